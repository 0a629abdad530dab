"""camit's progress lines from a real ``pytest suites/cam`` run on the lab (issue 16, item 3).

One quick case (``test_prefill_dispatch_combine`` at world 4: two lab hosts x 2 ranks, the stand-in artifacts
deployed into a workdir of the test's own), run as a Jenkins stage runs it (``jenkins_pytest``) at each
verbosity. The default shows the deploy's, the launch's and the teardown's events as
``camit: HH:MM:SS <host>: <message>`` for each host of the lab as they happen; ``-q`` shows only failures
and errors (a failing launch, ranks refusing their env: its teardown lines, not its start or the deploy);
``-v`` adds the camit logger's INFO records; the run folder's ``camit.log`` has the DEBUG records.
What the plugin does with the events is tested without hosts in ``tests/plugin/test_progress.py``.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from framework.lab import artifacts
from tests.support.camit_labtools import jenkins_pytest

pytestmark = pytest.mark.lab
ONE = ["-k", "test_prefill_dispatch_combine", "--world-sizes", "4"]
HOSTS = ("host1", "host2")
#: a progress line: ``camit: HH:MM:SS <who>: <message>`` (not the header's or the summary's ``camit:`` lines)
LINE = re.compile(r"^camit: (\d\d):(\d\d):(\d\d) (\S+?): (.*)$")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return artifacts.build_all(tmp_path_factory.mktemp("progress-artifacts"))


@pytest.fixture
def suite_env(env_variant: Callable[..., Path], built):
    """The lab env on two hosts, the stand-in artifacts, a workdir of this test's own (so a real deploy)."""
    def make(launch_env: dict[str, str] | None = None) -> Path:
        def change(doc):
            doc["host_info"] = {h: doc["host_info"][h] for h in HOSTS}
            doc["artifacts"] = {"run_package": str(built["run"]), "wheel": str(built["wheel"])}
            doc["defaults"]["workdir"] = f"/var/tmp/camit/progress-{secrets.token_hex(3)}"
            if launch_env:
                doc.setdefault("launch", {})["env"] = launch_env
        return env_variant(change, "progress.yaml")
    return make


def run(env: Path, reports: Path, verbosity: str | None) -> tuple[int, str, list[tuple[str, str]]]:
    """(exit status, output, the progress lines as (who, message)), every stamp a valid time of day."""
    with jenkins_pytest(env, reports, *ONE, verbosity=verbosity) as proc:
        out, _ = proc.communicate(timeout=600)
    lines = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            hh, mm, ss = (int(g) for g in m.groups()[:3])
            assert hh < 24 and mm < 60 and ss < 60, line
            lines.append((m[4], m[5]))
    return proc.returncode, out, lines


def of(lines: list[tuple[str, str]], host: str, pattern: str) -> list[str]:
    return [msg for who, msg in lines if who == host and re.match(pattern, msg)]


def test_the_default_shows_each_hosts_deploy_launch_and_teardown_as_they_happen(suite_env, tmp_path):
    rc, out, lines = run(suite_env(), tmp_path / "reports", None)
    assert rc == 0, out[-4000:]
    for host in HOSTS:
        assert of(lines, host, r"(pip )?install \S+"), (host, lines)  # the deploy's steps, on each host
        assert of(lines, host, r"deployed umdk_cam_op_lib \S+"), (host, lines)
        assert of(lines, host, r"launch node \d/2 x2 ranks, master [\d.]+:\d+$"), (host, lines)
        assert of(lines, host, r"teardown: node \d/2 ended after [\d.]+s, run folder fetched$"), (host, lines)
    assert of(lines, "host1", r"relay \S+ \([\d.]+ MiB\) through host1 -> host2$"), lines
    # in the run's order: deployed before launched before torn down, and before pytest's summary
    text = out.splitlines()
    deployed = max(i for i, line in enumerate(text) if "deployed umdk_cam_op_lib" in line)
    launched = [i for i, line in enumerate(text) if ": launch node " in line]
    ended = [i for i, line in enumerate(text) if ": teardown: node " in line]
    summary = next(i for i, line in enumerate(text) if re.search(r"=+ .*1 passed", line))
    assert deployed < min(launched) and max(launched) < min(ended) and max(ended) < summary, text
    assert not [msg for who, msg in lines if who == "info"], lines  # INFO records only from -v up


def test_quiet_shows_only_failures_and_errors(suite_env, tmp_path):
    # every rank refuses its environment at start-up: the launch fails, the hosts are torn down
    reports = tmp_path / "reports"
    rc, out, lines = run(suite_env({"CAMIT_AGREE_TIMEOUT": "not-a-number"}), reports, "-q")
    assert rc == 1, out[-4000:]
    assert "ValueError" in out  # the ranks' own error, in the test's failure
    for host in HOSTS:
        assert of(lines, host, r"teardown: node \d/2 torn down after [\d.]+s \(the launch failed\)"), (host, lines)
    assert all("failed" in msg or "FAILED" in msg or who == "error" for who, msg in lines), lines
    # the other events happened (camit.log has them), the terminal left them out
    log = ((reports / "latest").resolve() / "camit.log").read_text()
    for host in HOSTS:
        assert re.search(rf"INFO +camit: {host}: deployed umdk_cam_op_lib ", log), log[-3000:]
        assert re.search(rf"INFO +camit: {host}: launch node \d/2 ", log), log[-3000:]


def test_verbose_adds_info_and_the_run_folder_has_a_debug_log(suite_env, tmp_path):
    reports = tmp_path / "reports"
    rc, out, lines = run(suite_env(), reports, "-v")
    assert rc == 0, out[-4000:]
    info = [msg for who, msg in lines if who == "info"]
    assert any(re.fullmatch(r"lease on host[12], host[12] taken by \S+", msg) for msg in info), lines
    assert any(re.fullmatch(r"test_prefill_rank: 4 ranks on 2 node\(s\) x 2 \(host1, host2\)", m) for m in info), lines
    for host in HOSTS:  # the events as at the default
        assert of(lines, host, r"launch node \d/2 "), (host, lines)
        assert of(lines, host, r"teardown: node \d/2 ended"), (host, lines)
    log = ((reports / "latest").resolve() / "camit.log").read_text()
    debug = [line for line in log.splitlines() if re.match(r"\d\d:\d\d:\d\d\.\d{3} DEBUG +camit\.", line)]
    assert any(re.search(r"camit\.ssh: host[12]: connected to ", line) for line in debug), log[:3000]
    assert len(debug) > 10, log[:3000]
    for host in HOSTS:  # and every event, with its level
        assert re.search(rf"INFO +camit(\.\w+)*: {host}: launch node \d/2 ", log), log[-3000:]
