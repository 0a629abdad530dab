"""``pytest suites/cam`` as a Jenkins stage runs it, stopped or broken mid-run (issue 16, items 1 and 2).

pytest runs as Jenkins starts it: a subprocess in its own process group, ``--report-dir``,
``-o junit_family=xunit2``. The launch's ranks sit at start-up until killed (``tests/data/hang`` on
their ``PYTHONPATH``: a sitecustomize that sleeps in every torchrun worker), so a launch is surely
running when the test acts. Expected every time: the exit status of the table in
``framework/errors.py``, a complete report folder (junit.xml and cluster.xml valid against
junit-10.xsd, manifest.json, index.html), no process of the run left on any lab host (by the run's
own ``CAMIT_RUN_ID`` tag) and the lease free.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.errors import SESSION_LEASE, SESSION_UNREACHABLE
from tests.support.camit_labtools import REPO, assert_complete, jenkins_pytest, tagged, wait_for, wait_none_left

pytestmark = pytest.mark.lab
HANG = REPO / "tests" / "data" / "hang"
ONE = ["-k", "test_prefill_dispatch_combine", "--world-sizes", "4"]
TWO = ["-k", "test_prefill_dispatch_combine or test_abnormal_inputs", "--world-sizes", "4", "-n", "2"]


@pytest.fixture
def hang_env(env_variant):
    """The lab env with a workdir of this test's own, its ranks hanging at start-up."""
    workdir = f"/var/tmp/camit/sig-{secrets.token_hex(3)}"

    def change(doc):
        doc["defaults"]["workdir"] = workdir
        doc.setdefault("launch", {})["env"] = {"PYTHONPATH": str(HANG), "CAMIT_TEST_HANG": "1"}
    return env_variant(change, "hang.yaml")


def ranks_running(reports: Path, count: int, proc: subprocess.Popen[str], within: float = 120) -> str:
    """Wait until ``count`` ranks of the run (its tagged rank wrappers) run on the hosts; the run id."""
    def up() -> str | None:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        latest = reports / "latest"
        if not latest.exists():
            return None
        run_id = latest.resolve().name
        ranks = [p for p in tagged(run_id) if b"rankwrap" in _cmdline(p)]
        return run_id if len(ranks) >= count else None
    run_id = wait_for(up, within)
    assert run_id, "the launch never started its ranks"
    return run_id


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def lease_states(env: Path) -> dict[str, str]:
    from framework.config.effective import load
    from framework.hosts import Cluster
    from framework.lease import lease_status

    with Cluster.from_env(load(env)) as cluster:
        return {h: (s.state if not isinstance(s, BaseException) else repr(s)) for h, s in lease_status(cluster).items()}


@pytest.mark.parametrize("sig, to_group, args, ranks", [
    (signal.SIGTERM, True, ONE, 4), (signal.SIGHUP, False, ONE, 4),
    (signal.SIGTERM, True, TWO, 8), (signal.SIGTERM, False, TWO, 8),
], ids=["SIGTERM-tree", "SIGHUP-pytest", "n2-SIGTERM-tree", "n2-SIGTERM-controller"])
def test_a_stop_signal_tears_down_every_node_writes_every_report_and_frees_the_lease(hang_env, tmp_path, sig,
                                                                                   to_group, args, ranks):
    reports = tmp_path / "reports"
    with jenkins_pytest(hang_env, reports, *args) as proc:
        run_id = ranks_running(reports, ranks, proc)
        t0 = time.monotonic()
        os.killpg(proc.pid, sig) if to_group else proc.send_signal(sig)  # a Jenkins abort / to pytest alone
        out, _ = proc.communicate(timeout=90)
        took = time.monotonic() - t0
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-4000:]
    assert took < 45, took
    run = (reports / "latest").resolve()
    manifest = assert_complete(run, "interrupted")
    assert signal.Signals(sig).name in manifest["error"]
    launches = [json.loads(p.read_text()) for p in run.glob("launch-*.json")]
    assert len(launches) == ranks // 4 and all(la["failure_kind"] == "interrupted" for la in launches), launches
    # every node's run folder came back (its torchrun log; the ranks, asleep in sitecustomize, wrote none)
    assert len(list(run.glob("host*/*/torchrun.log"))) == ranks // 2
    assert wait_none_left(run_id, 15) == []
    assert set(lease_states(hang_env).values()) == {"free"}


