"""Infrastructure failures end the session with camit's exit status; SIGTERM/SIGHUP do what Ctrl-C does.

The hosts are this machine (``LocalTransport``, each host a workdir of its own, as in
test_resources.py), so the lease files are real files written by the real lease scripts. The runs
that get a signal or lose their lease run pytest in a subprocess (``runpytest_subprocess``): the
signal goes to that process, never to this one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from framework.errors import (
    SESSION_DEPLOY,
    SESSION_LEASE,
    SESSION_MEANING,
    SESSION_UNREACHABLE,
    AuthenticationFailed,
    DeployError,
    HostKeyError,
    HostUnreachable,
    LeaseHeld,
    LeaseLost,
    MultiHostError,
    one_line,
    session_exit_code,
)
from tests.plugin.test_resources import HOSTS, hold_lease, lease_file, local_env  # noqa: F401 - the fixture
from tests.support.camit_labtools import assert_complete

WORKTREE = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _this_camit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Subprocesses (pytest, its xdist workers) import this checkout's camit, not the installed one."""
    monkeypatch.setenv("PYTHONPATH", str(WORKTREE))


THREE_TESTS = textwrap.dedent("""
    def test_one(cluster):
        pass

    def test_two(cluster):
        pass

    def test_three(cluster):
        pass
""")


def folder(pytester: pytest.Pytester) -> Path:
    return (pytester.path / "out" / "latest").resolve()


# --------------------------------------------------------------------------- the table and the mapping


def test_the_exit_status_table_is_pytests_then_camits():
    assert [SESSION_MEANING[c] for c in range(9)] == [
        "ok", "tests failed", "interrupted", "internal error", "usage error", "no tests collected",
        "cluster unreachable", "lease held or lost", "deploy failed"]
    assert [int(c) for c in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR,
                             pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.NO_TESTS_COLLECTED)] == [2, 3, 4, 5]


def test_each_infrastructure_error_has_its_code_and_test_failures_have_none():
    assert session_exit_code(HostUnreachable("h1", "connect timed out")) == SESSION_UNREACHABLE
    assert session_exit_code(AuthenticationFailed("h1", "refused")) == SESSION_UNREACHABLE
    assert session_exit_code(HostKeyError("h1", "changed")) == SESSION_UNREACHABLE
    assert session_exit_code(LeaseHeld("h1", None)) == SESSION_LEASE
    assert session_exit_code(LeaseLost("lease lost: h1: taken over")) == SESSION_LEASE
    assert session_exit_code(DeployError("h1", "upload", "no space")) == SESSION_DEPLOY
    both = MultiHostError({"h1": HostUnreachable("h1", "a"), "h2": AuthenticationFailed("h2", "b")})
    assert session_exit_code(both) == SESSION_UNREACHABLE
    assert session_exit_code(MultiHostError({"h1": HostUnreachable("h1", "a"), "h2": DeployError("h2", "x", "y")})) \
        is None
    assert session_exit_code(AssertionError("rank 1 differs")) is None
    assert one_line(MultiHostError({"h1": DeployError("h1", "install-run", "exit 1\nlog tail\nmore")})) == \
        "h1: deploy step 'install-run' failed: exit 1"


# --------------------------------------------------------------------------- a held lease ends the session


def test_a_lease_held_by_another_owner_ends_the_session_with_7_naming_the_holder(pytester, local_env):  # noqa: F811
    pytester.makepyfile(test_three=THREE_TESTS)
    hold_lease(pytester, "node3", "other@test")
    result = pytester.runpytest("--env", str(local_env), "--report-dir", "out", "-p", "no:cacheprovider")
    assert result.ret == SESSION_LEASE
    # one line naming the host and the holder, and no test ran on the hosts (not one error per test)
    lines = [line for line in result.outlines if "leased by other@test" in line]
    assert len(lines) == 1 and "camit: lease held: node3: leased by other@test" in lines[0], result.outlines
    result.assert_outcomes()
    manifest = assert_complete(folder(pytester), "lease")
    assert "node3: leased by other@test" in manifest["error"]
    # the hosts taken before node3 were released again; node3 keeps the other owner's lease
    assert [h for h in HOSTS if lease_file(pytester, h).exists()] == ["node3"]


