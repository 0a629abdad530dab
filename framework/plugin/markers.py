"""Requirement markers: what a test needs of the cluster, and the reason it is skipped when the env lacks it.

``ranks(n)``, ``nodes(n)``, ``soc(*names)`` and ``a2_test``/``a3_test`` are judged against the hosts
this process drives (under ``-n`` its own share) by :func:`requirements`; a test the env cannot host
is skipped with a reason naming what is missing. :func:`core_policy` reads the ``core_policy(policy)``
marker over ``--core-policy``, and :func:`uses_cluster` says which tests the core watch surrounds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.plugin.context import RunContext

SOC_MARKERS = {"a2_test": "ascend910b", "a3_test": "ascend910_93"}
MARKERS = (
    "a2_test: runs on Atlas A2 (910B) hosts",
    "a3_test: runs on Atlas A3 (910C SuperPoD) hosts",
    "multi_process_test: launches several ranks",
    "single_process_test: one process",
    "author(name): who wrote the case",
    "ranks(n): needs n ranks in total (skipped with the reason when the env has fewer)",
    "nodes(n): needs n hosts, and places the test's world on at least n of them (world 4 on 2 nodes: 2+2)",
    "soc(*names): runs only on these SoCs (ascend910b, ascend910_93, cpu)",
    "perf: a performance measurement (pytest suites/cam -m perf; the sweep's matrix: --perf-matrix)",
    "core_policy(policy): fail | warn | ignore for cores that appear during this test",
    "rank_module(module, env=None): the rank-side module (and launch env) the test runs through run_ranks; "
    "with --launch-per world the tests of one world share one launch",
)
#: the fixtures that drive the cluster: a test using one is watched for cores
CLUSTER_FIXTURES = frozenset({"cluster", "launcher", "rank_suite", "deployed"})
#: the class attribute a ``BaseTest`` declares and the plugin sets to the session's resources
RESOURCES_ATTR = "_camit_resources"


def register(config: pytest.Config) -> None:
    """Declare the markers (``--strict-markers`` accepts them; ``pytest --markers`` lists them)."""
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


def requirements(item: pytest.Item, ctx: RunContext) -> str | None:
    """Why the env cannot host ``item``, or None."""
    env = ctx.env
    if env is None:
        return None
    names = ctx.host_names()
    # the SoC first: an A3-only case on A2 hosts is skipped for that, whatever its size
    return _soc_requirements(item, {env.hosts[n].npu.soc for n in names}) or _size_requirements(
        item, ctx, env, len(names))


def min_nodes(item: pytest.Item, ctx: RunContext) -> int:
    """The fewest nodes ``item``'s world goes on: its ``nodes(n)`` marker, else ``--spread`` (the larger)."""
    m = item.get_closest_marker("nodes")
    return max(int(m.args[0]) if m else 1, ctx.options.spread)


def _size_requirements(item: pytest.Item, ctx: RunContext, env: EnvConfig, hosts: int) -> str | None:
    m = item.get_closest_marker("nodes")
    if m and hosts < int(m.args[0]):
        return f"needs {m.args[0]} nodes; the env has {hosts}"
    m = item.get_closest_marker("ranks")
    return _world_requirements(item, ctx, env, hosts, m) if m else None


def _world_requirements(item: pytest.Item, ctx: RunContext, env: EnvConfig, hosts: int,
                        ranks: pytest.Mark) -> str | None:
    """Why the world of the ``ranks`` marker does not run: no placement on ``hosts``, or
    ``--world-sizes`` leaves it out."""
    from framework.ranksuite.suite import placement, slots_per_node

    world = int(ranks.args[0])
    where = placement(world, hosts, slots_per_node(env, ctx.options.slots), min_nodes(item, ctx))
    if isinstance(where, str):
        return where
    worlds = ctx.options.worlds
    if worlds is not None and world not in worlds:
        return f"world size {ranks.args[0]} not selected (--world-sizes {ctx.options.worlds_text})"
    return None


def _soc_requirements(item: pytest.Item, socs: set[str]) -> str | None:
    m = item.get_closest_marker("soc")
    if m and not socs <= set(m.args):
        return f"needs soc in {m.args}; the env has {sorted(socs)}"
    for name, soc in SOC_MARKERS.items():
        if _only_marked(item, name) and socs & (set(SOC_MARKERS.values()) - {soc}):
            return f"{name} case; the env's hosts are {sorted(socs)}"
    return None


def _only_marked(item: pytest.Item, name: str) -> bool:
    """Whether ``item`` is marked ``name`` (``a2_test`` or ``a3_test``) but not the other one."""
    other = "a2_test" if name == "a3_test" else "a3_test"
    return item.get_closest_marker(name) is not None and item.get_closest_marker(other) is None


def core_policy(item: pytest.Item, ctx: RunContext) -> str:
    """The test's ``core_policy`` marker, else ``--core-policy``."""
    m = item.get_closest_marker("core_policy")
    return str(m.args[0]) if m else ctx.core_policy


def is_base_test(cls: object) -> bool:
    """``cls`` is a ``BaseTest`` class: one that declares the :data:`RESOURCES_ATTR` the plugin hands
    the session's resources through (the plugin sits below ``framework.base_test``: it never imports it)."""
    return isinstance(cls, type) and hasattr(cls, RESOURCES_ATTR)


def uses_cluster(item: pytest.Item) -> bool:
    """A test that drives the cluster: it asks for a cluster fixture or is a ``BaseTest`` method."""
    return bool(set(getattr(item, "fixturenames", ())) & CLUSTER_FIXTURES) or is_base_test(
        getattr(item, "cls", None))
