"""Core dumps on the lab: real kernel cores in each host's own core dir, attributed, fetched, judged.

Run against your own lab: ``CAMIT_LAB_NAME=core CAMIT_LAB_ENV=/tmp/core.yaml``. Tests that switch
the machine-global ``kernel.core_pattern`` hold the lab's core-pattern lock and restore it.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.commands import ShellScript
from framework.cores.scan import CoreSources
from framework.cores.watch import CoreWatch
from framework.hosts import Cluster, Host
from framework.lab.plan import CORE_PATTERN_FILE, LAB_CORE_PATTERN
from framework.launch import Launcher, Target
from framework.records.folder import RunDir
from tests.support.camit_labtools import core_pattern

TARGET = Path(__file__).resolve().parents[1] / "data" / "targets" / "alltoall.py"
NODES = ["host1", "host2"]
CRASH = "import ctypes, os; print(os.getpid(), flush=True); ctypes.string_at(0)"


@pytest.fixture
def cluster(lab_env) -> Iterator[Cluster]:
    with Cluster.from_env(lab_env, NODES) as c:
        yield c


@pytest.fixture(autouse=True)
def tidy_core_dirs(lab) -> Iterator[None]:
    """Remove the cores a test made in this lab's hosts' core dirs."""
    dirs = [h.core_dir for h in lab.hosts]
    before = {d: set(d.iterdir()) for d in dirs}
    yield
    for d in dirs:
        for p in set(d.iterdir()) - before[d]:
            p.unlink(missing_ok=True)


def controller_cores(pid: int) -> list[Path]:
    """Cores of ``pid`` in the controller's (root namespace) core dir."""
    root = Path("/var/crash/camit")
    return [p for p in root.iterdir() if f".{pid}." in p.name] if root.exists() else []


def crash(host: Host, python: str, cwd: str | None = None) -> int:
    """Segfault a python process on ``host`` (cores allowed) and return its pid."""
    cd = f"cd {cwd} && " if cwd else ""
    result = host.run(ShellScript(f"ulimit -S -c unlimited; {cd}{python} -c {CRASH!r}"), timeout=60)
    assert result.rc == 139, result
    return int(result.stdout.split()[0])




# --------------------------------------------------------------------------- the lab's pattern


def test_lab_sets_the_core_pattern_and_records_the_original(lab) -> None:
    assert CORE_PATTERN_FILE.read_text().strip() == LAB_CORE_PATTERN
    record = json.loads(lab.plan.state_file.read_text())["core_pattern"]
    assert record is not None and record["saved"] != LAB_CORE_PATTERN


def test_the_kernel_writes_a_core_in_the_crashing_hosts_own_dir(lab, lab_env, cluster) -> None:
    pid = crash(cluster["host2"], lab_env.hosts["host2"].python)
    mine = [p.name for p in lab.host("host2").core_dir.iterdir() if f".{pid}." in p.name]
    assert len(mine) == 1 and re.fullmatch(rf"core\.python[\d.]*\.{pid}\.\d+\.11", mine[0]), mine
    for other in ("host1", "host3"):
        assert not [p for p in lab.host(other).core_dir.iterdir() if f".{pid}." in p.name]
    assert controller_cores(pid) == []  # nor in the controller's


def test_a_second_lab_shares_the_pattern_and_does_not_restore_it_while_another_is_up(lab, tmp_path) -> None:
    from framework.lab.manage import Lab

    saved = json.loads(lab.plan.state_file.read_text())["core_pattern"]["saved"]
    other = Lab.up(1, name="coretmp", subnet="10.81.1.0/24", env_out=tmp_path / "coretmp.yaml", torch=False)
    try:
        assert CORE_PATTERN_FILE.read_text().strip() == LAB_CORE_PATTERN
        assert json.loads(other.plan.state_file.read_text())["core_pattern"] == {"saved": saved}
    finally:
        other.down()
    assert CORE_PATTERN_FILE.read_text().strip() == LAB_CORE_PATTERN  # `core` (and maybe others) still up


# --------------------------------------------------------------------------- a segfaulting rank


