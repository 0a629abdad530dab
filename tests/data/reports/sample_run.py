"""Build synthetic run folders for the report tests (loaded by path from tests/unit/test_report*.py).

``two-node/`` holds what the hosts and the deploy step would have left (rank logs and
status files, torchrun logs, dmesg, a core file, deploy-manifest.json, phases.json).
:func:`build` copies it, adds the per-rank JUnit files — real pytest output from
:func:`pytest_junit` — and the launch record written through the real
``LaunchResult.to_json()``, and pins file times so derived phases are deterministic.

The scenario (2 nodes x 2 ranks, launch ``moe1``): rank 0 passes, rank 1 has a failing
test, rank 2 dies of SIGSEGV before writing JUnit (and leaves a core), rank 3 is
killed by SIGTERM in the teardown that follows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from framework.launch import LaunchResult, NodeResult, RankResult

HERE = Path(__file__).resolve().parent
T0 = 1785578400.0  # 2026-08-01T10:00:00Z, the epoch the static files use
RUN_ID = "20260801-100000-c0ffee"
LAUNCH_ID = f"{RUN_ID}-moe1-ab12"

SAMPLE_TESTS = textwrap.dedent('''
    import os
    import pytest

    FAIL = os.environ.get("SAMPLE_FAIL") == "1"

    def test_dispatch_layout():
        assert True

    @pytest.mark.parametrize("mode", ["Eager", "Graph"])
    def test_dispatch_combine(mode):
        if FAIL and mode == "Graph":
            assert 1.2e-3 < 5e-5, "diff 1.2e-03 not below 5e-05"

    @pytest.mark.skip(reason="needs an A3 SuperPoD")
    def test_superpod():
        pass

    def test_combine_output():
        print("combine ok <&> \\x1b[32mgreen\\x1b[0m")
''')


def pytest_junit(folder: Path, *, fail: bool, name: str) -> Path:
    """Run pytest on a tiny test file and return its ``--junitxml`` (xunit2, pytest's default)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sample_rank_tests.py").write_text(SAMPLE_TESTS)
    (folder / "pytest.ini").write_text("[pytest]\n")
    out = folder / f"{name}.xml"
    env = {**os.environ, "SAMPLE_FAIL": "1" if fail else "0", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(folder / "pytest.ini"),
                           "--rootdir", str(folder), f"--junitxml={out}", str(folder / "sample_rank_tests.py")],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == (1 if fail else 0), proc.stdout + proc.stderr
    return out


def launch_result(*, lost_node2: bool = False, timed_out: bool = False) -> LaunchResult:
    """The LaunchResult the launcher would have written for the scenario (or a variant)."""
    nodes = {"node1": NodeResult("node1", 0, exit_code=1, duration=15.2, done=True),
             "node2": NodeResult("node2", 1, exit_code=-11, duration=15.3, done=True)}
    ranks = {0: RankResult(0, "node1", 0, None, "reports/x/node1/rank0.log", "reports/x/node1/rank0.xml"),
             1: RankResult(1, "node1", 1, None, "reports/x/node1/rank1.log", "reports/x/node1/rank1.xml"),
             2: RankResult(2, "node2", None, "SIGSEGV", "reports/x/node2/rank2.log", None),
             3: RankResult(3, "node2", None, "SIGTERM", "reports/x/node2/rank3.log", None)}
    result = LaunchResult(LAUNCH_ID, nodes, ranks, world_size=4, master="10.77.0.11:29500", duration=15.4,
                          failure="rank 2 on node2 died of SIGSEGV", failure_kind="rank", failure_rank=2,
                          teardown_seconds=1.1)
    if lost_node2:
        nodes["node2"] = NodeResult("node2", 1, lost="no heartbeat for 13s", duration=12.0)
        del ranks[2], ranks[3]  # the launcher writes its record before it fills in missing ranks
        result.failure, result.failure_kind, result.failure_rank = "lost node2: no heartbeat for 13s", "lost", None
    if timed_out:
        result.failure, result.failure_kind, result.failure_rank = "job timeout after 600s", "timeout", None
        result.timed_out = True
    return result


@dataclass
class FakeCore:
    """Stands for ``framework.coredump_inspect.Core``: the attributes and ``describe()`` the report reads."""

    host: str
    pid: int
    exe: str
    signal: str
    rank: int | None
    backtrace: str
    local_path: Path | None

    def describe(self) -> str:
        where = f" rank {self.rank}" if self.rank is not None else ""
        return f"{self.host}{where}: {self.exe} (pid {self.pid}) dumped core on {self.signal}"


def core_for(run: Path) -> FakeCore:
    return FakeCore("node2", 4242, "/var/tmp/camit/venv/bin/python3", "SIGSEGV", 2,
                    "#0  0x00007f3a2c0b1d2e in cam::dispatch_prefill (ctx=0x0) at dispatch.cpp:211\n"
                    "#1  0x00007f3a2c0b2f10 in moe_dispatch_prefill () from libcam.so\n"
                    "#2  0x000055d0c1a3b4c5 in _PyEval_EvalFrameDefault ()",
                    run / "node2" / "cores" / "core.python3.4242")


def build(dest: Path, junit_pass: Path, junit_fail: Path, *, lost_node2: bool = False, timed_out: bool = False,
          controller_junit: Path | None = None) -> Path:
    """A complete run folder ``dest/<RUN_ID>`` for the scenario; returns its path."""
    run = dest / RUN_ID
    shutil.copytree(HERE / "two-node", run)
    shutil.copy(junit_pass, run / "node1" / "rank0.xml")
    shutil.copy(junit_fail, run / "node1" / "rank1.xml")
    if controller_junit is not None:
        shutil.copy(controller_junit, run / "junit.xml")
    if lost_node2:  # nothing was fetched from a lost node
        for f in (run / "node2").glob("rank*"):
            f.unlink()
    result = launch_result(lost_node2=lost_node2, timed_out=timed_out)
    launch = run / f"launch-{result.launch_id}.json"
    launch.write_text(json.dumps(result.to_json(), indent=2))
    os.utime(launch, (T0 + 58.0, T0 + 58.0))
    os.utime(run / "deploy-manifest.json", (T0 + 41.8, T0 + 41.8))
    return run
