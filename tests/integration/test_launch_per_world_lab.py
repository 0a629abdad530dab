"""``--launch-per world`` on the lab: a crash in a shared launch (a real SIGSEGV and its core) failing only the
module it hit: what finished before keeps its verdict, the module after it runs in a fresh launch, the core goes
to the test whose module dumped it. That one launch per world gives the verdicts of one launch per test is
tested on the main job, in test_suites_lab.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from framework.lab import artifacts
from tests.support.camit_labtools import launches, verdicts

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return artifacts.build_all(tmp_path_factory.mktemp("world-artifacts"))


@pytest.fixture
def world_env(env_variant, built):
    def change(doc):
        doc["artifacts"] = {"run_package": str(built["run"]), "wheel": str(built["wheel"])}
        doc["defaults"]["workdir"] = "/var/tmp/camit/world"
    return env_variant(change, "world.yaml")


def pytest_run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=1500)


RANK_FIRST = """
def test_first(cam):
    assert cam.world == 4
"""
RANK_CRASH = """
import ctypes


def test_crash(cam):
    if cam.rank == 1:
        ctypes.string_at(0)  # SIGSEGV: a real core, where the launch's core limit and the lab's pattern put it
"""
RANK_AFTER = """
def test_after(cam):
    assert cam.world == 4
"""
CONTROLLER_CONFTEST = """
from pathlib import Path

import pytest

from framework.ranksuite.suite import RankSuite

TREE = Path(__file__).resolve().parent / "rank"
collect_ignore = ["rank"]


@pytest.fixture(scope="session")
def rank_suite(camit, cluster, launcher):
    return RankSuite(camit.require_env(), cluster, launcher, tree=TREE, rank_env={"CAMIT_SEED": str(camit.seed)},
                     case_timeout=camit.case_timeout)
"""
CONTROLLER_TESTS = """
import pytest

WORLD = [pytest.param(4, marks=pytest.mark.ranks(4), id="4ranks")]


@pytest.mark.rank_module("test_first_rank.py")
@pytest.mark.parametrize("world", WORLD)
def test_first(run_ranks, world):
    run_ranks("test_first_rank.py", world).check()


@pytest.mark.rank_module("test_crash_rank.py")
@pytest.mark.parametrize("world", WORLD)
def test_crash(run_ranks, world):
    run_ranks("test_crash_rank.py", world).check()


@pytest.mark.rank_module("test_after_rank.py")
@pytest.mark.parametrize("world", WORLD)
def test_after(run_ranks, world):
    run_ranks("test_after_rank.py", world).check()
"""


def test_a_crash_in_a_shared_launch_fails_only_the_module_it_hit(world_env, tmp_path):
    suite = tmp_path / "suite"
    rank = suite / "rank"
    shutil.copytree(REPO / "suites" / "cam" / "rank", rank,
                    ignore=shutil.ignore_patterns("test_*.py", "__pycache__"))  # the harness, not its cases
    for name, text in (("test_first_rank.py", RANK_FIRST), ("test_crash_rank.py", RANK_CRASH),
                       ("test_after_rank.py", RANK_AFTER)):
        (rank / name).write_text(textwrap.dedent(text))
    (suite / "conftest.py").write_text(CONTROLLER_CONFTEST)
    (suite / "test_shared.py").write_text(CONTROLLER_TESTS)
    proc = pytest_run(str(suite), "--env", str(world_env), "--launch-per", "world", "--report-dir",
                      str(tmp_path / "reports"), "--rootdir", str(suite), cwd=REPO)
    out = proc.stdout
    assert proc.returncode == 1, out[-4000:]
    folder = tmp_path / "reports" / "latest"
    got = {k.rsplit("::", 1)[-1]: v for k, v in verdicts(folder / "junit.xml").items()}
    assert got == {"test_first[4ranks]": "passed", "test_crash[4ranks]": "failure",
                   "test_after[4ranks]": "passed"}, out[-4000:]
    # the shared launch, then the fresh one for the module it never began
    runs = sorted(launches(folder), key=lambda r: r["ok"])
    assert len(runs) == 2 and not runs[0]["ok"] and runs[1]["ok"], runs
    assert runs[0]["failure_rank"] == 1 and "rerun" in runs[1]["launch_id"], runs
    failure = next(c for c in ET.parse(folder / "junit.xml").getroot().iter("testcase")
                   if c.get("name") == "test_crash[4ranks]").find("failure")
    assert failure is not None
    text = (failure.get("message") or "") + (failure.text or "")
    assert "test_crash_rank.py was running when the launch it shared with" in text, text[-3000:]
    assert "SIGSEGV" in text or "signal 11" in text, text[-3000:]
    # the core is the crashed module's test's, named with its rank; the test that finished before has none
    assert "core dump" in text and "rank 1" in text, text[-3000:]
