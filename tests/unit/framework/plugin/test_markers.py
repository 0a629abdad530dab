"""framework.plugin.markers: the reason a test the env cannot host is skipped."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from framework.plugin.context import RunContext
from framework.plugin.markers import _size_requirements, _soc_requirements
from tests.support.builders import make_env
from tests.support.plugin_run import MarkedItem

A2, A3 = "ascend910b", "ascend910_93"


@pytest.mark.parametrize(("markers", "socs", "reason"), [
    ({"a3_test": ()}, {A2}, "a3_test case; the env's hosts are ['ascend910b']"),
    ({"a2_test": ()}, {A3}, "a2_test case; the env's hosts are ['ascend910_93']"),
    ({"a2_test": ()}, {A2}, None),
    ({"a3_test": ()}, {"cpu"}, None),  # CPU hosts run the platform cases (the stand-ins)
    ({"a2_test": (), "a3_test": ()}, {A3}, None),  # marked for both platforms
    ({"a3_test": ()}, {A2, A3}, "a3_test case; the env's hosts are ['ascend910_93', 'ascend910b']"),
    ({"soc": (A3, "cpu")}, {A2},
     "needs soc in ('ascend910_93', 'cpu'); the env has ['ascend910b']"),
    ({"soc": (A3, "cpu")}, {"cpu"}, None),
    ({}, {A2}, None),
])
def test_soc_requirements(markers: dict[str, tuple[Any, ...]], socs: set[str],
                          reason: str | None) -> None:
    assert _soc_requirements(cast(pytest.Item, MarkedItem(**markers)), socs) == reason


def _ctx(worlds: frozenset[int] | None = None) -> RunContext:
    options = SimpleNamespace(slots=None, spread=1, worlds=worlds,
                              worlds_text=",".join(map(str, sorted(worlds or ()))))
    return cast(RunContext, SimpleNamespace(options=options))


@pytest.mark.parametrize(("markers", "worlds", "reason"), [
    ({"nodes": (3,)}, None, "needs 3 nodes; the env has 2"),
    ({"nodes": (2,)}, None, None),
    ({"ranks": (4,)}, None, None),  # two CPU hosts, two slots each
    ({"ranks": (8,)}, None, "needs 8 ranks; the env has 2 host(s) x 2 rank(s) per node = 4"),
    ({"ranks": (4,)}, frozenset({2}), "world size 4 not selected (--world-sizes 2)"),
    ({"ranks": (2,)}, frozenset({2}), None),
])
def test_size_requirements(markers: dict[str, tuple[Any, ...]], worlds: frozenset[int] | None,
                           reason: str | None) -> None:
    env = make_env(("h1", "h2"))
    assert _size_requirements(cast(pytest.Item, MarkedItem(**markers)), _ctx(worlds), env, 2) == reason
