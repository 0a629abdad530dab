"""tools/complexity.py: the branch budget fails on a regression and passes on the committed baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "complexity.py"

SIMPLE = "def f(x):\n    return x + 1\n"
# 17 branches: a function above the limit of 15
COMPLEX = "def g(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(16)) + "    return -1\n"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "a.py").write_text(SIMPLE)
    (root / "b.py").write_text(SIMPLE.replace("f(", "h("))
    return root


def baseline(tmp_path: Path, average: float, offenders: dict[str, int] | None = None) -> Path:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"limit": 15, "average": average, "offenders": offenders or {}}))
    return path


def test_committed_tree_is_within_its_baseline() -> None:
    res = run()
    assert res.returncode == 0, res.stderr
    assert "radon:" in res.stdout and "average" in res.stdout


def test_new_block_above_the_limit_fails(tree: Path, tmp_path: Path) -> None:
    base = baseline(tmp_path, average=20.0)
    assert run("--root", str(tree), "--baseline", str(base)).returncode == 0
    (tree / "c.py").write_text(COMPLEX)
    res = run("--root", str(tree), "--baseline", str(base))
    assert res.returncode == 1
    assert "c.py::g: complexity 17 > 15 (a new block above the limit)" in res.stderr


def test_rising_average_fails(tree: Path, tmp_path: Path) -> None:
    base = baseline(tmp_path, average=1.0)
    assert run("--root", str(tree), "--baseline", str(base)).returncode == 0
    (tree / "a.py").write_text("def f(x):\n    return 1 if x else 2\n")
    res = run("--root", str(tree), "--baseline", str(base))
    assert res.returncode == 1
    assert "average 1.5000 is above the baseline's 1.0000" in res.stderr


def test_grown_offender_fails_and_listed_one_passes(tree: Path, tmp_path: Path) -> None:
    (tree / "c.py").write_text(COMPLEX)
    base = baseline(tmp_path, average=20.0, offenders={"c.py::g": 17})
    assert run("--root", str(tree), "--baseline", str(base)).returncode == 0
    (tree / "c.py").write_text(COMPLEX.replace("    return -1\n", "    if x < 0:\n        return 0\n    return -1\n"))
    res = run("--root", str(tree), "--baseline", str(base))
    assert res.returncode == 1
    assert "c.py::g: complexity 18, was 17 (an offender grew)" in res.stderr


def test_update_only_lowers(tree: Path, tmp_path: Path) -> None:
    (tree / "c.py").write_text(COMPLEX)
    base = baseline(tmp_path, average=20.0, offenders={"c.py::g": 17, "gone.py::old": 30})
    assert run("--root", str(tree), "--baseline", str(base), "--update").returncode == 0
    doc = json.loads(base.read_text())
    assert doc["offenders"] == {"c.py::g": 17}
    assert doc["average"] == pytest.approx(19 / 3, abs=1e-4)  # 1 + 1 + 17 over 3 blocks
    # a regression is never written into the baseline
    (tree / "d.py").write_text(COMPLEX.replace("def g(", "def k("))
    res = run("--root", str(tree), "--baseline", str(base), "--update")
    assert res.returncode == 1
    assert json.loads(base.read_text()) == doc
