"""Cores and fetch bounds on the lab (issue 17, items 2 and 4): every core of the run kept, no one else's,
mode 0600, unique names; every fetch stopped at its cap with a message naming host and file.

Tests that switch the machine-global ``kernel.core_pattern`` hold the labs' lock and restore it in a finally.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from framework.commands import ShellScript
from framework.cores.watch import CoreWatch
from framework.hosts import Cluster
from tests.security._cores_fetch import camit_run, mode
from tests.support.camit_labtools import core_pattern, pids_with_cmdline, wait_for

CRASH = "import ctypes, os; print(os.getpid(), flush=True); ctypes.string_at(0)"

CRASHING_RANK = textwrap.dedent("""\
    import ctypes, os
    if os.environ["RANK"] == "1":
        ctypes.string_at(0)
    print("rank", os.environ["RANK"], "done", flush=True)
""")


def test_a_relative_core_without_keep_remote_is_reported_with_its_core_and_backtrace(lab_env, lab_env_path,
                                                                                     tmp_path) -> None:
    """Debian's default pattern ``core`` drops the core in the rank's cwd, the run folder: it is scanned and
    fetched before the run folder goes (it went first: a signal with no core, no backtrace)."""
    target = tmp_path / "segv_rank1.py"
    target.write_text(CRASHING_RANK)
    reports = tmp_path / "reports"
    with core_pattern("core"):
        cp, _ = camit_run(lab_env_path, reports, target)
    out = cp.stdout + cp.stderr
    assert cp.returncode == 1, out
    assert re.search(r"core dump on host1: python[\w.]* \(pid \d+, rank 1, SIGSEGV\)", out), out
    run = (reports / "latest").resolve()
    cores = json.loads((run / "cores.json").read_text())
    assert [(c["host"], c["rank"], c["relation"]) for c in cores] == [("host1", 1, "rank")], cores
    assert cores[0]["location"].endswith("/core") and "/runs/" in cores[0]["location"], cores[0]
    # (cores.json names files inside the run folder relative to it, so an archived folder still resolves them)
    gz, bt = run / cores[0]["local_path"], run / cores[0]["backtrace_path"]
    assert not Path(cores[0]["local_path"]).is_absolute(), cores[0]
    assert gz.is_file() and gz.stat().st_size > 0 and gz.name == "core.gz"
    assert "#0" in bt.read_text(), bt.read_text()
    # host data in the report is ours alone
    assert mode(gz) == 0o600 and mode(bt) == 0o600 and mode(run / "cores.json") & 0o077 == 0
    # and the run folder (with its core) is still removed after the scan
    launch = json.loads(next(run.glob("launch-*.json")).read_text())["launch_id"]
    with Cluster.from_env(lab_env, ["host1"]) as c:
        left = c["host1"].run(
            ShellScript(f"ls -d {lab_env.hosts['host1'].workdir}/runs/*{launch}* 2>/dev/null"), timeout=30)
    assert left.stdout.strip() == "", left.stdout


SLOW_RANKS = textwrap.dedent("""\
    import os, time
    time.sleep(float(os.environ.get("CAMIT_TEST_SLEEP", "12")))
    print("rank", os.environ["RANK"], "done", flush=True)
""")


def test_a_foreign_core_during_the_run_is_neither_fetched_nor_reported(lab_env, lab_env_path, tmp_path) -> None:
    """Another process on a run host crashes while the run's ranks sleep: its core is not the run's."""
    import subprocess
    import sys

    target = tmp_path / f"slow_ranks_{os.getpid()}.py"
    target.write_text(SLOW_RANKS)
    reports = tmp_path / "reports"
    argv = [sys.executable, "-m", "framework.cli", "run", "--env", str(lab_env_path), "--hosts", "host1,host2",
            "--nproc-per-node", "1", "--report-dir", str(reports), "--timeout", "180", "--", str(target)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        def ranks_up() -> bool:  # the rank processes themselves (not their wrappers), on host1 and host2
            ranks = []
            for pid in pids_with_cmdline(target.name):
                try:
                    if b"rankwrap" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                        ranks.append(pid)
                except OSError:
                    pass
            return len(ranks) >= 2

        assert wait_for(ranks_up, 120), "the ranks never came up"
        with Cluster.from_env(lab_env, ["host1"]) as c:
            crashed = c["host1"].run(
                ShellScript(f"ulimit -S -c unlimited; {lab_env.hosts['host1'].python} -c {CRASH!r}"), timeout=60)
        assert crashed.rc == 139, crashed
        foreign_pid = int(crashed.stdout.split()[0])
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out  # the run passed; a foreign core does not fail it
    assert "core dump" not in out and str(foreign_pid) not in out, out
    run = (reports / "latest").resolve()
    assert not (run / "cores.json").exists()
    assert not list(run.rglob("cores/*")), list(run.rglob("cores/*"))


def test_two_cores_with_one_name_are_both_kept(lab, lab_env, tmp_path) -> None:
    """Two ranks' cores both called ``core`` (two run folders on one host) land under two names."""
    workdir = lab_env.hosts["host2"].workdir
    dirs = [f"{workdir}/runs/coresame-{os.getpid()}-{i}" for i in (1, 2)]
    with Cluster.from_env(lab_env, ["host2"]) as cluster:
        host = cluster["host2"]
        host.check(["mkdir", "-p", *dirs])
        try:
            with core_pattern("core"):
                watch = CoreWatch(cluster, lab_env)
                baseline = watch.snapshot()
                pids = []
                for d in dirs:
                    r = host.run(ShellScript(
                        f"ulimit -S -c unlimited; cd {d} && {lab_env.hosts['host2'].python} -c {CRASH!r}"),
                                 timeout=60)
                    assert r.rc == 139, r
                    pids.append(int(r.stdout.split()[0]))
                cores = watch.collect(baseline, rundir=tmp_path)
        finally:
            host.run(["rm", "-rf", "--", *dirs], timeout=60)
    assert sorted(c.pid for c in cores if c.pid is not None) == sorted(pids), cores
    paths = [c.local_path for c in cores]
    assert all(p is not None and p.is_file() for p in paths) and len(set(paths)) == 2, paths
    assert len({p.read_bytes() for p in paths if p is not None}) == 2  # two different cores, none overwritten
    assert len({c.backtrace_path for c in cores}) == 2
    assert all(mode(p) == 0o600 for p in paths if p is not None)


