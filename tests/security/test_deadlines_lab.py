"""A host that stops answering mid-operation (its sshd SIGSTOPped) is declared lost, named, within a deadline;
a timeout kills the remote process group even when the login shell prints noise before the pgid marker.

The sshd of a lab host (listener and the sessions serving our connections) is stopped with SIGSTOP: TCP still
accepts and buffers, nothing is read or answered. Without keepalives that expect a reply, a command without
a timeout, a launch's kill path and an SFTP transfer on that host wait for good. Everything stopped is
SIGCONTed in a ``finally``.
"""

from __future__ import annotations

import secrets
import sys
import threading
import time

import pytest

from framework.commands import ShellScript
from framework.errors import HostUnreachable
from framework.hosts import Cluster
from framework.transport.ssh import KEEPALIVE_DEADLINE, KEEPALIVE_INTERVAL
from tests.security._deadlines_lease import camit_popen, finish, kill, noisy_login_shell, stopped_sshd
from tests.support.camit_labtools import REPO, tagged, wait_for, wait_none_left, wait_ranks_up

pytestmark = pytest.mark.lab
TARGET = REPO / "tests" / "data" / "targets" / "alltoall.py"
#: when a silent host must have been noticed: one keepalive period, its deadline, and slack for a loaded machine
NOTICED = KEEPALIVE_INTERVAL + KEEPALIVE_DEADLINE + 15


def test_stopped_sshd_mid_command_is_declared_lost_naming_the_host(lab, lab_env):
    got: list[object] = []
    with Cluster.from_env(lab_env, ["host2"]) as c:
        host = c["host2"]
        host.connect()

        def work() -> None:
            try:
                got.append(host.run(ShellScript("sleep 90"), timeout=None))
            except BaseException as exc:  # noqa: BLE001 (the test inspects what came back)
                got.append(exc)

        t = threading.Thread(target=work, daemon=True)
        t.start()
        time.sleep(1.5)
        with stopped_sshd(lab, "host2"):
            t0 = time.monotonic()
            t.join(NOTICED)
            took = time.monotonic() - t0
            assert not t.is_alive(), f"still waiting on a host that stopped answering after {took:.0f}s"
    assert len(got) == 1 and isinstance(got[0], HostUnreachable), got
    assert "host2" in str(got[0]) and "stopped answering" in str(got[0]), got[0]
    assert took >= KEEPALIVE_DEADLINE - 1  # a slow host is given its deadline, no less


def test_stopped_sshd_mid_launch_ends_within_the_deadline_naming_the_host(lab, env_variant, tmp_path):
    workdir = f"/var/tmp/camit/dl-{secrets.token_hex(4)}"
    env = env_variant(lambda doc: doc["defaults"].__setitem__("workdir", workdir), "dl.yaml")
    reports = tmp_path / "reports"
    proc = camit_popen("run", "--env", str(env), "--hosts", "host1,host2", "--nproc-per-node", "1",
                       "--report-dir", str(reports), "--timeout", "600", "--", str(TARGET), "--hang-rank", "0")
    try:
        run_dir = wait_for(lambda: (reports / "latest").exists() and (reports / "latest").resolve(), 90)
        assert run_dir, "no report folder appeared"
        assert wait_ranks_up(run_dir.name, 2), "ranks never up"
        with stopped_sshd(lab, "host2"):
            out, err, took = finish(proc, 150)
    finally:
        kill(proc)
        # what host2 ran is still there after SIGCONT: the test leaves nothing behind
        for pid in wait_none_left(run_dir.name if run_dir else "none", 20):
            import os
            import signal

            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 3, (proc.returncode, out[-2000:], err[-2000:])  # infra: a host was lost
    assert "lost host2" in out + err, (out + err)[-3000:]


@pytest.fixture(scope="module")
def big_wheel(tmp_path_factory):
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from framework.lab import artifacts
    from tests.integration.test_deploy_lab import pad_wheel

    tmp = tmp_path_factory.mktemp("bigwheel")
    return pad_wheel(artifacts.build_wheel(tmp / "w"), tmp / "padded", 160 * 1024 * 1024)


def test_stopped_sshd_mid_deploy_ends_within_the_deadline_naming_the_host(lab, env_variant, big_wheel, tmp_path):
    name = f"dl-{secrets.token_hex(4)}"

    def change(doc):
        doc["defaults"]["workdir"] = f"/var/tmp/camit/{name}"
        doc["artifacts"] = {"wheel": str(big_wheel)}
    env = env_variant(change, "dl.yaml")
    root = lab.host("host2").work_dir / name
    proc = camit_popen("deploy", "--env", str(env), "--hosts", "host1,host2", "--no-relay", "--report-dir",
                       str(tmp_path / "reports"))
    try:
        part = wait_for(lambda: root.exists() and list(root.rglob("*.camit-part-*")), 120, 0.02)
        assert part, "the upload to host2 never started"
        with stopped_sshd(lab, "host2"):
            out, err, took = finish(proc, NOTICED + 60)
    finally:
        kill(proc)
        for h in ("host1", "host2"):
            lab.host_exec(h, ["rm", "-rf", "--", f"/var/tmp/camit/{name}"])
    assert proc.returncode not in (0, None), (out[-2000:], err[-2000:])
    assert "host2" in out + err and "stopped answering" in out + err, (out + err)[-3000:]
    assert "Traceback" not in err, err[-3000:]


def test_timeout_kills_the_remote_group_after_login_shell_noise(lab, lab_env):
    tag = f"pgidnoise-{secrets.token_hex(4)}"
    with noisy_login_shell(lab, "host3"), Cluster.from_env(lab_env, ["host3"]) as c:
        r = c["host3"].run(ShellScript(f"env CAMIT_RUN_ID={tag} sleep 120 & env CAMIT_RUN_ID={tag} sleep 121; wait"),
                           timeout=3)
        try:
            assert r.timed_out
            assert wait_none_left(tag, 10) == [], "the timeout only closed the channel: the command runs on"
            assert "setlocale" in r.stderr, r.stderr  # the noise came first, and is kept as the command's stderr
            assert "__camit_pgid__" not in r.stderr, r.stderr
        finally:
            for pid in tagged(tag):
                import os
                import signal

                os.kill(pid, signal.SIGKILL)