def test_an_unreachable_host_ends_the_run_with_6_in_one_line(env_variant, tmp_path):
    def change(doc):
        doc["defaults"]["workdir"] = f"/var/tmp/camit/sig-{secrets.token_hex(3)}"
        doc["host_info"]["host2"]["ssh_port"] = 1  # nothing listens there: connection refused
    env = env_variant(change, "down.yaml")
    reports = tmp_path / "reports"
    with jenkins_pytest(env, reports, *ONE) as proc:
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == SESSION_UNREACHABLE, out[-4000:]
    lines = [line for line in out.splitlines() if "camit: cluster unreachable" in line]
    assert len(lines) == 1 and "host2" in lines[0], out[-4000:]
    assert "Traceback" not in out
    manifest = assert_complete((reports / "latest").resolve(), "unreachable")
    assert "host2" in manifest["error"]
    states = lease_states(env)  # host2 is unreachable here too; the others were never leased or are free again
    assert {h: st for h, st in states.items() if h != "host2"} == {"host1": "free", "host3": "free", "host4": "free"}


def test_a_lease_held_by_another_owner_ends_the_run_with_7_naming_the_holder(hang_env, tmp_path):
    from framework.config.effective import load
    from framework.hosts import Cluster
    from framework.lease import Lease

    reports = tmp_path / "reports"
    with Cluster.from_env(load(hang_env), ["host3"]) as cluster, Lease(cluster, owner="someone@else", interval=0):
        with jenkins_pytest(hang_env, reports, *ONE, extra_env={"CAMIT_LEASE_WAIT": "1"}) as proc:
            out, _ = proc.communicate(timeout=120)
        assert proc.returncode == SESSION_LEASE, out[-4000:]
        lines = [line for line in out.splitlines() if "camit: lease held" in line]
        assert len(lines) == 1 and "host3: leased by someone@else" in lines[0], out[-4000:]
        assert "still held after waiting" in lines[0]
        states = lease_states(hang_env)
    assert states == {"host1": "free", "host2": "free", "host3": "held", "host4": "free"}, states
    assert_complete((reports / "latest").resolve(), "lease")
    assert not list((reports / "latest").resolve().glob("launch-*.json"))  # nothing ran on the hosts


def test_a_lease_lost_mid_run_stops_the_launch_within_one_heartbeat_with_7(hang_env, tmp_path):
    from framework.config.effective import load
    from framework.hosts import Cluster
    from framework.lease import Lease, release_leases

    reports = tmp_path / "reports"
    fast = {"PYTHONPATH": f"{REPO}{os.pathsep}{HANG}", "CAMIT_TEST_LEASE_INTERVAL": "1"}
    with jenkins_pytest(hang_env, reports, *ONE, "-p", "camit_fast_lease", extra_env=fast) as proc:
        run_id = ranks_running(reports, 4, proc)
        with Cluster.from_env(load(hang_env), ["host2"]) as cluster:
            # someone frees our lease on host2 by force and takes it. A forced release removes only the content
            # it read: a 1 s heartbeat landing between its read and its removal leaves the lease as it was
            # ("changed"; this stop's CI, under load), so the thief does what a person would, tries again
            for _ in range(20):
                if release_leases(cluster, force=True).get("host2") == "released":
                    break
            thief = Lease(cluster, owner="thief@else", interval=0).acquire()
            t0 = time.monotonic()
            try:
                out, _ = proc.communicate(timeout=90)
                took = time.monotonic() - t0
            finally:
                thief.release()
    assert proc.returncode == SESSION_LEASE, out[-4000:]
    assert took < 1 + 25, took  # one heartbeat, then the launch's teardown and the reports
    # the thief takes the lease in two steps (force-free, then acquire): a heartbeat between them finds no lease
    # and cannot name a holder ("someone"; stop 27's CI, under load, with the test's 1 s beats)
    lost = re.search(r"camit: lease lost: host2: taken over by (thief@else|someone)\b", out)
    assert lost, out[-4000:]
    run = (reports / "latest").resolve()
    manifest = assert_complete(run, "lease")
    assert f"taken over by {lost.group(1)}" in manifest["error"]
    launch = json.loads(next(run.glob("launch-*.json")).read_text())
    assert launch["failure_kind"] == "interrupted"
    assert wait_none_left(run_id, 15) == []
    assert set(lease_states(hang_env).values()) == {"free"}


