"""Suspect hosts (framework.suspects): marks written by the real host scripts, read back, cleared,
expired; what a launch and a preflight attribute to a host; how runs choose hosts around the marks.

The hosts are this machine (``LocalTransport``, a workdir each under tmp_path); a host that is down
is a ``FakeTransport`` whose connect fails.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from framework import suspects
from framework.config.effective import EnvConfig
from framework.cores.logs import oom_faults
from framework.hosts import Cluster
from framework.launch.devices import HeldDevice
from framework.launch.result import LaunchResult, NodeResult
from framework.plugin.context import chosen_hosts
from framework.plugin.options import Options
from framework.preflight.checks import FAIL, OK, WARN, CheckResult, Report
from tests.support.builders import LOCAL_HOSTS, local_env, local_transports

HOSTS = LOCAL_HOSTS


@pytest.fixture
def env(tmp_path: Path) -> EnvConfig:
    return local_env(tmp_path)


def cluster(env: EnvConfig, down: str | None = None) -> Cluster:
    return Cluster.from_env(env, None, transport_factory=local_transports(down))


def marks_on(tmp_path: Path, host: str) -> list[dict[str, Any]]:
    return [
        json.loads(p.read_text())
        for p in sorted((tmp_path / host / suspects.SUSPECT_DIR).glob("*.json"))
    ]


def test_a_lost_hosts_mark_is_kept_by_its_peers_and_seen_by_another_controller(env, tmp_path):
    with cluster(env, down="node2") as c:
        suspects.mark(c, {"node2": ("lost", "no heartbeat for 31s")}, ttl=600, run_id="r1")
    assert marks_on(tmp_path, "node2") == []  # it was down: its peers carry the mark
    for peer in ("node1", "node3"):
        (doc,) = marks_on(tmp_path, peer)
        assert doc["host"] == "node2" and doc["address"] == "192.0.2.2:22" and doc["kind"] == "lost"
        assert 598 <= doc["expires"] - doc["since"] <= 600 and abs(doc["since"] - time.time()) < 5
    with cluster(env) as other:  # a second controller, every host up
        seen = suspects.read(other)
    assert list(seen) == ["node2"] and seen["node2"].reason == "no heartbeat for 31s"
    assert (
        seen["node2"].run_id == "r1"
        and "lost: no heartbeat for 31s (marked by " in seen["node2"].describe()
    )


def test_clear_removes_the_mark_everywhere_and_an_expired_mark_is_not_read(env, tmp_path):
    with cluster(env) as c:
        suspects.mark(c, {"node1": ("held-device", "npu 0 chip 0 held by pid 7")}, ttl=600)
        assert set(suspects.read(c)) == {"node1"}
        suspects.clear(c, ["node1"])
        assert suspects.read(c) == {} and all(marks_on(tmp_path, h) == [] for h in HOSTS)
        old = json.loads(
            suspects.render("node3", "192.0.2.3:22", "oom", "killed", by="x", run_id="")
            .replace("__NOW__", str(time.time() - 100))
            .replace("__EXPIRES__", str(time.time() - 1))
        )
        (tmp_path / "node1" / suspects.SUSPECT_DIR / "old.json").write_text(json.dumps(old))
        assert suspects.read(c) == {}


def test_ttl_zero_marks_nothing(env, tmp_path, monkeypatch):
    monkeypatch.setenv("CAMIT_SUSPECT_TTL", "0")
    with cluster(env) as c:
        assert suspects.mark(c, {"node1": ("oom", "killed")}) == {}
    assert all(marks_on(tmp_path, h) == [] for h in HOSTS)


def test_a_mark_with_hostile_text_stays_data(env, tmp_path):
    reason = 'it\'s $(touch /tmp/pwned) `id` "q" \\ s/a/b/ & ; |'
    with cluster(env) as c:
        suspects.mark(c, {"node3": ("preflight", reason)}, ttl=60)
        assert suspects.read(c)["node3"].reason == reason


def test_launch_faults_are_host_faults_only():
    nodes = {
        "h1": NodeResult("h1", 0),
        "h2": NodeResult("h2", 1, lost="no heartbeat for 31s"),
        "h3": NodeResult("h3", 2),
    }
    result = LaunchResult(
        "L1",
        nodes,
        {},
        3,
        failure="rank 0 on h1 exited 1",
        failure_kind="rank",
        held=[HeldDevice("h3", 1, 0, 4242, "python", "L1")],
    )
    faults = result.host_faults()
    assert set(faults) == {"h2", "h3"}  # h1's rank failed: a test failure, not a host fault
    assert faults["h2"] == ("lost", "lost during launch L1: no heartbeat for 31s")
    assert faults["h3"][0] == "held-device" and "4242" in faults["h3"][1]
    assert result.host_faults(oom_hosts=["h1"])["h1"][0] == "oom"
    assert (
        LaunchResult("L2", {"h1": NodeResult("h1", 0)}, {}, 1, failure="x").host_faults()
        == {}
    )


def test_preflight_faults_are_the_failed_checks_not_the_warnings():
    results = {
        ("a", "disk"): CheckResult("a", "disk", FAIL, "only 0.1 GiB free"),
        ("a", "python"): CheckResult("a", "python", FAIL, "no python3"),
        ("b", "clock"): CheckResult("b", "clock", WARN, "skew 0.4s"),
        ("c", "disk"): CheckResult("c", "disk", OK, "9 GiB"),
    }
    faults = Report(["a", "b", "c"], results).host_faults()
    assert faults == {"a": ("preflight", "disk: fail: only 0.1 GiB free")}


def test_runs_plan_around_suspects_unless_hosts_names_them(env):
    marked = {"node2": object()}
    assert chosen_hosts(env, Options(), marked) == ["node1", "node3"]
    assert chosen_hosts(env, Options(hosts=("node2", "node3")), marked) == ["node2", "node3"]
    with pytest.raises(
        pytest.UsageError, match="every host .* is suspect .*node1, node2, node3.*--heal"
    ):
        chosen_hosts(env, Options(), dict.fromkeys(HOSTS, object()))


def test_the_launcher_marks_a_lost_host_and_a_held_device_on_the_hosts_still_there(
    env, tmp_path, monkeypatch
):
    from framework.launch import Launcher

    monkeypatch.setenv("CAMIT_SUSPECT_TTL", "600")
    nodes = {
        "node1": NodeResult("node1", 0),
        "node2": NodeResult("node2", 1, lost="its SSH channel closed"),
        "node3": NodeResult("node3", 2),
    }
    result = LaunchResult(
        "L7",
        nodes,
        {},
        3,
        failure="lost node2",
        failure_kind="lost",
        held=[HeldDevice("node3", 0, 1, 99, "python", "L7")],
    )
    with cluster(env, down="node2") as c:
        Launcher(env, c)._mark_suspects(result)
        seen = suspects.read(c)
    assert {n: m.kind for n, m in seen.items()} == {"node2": "lost", "node3": "held-device"}
    assert marks_on(tmp_path, "node2") == [] and len(marks_on(tmp_path, "node1")) == 2


def test_an_oom_kill_in_the_kernel_log_is_a_host_fault_but_not_in_a_rank_log():
    from framework.cores.logs import scan_signatures

    line = "[ 812.5] Out of memory: Killed process 4242 (python) total-vm:9000kB"
    found = {
        "h1": [replace(s, source="h1/dmesg.txt") for s in scan_signatures(line + "\n")],
        "h2": [replace(s, source="h2/rank0.log") for s in scan_signatures(line + "\n")],
    }
    faults = oom_faults(found)
    assert (
        list(faults) == ["h1"]
        and faults["h1"][0] == "oom"
        and "Killed process 4242" in faults["h1"][1]
    )


def test_heal_keeps_a_host_that_still_fails_preflight_or_has_no_healthy_partner(env, monkeypatch):
    from framework import heal

    monkeypatch.setenv("CAMIT_SUSPECT_TTL", "600")
    report = Report(
        list(HOSTS), {("node1", "disk"): CheckResult("node1", "disk", FAIL, "only 0.1 GiB free")}
    )
    with cluster(env) as c:
        suspects.mark(
            c, {"node1": ("lost", "gone"), "node2": ("oom", "killed"), "node3": ("oom", "killed")}
        )
        verdicts = heal.heal(env, c, report, suspects.read(c))
        assert [(v.host, v.healed) for v in verdicts] == [
            ("node1", False),
            ("node2", False),
            ("node3", False),
        ]
        assert verdicts[0].why == "disk: fail: only 0.1 GiB free"
        assert verdicts[1].why == "no healthy host to pair it with for the smoke run"
        after = suspects.read(c)
    assert {n: m.kind for n, m in after.items()} == {
        "node1": "lost",
        "node2": "heal",
        "node3": "heal",
    }


def test_two_controllers_marking_at_once_lose_no_mark(env, tmp_path):
    """Two controllers (threads with a cluster each) write marks of different hosts into the same folders at
    once, round after round; every host's folder ends with both, and each controller reads both."""
    import threading

    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def controller(victim: str) -> None:
        try:
            with cluster(env) as c:
                start.wait(10)
                for i in range(4):
                    suspects.mark(c, {victim: ("preflight", f"disk: fail: round {i}")}, ttl=600)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=controller, args=(v,)) for v in ("node2", "node3")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for host in HOSTS:
        assert sorted(d["host"] for d in marks_on(tmp_path, host)) == ["node2", "node3"], host
    with cluster(env) as c:
        seen = suspects.read(c)
    assert sorted(seen) == ["node2", "node3"] and seen["node2"].reason == "disk: fail: round 3"
    assert not list(tmp_path.rglob("*.tmp")), "a temporary mark file was left"
