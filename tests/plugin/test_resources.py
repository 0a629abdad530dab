"""The session's resources in-process (pytester): BaseTest and the preflight suite use the session's
leased cluster, under ``-n`` the worker's own host share.

The hosts are this machine: a conftest (``LOCALHOSTS``) gives the session's resources a
``LocalTransport`` per host, and each host has a workdir of its own under the test's folder, so the
lease files are real files written by the real lease scripts.
"""

from __future__ import annotations

import json
import os
import socket
import textwrap
import time
from pathlib import Path

import pytest

from framework.preflight.checks import CHECKS

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("node1", "node2", "node3", "node4")

LOCALHOSTS = textwrap.dedent("""
    import os
    from pathlib import Path

    from framework.plugin import resources_of
    from framework.transport.local import LocalTransport


    def pytest_configure(config):
        record = Path(os.environ["CAMIT_TEST_RECORD"])

        def local(spec):
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            with open(record / f"transports-{worker}.txt", "a") as fh:
                fh.write(spec.name + "\\n")
            return LocalTransport(spec.name)

        resources_of(config).transport_factory = local
""")


@pytest.fixture
def local_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Four hosts, each with its own workdir here; the transports each process makes are recorded."""
    monkeypatch.delenv("CAMIT_ENV", raising=False)
    monkeypatch.delenv("BUILD_URL", raising=False)
    record = pytester.mkdir("record")
    monkeypatch.setenv("CAMIT_TEST_RECORD", str(record))
    lines = ["host_info:"]
    for i, name in enumerate(HOSTS, 1):
        (pytester.path / "hosts" / name).mkdir(parents=True)
        lines.append(f"  {name}: {{manage_nic: {{name: eth0, ip: 192.0.2.{10 + i}}}, "
                     f"workdir: {pytester.path / 'hosts' / name}}}")
    lines.append("launch: {backend: gloo}")
    pytester.makeconftest(LOCALHOSTS)
    return pytester.makefile(".yaml", local_env="\n".join(lines) + "\n")


def transports(pytester: pytest.Pytester) -> dict[str, list[str]]:
    """The hosts each process (``main``, ``gw0``, ``gw1``) opened a transport to."""
    return {p.stem.removeprefix("transports-"): sorted(set(p.read_text().split()))
            for p in (pytester.path / "record").glob("transports-*.txt")}


def lease_file(pytester: pytest.Pytester, host: str) -> Path:
    return pytester.path / "hosts" / host / "camit-lease.json"


def hold_lease(pytester: pytest.Pytester, host: str, owner: str) -> None:
    """A live lease of someone else on ``host``: this process's pid, another token, a fresh heartbeat."""
    now = int(time.time())
    lease_file(pytester, host).write_text(json.dumps({
        "version": 1, "owner": owner, "token": "0123456789abcdef", "pid": os.getpid(),
        "controller": socket.gethostname(), "hosts": [host], "argv": "", "ttl": 300, "interval": 10,
        "start": now, "heartbeat": now, "expires": now + 300}) + "\n")


BASETEST = textwrap.dedent("""
    import json
    import os
    from pathlib import Path

    import pytest

    from framework.base_test import BaseTest


    class TestShare(BaseTest):
        @pytest.mark.parametrize("i", range(4))
        def test_hosts_are_the_share_and_leased(self, camit, i):
            names = [h.name for h in self.host_list]
            assert names == camit.host_names()
            for host in self.host_list:
                lease = json.loads((Path(host.spec.workdir) / "camit-lease.json").read_text())
                assert lease["hosts"] == names and lease["pid"] == os.getpid()
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            Path(os.environ["CAMIT_TEST_RECORD"], f"share-{worker}.txt").write_text(",".join(names))

        def test_the_class_cluster_is_the_cluster_fixture(self, cluster):
            assert self.cluster is cluster
""")