def test_under_xdist_a_workers_held_lease_ends_the_whole_run_with_7(pytester, local_env):  # noqa: F811
    pytester.makepyfile(test_three=THREE_TESTS)
    hold_lease(pytester, "node3", "other@test")  # gw1's share (node3, node4)
    result = pytester.runpytest_subprocess("--env", str(local_env), "-n", "2", "--report-dir", "out",
                                           "-p", "no:cacheprovider", "-p", "no:benchmark")
    assert result.ret == SESSION_LEASE, result.outlines[-30:]
    assert any("node3: leased by other@test" in line for line in result.outlines)
    manifest = assert_complete(folder(pytester), "lease")
    assert "node3: leased by other@test" in manifest["error"]
    assert [h for h in HOSTS if lease_file(pytester, h).exists()] == ["node3"]


UNREACHABLE = textwrap.dedent("""
    from framework.errors import HostUnreachable
    from framework.plugin import resources_of
    from framework.transport.local import LocalTransport


    class Down(LocalTransport):
        def connect(self):
            raise HostUnreachable(self.name, "TCP connect to 192.0.2.12:22 timed out after 5s")


    def pytest_configure(config):
        resources_of(config).transport_factory = lambda spec: Down(spec.name) if spec.name == "node2" \\
            else LocalTransport(spec.name)
""")


def test_an_unreachable_host_ends_the_session_with_6_in_one_line(pytester, local_env):  # noqa: F811
    pytester.makeconftest(UNREACHABLE)
    pytester.makepyfile(test_three=THREE_TESTS)
    result = pytester.runpytest("--env", str(local_env), "--report-dir", "out", "-p", "no:cacheprovider")
    assert result.ret == SESSION_UNREACHABLE
    lines = [line for line in result.outlines if "timed out after 5s" in line]
    assert len(lines) == 1 and "camit: cluster unreachable: node2: TCP connect" in lines[0], result.outlines
    assert "Traceback" not in result.stdout.str()
    result.assert_outcomes()
    manifest = assert_complete(folder(pytester), "unreachable")
    assert "node2" in manifest["error"]


def fake_deployer(errors: str) -> str:
    """A conftest whose Deployer 'deploys' every host, with ``errors`` (an expression over ``names``, the hosts) as
    the result's failures; put back after the in-process pytester run, or later tests of this process get it."""
    return textwrap.dedent("""
        import pytest

        from framework.deploy import DeployResult
        from framework.deploy.result import HostManifest
        from framework.errors import DeployError


        class Fake:
            def __init__(self, env, cluster, **kw):
                self.cluster = cluster

            def run(self):
                names = list(self.cluster.hosts)
                return DeployResult({h: HostManifest(h) for h in names}, ERRORS)


        @pytest.fixture(autouse=True, scope="session")
        def _fake_deploy():
            import framework.deploy
            real = framework.deploy.Deployer
            framework.deploy.Deployer = Fake
            yield
            framework.deploy.Deployer = real
    """).replace("ERRORS", errors)


DEPLOY_FAILS = fake_deployer('{names[1]: DeployError(names[1], "install-run", "exit status 3\\ninstaller log tail")}')
DEPLOY_SUCCEEDS = fake_deployer("{}")


def with_wheel(env: Path, tmp_path: Path) -> None:
    """The env gets a wheel artifact (its bytes never read: the Deployer is the conftest's fake)."""
    wheel = tmp_path / "camops-1.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    env.write_text(env.read_text().rstrip("\n") + f"\nartifacts: {{wheel: {wheel}}}\n")


def test_a_failed_deploy_ends_the_session_with_8_naming_host_and_step(pytester, local_env, tmp_path):  # noqa: F811
    with_wheel(local_env, tmp_path)
    pytester.makeconftest(pytester.path.joinpath("conftest.py").read_text() + DEPLOY_FAILS)
    pytester.makepyfile(test_three=THREE_TESTS.replace("(cluster)", "(deployed)"))
    result = pytester.runpytest("--env", str(local_env), "--report-dir", "out", "-p", "no:cacheprovider")
    assert result.ret == SESSION_DEPLOY, result.outlines[-30:] + result.errlines
    lines = [line for line in result.outlines if "deploy step" in line]
    assert len(lines) == 1 and "camit: deploy failed: node2: deploy step 'install-run' failed: exit status 3" \
        in lines[0], result.outlines
    result.assert_outcomes()
    assert_complete(folder(pytester), "deploy failed")
    assert not [h for h in HOSTS if lease_file(pytester, h).exists()]


# --------------------------------------------------------------------------- a lost lease, SIGTERM, SIGHUP

FAST_LEASE = textwrap.dedent("""
    import framework.lease

    framework.lease.MAX_INTERVAL = 0.5  # a heartbeat every half second, so the test is quick
""")

