"""FakeTransport satisfies the Transport protocol, spawn included, and drives the launcher and the relay chain."""

from __future__ import annotations

import hashlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from framework.commands import ShellScript
from framework.config.effective import ArtifactsSpec, Defaults, EnvConfig, HostSpec, LaunchSpec, NicSpec
from framework.deploy.plan import Artifact, HostPlan, Probe
from framework.deploy.relay import RelayChain
from framework.hosts import Cluster, Host
from framework.launch import Launcher, Target
from framework.phases import PhaseEvent
from framework.remote import protocol
from framework.testing import FakeTransport
from framework.testing.fake import FakeProcess
from framework.transport.base import Process, Transport
from framework.transport.local import LocalProcess, LocalTransport

HOSTS = ["host1", "host2"]


def _members(proto: type) -> list[str]:
    """The public methods and properties a protocol declares."""
    return [n for n in dir(proto) if not n.startswith("_")
            and (callable(getattr(proto, n)) or isinstance(getattr(proto, n), property))]


@pytest.mark.parametrize(("fake", "real", "proto"), [
    (FakeTransport, LocalTransport, Transport),
    (FakeProcess, LocalProcess, Process),
])
def test_the_fake_has_every_member_of_the_protocol_with_the_same_keywords(fake, real, proto):
    for name in _members(proto):
        want = getattr(proto, name)
        for impl in (fake, real):
            got = getattr(impl, name, None)
            assert got is not None, f"{impl.__name__} lacks {name}"
            if isinstance(want, property):
                assert isinstance(got, property), f"{impl.__name__}.{name} is not a property"
                continue
            params = inspect.signature(want).parameters
            have = inspect.signature(got).parameters
            for p in params.values():
                if p.name == "self":
                    continue
                assert p.name in have, f"{impl.__name__}.{name} lacks parameter {p.name}"
                assert have[p.name].kind == p.kind, f"{impl.__name__}.{name}({p.name}) differs in kind"
    assert isinstance(FakeTransport("x"), Transport)


def test_a_fake_process_answers_its_stdin_and_ends_when_scripted():
    fake = FakeTransport("h").on_spawn("sup", lines=["STARTED 1"], ends=False, replies={"KILL": ["KILLED stdin-kill"]})
    proc = Host("h", fake, command_timeout=5).spawn(ShellScript("sup"))
    assert proc.readline(1) == "STARTED 1\n"
    assert proc.readline(0.05) is None and not proc.poll()
    proc.write(b"HB\n")
    proc.write(b"KILL\n")
    assert proc.readline(1) == "KILLED stdin-kill\n" and proc.readline(1) == ""
    res = proc.wait(1)
    assert res is not None and res.rc == 0 and res.stdout == "STARTED 1\nKILLED stdin-kill\n"
    assert fake.processes[0].written == b"HB\nKILL\n"
    with pytest.raises(AssertionError, match="unexpected spawn 'other'"):
        Host("h", fake).spawn(ShellScript("other"))


def env_of(tmp_path: Path, hosts: list[str] = HOSTS) -> EnvConfig:
    specs = {h: HostSpec(name=h, manage_nic=NicSpec("eth0", f"10.77.0.{11 + i}"), workdir=f"/w/{h}", python="python3")
             for i, h in enumerate(hosts)}
    return EnvConfig(path=tmp_path / "env.yaml", source="env.yaml", hosts=specs, defaults=Defaults(), cann=None,
                     artifacts=ArtifactsSpec(), launch=LaunchSpec(backend="gloo", master_port=29500), relay=True)


def prepared(fake: FakeTransport) -> FakeTransport:
    # the prepare probe: nothing shipped yet, and the deploy state
    state = '{"interpreter": "/w/venv/bin/python", "install_path": "/w/opp", "vendor": "CAM"}'
    return fake.on(re.compile(r"^umask 077; .*/bin/supervisor-"), stdout=f"@@state {state}\n")