def test_basetest_uses_the_workers_share_and_its_lease(pytester, local_env):
    pytester.makepyfile(test_base=BASETEST)
    result = pytester.runpytest("--env", str(local_env), "-n", "2", "--report-dir", "out",
                                "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(passed=5)
    shares = sorted(p.read_text() for p in (pytester.path / "record").glob("share-gw*.txt"))
    assert shares == ["node1,node2", "node3,node4"]
    # each worker reached its own hosts only, and released its lease at the end of the session
    assert transports(pytester) == {"gw0": ["node1", "node2"], "gw1": ["node3", "node4"]}
    assert not [h for h in HOSTS if lease_file(pytester, h).exists()]


def test_basetest_ends_the_session_on_a_host_leased_by_someone_else(pytester, local_env):
    pytester.makepyfile(test_base=BASETEST)
    hold_lease(pytester, "node3", "other@test")
    result = pytester.runpytest("--env", str(local_env), "--report-dir", "out",
                                "-p", "no:cacheprovider")
    # the session ends with the lease's exit status (7), not one error per test
    assert result.ret == 7
    result.assert_outcomes()
    result.stdout.fnmatch_lines(["*camit: lease held: node3: leased by other@test*"])
    # the hosts taken before node3 were released again; node3 still holds the other lease
    assert [h for h in HOSTS if lease_file(pytester, h).exists()] == ["node3"]


def _preflight_suite(pytester: pytest.Pytester) -> None:
    """The preflight suite as it ships: its module, its helper and its folder's conftest."""
    suite = REPO / "suites" / "cam"
    pytester.makepyfile(test_preflight=(suite / "test_preflight.py").read_text(),
                        preflight_share=(suite / "preflight_share.py").read_text(),
                        conftest=(suite / "conftest.py").read_text() + LOCALHOSTS)


def test_preflight_suite_probes_each_workers_share_under_its_lease(pytester, local_env):
    _preflight_suite(pytester)
    result = pytester.runpytest("--env", str(local_env), "-n", "2", "--report-dir", "out",
                                "-v", "-p", "no:cacheprovider", "-p", "no:benchmark")
    outcomes = result.parseoutcomes()
    assert "errors" not in outcomes and "error" not in outcomes, result.stdout.str()[-3000:]
    assert sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped")) == len(CHECKS) * len(HOSTS)
    # every host's ssh check passed, whichever worker ran it; each worker probed its own share only
    for host in HOSTS:
        result.stdout.fnmatch_lines([f"*PASSED*test_check?{host}-ssh?*"])
    assert transports(pytester) == {"gw0": ["node1", "node2"], "gw1": ["node3", "node4"]}
    assert not [h for h in HOSTS if lease_file(pytester, h).exists()]


def test_preflight_suite_needs_the_lease(pytester, local_env):
    _preflight_suite(pytester)
    hold_lease(pytester, "node2", "other@test")
    result = pytester.runpytest("--env", str(local_env), "--report-dir", "out",
                                "-p", "no:cacheprovider")
    assert result.ret == 7  # the session ends on the held lease: no check runs on the hosts
    result.assert_outcomes()
    result.stdout.fnmatch_lines(["*camit: lease held: node2: leased by other@test*"])


def test_preflight_suite_without_an_env_skips_under_xdist_too(pytester, local_env):
    _preflight_suite(pytester)
    result = pytester.runpytest("-n", "2", "-rs", "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no env file: pass --env FILE or set CAMIT_ENV*"])
    assert transports(pytester) == {}


BACKGROUND = textwrap.dedent("""
    import os
    from pathlib import Path

    from framework.base_test import BaseTest


    class TestBackground(BaseTest):
        def test_leaves_a_server_running(self):
            server = self.node1.exec_cmd("sleep 120", background=True)
            Path(os.environ["CAMIT_TEST_RECORD"], "pgid").write_text(str(server.pid))
            self.assertEqual(self.node2.exec_cmd("echo $((6*7))").stdout, 42)

        def test_the_server_still_runs_in_the_next_test(self):
            pgid = int(Path(os.environ["CAMIT_TEST_RECORD"], "pgid").read_text())
            os.killpg(pgid, 0)  # as in URMA: background commands live until teardown_class
""")


def test_basetest_kills_its_background_commands_at_teardown_class(pytester, local_env):
    from framework.transport.local import group_alive

    pytester.makepyfile(test_bg=BACKGROUND)
    result = pytester.runpytest("--env", str(local_env), "--report-dir", "out", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    pgid = int((pytester.path / "record" / "pgid").read_text())
    assert not group_alive(pgid)
    assert not [h for h in HOSTS if lease_file(pytester, h).exists()]
