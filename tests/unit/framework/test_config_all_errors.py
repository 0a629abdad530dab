"""An env file with several mistakes gets all of them in one run, one line each naming its key path
(framework/config/effective.py collects them; document.validate no longer lets an unknown key hide the
other mistakes of its section)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from framework.config import load
from framework.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]

SCHEMA_MISTAKES = """\
defaults:
  max_parallel: 0
host_info:
  host1:
    passed: x
    manage_nic: {name: eth0, ip: 10.0.0.300}
  host2:
    manage_nic: {name: eth0, ip: 10.0.0.2}
    ssh_port: 99999
"""

LATER_MISTAKES = """\
launch:
  rendezvous_nic: test_nic1
  master_port: 60005
defaults:
  ssh_config: no-such-ssh-config
  npu: {count: 2}
host_info:
  host1:
    passwd: ${H7_UNSET_A}
    manage_nic: {name: eth0, ip: 10.0.0.1}
    test_nic1: {ip: 10.1.0.1}
    npu: {visible: [0, 3]}
  host2:
    passwd: ${H7_UNSET_B}
    manage_nic: {name: eth0, ip: 10.0.0.1}
"""


def _lines(tmp_path: Path, text: str) -> tuple[ConfigError, list[str]]:
    path = tmp_path / "test_env.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load(path, environ={})
    lines = str(exc.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines), lines
    return exc.value, [line.split(": ", 1)[1] for line in lines]


def test_schema_mistakes_all_reported_in_file_order(tmp_path):
    """The unknown key no longer hides host1's bad address (before: three lines, not four)."""
    err, lines = _lines(tmp_path, SCHEMA_MISTAKES)
    assert lines == [
        "defaults.max_parallel: must be >= 1, got 0",
        "host_info.host1: unknown key 'passed' (did you mean 'passwd'?)",
        "host_info.host1.manage_nic.ip: '10.0.0.300' is not an IPv4 address",
        "host_info.host2.ssh_port: must be <= 65535, got 99999",
    ]
    assert err.key_path == "defaults.max_parallel"


def test_unset_variables_and_the_checks_after_the_schema_all_reported(tmp_path):
    """Before: only the first unset variable. Now every ${VAR}, then every check of the resolved file."""
    _, lines = _lines(tmp_path, LATER_MISTAKES)
    ssh_config = tmp_path / "no-such-ssh-config"
    assert lines == [
        "host_info.host1.passwd: environment variable 'H7_UNSET_A' is not set",
        "host_info.host2.passwd: environment variable 'H7_UNSET_B' is not set",
        f"defaults.ssh_config: ssh_config {ssh_config} does not exist "
        "(set defaults.ssh_config: none to read none)",
        "host_info.host1.npu.visible: device 3 is out of range: host 'host1' has npu.count 2 "
        "(devices 0..1)",
        "host_info.host2: hosts 'host1' and 'host2' have the same SSH address 10.0.0.1:22 "
        "(ssh_ip defaults to manage_nic.ip)",
        "host_info.host2.test_nic1: launch.rendezvous_nic is test_nic1, but host 'host2' has no "
        "test_nic1.ip",
        "launch.master_port: 60005 is one of HCCL's host ports (60000-60031, from "
        "HCCL_IF_BASE_PORT): pick another, or null to let camit choose",
    ]


def test_a_value_whose_variable_is_unset_is_reported_once(tmp_path):
    """``ip: ${X}`` unset: the variable's line only, not also "'${X}' is not an IPv4 address"."""
    text = "host_info:\n  h1:\n    manage_nic: {name: eth0, ip: '${H7_IP}'}\n    ssh_port: 0\n"
    _, lines = _lines(tmp_path, text)
    assert lines == [
        "host_info.h1.manage_nic.ip: environment variable 'H7_IP' is not set",
        "host_info.h1.ssh_port: must be >= 1, got 0",
    ]


def test_many_mistakes_are_capped_with_a_count(tmp_path):
    hosts = "".join(f"  h{i}:\n    manage_nic: {{name: eth0, ip: 10.0.0.{300 + i}}}\n" for i in range(14))
    _, lines = _lines(tmp_path, "host_info:\n" + hosts)
    assert len(lines) == 11 and lines[-1] == "... and 4 more problem(s)"
    assert lines[0] == "host_info.h0.manage_nic.ip: '10.0.0.300' is not an IPv4 address"


def test_camit_env_validate_prints_every_mistake_and_exits_2(tmp_path):
    path = tmp_path / "test_env.yaml"
    path.write_text(SCHEMA_MISTAKES)
    res = subprocess.run([sys.executable, "-m", "framework.cli", "env", "validate", str(path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 4 and lines[0].startswith(f"camit: error: {path}: defaults.max_parallel")
    assert all(str(path) in line for line in lines)
