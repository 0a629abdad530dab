"""Cluster leases against the lab's real sshd hosts: the API and `camit lease`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.hosts import Cluster
from framework.lease import LEASE_FILE, Lease, LeaseHeld, LeaseRecord, lease_status, release_leases
from tests.support.leases import states

REPO = Path(__file__).resolve().parents[2]


def camit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def start_holder(env_path: Path, *extra: str, seconds: float = 60) -> subprocess.Popen[str]:
    """`camit lease run ... -- sleep N` in the background; returns once the lease is held."""
    proc = subprocess.Popen([sys.executable, "-m", "framework.cli", "lease", "run", "--env", str(env_path),
                             "--owner", "holder@cli", *extra, "--", "sleep", f"{seconds:g}"],
                            stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "lease held on" in line, line + proc.stderr.read()
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    """Kill what is left of a holder's session (camit and its command) and close the pipes."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


@pytest.fixture
def clean(lab_env):
    """Leave no lease behind on the lab, whatever the test did."""
    yield
    with Cluster.from_env(lab_env) as c:
        release_leases(c, force=True)


def sub(lab_env, *names: str) -> Cluster:
    return Cluster.from_env(lab_env, list(names))


def test_second_lease_fails_naming_the_first_then_succeeds_after_release(lab_env, clean):
    with Cluster.from_env(lab_env) as c1, Cluster.from_env(lab_env) as c2:
        first = Lease(c1, owner="first@lab").acquire()
        try:
            with pytest.raises(LeaseHeld) as info:
                Lease(c2, owner="second@lab").acquire()
            text = str(info.value)
            assert text.startswith("host1: leased by first@lab (pid ")
            assert f"pid {os.getpid()} on " in text and "heartbeat " in text
            assert info.value.exit_code == 3
        finally:
            first.release()
        with Lease(c2, owner="second@lab") as lease:
            assert sorted(lease.held) == sorted(lab_env.hosts)


def test_disjoint_host_groups_concurrently(lab_env, clean):
    with (sub(lab_env, "host1", "host2") as a, sub(lab_env, "host3", "host4") as b,
          sub(lab_env, "host2", "host3") as mid):
        with Lease(a, owner="left"), Lease(b, owner="right"):
            with pytest.raises(LeaseHeld, match="^host2: leased by left"):
                Lease(mid, owner="middle").acquire()
        with Lease(mid, owner="middle") as lease:
            assert sorted(lease.held) == ["host2", "host3"]


def test_released_on_exception(lab_env, clean):
    with Cluster.from_env(lab_env) as c:
        with pytest.raises(RuntimeError), Lease(c, owner="doomed"):
            raise RuntimeError("test body failed")
        assert {h: s.state for h, s in states(lease_status(c)).items()} == {h: "free" for h in lab_env.hosts}


def test_stale_lease_is_taken_over_with_a_warning(lab, lab_env, clean, caplog):
    stale = {"version": 1, "owner": "https://ci/job/dead/1/", "token": "deadbeef", "pid": 1, "controller": "gone",
             "hosts": ["host1"], "argv": "", "ttl": 300, "interval": 10, "start": 1, "heartbeat": 1, "expires": 301}
    lab.host_exec("host1", ["sh", "-c", f"mkdir -p /var/tmp/camit && cat > /var/tmp/camit/{LEASE_FILE}"],
                  input=json.dumps(stale) + "\n", check=True)
    with sub(lab_env, "host1", "host2") as c, caplog.at_level(logging.WARNING, logger="camit.lease"):
        with Lease(c, owner="rescuer") as lease:
            assert lease.held["host1"].owner == "rescuer"
    assert "host1: taking over the stale lease of https://ci/job/dead/1/ (pid 1 on gone" in caplog.text
    assert "expired" in caplog.text