def test_a_segfaulting_rank_is_reported_with_its_rank_a_backtrace_and_the_gzipped_core(lab_env, cluster,
                                                                                      tmp_path) -> None:
    rundir = RunDir.create(tmp_path / "reports")
    watch = CoreWatch(cluster, lab_env)
    baseline = watch.snapshot()
    assert not baseline.notes(), baseline.notes()
    result = Launcher(lab_env, cluster, rundir=rundir, nproc_per_node=2).run(
        Target(script=str(TARGET), args=("--segv-rank", "3")), timeout=120)
    assert not result.ok and result.ranks[3].signal == "SIGSEGV"
    cores = watch.collect(baseline, rundir=rundir, ranks=[result])
    assert len(cores) == 1, [c.describe() for c in cores]
    core = cores[0]
    status = json.loads((rundir.path / "host2" / "rank3.json").read_text())
    assert core.pid == status["pid"]
    assert re.fullmatch(rf"core dump on host2: python[\w.]* \(pid {status['pid']}, rank 3, SIGSEGV\)",
                        core.describe()), core.describe()
    assert core.local_path is not None and core.local_path.parent == rundir.path / "host2" / "cores"
    with gzip.open(core.local_path) as fh:
        assert fh.read(4) == b"\x7fELF"
    assert any("string_at" in f or "strlen" in f for f in core.crashing_frames()), core.backtrace
    failed, message = watch.verdict(cores)
    assert failed and core.describe() in message and "#0" in message
    assert json.loads((rundir.path / "cores.json").read_text())[0]["rank"] == 3


CHILD_CRASH = textwrap.dedent("""\
    import os, subprocess, sys
    if os.environ["RANK"] == "1":
        crash = "import ctypes; ctypes.string_at(0)"
        subprocess.run([sys.executable, "-c", crash])                      # a child of the rank
        subprocess.run(["bash", "-c", f"{sys.executable} -c '{crash}'; true"])  # a grandchild
    print("rank", os.environ["RANK"], "done", flush=True)
""")


@pytest.mark.parametrize("policy, rc", [("fail", 1), ("warn", 0)])
def test_camit_run_reports_cores_of_a_passing_launch_per_policy(lab_env_path, tmp_path, policy, rc) -> None:
    target = tmp_path / "child_crash.py"
    target.write_text(CHILD_CRASH)
    reports = tmp_path / "reports"
    cp = subprocess.run(
        [sys.executable, "-m", "framework.cli", "run", "--env", str(lab_env_path), "--hosts", ",".join(NODES),
         "--nproc-per-node", "2", "--report-dir", str(reports), "--timeout", "120", "--core-policy", policy,
         "--", str(target)], capture_output=True, text=True, timeout=300)
    out = cp.stdout
    assert cp.returncode == rc, out + cp.stderr
    assert "PASSED" in out
    assert re.search(r"core dump on host1: python[\w.]* \(pid \d+, child of rank 1, SIGSEGV\)", out), out
    assert re.search(r"core dump on host1: python[\w.]* \(pid \d+, process of rank 1, SIGSEGV\)", out), out
    assert ("warning: core dump(s)" in out) == (policy == "warn")
    run_dir = (reports / "latest").resolve()
    assert len(list((run_dir / "host1" / "cores").glob("*.gz"))) == 2
    assert len(json.loads((run_dir / "cores.json").read_text())) == 2


def test_ignore_policy_neither_fails_nor_fetches(lab_env, cluster, tmp_path) -> None:
    watch = CoreWatch(cluster, lab_env, policy="ignore")
    baseline = watch.snapshot()
    crash(cluster["host1"], lab_env.hosts["host1"].python)
    cores = watch.collect(baseline, rundir=tmp_path)
    assert len(cores) == 1 and watch.verdict(cores) == (False, "")
    assert not list(tmp_path.rglob("*.gz")) and not (tmp_path / "cores.json").exists()


# --------------------------------------------------------------------------- no false positives


def test_a_core_from_before_the_snapshot_never_counts(lab_env, cluster, tmp_path) -> None:
    crash(cluster["host1"], lab_env.hosts["host1"].python)
    watch = CoreWatch(cluster, lab_env)
    baseline = watch.snapshot()
    assert watch.collect(baseline, rundir=tmp_path) == []
    assert watch.verdict([]) == (False, "")