def launcher(tmp_path: Path, scripts: dict[str, dict], events: list[tuple[str, str]] | None = None
             ) -> tuple[Launcher, dict[str, FakeTransport]]:
    fakes = {h: prepared(FakeTransport(h)).on_spawn(re.compile(r"^bash -c .*supervisor-"), **scripts[h])
             for h in HOSTS}
    env = env_of(tmp_path)
    cluster = Cluster([Host(h, fakes[h], spec=env.hosts[h], command_timeout=5) for h in HOSTS])
    said = events.append if events is not None else (lambda e: None)
    return Launcher(env, cluster, nproc_per_node=2, on_event=lambda h, m: said((h, m))), fakes


def teardown_events(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The launch's teardown events, their durations blanked (``after N.Ns`` -> ``after _s``)."""
    return [(h, re.sub(r"after [\d.]+s", "after _s", m)) for h, m in events if m.startswith("teardown: ")]


def test_a_launch_through_the_fake_passes_and_ships_the_programs_once(tmp_path):
    ranks = {"host1": (0, 1), "host2": (2, 3)}
    scripts = {h: {"lines": ["STARTED 10", *(f"RANK {r} exit 0 pid {r + 20}" for r in ranks[h]), "EXIT 0", "DONE"]}
               for h in HOSTS}
    events: list[tuple[str, str]] = []
    lau, fakes = launcher(tmp_path, scripts, events)
    result = lau.run(Target(module="pytest"), timeout=30)
    assert result.ok, result.message()
    # each node's end is said as its start was: nothing to stop, every node ended by itself (no run folder here)
    assert teardown_events(events) == [("host1", "teardown: node 0/2 ended after _s"),
                                       ("host2", "teardown: node 1/2 ended after _s")]
    assert result.world_size == 4 and result.master == "10.77.0.11:29500"
    for h, fake in fakes.items():
        shipped = sorted(p for p in fake.files if "/bin/" in p)
        assert [Path(p).name.split("-")[0] for p in shipped] == ["rankwrap", "supervisor"]
        line = fake.processes[0].display
        assert "--node-rank " + str(HOSTS.index(h)) in line and f"/w/{h}/runs/{result.launch_id}" in line
        assert "/w/venv/bin/python -m torch.distributed.run" in line  # the deployed interpreter
        assert "/w/opp/vendors/CAM/bin/set_env.bash" in line


class _BatchSink:
    """A phase sink that takes batches (``many``), as the run folder's does."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, str]]] = []

    def __call__(self, event: PhaseEvent) -> None:
        self.many([event])

    def many(self, events: list[PhaseEvent]) -> None:
        self.batches.append([(e.host, e.phase) for e in events])


def test_a_launch_hands_every_hosts_phase_over_at_once(tmp_path):
    """One batch per phase for the whole cluster (a run folder's phases.json is then written once, not per host)."""
    scripts = {h: {"lines": ["STARTED 10", "EXIT 0", "DONE"]} for h in HOSTS}
    lau, _ = launcher(tmp_path, scripts)
    lau.on_phase = sink = _BatchSink()
    lau.run(Target(module="pytest"), timeout=30)
    assert sink.batches == [[(h, "launch") for h in HOSTS]]


def test_a_rank_failure_through_the_fake_tears_the_other_node_down(tmp_path):
    scripts: dict[str, dict[str, Any]] = {
        "host1": {"lines": ["STARTED 10"], "ends": False,
                  "replies": {protocol.KILL: ["KILLED stdin-kill", "RANK 0 SIG SIGTERM pid 1",
                                              "RANK 1 SIG SIGTERM pid 2", "DONE"]}},
        "host2": {"lines": ["STARTED 11", "RANK 2 exit 0 pid 3", "RANK 3 SIG SIGSEGV pid 4", "EXIT 1", "DONE"]},
    }
    events: list[tuple[str, str]] = []
    lau, fakes = launcher(tmp_path, scripts, events)
    result = lau.run(Target(module="pytest"), timeout=30)
    assert (result.failure_kind, result.failure_rank, result.failure) == ("rank", 3, "rank 3 on host2 died of SIGSEGV")
    # the node still running is stopped (host2's may be too, its DONE not read yet), then both ends say the
    # launch failed (the words -q shows)
    said = teardown_events(events)
    assert said[-2:] == [("host1", "teardown: node 0/2 torn down after _s (the launch failed)"),
                         ("host2", "teardown: node 1/2 torn down after _s (the launch failed)")]
    assert ("host1", "teardown: stopping node 0/2") in said[:-2]
    assert set(said[:-2]) <= {("host1", "teardown: stopping node 0/2"), ("host2", "teardown: stopping node 1/2")}
    assert result.nodes["host1"].killed == "stdin-kill" and result.nodes["host1"].done
    assert protocol.kill_line() in fakes["host1"].processes[0].written
    assert result.teardown_seconds is not None and result.teardown_seconds < 5


def test_a_host_that_cannot_start_is_an_infra_failure(tmp_path):
    from framework.errors import HostUnreachable

    scripts: dict[str, dict[str, Any]] = {
        "host1": {"lines": ["STARTED 1"], "ends": False, "replies": {"KILL": ["DONE"]}},
        "host2": {"raises": HostUnreachable("host2", "connection refused")}}
    lau, _ = launcher(tmp_path, scripts)
    result = lau.run(Target(module="pytest"), timeout=30)
    assert result.failure_kind == "infra" and result.failure is not None
    assert result.failure.startswith("host2: cannot start the launch: ")


def test_the_relay_chain_through_the_fake_wires_next_hops_and_tokens(tmp_path):
    data = b"artifact bytes" * 100
    art_path = tmp_path / "a.whl"
    art_path.write_bytes(data)
    art = Artifact("wheel", art_path, hashlib.sha256(data).hexdigest(), len(data))
    hosts = ["h1", "h2", "h3"]
    ok = [f"OK {art.sha256}"]
    fakes = {"h1": FakeTransport("h1").on_spawn(re.compile(r"relay"), ends=False, on_close=ok),
             "h2": FakeTransport("h2").on_spawn(re.compile(r"--listen"), lines=["PORT 4002"], ends=False, on_close=ok),
             "h3": FakeTransport("h3").on_spawn(re.compile(r"--listen"), lines=["PORT 4003"], ends=False,
                                                on_close=["ERR sha256 mismatch"])}
    cluster = Cluster([Host(h, fakes[h], command_timeout=5) for h in hosts])
    plans = {h: HostPlan(host=h, workdir="/w", python="python3", venv=False, install_path="/w/opp",
                         manage_ip=f"10.0.0.{i}") for i, h in enumerate(hosts, 1)}
    relay_bin = {h: plans[h].bin_path("relay.py", "ab" * 32) for h in hosts}
    chain = RelayChain(cluster, plans, tmp_path / "relay.py", relay_bin, on_event=lambda h, m: None,
                       progress=lambda h, a: (lambda sent, total: None))
    probes = {h: Probe(relay_ok=True) for h in hosts}
    outcome = chain.send(art, hosts, probes)
    assert sorted(outcome.received) == ["h1", "h2"] and outcome.pending == ["h3"]
    assert outcome.notes == [f"relay: h3 did not receive {art.name}: ERR sha256 mismatch"]
    head, mid, tail = (fakes[h].processes[0].written for h in hosts)
    found = {h: re.search(rb"TOKEN (\w+)", w) for h, w in (("h2", mid), ("h3", tail))}
    tokens = {h: m.group(1).decode() for h, m in found.items() if m}
    assert tokens.keys() == found.keys(), (mid, tail)
    assert head == f"NEXT 10.0.0.2 4002 {tokens['h2']}\n".encode() + data
    assert mid == f"NEXT 10.0.0.3 4003 {tokens['h3']}\nTOKEN {tokens['h2']}\n".encode()
    assert tail == f"NEXT -\nTOKEN {tokens['h3']}\n".encode()
    assert "--listen" not in fakes["h1"].processes[0].display
    assert "--listen 10.0.0.2" in fakes["h2"].processes[0].display


def test_a_relay_that_does_not_listen_is_left_out_of_the_chain(tmp_path):
    art_path = tmp_path / "a.whl"
    art_path.write_bytes(b"x")
    art = Artifact("wheel", art_path, hashlib.sha256(b"x").hexdigest(), 1)
    fakes = {"h1": FakeTransport("h1").on_spawn(re.compile("relay"), ends=False, on_close=[f"OK {art.sha256}"]),
             "h2": FakeTransport("h2").on_spawn(re.compile("relay"), lines=["ERR cannot bind"])}
    cluster = Cluster([Host(h, f, command_timeout=5) for h, f in fakes.items()])
    plans = {h: HostPlan(host=h, workdir="/w", python="p", venv=False, install_path="/o", manage_ip="1.1.1.1")
             for h in fakes}
    chain = RelayChain(cluster, plans, tmp_path / "relay.py", {h: "/w/bin/relay.py" for h in fakes},
                       on_event=lambda h, m: None, progress=lambda h, a: (lambda s, t: None))
    outcome = chain.send(art, ["h1", "h2"], {h: Probe(relay_ok=True) for h in fakes})
    assert outcome.pending == ["h1", "h2"] and outcome.received == {}
    assert outcome.notes == ["relay: h2 did not listen: ERR cannot bind"]
    assert fakes["h2"].processes[0].killed or fakes["h2"].processes[0].poll()


def test_the_launcher_records_the_test_its_attempt_and_the_place_of_each_launch(tmp_path):
    ranks = {"host1": (0, 1), "host2": (2, 3)}
    scripts = {h: {"lines": ["STARTED 10", *(f"RANK {r} exit 0 pid {r + 20}" for r in ranks[h]), "EXIT 0", "DONE"]}
               for h in HOSTS}
    lau, _ = launcher(tmp_path, scripts)
    owner: list[tuple[str, int] | None] = [("t.py::test_a", 1)]
    lau.owner = lambda: owner[0]
    seen = []
    for now in [("t.py::test_a", 1), ("t.py::test_a", 1), ("t.py::test_a", 2), None]:
        owner[0] = now
        data = lau.run(Target(module="pytest"), timeout=30).to_json()
        seen.append((data.get("test"), data.get("attempt"), data.get("seq")))
    # the n-th launch of a world in one attempt of a test; a rerun starts again at 1; no test: nothing recorded
    assert seen == [("t.py::test_a", 1, 1), ("t.py::test_a", 1, 2), ("t.py::test_a", 2, 1), (None, None, None)]


def test_ranks_the_launcher_tore_down_after_another_failed_are_skipped_in_cluster_xml(tmp_path):
    import json
    import xml.etree.ElementTree as ET

    from framework.report.junit import validate_junit, write_cluster_junit

    scripts: dict[str, dict[str, Any]] = {
        "host1": {"lines": ["STARTED 10"], "ends": False,
                  "replies": {protocol.KILL: ["KILLED stdin-kill", "RANK 0 SIG SIGTERM pid 1",
                                              "RANK 1 SIG SIGTERM pid 2", "DONE"]}},
        "host2": {"lines": ["STARTED 11", "RANK 2 exit 0 pid 3", "RANK 3 SIG SIGSEGV pid 4", "EXIT 1", "DONE"]},
    }
    lau, _ = launcher(tmp_path, scripts)
    result = lau.run(Target(module="true"), timeout=30)
    run = tmp_path / "20260801-100000-ffffff"
    run.mkdir()
    (run / f"launch-{result.launch_id}.json").write_text(json.dumps(result.to_json()))
    outcome = {}
    for suite in ET.parse(write_cluster_junit(run)).getroot().iter("testsuite"):
        for case in suite.iter("testcase"):
            outcome[suite.get("name")] = [(el.tag, el.get("type")) for el in case if el.tag != "system-out"]
    assert outcome == {"rank0@host1": [("skipped", "RankTornDown")], "rank1@host1": [("skipped", "RankTornDown")],
                       "rank2@host2": [], "rank3@host2": [("error", "RankCrashed")]}
    assert validate_junit(run / "cluster.xml") == []
