"""framework.urma.harness: an URMA harness tree runs unmodified (pytest in a subprocess, no hosts
needed).

The tree's own ``ubus_test``/``common`` and root conftest fail when used, so each test also proves
that
camit's shims won and the conftest was blocked."""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest

from framework.urma.harness import harness_root, roots_of

ROOT_CONFTEST = """
def pytest_configure(config):
    raise RuntimeError("the tree's root conftest was loaded")
"""
APP = """
from common.constants import const
from ubus_test.base_test import BaseTest


class Feature(BaseTest):
    calls = []

    @classmethod
    def setup_class(cls):  # no hosts in this test
        pass

    @classmethod
    def teardown_class(cls):
        assert cls.calls == ["setup", "teardown"], cls.calls

    def setup(self):
        super(Feature, self).setup()
        self.calls.append("setup")

    def teardown(self):
        self.calls.append("teardown")
        super(Feature, self).teardown()
"""
CASE = """
import pytest
from app.mini.mini_app import Feature, const
from public import SUITE


class Test(Feature):
    @pytest.mark.timeout(600)
    def test_marked(self):
        assert SUITE == "MINI"
        assert const.TMOUT == 600
        assert const.CASE_NAME == "test_case1"
        assert const.CASE_PATH.endswith("/MINI/test_case1/test.py")
"""
UNMARKED = """
from common.constants import const


def test_unmarked():
    print("TMOUT", const.TMOUT)
    assert const.CASE_DIR.endswith("/MINI/test_case2")
"""


@pytest.fixture
def tree(pytester: pytest.Pytester) -> Path:
    root = pytester.path / "umdk" / "test" / "intergration_test"
    files = {
        "conftest.py": ROOT_CONFTEST,
        "test_framework/ubus_test/__init__.py": "",
        "test_framework/ubus_test/base_test.py": "raise ImportError('the tree ubus_test won')\n",
        "test_framework/common/__init__.py": "",
        "test_framework/common/constants.py": "raise ImportError('the tree common won')\n",
        "test_framework/app/__init__.py": "",
        "test_framework/app/mini/mini_app.py": APP,
        "test_suites/MINI/public.py": "SUITE = 'MINI'\n",
        "test_suites/MINI/test_case1/test.py": CASE,
        "test_suites/MINI/test_case2/test.py": UNMARKED,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def test_root_is_found_above_a_case(tree: Path) -> None:
    case = tree / "test_suites" / "MINI" / "test_case1" / "test.py"
    assert harness_root(case) == tree
    assert harness_root(tree.parent) is None
    assert roots_of(["-q", f"{case}::Test::test_marked", "--env", "x"], Path("/")) == [tree]


def test_case_runs_with_shims_nose_hooks_and_marker_timeout(
    pytester: pytest.Pytester, tree: Path
) -> None:
    case = tree / "test_suites" / "MINI" / "test_case1" / "test.py"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", str(case))
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("args", "expected"), [((), "TMOUT 300"), (("--timeout", "50"), "TMOUT 50.0")]
)
def test_timeout_option_anywhere_on_the_command_line(
    pytester: pytest.Pytester, tree: Path, args: tuple[str, ...], expected: str
) -> None:
    case = tree / "test_suites" / "MINI" / "test_case2" / "test.py"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", *args, str(case))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*{expected}*"])


def test_upstream_command_line_seed_and_timeout(pytester: pytest.Pytester, tree: Path) -> None:
    """``pytest <case> --random_seed N --timeout=S`` as upstream ran it: one seed, camit's, is N."""
    case = tree / "test_suites" / "MINI" / "test_case2" / "test.py"
    case.write_text(
        UNMARKED.replace(
            'print("TMOUT", const.TMOUT)',
            'import random; print("TMOUT", const.TMOUT, "R", random.random())',
        )
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-s", str(case), "--random_seed", "42", "--timeout=30"
    )
    result.assert_outcomes(passed=1)
    random.seed(42)
    result.stdout.fnmatch_lines([f"*TMOUT 30.0 R {random.random()}*"])


def test_xdist_is_refused_with_one_line(pytester: pytest.Pytester, tree: Path) -> None:
    case = tree / "test_suites" / "MINI" / "test_case2" / "test.py"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", str(case))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{tree}: an URMA harness tree runs without -n*"])