def test_cores_of_other_lab_hosts_and_of_the_controller_do_not_count(lab, lab_env, cluster, tmp_path) -> None:
    watch = CoreWatch(cluster, lab_env)
    baseline = watch.snapshot()
    with Cluster.from_env(lab_env, ["host3"]) as outside:
        pid = crash(outside["host3"], lab_env.hosts["host3"].python)
    assert [p for p in lab.host("host3").core_dir.iterdir() if f".{pid}." in p.name]
    here = subprocess.run(["sh", "-c", f"ulimit -S -c unlimited; exec {sys.executable} -c {CRASH!r}"],
                          capture_output=True, text=True, timeout=60)
    assert here.returncode == -11
    mine = controller_cores(int(here.stdout.split()[0]))
    try:
        assert len(mine) == 1  # the controller's core went to its own dir, which no lab host sees
        assert watch.collect(baseline, rundir=tmp_path) == []
    finally:
        for p in mine:
            p.unlink(missing_ok=True)


# --------------------------------------------------------------------------- other pattern styles


def test_a_relative_pattern_for_real_finds_the_core_in_the_run_dir(lab, lab_env, cluster, tmp_path) -> None:
    workdir = lab_env.hosts["host2"].workdir
    run_dir = f"{workdir}/runs/coretest-{os.getpid()}"
    cluster["host2"].check(["mkdir", "-p", run_dir])
    try:
        with core_pattern("core.%e.%p"):
            watch = CoreWatch(cluster, lab_env)
            baseline = watch.snapshot()
            assert baseline.hosts["host2"].pattern.kind == "relative"
            pid = crash(cluster["host2"], lab_env.hosts["host2"].python, cwd=run_dir)
            cores = watch.collect(baseline, rundir=tmp_path)
        assert [(c.host, c.pid, c.location) for c in cores] == [
            ("host2", pid, f"{run_dir}/core.{Path(cores[0].location).name.split('.')[1]}.{pid}")]
        assert cores[0].signal == "SIGSEGV" and cores[0].crashing_frames() and cores[0].local_path
    finally:
        cluster["host2"].run(["rm", "-rf", "--", run_dir])


def test_an_absolute_pattern_with_other_specifiers(lab, lab_env, cluster, tmp_path) -> None:
    with core_pattern("/var/crash/camit/%h-%E-%P-%u.core"):
        watch = CoreWatch(cluster, lab_env)
        baseline = watch.snapshot()
        pid = crash(cluster["host1"], lab_env.hosts["host1"].python)
        [core] = watch.collect(baseline, rundir=tmp_path)
    assert core.location.startswith("/var/crash/camit/host1-!") and core.location.endswith(f"-{pid}-0.core")
    assert core.executable and core.executable.startswith("/") and "!" not in core.executable
    assert core.signal == "SIGSEGV"  # no %s in the name: from the core's own notes


STYLES = {
    "systemd": "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h",
    "apport": "|/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -u%u -g%g -- %E",
    "abrt": "|/usr/libexec/abrt-hook-ccpp %s %c %p %u %g %t %e %P %I %h",
}


@pytest.mark.parametrize("style", sorted(STYLES))
def test_handler_styles_over_ssh_with_a_real_core_in_a_synthesized_store(style, lab, lab_env, cluster,
                                                                         tmp_path) -> None:
    """No daemon runs in the lab: a real kernel core is moved into the store the handler would have made."""
    host = cluster["host2"]
    python = lab_env.hosts["host2"].python
    base = f"{lab_env.hosts['host2'].workdir}/fake-{style}-{os.getpid()}"
    host.check(f"mkdir -p {base}/proc {base}/store && printf '%s\\n' '{STYLES[style]}' > {base}/proc/core_pattern")
    ctl = f"{base}/coredumpctl"
    sources = CoreSources(proc_dir=f"{base}/proc", coredumpctl=ctl, apport_dirs=(f"{base}/store",),
                          abrt_dirs=(f"{base}/store",))
    try:
        host.check(f"printf '[]' > {base}/list.json; cat > {ctl} <<'EOF'\n#!/bin/sh\ncase \"$*\" in\n"
                   f"*--json=short*) cat {base}/list.json ;;\n"
                   "*dump*) while [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done; "
                   f"cp {base}/core \"$out\" ;;\n"
                   f"esac\nEOF\nchmod +x {ctl}")
        watch = CoreWatch(cluster, lab_env, sources=sources)
        baseline = watch.snapshot()
        assert baseline.hosts["host2"].pattern.kind == style
        pid = crash(host, python)
        [made] = [p for p in lab.host("host2").core_dir.iterdir() if f".{pid}." in p.name]
        made_path = f"/var/crash/camit/{made.name}"
        now = int(time.time())
        if style == "systemd":
            host.check(f"mv {made_path} {base}/core && printf '%s' "
                       f"'[{{\"time\":{now * 1_000_000},\"pid\":{pid},\"uid\":0,\"gid\":0,\"sig\":11,"
                       f"\"corefile\":\"present\",\"exe\":\"{python}\",\"size\":1}}]' > {base}/list.json")
        elif style == "apport":
            host.check(f"mv {made_path} {base}/store/core._x_python.0.0123456789abcdef0123456789abcdef.{pid}.99")
        else:
            d = f"{base}/store/ccpp-{time.strftime('%Y-%m-%d-%H:%M:%S')}-{pid}"
            host.check(f"mkdir {d} && mv {made_path} {d}/coredump && printf %s {python} > {d}/executable && "
                       f"printf '%s' 'python3 killed by SIGSEGV' > {d}/reason && printf %s {now} > {d}/time")
        [core] = watch.collect(baseline, rundir=tmp_path)
        assert (core.host, core.source, core.pid, core.signal) == ("host2", style, pid, "SIGSEGV")
        assert core.local_path is not None and core.local_path.exists() and core.crashing_frames()
        assert not host.run(f"ls {lab_env.hosts['host2'].workdir}/.camit-cores").stdout.strip()
    finally:
        host.run(["rm", "-rf", "--", base])


