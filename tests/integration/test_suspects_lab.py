"""Suspect hosts on the lab's real sshd hosts, across two controllers (two processes).

One process (``camit check`` with a disk limit the victim cannot meet: a failed preflight check)
marks the victim suspect; another (a pytest session with ``--env``) leaves it out, says so in its
header and JUnit, and runs there only when ``--hosts`` names it (with a warning); ``camit check
--heal`` re-admits it after a clean preflight and a two-node torchrun all_reduce.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from framework import suspects
from framework.config.effective import EnvConfig
from framework.hosts import Cluster

REPO = Path(__file__).resolve().parents[2]

WHERE = textwrap.dedent("""
    def test_where(cluster):
        print("HOSTS=" + ",".join(h.name for h in cluster))
""")


def run(args: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CAMIT_SUSPECT_TTL": "600", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


@pytest.fixture
def victim(lab_env: EnvConfig):
    names = list(lab_env.hosts)
    with Cluster.from_env(lab_env) as cluster:
        suspects.clear(cluster, names)
        yield names[1]
        suspects.clear(cluster, names)


def hosts_seen(proc: subprocess.CompletedProcess[str]) -> list[str]:
    found = re.search(r"HOSTS=(\S+)", proc.stdout)
    assert found, proc.stdout + proc.stderr
    return found.group(1).split(",")


def test_one_controller_marks_the_other_plans_around_it_and_heal_readmits(
    lab_env_path, lab_env, victim, tmp_path
):
    names = list(lab_env.hosts)
    marked = run(
        [
            "-m",
            "framework.cli",
            "check",
            "--env",
            str(lab_env_path),
            "--hosts",
            victim,
            "--min-free-gb",
            "1000000",
        ],
        REPO,
    )
    assert (
        marked.returncode == 1 and f"suspect {victim}: preflight: disk: fail: only" in marked.stdout
    ), marked.stdout

    (tmp_path / "test_where.py").write_text(WHERE)
    other = run(
        [
            "-m",
            "pytest",
            "test_where.py",
            "--env",
            str(lab_env_path),
            "-s",
            "-p",
            "no:cacheprovider",
            "--report-dir",
            "out",
        ],
        tmp_path,
    )
    assert other.returncode == 0, other.stdout + other.stderr
    assert hosts_seen(other) == [n for n in names if n != victim]
    assert f"camit: suspect host left out: {victim} (preflight: disk: fail:" in other.stdout
    junit = next((tmp_path / "out").glob("*/junit.xml")).read_text()
    assert (
        f'property name="camit_suspect_{victim}" value="left out: preflight: disk: fail:' in junit
    )
    manifest = json.loads(next((tmp_path / "out").glob("*/manifest.json")).read_text())
    assert manifest["extra"]["suspect_hosts"][victim]["used"] is False

    named = run(
        [
            "-m",
            "pytest",
            "test_where.py",
            "--env",
            str(lab_env_path),
            "-s",
            "-p",
            "no:cacheprovider",
            "--report-dir",
            "out2",
            "--hosts",
            f"{names[0]},{victim}",
        ],
        tmp_path,
    )
    assert named.returncode == 0 and hosts_seen(named) == [names[0], victim], (
        named.stdout + named.stderr
    )
    assert f"camit: WARNING: --hosts names suspect host {victim} (preflight: disk" in named.stdout

    healed = run(
        [
            "-m",
            "framework.cli",
            "check",
            "--env",
            str(lab_env_path),
            "--hosts",
            f"{names[0]},{victim}",
            "--heal",
        ],
        REPO,
    )
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert (
        f"suspect {victim}: re-admitted: preflight clean, smoke run with {names[0]} passed"
        in healed.stdout
    )
    with Cluster.from_env(lab_env) as cluster:
        assert suspects.read(cluster) == {}