LONG_TEST = textwrap.dedent("""
    import os
    import time
    from pathlib import Path


    def test_long(cluster):
        Path(os.environ["CAMIT_TEST_RECORD"], "started").write_text(str(time.time()))
        time.sleep(60)
""")


def start(pytester: pytest.Pytester, env: Path, *args: str) -> subprocess.Popen[str]:
    """pytest in its own process group (as Jenkins starts it)."""
    return subprocess.Popen([sys.executable, "-m", "pytest", "--env", str(env), "--report-dir", "out",
                             "-p", "no:cacheprovider", "-p", "no:benchmark", "-o", "junit_family=xunit2", *args],
                            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def wait_started(pytester: pytest.Pytester, proc: subprocess.Popen[str]) -> float:
    started = pytester.path / "record" / "started"
    end = time.monotonic() + 60
    while not started.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < end, "the test never started"
        time.sleep(0.05)
    return time.monotonic()


def test_a_lease_lost_mid_run_stops_the_run_within_a_heartbeat_with_7(pytester, local_env):  # noqa: F811
    pytester.makeconftest(pytester.path.joinpath("conftest.py").read_text() + FAST_LEASE)
    pytester.makepyfile(test_long=LONG_TEST)
    proc = start(pytester, local_env)
    try:
        wait_started(pytester, proc)
        hold_lease(pytester, "node2", "thief@test")  # someone judged us stale and took node2 over
        t0 = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == SESSION_LEASE, out[-3000:]
    assert took < 0.5 + 5, took  # one heartbeat (0.5 s), plus the session's finish; not the test's 60 s
    assert "camit: lease lost: node2: taken over by thief@test" in out, out[-3000:]
    manifest = assert_complete(folder(pytester), "lease")
    assert "taken over by thief@test" in manifest["error"]
    # our own lease files are gone; node2 keeps the thief's
    assert [h for h in HOSTS if lease_file(pytester, h).exists()] == ["node2"]


@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, True), (signal.SIGHUP, False), (signal.SIGTERM, False)],
                         ids=["SIGTERM-to-the-group", "SIGHUP-to-pytest", "SIGTERM-to-pytest"])
def test_a_stop_signal_does_what_ctrl_c_does(pytester, local_env, sig, group):  # noqa: F811
    pytester.makepyfile(test_long=LONG_TEST)
    proc = start(pytester, local_env)
    try:
        wait_started(pytester, proc)
        assert all(lease_file(pytester, h).exists() for h in HOSTS)
        t0 = time.monotonic()
        if group:
            import os

            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert took < 10, took
    assert "Traceback" not in out, out[-3000:]
    manifest = assert_complete(folder(pytester), "interrupted")
    assert signal.Signals(sig).name in manifest["error"]
    assert not [h for h in HOSTS if lease_file(pytester, h).exists()]


def test_the_previous_signal_handlers_are_back_after_the_session(pytester, local_env):  # noqa: F811
    pytester.makepyfile(test_one="def test_one(cluster):\n    pass\n")
    marker = object()

    def mine(signum, frame):  # noqa: ANN001
        return marker

    before = signal.signal(signal.SIGHUP, mine)
    try:
        result = pytester.runpytest("--env", str(local_env), "--report-dir", "out", "-p", "no:cacheprovider")
        assert result.ret == 0
        assert signal.getsignal(signal.SIGHUP) is mine
    finally:
        signal.signal(signal.SIGHUP, before)



@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_the_deploy_once_marker_stays_in_the_runs_own_temp_folder(pytester, local_env, tmp_path, workers):  # noqa: F811
    """The record that a run's share is deployed (and its lock) goes into the run's base temp folder, which pytest
    rotates, never into /tmp/pytest-of-<user> itself, where every run used to leave two files for good."""
    with_wheel(local_env, tmp_path)
    pytester.makeconftest(pytester.path.joinpath("conftest.py").read_text() + DEPLOY_SUCCEEDS)
    pytester.makepyfile(test_three=THREE_TESTS.replace("(cluster)", "(deployed)"))
    base = pytester.path / "base"
    result = pytester.runpytest("--env", str(local_env), "--report-dir", "out", "-p", "no:cacheprovider",
                                f"--basetemp={base}", *workers)
    result.assert_outcomes(passed=3)
    assert not list(pytester.path.glob("camit-deploy*")), sorted(p.name for p in pytester.path.iterdir())
    assert len(list(base.glob("camit-deployed-*.txt"))) == (2 if workers else 1), sorted(base.rglob("*"))
