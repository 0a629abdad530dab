"""``camit collect --diag`` on the emulated A3 lab: ascend-fd's input tree per host, and its verdict."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from framework.cores import faultbundle

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]


def test_collect_diag_writes_a_tree_per_host_in_the_tools_layout_and_runs_ascend_fd(npu_lab_env_path, npu_lab_env,
                                                                                   tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "ascend-fd"  # a stand-in for MindCluster's tool on the controller: says what it was given
    tool.write_text("#!/bin/sh\n[ \"$1\" = diag ] && echo \"diag of $(ls \"$3\" | tr '\\n' ' ')\"\nexit 0\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "framework.cli", "collect", "--env", str(npu_lab_env_path), "--diag",
                           "--report-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=180,
                          cwd=REPO, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    bundle = (tmp_path / "r" / "latest" / faultbundle.BUNDLE).resolve()
    hosts = sorted(p.name for p in bundle.iterdir() if p.is_dir() and p.name not in ("parsed", "diag"))
    assert hosts == sorted(npu_lab_env.hosts)   # every host of the lab (make test: 4)
    for host in hosts:
        assert faultbundle.check_tree(bundle / host) == []
        after = (bundle / host / "environment_check" / "npu_info_after.txt").read_text()
        assert "npu-smi" in after and "hccn_tool -i 0 -link -g" in after
        assert (bundle / host / "dmesg").is_file()
    assert f"ascend-fd: diag of {' '.join(hosts)}" in proc.stderr, proc.stderr[-2000:]
