"""The layers of ``framework/``: every import (TYPE_CHECKING and function-level ones included) goes to
the same layer or a lower one, and no two packages import each other, directly or around a loop."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3] / "framework"

#: bottom to top; a unit is a package of framework/ or a top-level module (``framework.<name>``)
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer.split()) for layer in (
    # the vocabulary: results, errors, shell quoting, the host programs and their records
    "framework.result framework.errors framework.commands framework._lazy framework.fetchcaps "
    "framework.console remote",
    # facts: the env file, what Ascend hosts are
    "config ascend",
    # the run folder and the records in it
    "records framework.phases",
    # reaching hosts, and the state camit keeps on them
    "transport testing framework.hosts framework.lease framework.suspects framework.samepath framework.setenv",
    # what a run does
    "deploy cores preflight launch perf ranksuite framework.pairs",
    # what a person reads
    "report",
    # the front ends
    "plugin framework.base_test urma cli framework.heal lab calib "
    "framework.artifacts",
))
#: imports that may run back up the layers (at most two; none today)
UPWARD_ALLOWED: frozenset[tuple[str, str]] = frozenset()


def unit_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "framework" or len(parts) == 1:
        return None
    if (ROOT / parts[1]).is_dir():
        return parts[1]
    return f"framework.{parts[1]}" if (ROOT / f"{parts[1]}.py").is_file() else None  # else: a name of framework


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[:len(here) - (node.level - 1)]
        base = ".".join([*here, *([node.module] if node.module else [])])
    if base == "framework":
        return [f"framework.{a.name}" for a in node.names]
    return [base]


def edges() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        module = module_name(path)
        src = unit_of(module)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in imported(node, module, path.name == "__init__.py"):
                dst = unit_of(target)
                if src and dst and dst != src:
                    out[(src, dst)].append(f"{path.relative_to(ROOT.parent)}:{getattr(node, 'lineno', 0)}")
    return out


def layer_of(unit: str) -> int:
    found = [i for i, layer in enumerate(LAYERS) if unit in layer]
    assert found, f"{unit} is in no layer of tests/unit/project/test_layers.py: put it in one"
    return found[0]


def test_every_package_and_top_level_module_has_a_layer() -> None:
    units = {unit_of(module_name(p)) for p in ROOT.rglob("*.py")} - {None, "data"}
    for unit in sorted(u for u in units if u):
        layer_of(unit)


def test_imports_go_down_the_layers() -> None:
    upward = {(a, b): where for (a, b), where in edges().items()
              if layer_of(b) > layer_of(a) and (a, b) not in UPWARD_ALLOWED}
    assert not upward, "imports that run back up the layers:\n" + "\n".join(
        f"{a} -> {b}: {', '.join(w)}" for (a, b), w in sorted(upward.items()))
    assert len(UPWARD_ALLOWED) <= 2


def test_no_package_cycle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges():
        graph[a].add(b)
    seen: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(unit: str, path: list[str]) -> None:
        seen[unit] = 1
        for nxt in sorted(graph[unit]):
            if seen.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path[path.index(nxt):], nxt]))
            if nxt not in seen:
                visit(nxt, [*path, nxt])
        seen[unit] = 2

    for unit in sorted(graph):
        if unit not in seen:
            visit(unit, [unit])


def test_the_guard_sees_an_upward_import(tmp_path: Path) -> None:
    """The scan itself: a relative import from config up into launch is found as such."""
    module = "framework.config.effective"
    node = ast.parse("from ..launch import plan").body[0]
    (target,) = imported(node, module, is_package=False)
    assert unit_of(target) == "launch" and layer_of("launch") > layer_of("config")


def test_the_design_page_draws_the_same_layers() -> None:
    """docs/design.md's layer table lists each layer's units in this file's order."""
    page = (ROOT.parent / "docs" / "design.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == len(LAYERS)
    for row, layer in zip(rows, LAYERS):
        drawn = {u.strip("`/ ") for u in row.split("|")[2].split(",")}
        assert drawn == {u.removeprefix("framework.") for u in layer}, row
