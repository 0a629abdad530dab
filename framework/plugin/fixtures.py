"""The plugin's fixtures: ``camit``, ``env``, ``cluster``, ``deployed``, ``launcher``,
``rank_suite``, ``run_ranks``.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from framework.errors import FrameworkError
from framework.plugin.context import CONTEXT_KEY, LAUNCHES_KEY, RunContext
from framework.plugin.markers import core_policy, min_nodes
from framework.plugin.resources import resources_of
from framework.ranksuite import batches

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.deploy import DeployResult
    from framework.hosts import Cluster
    from framework.launch import Launcher
    from framework.ranksuite.suite import RankSuite, SuiteResult

@pytest.fixture(scope="session")
def camit(request: pytest.FixtureRequest) -> RunContext:
    """The run context: options, env, seed, the worker's host share (``host_names()``), run folder.

    Asking for it puts camit in use (:meth:`RunContext.activate`): an env that does not load fails here, in one line.
    """
    ctx = request.config.stash[CONTEXT_KEY]
    try:
        if ctx.activate():
            from framework.plugin import progress

            progress.start(request.config, ctx)
    except pytest.UsageError as exc:
        pytest.fail(f"camit: {exc}", pytrace=False)
    return ctx


@pytest.fixture(scope="session")
def env(camit: RunContext) -> EnvConfig:
    """The validated environment (``framework.config.EnvConfig``)."""
    return camit.require_env()


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Cluster:
    """This process's hosts of the env (under ``-n`` the worker's share), leased, connected lazily."""
    return resources_of(request.config).open_cluster()


@pytest.fixture(scope="session")
def deployed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> DeployResult | str:
    """The env's artifacts deployed on every host, once per session (xdist-safe)."""
    # the marker and lock live in the run's own base temp, which pytest rotates (keeps the last 3): an xdist
    # worker's is <basetemp>/popen-gwN, so its parent is the one its controller and sibling workers share; a
    # session without xdist uses its own (its parent, /tmp/pytest-of-<user>, is never cleaned)
    base = tmp_path_factory.getbasetemp()
    root = base.parent if hasattr(request.config, "workerinput") else base
    try:
        return resources_of(request.config).deploy(root)
    except FrameworkError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def launcher(request: pytest.FixtureRequest, deployed: DeployResult | str) -> Launcher:
    """A ``framework.launch.Launcher`` over the cluster, after deploy."""
    return resources_of(request.config).open_launcher()


@pytest.fixture(scope="session")
def rank_suite(request: pytest.FixtureRequest, deployed: DeployResult | str) -> RankSuite:
    """Runs rank-side modules of suites/cam/rank across the cluster (``framework.ranksuite.suite.RankSuite``)."""
    return resources_of(request.config).open_suite()


def record_launch(item: pytest.Item, result: SuiteResult) -> None:
    """Note a suite launch on ``item``: for the core watch, and its placement as a report property."""
    item.stash.setdefault(LAUNCHES_KEY, []).append(result.launch)
    if result.placed:
        item.user_properties.append(("placement", result.placed))


@pytest.fixture
def run_ranks(request: pytest.FixtureRequest, rank_suite: RankSuite) -> Callable[..., SuiteResult]:
    """``run_ranks(module, world, **kw)`` → ``SuiteResult``; recorded on the test for core attribution, its
    placement (the test's ``nodes(n)`` marker and ``--spread``) in the test's report (property ``placement``).

    Under ``--launch-per world`` a test of a batch (framework.ranksuite.batches) gets its module's share of the
    world's one launch, run here at the first of the batch's tests to set up."""
    ctx = request.config.stash[CONTEXT_KEY]
    shared = batches.for_item(request.node)
    if shared is not None:
        shared.ensure(rank_suite, resources_of(request.config), ctx)

    def run(module: str, world: int, **kw: Any) -> SuiteResult:  # kw: RankSuite.run's keywords
        kw.setdefault("min_nodes", min_nodes(request.node, ctx))
        if shared is None:
            result = rank_suite.run(module, world, **kw)
        elif shared.covers(request.node.nodeid, module, world, kw):
            result = shared.result_for(request.node, module, core_policy(request.node, ctx))
        else:
            result = shared.run_alone(request.node, rank_suite, resources_of(request.config), ctx, module, world, kw,
                                      core_policy(request.node, ctx))
        record_launch(request.node, result)
        return result

    return run
