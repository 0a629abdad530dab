"""URMA-style classes on BaseTest against the lab: hosts as attributes, host_list, core check at teardown,
and a URMA-style suite ported by renaming only (``urma_suite/``) run as URMA runs its cases."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
PORTED = REPO / "tests" / "integration" / "urma_suite" / "TCP" / "test_urma_tcp_echo" / "test.py"

CASE = textwrap.dedent("""
    from framework.base_test import BaseTest


    class TestHosts(BaseTest):
        def setup_method(self, method):
            self.marker = "set"

        def test_hosts_by_name_and_list(self):
            assert self.marker == "set"
            names = [h.name for h in self.host_list]
            assert names == list(self.env.hosts)
            assert self.host1.check("hostname").stdout.strip() == "host1"
            assert self.host2.check("hostname").stdout.strip() == "host2"


    class TestOtherClassHasItsOwnState(BaseTest):
        def test_own_list(self):
            assert len(self.host_list) == len(self.env.hosts)
            assert self.hosts["host3"] is self.host3
""")

CRASH = textwrap.dedent("""
    from framework.base_test import BaseTest

    SEGV = "cd /var/tmp/camit && ulimit -c unlimited && python3 -c 'import ctypes; ctypes.string_at(0)'"


    class TestCrash(BaseTest):
        def test_segfault_on_host2(self):
            # a process of ours dumps core on host2 (the lab's core dir is per host)
            self.host2.run(SEGV)


    class TestCrashInTeardown(BaseTest):
        def teardown_method(self, method):
            self.host2.run(SEGV)

        def test_passes(self):
            pass
""")


PORTS = textwrap.dedent("""
    import socket

    from framework.base_test import BaseTest

    LISTEN = "python3 -c 'import socket, time; s = socket.create_server((\\"0.0.0.0\\", {})); print(\\"up\\", flush=True); time.sleep(120)'"


    class TestPorts(BaseTest):
        def test_a_port_taken_on_the_host_is_skipped(self):
            first = self.host2.get_free_port()
            server = self.host2.exec_cmd(LISTEN.format(first + 1), background=True)
            self.assertEqual(server.expect("up", timeout=30), 0, server.stderr)
            second = self.host2.get_free_port()
            assert second not in (first, first + 1), (first, second)
            # found on host2: the controller (another network namespace) could bind that port itself
            with socket.socket() as s:
                s.bind(("0.0.0.0", first + 1))
            common = self.get_free_port()  # free on every host of the class, never handed out before
            assert common not in (first, first + 1, second)
""")


def run(tmp_path, env_path, source, name):
    (tmp_path / name).write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", str(tmp_path / name), "--env", str(env_path),
                           "--report-dir", str(tmp_path / "reports"), "-p", "no:cacheprovider", "-q",
                           "--rootdir", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # this checkout's framework, not an install


def test_basetest_class_api(lab_env_path, tmp_path):
    proc = run(tmp_path, lab_env_path, CASE, "test_case.py")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 passed" in proc.stdout


def test_get_free_port_is_found_on_the_host(lab_env_path, tmp_path):
    proc = run(tmp_path, lab_env_path, PORTS, "test_ports.py")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout


def test_basetest_cores_fail_the_test_or_the_class_once(lab_env_path, tmp_path):
    """A core in a test body fails that test (the session's watch around every test); a core outside
    the bodies (here teardown_method) fails the class at teardown_class (CHECK CORE FAILED). Each core
    is reported once: in cores.json and as one failure of cluster.xml's cluster suite (the class watch
    covers only what lies between the bodies); junit.xml and index.html name both classes."""
    proc = run(tmp_path, lab_env_path, CRASH, "test_crash.py")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "core dump on host2" in proc.stdout
    latest = tmp_path / "reports" / "latest"
    junit = (latest / "junit.xml").read_text()
    assert re.search(r'<testcase classname="test_crash.TestCrash" name="test_segfault_on_host2"[^>]*>\s*'
                     r'<failure message="AssertionError: core dump on host2', junit), junit[-3000:]
    assert re.search(r'<testcase classname="test_crash.TestCrashInTeardown" name="test_passes"[^>]*>\s*'
                     r'<error message="failed on teardown with [^"]*CHECK CORE FAILED', junit), junit[-3000:]
    cores = json.loads((latest / "cores.json").read_text())
    assert [c["host"] for c in cores] == ["host2", "host2"]
    assert len({c["location"] for c in cores}) == 2
    cluster = (latest / "cluster.xml").read_text()
    assert len(re.findall(r'<testcase classname="host2.cores" name="core_dump\[python3:\d+\]"', cluster)) == 2
    assert re.search(r'<testsuite name="cluster" tests="2" failures="2"', cluster), cluster[:2000]
    index = (latest / "index.html").read_text()
    assert "TestCrash" in index and "TestCrashInTeardown" in index


def test_ported_urma_case(lab, lab_env_path, tmp_path):
    """The URMA-style suite, run as URMA runs one case (``pytest <case>/test.py``) from a copy under this
    machine's /tmp, as CI clones to /tmp/ci: each lab host has a /tmp of its own, so the echo_app the case
    starts by the controller's path is on no host until the suite's conftest ships the case's folder there
    (``BaseTest.ship``), and is gone from every host after the class. Both cases pass: the HTTP one (a
    background server, a client command, the free port, test_nic1_*, the teardown kill) and the echo_app
    pair, whose client starts once the server said it listens (no sleep; the readiness message names no
    ``p1.ret``, which would wait for the server's end)."""
    suite = tmp_path / "urma_suite"
    shutil.copytree(PORTED.parents[2], suite, ignore=shutil.ignore_patterns("__pycache__"))
    case = suite / PORTED.relative_to(PORTED.parents[2])
    proc = subprocess.run([sys.executable, "-m", "pytest", str(case), "--env", str(lab_env_path),
                           "--report-dir", str(tmp_path / "reports"), "-p", "no:cacheprovider", "-v",
                           "-o", "log_cli=true", "--log-cli-level=INFO"],
                          cwd=suite, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # this checkout's framework, not an install
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:]
    assert "2 passed" in out
    copy = re.escape(str(case.parent))
    for host in ("host1", "host2"):  # not on the hosts before: shipped, creating the copy's top folder there
        assert re.search(rf"{host}: shipped 2 file\(s\) to {copy} \(created /tmp/", out), out[-4000:]
    app = re.escape(str(case.parent / "echo_app.py"))
    assert re.search(rf"\[ host1 exec_cmd end \] python3 {app} -n 5 .* -S [\d.]+ ret=0", out), out[-4000:]
    assert re.search(rf"\[ host2 exec_cmd end \] python3 {app} -n 5 .* -B [\d.]+ ret=0", out), out[-4000:]
    server = re.search(r"\[ host2 exec_cmd \] python3 -u -m http.server (\d+) --bind ([\d.]+) background=True", out)
    assert server, out[-4000:]
    port, ip = server.groups()
    assert f"host2: killing background command still running at teardown: python3 -u -m http.server {port}" in out
    for host in ("host1", "host2", "host3", "host4"):  # taken away again: that host's /tmp as before
        assert not (lab.host(host).tmp_dir / tmp_path.relative_to("/tmp")).exists(), host
    from framework.config import load
    from framework.hosts import Host

    with Host.from_spec(load(lab_env_path).hosts["host2"]) as host2:
        listening = host2.check(["ss", "-Htln", f"sport = :{port}"]).stdout
    assert f"{ip}:{port}" not in listening, listening
