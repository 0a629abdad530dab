"""framework.ranksuite.batches below the plugin: the plugin hands in how it reads a test's markers
(``fewest_nodes``) and each test's core policy; the package imports nothing of the plugin."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from framework.ranksuite import batches


@dataclass
class _Item:
    """The parts of a pytest item that planning and reporting read."""

    nodeid: str
    module: str | None
    world: int
    sections: list[tuple[str, str, str]] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> Any:
        if name != "rank_module" or self.module is None:
            return None
        return SimpleNamespace(args=(self.module,), kwargs={})

    @property
    def callspec(self) -> Any:
        return SimpleNamespace(params={"world": self.world})

    def add_report_section(self, when: str, key: str, text: str) -> None:
        self.sections.append((when, key, text))


def _ctx(launch_per: str = "world", controller: bool = True) -> Any:
    return SimpleNamespace(options=SimpleNamespace(launch_per=launch_per), env=object(),
                           is_controller=controller)


#: the stand-ins as the pytest items they stand in for (batches reads nodeid, path and the world)
ITEMS = cast("list[pytest.Item]", [_Item("t1", "a.py", 4), _Item("t2", "b.py", 4), _Item("t3", "c.py", 4),
                                   _Item("t4", "d.py", 4), _Item("t5", None, 4), _Item("t6", "e.py", 8)])
#: t3 cannot run here (the plugin's markers say so), t4 wants 2 nodes: each stays out of the batch
FEWEST = {"t1": 1, "t2": 1, "t3": None, "t4": 2, "t5": 1, "t6": 1}


def test_plan_groups_by_world_and_the_fewest_nodes_the_plugin_reads() -> None:
    seen: list[str] = []

    def fewest(item: Any) -> int | None:
        seen.append(item.nodeid)
        return FEWEST[item.nodeid]

    out = batches.plan(ITEMS, _ctx(), fewest)
    assert sorted(out) == ["t1", "t2"] and out["t1"] is out["t2"]
    assert out["t1"].modules == ["a.py", "b.py"] and out["t1"].key == batches.BatchKey(4, (), 1)
    assert "t3" in seen and "t4" in seen


@pytest.mark.parametrize("ctx", [_ctx(launch_per="test"), _ctx(controller=False)])
def test_no_plan_per_test_or_on_an_xdist_worker(ctx: Any) -> None:
    assert batches.plan(ITEMS, ctx, lambda item: 1) == {}


def _core() -> Any:
    return SimpleNamespace(describe=lambda: "core of rank 1 on host1 (SIGSEGV)", backtrace="#0 f")


def test_the_policy_handed_in_judges_the_cores() -> None:
    passed: Any = SimpleNamespace(ok=True, notes=[])
    item: Any = _Item("t1", "a.py", 4)
    with pytest.raises(AssertionError, match="core dumps while a.py ran"):
        batches.report_cores(item, "fail", "a.py", passed, [_core()])
    with pytest.warns(pytest.PytestWarning, match="policy warn"):
        batches.report_cores(item, "warn", "a.py", passed, [_core()])
    assert batches.report_cores(item, "ignore", "a.py", passed, [_core()]) is passed
    assert [key for _, key, _ in item.sections] == ["core dumps"] * 3


def test_a_failing_module_keeps_its_failure_and_carries_its_cores_once() -> None:
    failed: Any = SimpleNamespace(ok=False, notes=["rank 1 failed"])
    bare: Any = SimpleNamespace(describe=lambda: "core of rank 2 on host2 (SIGABRT)", backtrace="")
    item: Any = _Item("t1", "a.py", 4)
    for _ in range(2):
        assert batches.report_cores(item, "fail", "a.py", failed, [_core(), bare]) is failed
    cores = "core of rank 1 on host1 (SIGSEGV)\n#0 f\ncore of rank 2 on host2 (SIGABRT)"
    assert failed.notes == ["rank 1 failed", cores]


def test_the_package_imports_nothing_of_the_plugin() -> None:
    import ast
    from pathlib import Path

    root = Path(batches.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("framework.plugin"), (path.name, node.module)
