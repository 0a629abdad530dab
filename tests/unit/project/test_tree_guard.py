"""The tests mirror the tree they test (tools/testtree.py holds the rule and makes the moves): every file of
tests/unit/ is in its place, nothing is left to move, and the script's moves keep what named the old place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from tools import testtree

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (requires-python): the same parser as a package
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[3]
HELPER = "builders"


def test_every_test_file_of_tests_unit_is_in_its_place():
    problems = [p for p in map(testtree.problem, testtree.test_files()) if p]
    assert problems == [], "\n".join(problems)


def test_nothing_is_left_to_move():
    assert testtree.plan() == ([], [])
    assert sorted(p.name for p in (ROOT / "tests").glob("*.py")) == ["__init__.py", "conftest.py"]


@pytest.mark.parametrize(("rel", "placed"), [
    ("framework/launch/test_monitor.py", True),
    ("framework/launch/test_monitor_teardown.py", True),    # <module>_<aspect>
    ("framework/test_deploy_first.py", True),               # a package's own code: named after it, beside it
    ("tools/test_complexity.py", True),
    ("standin/test_timing.py", True),                       # standin/umdk_cam_op_lib/_timing.py, any depth
    ("test_hosts.py", False),                               # flat: in no area
    ("framework/launch/test_monitors.py", False),           # no module monitors
    ("framework/nosuch/test_hosts.py", False),              # no package framework/nosuch
    ("tools/deeper/test_complexity.py", False),             # the other areas are flat
    ("project/test_anything.py", False),                    # project/ holds only what ALLOWED names
])
def test_the_rule_refuses_what_is_out_of_place(rel, placed):
    assert (testtree.problem(PurePosixPath(rel)) is None) == placed


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_file_added_later_at_the_flat_place_is_planned(tmp_path):
    root = _tree(tmp_path, {
        "tests/unit/test_launch_monitor_later.py": "",                           # by its name
        "tests/unit/test_cpu_rows.py": "from framework.perf.row import Config\n",  # by what it imports
        "tests/unit/test_mystery.py": "import os\n",                             # by nothing
    })
    assert testtree.plan(root) == (
        [("tests/unit/test_cpu_rows.py", "tests/unit/framework/perf/test_row_cpu_rows.py"),
         ("tests/unit/test_launch_monitor_later.py", "tests/unit/framework/launch/test_monitor_later.py")],
        ["tests/unit/test_mystery.py"])


def test_apply_moves_with_git_and_rewrites_what_named_the_old_place(tmp_path):
    root = _tree(tmp_path, {
        "tests/unit/test_launch_monitor_later.py":
            "from pathlib import Path\n\nREPO = Path(__file__).resolve().parents[2]\n"
            "DATA = Path(__file__).parent.parent / 'data'\n",
        "tests/integration/test_user_lab.py": "from tests.unit.test_launch_monitor_later import REPO\n",
        "docs/notes.md": "kept equal by `tests/unit/test_launch_monitor_later.py::test_x`\n",
        "framework/kept.py": '"""named in tests/unit/test_launch_monitor_later.py"""\n',
        # the helper's old names spelled so that the script's own rewrite of this file leaves them
        f"tests/{HELPER}.py": "from pathlib import Path\n\nSAMPLE = Path(__file__).parent / \"data\" / \"x\"\n",
        "tests/plugin/test_user.py": f"from tests import {HELPER}\nfrom tests.{HELPER} import SAMPLE\n",
    })
    for argv in (["init", "-q"], ["add", "-A"]):
        subprocess.run(["git", *argv], cwd=root, check=True)
    moves, _ = testtree.plan(root)
    testtree.apply(root, moves, keep=["framework"])
    new = root / "tests/unit/framework/launch/test_monitor_later.py"
    assert not (root / "tests/unit/test_launch_monitor_later.py").exists()
    assert "parents[4]" in new.read_text() and "parents[3] / 'data'" in new.read_text()
    assert (root / "tests/integration/test_user_lab.py").read_text() == \
        "from tests.unit.framework.launch.test_monitor_later import REPO\n"
    assert "`tests/unit/framework/launch/test_monitor_later.py::test_x`" in (root / "docs/notes.md").read_text()
    assert "tests/unit/test_launch_monitor_later.py" in (root / "framework/kept.py").read_text()  # --keep
    assert (root / "tests/plugin/test_user.py").read_text() == \
        "from tests.support import builders\nfrom tests.support.builders import SAMPLE\n"
    assert 'Path(__file__).parents[1] / "data"' in (root / "tests/support/builders.py").read_text()
    for folder in ("tests", "tests/unit", "tests/unit/framework", "tests/unit/framework/launch"):
        assert (root / folder / "__init__.py").is_file(), folder
    staged = subprocess.run(["git", "diff", "--cached", "--name-status"], cwd=root, capture_output=True,
                            text=True, check=True).stdout
    assert "tests/unit/framework/launch/test_monitor_later.py" in staged
    assert testtree.plan(root) == ([], [])  # idempotent


def test_mypy_checks_the_tests_bodies_without_asking_annotations():
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "tests" in mypy["files"]
    (tests,) = [o for o in mypy["overrides"] if "tests.*" in o["module"]]
    assert tests["check_untyped_defs"] is True and tests["disallow_untyped_defs"] is False