STOPPED_TEST = '''
import signal
import threading

import pytest
from tests.support.camit_labtools import wait_ranks_up

from framework.launch import Target


def stop(signum, frame):
    {stop}


def test_stopped_during_the_launch(camit, launcher):
    signal.signal(signal.SIGALRM, stop)
    run_id = camit.ensure_rundir().run_id
    main = threading.main_thread().ident
    # as pytest-timeout's signal method does, once every rank is up: an exception raised in the main thread
    threading.Thread(target=lambda: wait_ranks_up(run_id, 2) and signal.pthread_kill(main, signal.SIGALRM),
                     daemon=True).start()
    launcher.run(Target(script={target!r}, args=("--hang-rank", "0")), nproc_per_node=1, timeout=300)
'''


@pytest.mark.parametrize("stop, rc, kind", [
    ("pytest.exit('stopped by the test', returncode=3)", 3, "Exit"),
    ("pytest.fail('Timeout (pytest-timeout)', pytrace=False)", 1, "Failed"),
], ids=["pytest.exit", "pytest-timeout"])
def test_an_exception_during_a_launch_tears_it_down_and_fetches_the_rank_logs(env_variant, tmp_path, stop, rc, kind):
    def change(doc):
        doc["defaults"]["workdir"] = f"/var/tmp/camit/sig-{secrets.token_hex(3)}"
        doc["host_info"] = {h: doc["host_info"][h] for h in ("host1", "host2")}
    env = env_variant(change, "two.yaml")
    target = REPO / "tests" / "data" / "targets" / "alltoall.py"
    (tmp_path / "test_stopped.py").write_text(STOPPED_TEST.format(stop=stop, target=str(target)))
    proc = subprocess.run([sys.executable, "-m", "pytest", "test_stopped.py", "--env", str(env), "--report-dir",
                           "reports", "-p", "no:cacheprovider", "-q"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"})
    out = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == rc, out
    run = (tmp_path / "reports" / "latest").resolve()
    launch = json.loads(next(run.glob("launch-*.json")).read_text())
    assert launch["failure_kind"] == "interrupted" and f"stopped ({kind}" in launch["failure"], launch["failure"]
    assert (run / "host1" / launch["launch_id"] / "rank0.log").is_file()
    assert (run / "host2" / launch["launch_id"] / "rank1.log").is_file()
    assert wait_none_left(run.name, 15) == []
    assert set(lease_states(env).values()) == {"free"}


def test_a_deploy_failed_on_one_host_ends_the_run_with_8_naming_host_and_step(lab, env_variant, tmp_path):
    """rc 8 as Jenkins sees it: host2's workdir too small for the wheel (a tmpfs, as in test_deploy_lab.py)."""
    import zipfile

    from framework.errors import SESSION_DEPLOY
    from framework.lab import artifacts

    wheel = artifacts.build_wheel(tmp_path / "built")
    big = tmp_path / "big" / wheel.name  # 12 MiB more than host2's 8 MiB workdir holds
    big.parent.mkdir()
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(big, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            zout.writestr(item, zin.read(item.filename))
        zout.writestr("umdk_cam_op_lib/_pad.bin", os.urandom(12 * 1024 * 1024))

    def change(doc):
        doc["defaults"]["workdir"] = "/var/tmp/camit"  # the folder set_small_workdir mounts over
        doc["artifacts"] = {"wheel": str(big)}
        doc["relay"] = False
    env = env_variant(change, "deploy-fails.yaml")
    reports = tmp_path / "reports"
    lab.set_small_workdir("host2", "8m")
    try:
        with jenkins_pytest(env, reports, *ONE) as proc:
            out, _ = proc.communicate(timeout=180)
        states = lease_states(env)
    finally:
        lab.reset_workdir("host2")
    assert proc.returncode == SESSION_DEPLOY, out[-4000:]
    lines = [line for line in out.splitlines() if "camit: deploy failed" in line]
    assert len(lines) == 1 and "host2: deploy step 'upload' failed" in lines[0], out[-4000:]
    assert "Traceback" not in out
    run = (reports / "latest").resolve()
    manifest = assert_complete(run, "deploy failed")
    assert "host2" in manifest["error"] and "upload" in manifest["error"], manifest
    assert not list(run.glob("launch-*.json"))  # nothing ran on the hosts, and no error per test
    assert " error" not in out.splitlines()[-1], out[-2000:]
    assert states == {"host1": "free", "host2": "free", "host3": "free", "host4": "free"}, states