BOMB_RANKS = textwrap.dedent("""\
    import base64, os, sys
    if os.environ["RANK"] == "0":  # a sparse GiB of zeros: its tgz is ~1 MiB, it expands to 1 GiB
        with open("perf-bomb.json", "wb") as f:
            f.truncate(1 << 30)
    else:  # an oversized rank log (base64 of random bytes: hardly compressible)
        for _ in range(24):
            sys.stdout.write(base64.b64encode(os.urandom(768 * 1024)).decode() + "\\n")
    sys.stdout.flush()
    print("rank", os.environ["RANK"], "done", flush=True)
""")


def test_a_fetch_bomb_and_an_oversized_log_stop_at_the_caps(lab_env_path, tmp_path) -> None:
    target = tmp_path / "bomb.py"
    target.write_text(BOMB_RANKS)
    reports = tmp_path / "reports"
    caps = {"CAMIT_FETCH_MEMBER_BYTES": "8M", "CAMIT_FETCH_TOTAL_BYTES": "40M"}
    cp, rss_kib = camit_run(lab_env_path, reports, target, hosts="host1", extra_env=caps)
    out = cp.stdout + cp.stderr
    run = (reports / "latest").resolve()
    bomb, big_log = run / "host1" / "perf-bomb.json", run / "host1" / "rank1.log"
    assert bomb.stat().st_size == 8 << 20 and big_log.stat().st_size == 8 << 20, out
    assert re.search(r"host1: run folder \S+: \S*perf-bomb\.json is 1 GiB, cut at the member cap of 8 MiB "
                     r"\(CAMIT_FETCH_MEMBER_BYTES\)", out), out
    assert re.search(r"host1: run folder \S+: \S*rank1\.log is \d+(\.\d+)? MiB, cut at the member cap", out), out
    # what came before and after the cut members is kept: the ranks' status, so the run still passes
    assert cp.returncode == 0 and "PASSED" in out, out
    assert mode(bomb) == 0o600
    # bounded controller memory (the old unpack read each member whole: > 1 GiB) and disk
    assert 0 < rss_kib < 400 * 1024, rss_kib
    assert sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) < 40 << 20


def test_a_download_stops_at_its_byte_cap_over_ssh_naming_host_and_file(lab_env, tmp_path) -> None:
    """The cap is counted while reading (not from the host's stat): the first bytes are kept, one clear error."""
    from framework import fetchcaps
    from framework.fetchcaps import FetchCapError

    with Cluster.from_env(lab_env, ["host3"]) as cluster:
        host = cluster["host3"]
        remote = f"{lab_env.hosts['host3'].workdir}/big-{os.getpid()}.log"
        host.check(ShellScript(
            f"mkdir -p {lab_env.hosts['host3'].workdir} && head -c 20000000 /dev/urandom > {remote}"))
        try:
            cap = fetchcaps.caps().with_(max_bytes=4 << 20)
            with pytest.raises(FetchCapError) as err:
                host.get(remote, tmp_path / "big.log", cap=cap, keep_partial=True)
            assert str(err.value).startswith(f"host3: download of {remote} stopped at the cap of 4 MiB")
            assert (tmp_path / "big.log").stat().st_size == 4 << 20
            assert mode(tmp_path / "big.log") == 0o600
            with pytest.raises(FetchCapError):
                host.get(remote, tmp_path / "none.log", cap=cap)
            assert not list(tmp_path.glob("none.log*"))  # without keep_partial nothing stays
        finally:
            host.run(["rm", "-f", "--", remote], timeout=30)
