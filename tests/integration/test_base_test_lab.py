"""URMA-style classes on BaseTest against the lab: hosts as attributes, host_list, core check at teardown."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

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


    class TestCrash(BaseTest):
        def test_segfault_on_host2(self):
            # a process of ours dumps core on host2 (the lab's core dir is per host)
            self.host2.run("cd /var/tmp/camit && ulimit -c unlimited && python3 -c 'import ctypes; ctypes.string_at(0)'")
""")


def run(tmp_path, env_path, source, name):
    (tmp_path / name).write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", str(tmp_path / name), "--env", str(env_path),
                           "--report-dir", str(tmp_path / "reports"), "-p", "no:cacheprovider", "-q",
                           "--rootdir", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_basetest_class_api(lab_env_path, tmp_path):
    proc = run(tmp_path, lab_env_path, CASE, "test_case.py")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 passed" in proc.stdout


def test_basetest_teardown_fails_the_class_on_a_new_core(lab_env_path, tmp_path):
    proc = run(tmp_path, lab_env_path, CRASH, "test_crash.py")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "core dump on host2" in proc.stdout
