"""torchrun across the lab's hosts: pass, fail fast, time out, interrupt, lose a host — nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from framework.hosts import Cluster
from framework.lab.plan import nsenter_argv
from framework.launch import Launcher, LaunchResult, Target, stacks
from framework.records.folder import RunDir
from framework.report.summary import terminal_summary
from tests.support.camit_labtools import tagged, wait_for, wait_none_left, wait_ranks_up

TARGET = Path(__file__).resolve().parents[1] / "data" / "targets" / "alltoall.py"
NODES = ["host1", "host2"]


@pytest.fixture
def launcher(lab_env, tmp_path):
    cluster = Cluster.from_env(lab_env, NODES)
    rundir = RunDir.create(tmp_path / "reports")
    yield Launcher(lab_env, cluster, rundir=rundir, nproc_per_node=2)
    cluster.close()


def test_two_nodes_two_ranks_all_to_all(launcher):
    result = launcher.run(Target(script=str(TARGET)), timeout=120)
    assert result.ok, result.message()
    assert sorted(result.ranks) == [0, 1, 2, 3]
    for r in result.ranks.values():
        assert r.exit_code == 0 and r.log and "all_to_all ok" in Path(r.log).read_text()
        assert r.host == NODES[r.rank // 2] and Path(r.log).parent.name == r.host
    assert {n.exit_code for n in result.nodes.values()} == {0}
    record = json.loads((Path(result.report_dir) / f"launch-{result.launch_id}.json").read_text())
    assert record["ok"]
    # gloo: the NIC the host's ip -o link lists for its manage_nic address, the process-group timeout below the
    # case timeout, no HCCL variable (HCCL_BUFFSIZE least of all); the rendezvous on node 0's manage_nic address
    for host, node in record["nodes"].items():
        assert node["comm_env"] == {"GLOO_SOCKET_IFNAME": "eth0", "CAMIT_PG_TIMEOUT": "108"}, (host, node)
    assert result.master.startswith(launcher.env.hosts["host1"].manage_nic.ip + ":"), result.master
    assert wait_none_left(result.launch_id, 15) == []


def _decoy(lab, host: str, argv: list[str]) -> subprocess.Popen[bytes]:
    pid = lab.host(host).sshd_pid
    return subprocess.Popen(nsenter_argv(pid, argv), env=dict(os.environ, CAMIT_TEST_DECOY="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)


def test_rank_raise_fails_fast_and_leaves_nothing_but_the_decoy(lab, lab_env, launcher):
    # the decoy runs the very command line a worker runs, on host2, outside camit
    py = lab_env.hosts["host2"].python
    remote_target = f"{lab_env.hosts['host2'].workdir}/targets"
    launcher.run(Target(script=str(TARGET)), timeout=120)  # ships the target once
    shipped = lab.host_exec("host2", ["sh", "-c", f"ls {remote_target}/*/alltoall.py"], check=True).stdout.split()[0]
    decoy = _decoy(lab, "host2", [py, shipped, "--raise-rank", "3"])
    assert decoy.stdout is not None
    try:
        assert decoy.stdout.readline().startswith(b"decoy")
        result = launcher.run(Target(script=str(TARGET), args=("--raise-rank", "3")), timeout=120)
        assert not result.ok and result.failure_rank == 3
        assert "rank 3 on host2" in result.failure
        assert "RuntimeError: rank 3 raising on purpose" in result.failure_tail
        # bounded; bench/teardown.py measures the speed
        assert result.teardown_seconds is not None and result.teardown_seconds <= 15
        assert wait_none_left(result.launch_id, 15) == []
        assert decoy.poll() is None, "the decoy with the same command line was killed"
    finally:
        os.killpg(decoy.pid, signal.SIGKILL)
        decoy.wait()
        decoy.stdout.close()


def test_rank_segfault_is_reported_as_signal(launcher):
    result = launcher.run(Target(script=str(TARGET), args=("--segv-rank", "1")), timeout=120)
    assert not result.ok
    assert result.ranks[1].signal == "SIGSEGV"
    assert "rank 1 on host1 died of SIGSEGV" in result.failure
    assert wait_none_left(result.launch_id, 15) == []


def test_hanging_rank_hits_the_job_timeout(launcher):
    start = time.monotonic()
    result = launcher.run(Target(script=str(TARGET), args=("--hang-rank", "2")), timeout=20)
    elapsed = time.monotonic() - start
    assert result.timed_out and result.failure_kind == "timeout"
    assert 19 <= elapsed <= 60, elapsed
    assert wait_none_left(result.launch_id, 15) == []
    # the stacks each rank printed before the kill, grouped: the three in the barrier, rank 2 the odd one out
    assert [g.ranks for g in result.stacks] == [[0, 1, 3], [2]], result.message()
    # py-spy's dump (installed with the test extra; its native frames first when they resolved in time)
    assert "barrier" in [f.func for f in result.stacks[0].stack]
    line = stacks.summary(result.stacks)
    assert "3 ranks (0, 1, 3) in " in line and "barrier (distributed_c10d.py:" in line, line
    assert "odd one out: rank 2 on host2 in " in line and "<module> (alltoall.py:" in line, line
    assert all((Path(r.log).with_suffix(".pyspy")).is_file() for r in result.ranks.values() if r.log)
    assert "odd one out: rank 2 on host2" in result.message()
    summary = terminal_summary(launcher.rundir.path)
    assert "STACKS" in summary and "rank 2 on host2 in " in summary, summary


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_the_controller_tears_down_and_keeps_the_report(lab_env_path, tmp_path, sig):
    reports = tmp_path / "reports"
    proc = subprocess.Popen(
        [sys.executable, "-m", "framework.cli", "run", "--env", str(lab_env_path), "--hosts", ",".join(NODES),
         "--nproc-per-node", "2", "--report-dir", str(reports), "--timeout", "120", "--",
         str(TARGET), "--hang-rank", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait until the run's ranks are up on both nodes before interrupting
    run_dir = wait_for(lambda: (reports / "latest").exists() and (reports / "latest").resolve(), 60)
    assert run_dir, "no report folder appeared"
    assert wait_ranks_up(run_dir.name, 4), "ranks never up"
    time.sleep(3)  # rendezvous + all_to_all
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 30
    assert proc.returncode != 0
    assert any(run_dir.glob("launch-*.json")), err
    launch = json.loads(next(run_dir.glob("launch-*.json")).read_text())
    assert launch["failure_kind"] == "interrupted"
    assert wait_none_left(launch["launch_id"], 15) == []
    # the report folder is finished all the same: an interrupted run is an error entry in cluster.xml
    for name in ("cluster.xml", "manifest.json", "index.html"):
        assert (run_dir / name).is_file(), (name, err[-1500:])
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    cluster_xml = (run_dir / "cluster.xml").read_text()
    assert 'name="run"' in cluster_xml and "RunInterrupted" in cluster_xml


def _session_pids(lab, host: str) -> list[int]:
    """sshd session processes on that lab host (children of its listener), i.e. our connections."""
    listener = lab.host(host).sshd_pid
    pids = []
    for pid in lab.host_pids(host):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if comm == "sshd" and ppid == listener:
            pids.append(pid)
    return pids


def test_killed_ssh_session_is_a_lost_host_and_everything_is_torn_down(lab, launcher):
    box: dict[str, object] = {}

    def run() -> None:
        box["result"] = launcher.run(Target(script=str(TARGET), args=("--hang-rank", "0")), timeout=120)

    t = threading.Thread(target=run)
    t.start()
    assert wait_ranks_up(launcher.rundir.run_id, 4), "ranks never up"
    time.sleep(3)  # and hanging in their collective
    for pid in _session_pids(lab, "host2"):
        os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    t.join(60)
    result = box["result"]
    assert isinstance(result, LaunchResult), result
    assert time.monotonic() - t0 < 30
    assert result.failure_kind == "lost" and "host2" in (result.failure or "")
    assert wait_none_left(result.launch_id, 10) == []


def test_link_down_is_a_lost_host_and_its_supervisor_cleans_up(lab, launcher):
    box: dict[str, object] = {}
    ns = lab.host("host2").ns

    def run() -> None:
        box["result"] = launcher.run(Target(script=str(TARGET), args=("--hang-rank", "0")), timeout=120)

    t = threading.Thread(target=run)
    t.start()
    assert wait_ranks_up(launcher.rundir.run_id, 4), "ranks never up"
    time.sleep(3)
    subprocess.run(["ip", "-n", ns, "link", "set", "eth0", "down"], check=True)
    t0 = time.monotonic()
    try:
        t.join(60)
        assert time.monotonic() - t0 < 30
    finally:
        subprocess.run(["ip", "-n", ns, "link", "set", "eth0", "up"], check=True)
    result = box["result"]
    assert isinstance(result, LaunchResult), result
    assert result.failure_kind == "lost" and "host2" in (result.failure or "")
    # the supervisor on host2 heard nothing for its silence limit and ended its run
    assert wait_none_left(result.launch_id, 20) == []


def test_a_taken_master_port_is_retried_with_another(lab, lab_env_path, env_variant, tmp_path):
    """The env pins a master port that something else holds on node 0: the launch retries on a free one."""
    import socket as _socket

    from framework.config.effective import load

    # a free port on host1 right now, then a listener outside camit holding it
    probe = lab.host_exec("host1", [sys.executable, "-c", "import socket; s = socket.socket(); "
                                    "s.bind(('0.0.0.0', 0)); print(s.getsockname()[1])"], check=True)
    port = int(probe.stdout.strip())
    holder = subprocess.Popen(nsenter_argv(lab.host("host1").sshd_pid, [
        sys.executable, "-c", f"import socket, time; s = socket.socket(); s.bind(('0.0.0.0', {port})); "
                              "s.listen(); print('held', flush=True); time.sleep(300)"]),
        stdout=subprocess.PIPE, start_new_session=True)
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().startswith(b"held")
        env = load(env_variant(lambda d: d["launch"].__setitem__("master_port", port), "port.yaml"))
        with Cluster.from_env(env, NODES) as cluster:
            result = Launcher(env, cluster, rundir=RunDir.create(tmp_path / "r"), nproc_per_node=2).run(
                Target(script=str(TARGET)), timeout=120)
        assert result.ok, result.message()
        assert not result.master.endswith(f":{port}")
        assert result.launch_id.endswith("-r2")  # the second attempt passed
        assert (result.retry_of, result.port_try) == (result.launch_id[:-3], 2)  # the report reads these
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    del _socket


def test_one_nodes_torchrun_killed_9_tears_everything_down(lab, launcher):
    """SIGKILL to host2's torchrun orphans its workers (own sessions): the tag sweep still finds them."""
    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.setdefault("r", launcher.run(
        Target(script=str(TARGET), args=("--hang-rank", "0")), timeout=120)))
    t.start()
    victim = None
    end = time.monotonic() + 60
    while victim is None and time.monotonic() < end:
        for pid in tagged(""):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            # torchrun itself carries the tag (the supervisor above it does not) and runs the module
            if any(e.startswith(b"CAMIT_RUN_ID=") and e.endswith(b".host2") for e in env) and \
                    b"torch.distributed.run" in cmd:
                victim = pid
        time.sleep(0.2)
    assert victim is not None, "host2's torchrun never started"
    assert wait_ranks_up(launcher.rundir.run_id, 4), "ranks never up"
    time.sleep(3)  # and in their collectives
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    t.join(60)
    result = box["r"]
    assert isinstance(result, LaunchResult), result
    assert result.failure_kind in ("node", "rank"), result.failure
    assert "host2" in (result.failure or "")
    assert wait_none_left(result.launch_id, 15) == []
    assert time.monotonic() - t0 < 45


