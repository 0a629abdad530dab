"""One definition of each default the framework shares: the default workdir is written out once."""

from __future__ import annotations

import ast
from pathlib import Path

from framework.config import document
from framework.lab import plan
from framework.remote import layout

FRAMEWORK = Path(__file__).resolve().parents[3] / "framework"


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_the_default_workdir_is_written_out_once() -> None:
    """The env file's default, the lab hosts' workdir and the host layout's fallback are one constant."""
    found = [f"{p.relative_to(FRAMEWORK)}:{line}" for p in sorted(FRAMEWORK.rglob("*.py"))
             for line, value in _string_constants(p) if value == layout.DEFAULT_WORKDIR]
    assert [f.split(":")[0] for f in found] == ["remote/layout.py"], found
    assert document.BUILTIN["workdir"] == plan.HOST_WORKDIR == layout.DEFAULT_WORKDIR
