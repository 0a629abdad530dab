"""``suites/`` imports camit only through its public surface: the names of ``framework`` and of
``framework.ranksuite`` (each declared in its ``__all__``, loaded on first use), never a module
inside (``framework.plugin.context``, ``framework.perf.row``, ...)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import framework
import framework.ranksuite as ranksuite
from framework.ranksuite.coverage import STANDIN_OP_LIB
from framework.ranksuite.suite import RANK_TREE

ROOT = Path(__file__).resolve().parents[3]
#: the public packages and the names each offers
SURFACE: dict[str, frozenset[str]] = {
    "framework": frozenset(framework.__all__),
    "framework.ranksuite": frozenset(ranksuite.__all__),
}


def outside_surface(source: str, filename: str = "<suite>") -> list[str]:
    """``line: import`` of every import of a framework module, or of a framework name, that is not
    on the surface (function-level and TYPE_CHECKING imports included)."""
    bad: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            bad += [f"{node.lineno}: import {a.name}" for a in node.names
                    if a.name.split(".")[0] == "framework" and a.name not in SURFACE]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module is not None:
            if node.module.split(".")[0] != "framework":
                continue
            offered = SURFACE.get(node.module, frozenset())
            bad += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names
                    if a.name not in offered]
    return bad


def test_the_suites_import_only_the_public_surface() -> None:
    files = sorted((ROOT / "suites").rglob("*.py"))
    assert files
    found = {str(p.relative_to(ROOT)): outside_surface(p.read_text(), str(p)) for p in files}
    found = {path: bad for path, bad in found.items() if bad}
    listed = "\n".join(f"{path}:{line}" for path, bad in sorted(found.items()) for line in bad)
    assert not found, f"suites/ imports framework internals (use framework.ranksuite):\n{listed}"


@pytest.mark.parametrize("source", [
    "from framework.plugin import CONTEXT_KEY",
    "from framework.plugin.context import RunContext",
    "import framework.perf.row",
    "def f():\n    from framework.ranksuite.suite import RankSuite",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from framework.perf import history",
    "from framework.ranksuite import placement",  # in the module, not on the surface
    "from framework import Hostt",
])
def test_the_guard_sees_an_internal_import(source: str) -> None:
    assert outside_surface(source)


@pytest.mark.parametrize("source", [
    "import framework",
    "from framework import CONTEXT_KEY, Host",
    "from framework.ranksuite import RankSuite, perfbase, history",
    "import os\nfrom pathlib import Path",
])
def test_the_guard_lets_the_surface_through(source: str) -> None:
    assert outside_surface(source) == []


@pytest.mark.parametrize("name", sorted(ranksuite.__all__))
def test_every_ranksuite_name_resolves(name: str) -> None:
    value = getattr(ranksuite, name)
    if name in ranksuite._MODULES:
        assert value is importlib.import_module(ranksuite._MODULES[name])
    else:
        assert value is getattr(importlib.import_module(ranksuite._NAMES[name]), name)
    assert name in dir(ranksuite)


def test_an_unknown_ranksuite_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'RankSuit'"):
        ranksuite.RankSuit  # noqa: B018


def test_importing_the_package_for_the_plugin_loads_no_launcher_and_no_perf_stack() -> None:
    """The plugin imports framework.ranksuite.batches at pytest's start: the names wait."""
    code = ("import sys, framework.ranksuite.batches\n"
            "print(sorted(m for m in sys.modules if m.startswith(('framework.launch.runner', "
            "'framework.perf', 'framework.ranksuite.suite', 'numpy', 'torch'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_package_finds_the_rank_tree_and_the_standin_from_its_new_place() -> None:
    assert RANK_TREE == ROOT / "suites" / "cam" / "rank" and (RANK_TREE / "conftest.py").is_file()
    assert STANDIN_OP_LIB.parent == ROOT / "standin" and STANDIN_OP_LIB.exists()