ESCAPER = """\
import os, subprocess, sys, time
if os.environ["RANK"] == "1":
    # a child that leaves the session (setsid) and drops the run's tag (a clean environment): the
    # supervisor's group and tag kills miss it, its process tree does not
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                             env={"PATH": "/usr/bin:/bin"})
    print("ESCAPED", child.pid, flush=True)
    time.sleep(1)  # the supervisor follows its tree every 0.25 s
    sys.exit(3)  # the launch fails: camit kills every node's run
time.sleep(300)
"""


def test_a_child_escaping_session_and_tag_survives_the_kill_and_the_supervisor_reports_it_left(launcher, tmp_path):
    script = tmp_path / "escaper.py"
    script.write_text(ESCAPER)
    result = launcher.run(Target(script=str(script)), timeout=120)
    logs = "\n".join(Path(r.log).read_text() for r in result.ranks.values() if r.log)
    pid = int(next(line.split()[1] for line in logs.splitlines() if line.startswith("ESCAPED ")))
    try:
        assert result.failure_rank == 1, result.message()
        node = result.nodes["host1"]  # rank 1 runs on host1 (two ranks per node)
        assert node.left == [pid], (node, result.message())
        assert pid in node.tree and result.nodes["host2"].left == []
        assert f"host1: processes of the run left after the kill: pid {pid}" in result.message()
        saved = json.loads((Path(result.report_dir) / f"launch-{result.launch_id}.json").read_text())
        assert saved["nodes"]["host1"]["left"] == [pid]
        assert Path(f"/proc/{pid}").exists()  # it really survived (the lab's hosts share this pid namespace)
    finally:
        os.kill(pid, signal.SIGKILL)
    assert wait_none_left(result.launch_id, 15) == []