# --------------------------------------------------------------------------- logs


def test_collect_logs_brings_dmesg_and_ascend_logs_with_signatures(lab, lab_env, cluster, tmp_path) -> None:
    workdir = lab_env.hosts["host1"].workdir
    logs = f"{workdir}/ascend-{os.getpid()}/log"
    watch = CoreWatch(cluster, lab_env, ascend_log_dirs=[logs])
    baseline = watch.snapshot()
    time.sleep(1.1)  # the Ascend files must be newer than the snapshot (whole seconds)
    cluster["host1"].check(f"mkdir -p {logs}/debug/plog {logs}/run/device-0 && "
                           f"printf '%s\\n' 'EI0006: Getting socket times out. dst_rank[2]' > "
                           f"{logs}/debug/plog/plog-1_1.log && printf 'dev\\n' > {logs}/run/device-0/device-1_1.log")
    crash(cluster["host1"], lab_env.hosts["host1"].python)
    try:
        files = watch.collect_logs(tmp_path, since=baseline)
    finally:
        cluster["host1"].run(["rm", "-rf", "--", f"{workdir}/ascend-{os.getpid()}"])
    names = {p.name for p in files["host1"]}
    assert {"dmesg.txt", "plog-1_1.log", "device-1_1.log", "signatures.txt"} <= names
    dmesg = (tmp_path / "host1" / "dmesg.txt").read_text()
    assert "segfault" in dmesg or dmesg.startswith("# dmesg is not readable")
    assert "EI0006" in (tmp_path / "signatures.txt").read_text() and "peer ranks 2" in watch.log_summary
    assert "host2:" not in watch.log_summary


def test_a_rank_that_segfaults_where_no_core_can_be_written_is_reported_with_why(lab, lab_env, cluster,
                                                                                  tmp_path) -> None:
    """core_pattern's directory does not exist for the SSH user: the rank's SIGSEGV leaves no core, and the
    watch says so for that rank and host, in the report folder and its notes."""
    with core_pattern("/nonexistent-camit-cores/core.%p"):
        watch = CoreWatch(cluster, lab_env)
        baseline = watch.snapshot()
        rundir = RunDir.create(tmp_path / "reports")
        result = Launcher(lab_env, cluster, rundir=rundir, nproc_per_node=2).run(
            Target(script=str(TARGET), args=("--segv-rank", "1")), timeout=120)
        assert result.ranks[1].signal == "SIGSEGV", result.message()
        cores = watch.collect(baseline, rundir=rundir.path, ranks=result)
    assert cores == []
    [missing] = watch.missing
    assert (missing.rank, missing.host, missing.signal) == (1, "host1", "SIGSEGV")
    assert missing.why.startswith("core_pattern's directory /nonexistent-camit-cores is not writable"), missing
    assert missing.describe() in watch.notes
    recorded = json.loads((rundir.path / "cores-missing.json").read_text())
    assert recorded == [missing.to_json()]
