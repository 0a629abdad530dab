"""Cores on the emulated Ascend lab: ranks run with the NPU defaults (a 4 GiB core limit, coredump_filter 0x11)
and a crashing rank still leaves a real kernel core that camit finds, attributes and fetches.

Uses the A3 lab named by CAMIT_NPU_LAB_ENV (skipped without it); holds /tmp/camit-npulab.lock as every user of
that lab does.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.ascend.tools import NPU_CORE_LIMIT
from framework.cores.watch import CoreWatch
from framework.hosts import Cluster
from framework.launch import Launcher, Target
from framework.records.folder import RunDir

pytestmark = pytest.mark.lab
LOCK = Path("/tmp/camit-npulab.lock")

CRASH = textwrap.dedent("""\
    import ctypes, os, resource
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    with open("/proc/self/coredump_filter") as fh:
        print("LIMITS", soft, fh.read().strip(), flush=True)
    ctypes.string_at(0)
""")


@contextlib.contextmanager
def npu_lab_lock() -> Iterator[None]:
    with open(LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def test_a_crashing_rank_on_an_npu_host_leaves_a_real_bounded_core(npu_lab_env, tmp_path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    rundir = RunDir.create(tmp_path / "reports")
    with npu_lab_lock(), Cluster.from_env(npu_lab_env, ["host1"]) as cluster:
        watch = CoreWatch(cluster, npu_lab_env)
        baseline = watch.snapshot()
        result = Launcher(npu_lab_env, cluster, rundir=rundir, nproc_per_node=1, backend="gloo").run(
            Target(script=str(script)), timeout=120)
        assert not result.ok and result.ranks[0].signal == "SIGSEGV", result
        cores = watch.collect(baseline, rundir=rundir, ranks=[result])
    log = (rundir.path / "host1" / "rank0.log").read_text(errors="replace")
    assert f"LIMITS {int(NPU_CORE_LIMIT) * 1024} 00000011" in log, log[-2000:]
    assert len(cores) == 1, [c.describe() for c in cores]
    core = cores[0]
    assert core.pid == json.loads((rundir.path / "host1" / "rank0.json").read_text())["pid"]
    assert core.local_path is not None
    with gzip.open(core.local_path) as fh:
        data = fh.read()
    assert data[:4] == b"\x7fELF" and len(data) <= int(NPU_CORE_LIMIT) * 1024
    assert any("string_at" in f or "strlen" in f for f in core.crashing_frames()), core.backtrace
