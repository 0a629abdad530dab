"""The controller is told to stop (SIGTERM, as Jenkins does on abort; SIGINT, Ctrl-C) mid-run and mid-deploy.

``camit run`` and ``camit deploy`` run as subprocesses against the lab. Expected: the process
ends within a bound, says what happened, leaves no process of the run and no partial file on
any host, and keeps a report folder.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from framework.lab import artifacts
from framework.report.junit import validate_junit
from tests.support.camit_labtools import REPO, Footprint, pids_with_cmdline, wait_for, wait_none_left, wait_ranks_up

pytestmark = pytest.mark.lab
TARGET = REPO / "tests" / "data" / "targets" / "alltoall.py"
HOSTS = ["host1", "host2"]


@contextlib.contextmanager
def controller(*argv: str) -> Iterator[subprocess.Popen[str]]:
    """``camit <argv>`` as a subprocess; killed on the way out if the test left it running."""
    # SIGINT back to its default first: a shell without job control starts background jobs with it
    # ignored, and Python then never turns it into KeyboardInterrupt.
    proc = subprocess.Popen([sys.executable, "-m", "framework.cli", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def stop(proc: subprocess.Popen[str], sig: int) -> tuple[str, str, float]:
    """Send ``sig`` and wait for the controller to end: (stdout, stderr, seconds it took)."""
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return out, err, time.monotonic() - t0


@pytest.fixture
def fresh_env(env_variant, workdir_name):
    def make(**artifacts_):
        def change(doc):
            doc["defaults"]["workdir"] = f"/var/tmp/camit/{workdir_name}"
            if artifacts_:
                doc["artifacts"] = {k: str(v) for k, v in artifacts_.items()}
        return env_variant(change, "fresh.yaml")
    return make


def test_sigterm_mid_run_tears_down_every_host_and_keeps_the_report(lab, fresh_env, workdir_name, tmp_path):
    env = fresh_env()
    reports = tmp_path / "reports"
    fp = Footprint(lab, HOSTS, workdir_name)
    with controller("run", "--env", str(env), "--hosts", ",".join(HOSTS), "--nproc-per-node", "2", "--report-dir",
                    str(reports), "--timeout", "300", "--", str(TARGET), "--hang-rank", "0") as proc:
        run_dir = wait_for(lambda: (reports / "latest").exists() and (reports / "latest").resolve(), 60)
        assert run_dir, "no report folder appeared"
        # every rank is up (4 workers tagged with this run), then give all_to_all a moment
        assert wait_ranks_up(run_dir.name, 4), "ranks never up"
        time.sleep(3)
        out, err, took = stop(proc, signal.SIGTERM)
    assert took < 45, took  # bounded (a hang would be 300 s); bench/teardown.py measures the speed
    assert proc.returncode not in (0, None)
    launch = json.loads(next(run_dir.glob("launch-*.json")).read_text())
    assert launch["failure_kind"] == "interrupted" and "interrupted" in launch["failure"]
    assert launch["teardown_seconds"] is not None and launch["teardown_seconds"] <= 15
    assert wait_none_left(run_dir.name, 15) == []
    # what the ranks logged before the stop came back, per host
    assert (run_dir / "host1" / "rank0.log").exists() and (run_dir / "host2" / "rank3.log").exists()
    assert fp.strays() == {}


@pytest.fixture(scope="module")
def big_wheel(tmp_path_factory):
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from tests.integration.test_deploy_lab import pad_wheel

    tmp = tmp_path_factory.mktemp("bigwheel")
    return pad_wheel(artifacts.build_wheel(tmp / "w"), tmp / "padded", 96 * 1024 * 1024)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_mid_deploy_stops_at_once_and_leaves_no_partial_upload(lab, fresh_env, workdir_name, big_wheel,
                                                                      tmp_path, sig):
    env = fresh_env(wheel=big_wheel)
    reports = tmp_path / "reports"
    fp = Footprint(lab, HOSTS, workdir_name)
    roots = [lab.host(h).work_dir / workdir_name for h in HOSTS]
    with controller("deploy", "--env", str(env), "--hosts", ",".join(HOSTS), "--no-relay", "--report-dir",
                    str(reports)) as proc:
        part = wait_for(lambda: [p for r in roots if r.exists() for p in r.rglob("*.camit-part-*")], 120, 0.05)
        assert part, "the upload never started"
        out, err, took = stop(proc, sig)
    assert took < 30, took
    assert "interrupted" in (out + err).lower(), (out + err)[-2000:]
    assert proc.returncode not in (0, None)
    assert "Traceback" not in err, err[-2000:]
    # no partial upload on any host, nothing running from the workdir, nothing outside it
    left = [p for r in roots if r.exists() for p in r.rglob("*.camit-part-*")]
    assert left == [], left
    assert wait_for(lambda: not pids_with_cmdline(workdir_name), 10) is not None, pids_with_cmdline(workdir_name)
    assert fp.strays() == {}
    folder = (reports / "latest").resolve()
    assert folder.is_dir()
    for xml in ("junit.xml", "cluster.xml"):
        if (folder / xml).exists():
            assert validate_junit(folder / xml) == []


def test_a_launch_leaves_nothing_in_the_hosts_tmp(lab, fresh_env, workdir_name, tmp_path):
    env = fresh_env()
    fp = Footprint(lab, ["host1"], workdir_name)
    proc = subprocess.run([sys.executable, "-m", "framework.cli", "run", "--env", str(env), "--hosts", "host1",
                           "--nproc-per-node", "1", "--report-dir", str(tmp_path / "r"), "--timeout", "120", "--",
                           str(TARGET)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert fp.strays() == {}
