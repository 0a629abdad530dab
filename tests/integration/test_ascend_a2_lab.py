"""Preflight on an emulated A2 lab (``python -m framework.lab up --npu a2``): the device-NIC ping per node pair.

Named by CAMIT_NPU_A2_LAB_ENV (its env file); skipped without it. Each node pings its peer's first device
(``hccn_tool -i 0 -ping -g address <ip>``); with ``link-down`` on host2's device 0 both directions lose every
packet, as on a real host, and each node's ``hccn`` column fails naming the peer and the loss. Knob tests hold
``/tmp/camit-npulab-a2.lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]
LOCK = Path("/tmp/camit-npulab-a2.lock")


@pytest.fixture(scope="module")
def a2_env(npu_a2_lab_env_path) -> tuple[Path, str]:
    path = npu_a2_lab_env_path
    key = next(ln.split(":", 1)[1].strip() for ln in path.read_text().splitlines() if "key_file:" in ln)
    return path, str(json.loads((Path(key).parent / "lab.json").read_text())["name"])


def run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def lock() -> Iterator[None]:
    with open(LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def hccn(path: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    proc = run("-m", "framework.cli", "check", "--env", str(path), "--json")
    assert proc.stdout.strip(), proc.stderr[-2000:]
    return proc.returncode, {r["host"]: r for r in json.loads(proc.stdout)["results"] if r["check"] == "hccn"}


def test_every_a2_node_pings_its_peers_device(a2_env):
    path, _ = a2_env
    with lock():
        rc, cells = hccn(path)
    assert rc == 0, cells
    assert cells["host1"]["status"] == "ok" and "ping dev 0 -> host2 dev 0 " in cells["host1"]["summary"], cells
    assert cells["host2"]["status"] == "ok" and "ping dev 0 -> host1 dev 0 " in cells["host2"]["summary"], cells


def test_a_link_down_device_loses_the_pings_both_ways(a2_env):
    path, name = a2_env
    with lock():
        proc = run("-m", "framework.lab", "fault", "host2", "link-down", "--name", name)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        try:
            rc, cells = hccn(path)
        finally:
            proc = run("-m", "framework.lab", "fault", "host2", "clear", "--name", name)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rc == 1, cells
    one, two = cells["host1"], cells["host2"]
    assert one["status"] == "fail" and "ping dev 0 -> host2 dev 0 " in one["summary"], one
    assert "0 of 3 replies (100% loss)" in one["summary"], one
    assert two["status"] == "fail" and "ping dev 0 -> host1 dev 0 " in two["summary"], two
    assert "dev 0 link DOWN" in two["summary"], two
