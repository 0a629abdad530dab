"""Suspect hosts on the lab's real sshd hosts, with two controllers (processes) at once.

At once: ``camit check`` with a disk limit the victim cannot meet (a failed preflight check) marks it
suspect while another controller marks a second host on every host (the same folders): neither mark is
lost. Then two pytest sessions with ``--env`` run at once (the second waits for the first's lease): each
leaves both out and says so in its header and JUnit. A session runs on a suspect only when ``--hosts``
names it (with a warning); ``camit check --heal`` re-admits it after a clean preflight and a two-node
torchrun all_reduce.
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


#: a second controller: marks ``argv[2]`` suspect on every host, round after round, then reads the marks
MARKER = textwrap.dedent("""
    import sys
    from framework import suspects
    from framework.config.effective import load
    from framework.hosts import Cluster
    with Cluster.from_env(load(sys.argv[1])) as cluster:
        for i in range(3):
            suspects.mark(cluster, {sys.argv[2]: ("lost", f"test mark {i}")})
""")


def start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "CAMIT_SUSPECT_TTL": "600", "CAMIT_LEASE_WAIT": "120", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=env)


def at_once(*procs: subprocess.Popen[str], timeout: float = 240) -> list[subprocess.CompletedProcess[str]]:
    """Wait for processes started together; their results in order."""
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return at_once(start(args, cwd))[0]


def session(env_path: Path, out: str, *hosts: str) -> list[str]:
    """A pytest session of ``test_where.py`` with ``--env`` (and ``--hosts`` when given), report in ``out``."""
    extra = ["--hosts", ",".join(hosts)] if hosts else []
    return ["-m", "pytest", "test_where.py", "--env", str(env_path), "-s", "-p", "no:cacheprovider",
            "--report-dir", out, *extra]


@pytest.fixture
def victim(lab_env: EnvConfig):
    names = list(lab_env.hosts)
    if len(names) < 3:
        pytest.skip(f"two suspects and a host to run on need 3 lab hosts; this lab has {len(names)}")
    with Cluster.from_env(lab_env) as cluster:
        suspects.clear(cluster, names)
        yield names[1]
        suspects.clear(cluster, names)


def hosts_seen(proc: subprocess.CompletedProcess[str]) -> list[str]:
    found = re.search(r"HOSTS=(\S+)", proc.stdout)
    assert found, proc.stdout + proc.stderr
    return found.group(1).split(",")


def test_two_controllers_at_once_mark_both_plan_around_both_and_heal_readmits(
    lab_env_path, lab_env, victim, tmp_path
):
    names = list(lab_env.hosts)
    second = names[2]
    (tmp_path / "marker.py").write_text(MARKER)
    marked, other = at_once(
        start(["-m", "framework.cli", "check", "--env", str(lab_env_path), "--hosts", victim,
               "--min-free-gb", "1000000"], REPO),
        start([str(tmp_path / "marker.py"), str(lab_env_path), second], tmp_path),
    )
    assert marked.returncode == 1 and f"suspect {victim}: preflight: disk: fail: only" in marked.stdout, \
        marked.stdout + marked.stderr
    assert other.returncode == 0, other.stdout + other.stderr
    with Cluster.from_env(lab_env) as cluster:
        assert sorted(suspects.read(cluster)) == sorted([victim, second])

    (tmp_path / "test_where.py").write_text(WHERE)
    sessions = at_once(start(session(lab_env_path, "out1"), tmp_path), start(session(lab_env_path, "out2"), tmp_path))
    for i, seen in enumerate(sessions, 1):
        assert seen.returncode == 0, seen.stdout + seen.stderr
        assert hosts_seen(seen) == [n for n in names if n not in (victim, second)]
        assert f"camit: suspect host left out: {victim} (preflight: disk: fail:" in seen.stdout
        assert f"camit: suspect host left out: {second} (lost: test mark 2" in seen.stdout
        junit = next((tmp_path / f"out{i}").glob("*/junit.xml")).read_text()
        assert f'property name="camit_suspect_{victim}" value="left out: preflight: disk: fail:' in junit
        manifest = json.loads(next((tmp_path / f"out{i}").glob("*/manifest.json")).read_text())
        assert manifest["extra"]["suspect_hosts"][victim]["used"] is False

    named = run(session(lab_env_path, "out3", names[0], victim), tmp_path)
    assert named.returncode == 0 and hosts_seen(named) == [names[0], victim], named.stdout + named.stderr
    assert f"camit: WARNING: --hosts names suspect host {victim} (preflight: disk" in named.stdout

    healed = run(["-m", "framework.cli", "check", "--env", str(lab_env_path), "--hosts", f"{names[0]},{victim}",
                  "--heal"], REPO)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert f"suspect {victim}: re-admitted: preflight clean, smoke run with {names[0]} passed" in healed.stdout
    with Cluster.from_env(lab_env) as cluster:
        assert sorted(suspects.read(cluster)) == [second]  # the other controller's mark stays
