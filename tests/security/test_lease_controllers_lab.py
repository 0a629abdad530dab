"""Two controllers on one env never share hosts: the lease heartbeat has its own threads (long host work in
the cluster's pool cannot starve it), ``camit run`` / ``camit deploy`` take the lease like the pytest path, and
a second controller on the same machine waits (or fails naming the holder) instead of judging a live lease stale.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from framework.hosts import Cluster
from framework.lease import LEASE_FILE, Lease, LeaseHeld, lease_status, release_leases
from tests.security._deadlines_lease import camit_popen, finish, kill
from tests.support.camit_labtools import REPO

pytestmark = pytest.mark.lab
TARGET = Path(__file__).with_name("_deadlines_lease_target.py")
HOSTS = ["host1", "host2"]


@pytest.fixture
def own_workdir(env_variant, lab):
    """An env of :data:`HOSTS` whose workdir (so their lease file) belongs to this test only; removed after.

    Its ``max_parallel`` is 2: the cluster's pool is full as soon as both hosts do long work."""
    name = f"ls-{os.urandom(4).hex()}"

    def change(doc):
        doc["defaults"]["workdir"] = f"/var/tmp/camit/{name}"
        doc["defaults"]["max_parallel"] = 2
        doc["host_info"] = {h: v for h, v in doc["host_info"].items() if h in HOSTS}
    yield env_variant(change, "lease.yaml")
    for h in HOSTS:
        lab.host_exec(h, ["rm", "-rf", "--", f"/var/tmp/camit/{name}"])


def test_heartbeat_stays_fresh_while_the_cluster_pool_is_busy(lab_env):
    # a pool of 2 threads, both busy with 12 s of host work: a heartbeat queued behind it would be ~12 s old
    with Cluster.from_env(lab_env, HOSTS, max_parallel=2) as c, Cluster.from_env(lab_env, HOSTS) as other:
        try:
            with Lease(c, owner="busy@lab", ttl=9, interval=1) as lease:
                work = threading.Thread(target=c.run, args=("sleep 12",), kwargs={"timeout": 60}, daemon=True)
                work.start()
                oldest = 0.0
                while work.is_alive():
                    for name, st in lease_status(other).items():
                        assert not isinstance(st, BaseException), st
                        assert st.record is not None and st.record.token == lease.token, (name, st)
                        assert st.stale is None, f"{name}: the lease went stale under load: {st.stale}"
                        oldest = max(oldest, st.now - st.record.heartbeat)
                    time.sleep(0.5)
                with pytest.raises(LeaseHeld, match="leased by busy@lab"):
                    Lease(other, owner="second@lab").acquire()
            assert oldest <= 3, oldest
        finally:
            release_leases(other, force=True)


