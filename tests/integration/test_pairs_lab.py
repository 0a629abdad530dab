"""``camit check --pairs`` on the lab: one host's link really slowed (a ``tc`` token-bucket shaper
on its veth, 50 Mbit/s; this kernel has no ``netem``) is named as the slow node, its partners are
not.

The healthy side (many runs naming nobody) is carried by tests/unit/framework/test_pairs.py over synthetic
timings.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def shaped(lab):
    hosts = list(lab.hosts)
    if len(hosts) < 3:
        pytest.skip("--pairs needs 3 lab hosts to tell a slow one from its partner")
    victim = hosts[len(hosts) // 2]
    add = subprocess.run(
        [
            "tc",
            "qdisc",
            "add",
            "dev",
            victim.veth,
            "root",
            "tbf",
            "rate",
            "50mbit",
            "burst",
            "32kbit",
            "latency",
            "400ms",
        ],
        capture_output=True,
        text=True,
    )
    if add.returncode != 0:
        pytest.skip(f"cannot shape {victim.veth}: {add.stderr.strip()}")
    try:
        yield victim.name
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", victim.veth, "root"], capture_output=True)


def test_the_host_behind_a_slow_link_is_named(lab_env_path, shaped, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.cli",
            "check",
            "--env",
            str(lab_env_path),
            "--pairs",
            "--rounds",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    slow = [line for line in proc.stdout.splitlines() if line.startswith("slow node: ")]
    assert proc.returncode == 1 and len(slow) == 1, proc.stdout + proc.stderr
    assert slow[0].startswith(f"slow node: {shaped} x"), proc.stdout