def test_diagnose_names_the_odd_rank_of_a_running_launch_and_stops_nothing(lab_env_path, tmp_path):
    """``camit diagnose RUN_ID`` while rank 2 sleeps and the others wait in the barrier: it names rank 2
    and its host, and every rank is still running afterwards."""
    reports = tmp_path / "reports"
    proc = subprocess.Popen(
        [sys.executable, "-m", "framework.cli", "run", "--env", str(lab_env_path), "--hosts", ",".join(NODES),
         "--nproc-per-node", "2", "--report-dir", str(reports), "--timeout", "180", "--",
         str(TARGET), "--hang-rank", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_dir = wait_for(lambda: (reports / "latest").exists() and (reports / "latest").resolve(), 60)
        assert run_dir, "no report folder appeared"
        assert wait_ranks_up(run_dir.name, 4), "ranks never up"
        # a diagnosis stops nothing: ask again until the ranks are past torch's import and the all_to_all
        deadline = time.monotonic() + 90
        while True:
            t0 = time.monotonic()
            diag = subprocess.run([sys.executable, "-m", "framework.cli", "diagnose", "--env", str(lab_env_path),
                                   run_dir.name], capture_output=True, text=True, timeout=120)
            took = time.monotonic() - t0
            assert diag.returncode == 0, diag.stdout + diag.stderr
            if "3 ranks (0, 1, 3)" in diag.stdout or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert "3 ranks (0, 1, 3) in " in diag.stdout and "barrier (distributed_c10d.py:" in diag.stdout, diag.stdout
        assert "odd one out: rank 2 on host2 in " in diag.stdout, diag.stdout
        assert "<module> (alltoall.py:" in diag.stdout, diag.stdout
        assert took < 10, took
        assert wait_ranks_up(run_dir.name, 4, within=2), "a rank ended after the diagnosis"
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