def test_lease_file_names_the_holder_without_its_command_line(lab, lab_env_path):
    secret_arg = "--password=hunter2-" + os.urandom(3).hex()
    script = textwrap.dedent("""
        import sys, time
        from framework.config.effective import load
        from framework.hosts import Cluster
        from framework.lease import Lease
        with Cluster.from_env(load(sys.argv[1]), ["host3"]) as c:
            with Lease(c, owner="argv@lab", interval=0):
                print("HELD", flush=True)
                sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, str(lab_env_path), secret_arg], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "CAMIT_RUN_ID": "run-argv-1"})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "HELD"
        text = (lab.host("host3").work_dir / LEASE_FILE).read_text()
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.communicate(timeout=60)
    doc = json.loads(text)
    assert "hunter2" not in text and "argv" not in doc, text
    assert doc["owner"] == "argv@lab" and doc["pid"] == proc.pid and doc["run_id"] == "run-argv-1"
    assert doc["pid_start"] > 0 and doc["controller_id"], doc


def _window(report: Path, host: str) -> tuple[float, float]:
    """When the target ran on ``host`` in the run whose report folder is ``report``."""
    logs = list((report / host).rglob("rank*.log"))
    assert logs, f"no rank log of {host} in {report}"
    text = logs[0].read_text()
    start, end = re.search(r"START (\d+\.\d+)", text), re.search(r"END (\d+\.\d+)", text)
    assert start and end, text[-2000:]
    return float(start[1]), float(end[1])


def _report(out: str) -> Path:
    found = re.search(r"^report: (.+)$", out, re.M)
    assert found, out[-2000:]
    return Path(found[1].strip())


def test_two_camit_runs_a_few_seconds_apart_never_overlap(own_workdir, tmp_path):
    args = ["run", "--env", str(own_workdir), "--hosts", ",".join(HOSTS), "--nproc-per-node", "1", "--timeout",
            "300"]
    first = camit_popen(*args, "--owner", "first@lab", "--report-dir", str(tmp_path / "r1"), "--", str(TARGET), "15")
    try:
        time.sleep(4)
        refused = camit_popen(*args, "--owner", "refused@lab", "--report-dir", str(tmp_path / "r0"), "--",
                              str(TARGET), "1")
        out0, err0, _ = finish(refused, 120)
        time.sleep(1)
        second = camit_popen(*args, "--owner", "second@lab", "--wait", "300", "--report-dir", str(tmp_path / "r2"),
                             "--", str(TARGET), "5")
        out1, err1, _ = finish(first, 240)
        out2, err2, _ = finish(second, 240)
    finally:
        kill(first)
    # without --wait: refused at once, naming the holder (exit 3), nothing launched
    assert refused.returncode == 3, (out0[-1500:], err0[-1500:])
    assert "leased by first@lab" in err0, err0[-1500:]
    assert first.returncode == 0, (out1[-1500:], err1[-1500:])
    assert second.returncode == 0, (out2[-1500:], err2[-1500:])
    for h in HOSTS:
        s1, e1 = _window(_report(out1), h)
        s2, e2 = _window(_report(out2), h)
        assert s2 >= e1, f"{h}: the second run ran at {s2:.1f}, while the first ran {s1:.1f}..{e1:.1f}"


SESSION_TEST = '''
import json, os, time
from pathlib import Path

def test_hold(cluster):
    start = time.time()
    # host work on every host, in the cluster's pool: the first session's longer than the lease's staleness window
    cluster.run("sleep " + os.environ["WORK"], timeout=300).raise_on_failure()
    Path(os.environ["WINDOW_OUT"]).write_text(json.dumps([start, time.time()]))
'''


def test_two_pytest_sessions_a_few_seconds_apart_never_overlap(own_workdir, tmp_path):
    test_file = tmp_path / "test_hold.py"
    test_file.write_text(SESSION_TEST)
    sessions = []
    # the first session holds the lease past its staleness window (3 missed beats, 30 s), so only its heartbeat
    # keeps the waiting second from taking it over; the second needs only to start after the first ended
    for i, work in enumerate(("36", "1")):
        env = {**os.environ, "WINDOW_OUT": str(tmp_path / f"w{i}.json"), "CAMIT_LEASE_WAIT": "300",
               "PYTHONPATH": str(REPO), "WORK": work}
        sessions.append(subprocess.Popen(
            [sys.executable, "-m", "pytest", str(test_file), "--env", str(own_workdir), "-q", "-p", "no:cacheprovider",
             "--report-dir", str(tmp_path / f"rep{i}"), "--no-deploy"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True))
        time.sleep(4)
    try:
        outs = [finish(p, 400)[0] for p in sessions]
    finally:
        for p in sessions:
            kill(p)
    for p, out in zip(sessions, outs):
        assert p.returncode == 0, out[-3000:]
    (s0, e0), (s1, e1) = (json.loads((tmp_path / f"w{i}.json").read_text()) for i in range(2))
    assert s1 >= e0 or s0 >= e1, f"the sessions overlapped on the hosts: {s0:.1f}..{e0:.1f} and {s1:.1f}..{e1:.1f}"


def test_deploy_and_exec_lease_take_the_lease_while_exec_and_status_stay_usable(own_workdir):
    from framework.config.effective import load

    with Cluster.from_env(load(own_workdir)) as c, Lease(c, owner="holder@lab"):
        base = ["--env", str(own_workdir)]
        deploy = camit_popen("deploy", *base, "--no-relay")
        leased_exec = camit_popen("exec", *base, "--lease", "--", "true")
        plain_exec = camit_popen("exec", *base, "--", "echo", "beside")
        status = camit_popen("lease", "status", *base)
        results = {name: (p, *finish(p, 180)) for name, p in
                   {"deploy": deploy, "exec --lease": leased_exec, "exec": plain_exec, "status": status}.items()}
    for name in ("deploy", "exec --lease"):
        p, out, err, _ = results[name]
        assert p.returncode == 3 and "leased by holder@lab" in err, (name, out[-1500:], err[-1500:])
    p, out, err, _ = results["exec"]
    assert p.returncode == 0 and "beside" in out, (out[-1500:], err[-1500:])
    p, out, err, _ = results["status"]
    assert p.returncode == 0 and "holder@lab" in out, (out[-1500:], err[-1500:])