def test_cli_lease_run_status_wait_and_release(lab_env_path, lab_env, clean):
    holder = start_holder(lab_env_path, "--hosts", "host1,host2")
    waiter = None
    try:
        status = camit("lease", "status", "--env", str(lab_env_path), "--json")
        assert status.returncode == 0, status.stderr
        states = {r["host"]: r for r in json.loads(status.stdout)}
        assert states["host1"]["state"] == "held" and states["host1"]["lease"]["owner"] == "holder@cli"
        assert states["host1"]["lease"]["pid"] == holder.pid
        assert states["host3"]["state"] == "free"

        busy = camit("lease", "run", "--env", str(lab_env_path), "--hosts", "host2,host3", "--", "true")
        assert busy.returncode == 3
        assert f"host2: leased by holder@cli (pid {holder.pid} on" in busy.stderr

        refused = camit("lease", "release", "--env", str(lab_env_path), "--hosts", "host1")
        assert refused.returncode == 1 and "not released (use --force)" in refused.stdout

        waiter = subprocess.Popen([sys.executable, "-m", "framework.cli", "lease", "run", "--env", str(lab_env_path),
                                   "--wait", "60", "--", "echo", "got it"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                  start_new_session=True)
        time.sleep(2)
        assert waiter.poll() is None, waiter.communicate()  # still waiting
        holder.terminate()  # the holder releases on SIGTERM; the waiter gets the lease
        assert holder.wait(timeout=30) is not None
        out, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, err
        assert "got it" in out and "leased by holder@cli" in err  # it said whom it waited for
    finally:
        for p in (holder, waiter):
            if p is not None:
                stop(p)


def test_cli_force_release_frees_a_live_lease(lab_env_path, clean):
    holder = start_holder(lab_env_path, "--hosts", "host4")
    try:
        forced = camit("lease", "release", "--env", str(lab_env_path), "--hosts", "host4", "--force")
        assert forced.returncode == 0 and "released" in forced.stdout
        free = camit("lease", "run", "--env", str(lab_env_path), "--hosts", "host4", "--", "true")
        assert free.returncode == 0, free.stderr
    finally:
        holder.terminate()
        stop(holder)


def test_ctrl_c_releases_the_lease(lab_env_path, lab_env, clean):
    holder = start_holder(lab_env_path)
    holder.send_signal(signal.SIGINT)
    assert holder.wait(timeout=30) == 130
    stop(holder)
    with Cluster.from_env(lab_env) as c:
        assert {s.state for s in states(lease_status(c)).values()} == {"free"}


def test_sigterm_releases_the_lease(lab_env_path, lab_env, clean):
    holder = start_holder(lab_env_path)
    holder.terminate()
    assert holder.wait(timeout=30) == 130
    stop(holder)
    with Cluster.from_env(lab_env) as c:
        assert {s.state for s in states(lease_status(c)).values()} == {"free"}


def test_killed_holder_is_stale_at_once(lab_env_path, lab_env, clean, caplog):
    holder = start_holder(lab_env_path, "--hosts", "host1")
    os.kill(holder.pid, signal.SIGKILL)  # no release: the file stays behind
    holder.wait()
    with sub(lab_env, "host1") as c:
        assert states(lease_status(c))["host1"].state == "stale"
        with caplog.at_level(logging.WARNING, logger="camit.lease"), Lease(c, owner="next"):
            pass
    stop(holder)
    assert f"its holder, pid {holder.pid} on this controller, is gone" in caplog.text


def test_heartbeat_keeps_a_long_run_alive(lab_env, clean):
    with sub(lab_env, "host1") as c, Lease(c, owner="long", ttl=6, interval=0.5) as lease:
        first = LeaseRecord.parse(states(lease_status(c))["host1"].content)
        time.sleep(7)  # longer than the ttl: only the heartbeat keeps it (a beat may lag 5 s on a loaded box)
        now = states(lease_status(c))["host1"]
        assert first is not None and now.record is not None
        assert now.state == "held" and now.record.token == lease.token
        assert now.record.heartbeat > first.heartbeat and now.record.start == first.start
