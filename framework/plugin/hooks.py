"""camit's pytest hooks: each one reads the run context and hands the work to the module that
owns it.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from framework.plugin import cores, failtext, markers, progress, reporting, xdist
from framework.plugin.context import CONTEXT_KEY, RunContext, context_of
from framework.plugin.options import add_options, add_seed_alias
from framework.plugin.resources import RESOURCES_KEY, Resources, resources_of
from framework.plugin.signals import SIGNALS_KEY, Signals, name_cut_cases, signals_of
from framework.ranksuite import batches

if TYPE_CHECKING:
    from _pytest.terminal import TerminalReporter


class WorkerNode(Protocol):
    """What ``pytest_configure_node`` uses of xdist's ``WorkerController``."""

    config: pytest.Config
    workerinput: dict[str, object]
    workeroutput: dict[str, object]
    gateway: Any  # execnet's gateway (its ``id`` is the worker id)


#: the fixtures that make a test a camit test (their dependants have them in ``fixturenames`` too)
CAMIT_FIXTURES = frozenset({"camit", "env", "cluster", "deployed", "launcher", "rank_suite", "run_ranks"})


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> Generator[None, None, None]:
    """After the initial conftests (and the URMA harness's set-up before them,
    :func:`framework.urma.harness.detect`): ``--random_seed`` is camit's alias unless a conftest declared it."""
    yield
    add_seed_alias(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    markers.register(config)
    config.pluginmanager.register(failtext.FailText(), "camit-failtext")
    ctx = RunContext.from_config(config)
    config.stash[CONTEXT_KEY] = ctx
    config.stash[RESOURCES_KEY] = Resources(ctx)
    random.seed(ctx.seed)
    runs = ctx.env is not None and not config.option.collectonly
    if runs:
        _configure_run(config, ctx)
    _start_progress(config, ctx)
    if runs and ctx.active and ctx.is_controller:
        _deal_one_by_one(config)


def _configure_run(config: pytest.Config, ctx: RunContext) -> None:
    """A session that runs tests with an env: signal handlers; on the controller, its reports."""
    signals = config.stash[SIGNALS_KEY] = Signals()
    signals.install()
    config.pluginmanager.register(signals, "camit-signals")  # its hooks note the running tests
    if ctx.is_controller:
        _register_controller_reports(config, ctx)


def _start_progress(config: pytest.Config, ctx: RunContext) -> None:
    """The progress display once camit is used; an xdist controller with an env file prints its
    workers' events too."""
    distributed = getattr(config.option, "dist", "no") != "no"
    xdist_controller = ctx.env is not None and ctx.is_controller and distributed
    if ctx.active or xdist_controller:
        progress.start(config, ctx)


def _deal_one_by_one(config: pytest.Config) -> None:
    """Under ``--dist load`` with no ``--maxschedchunk``, xdist hands the cluster tests (few and
    slow) out one at a time to whichever worker is free (its option for "a small number of slow
    tests"); see xdist.sort_for_workers."""
    if getattr(config.option, "dist", "no") != "load":
        return
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1


def _register_controller_reports(config: pytest.Config, ctx: RunContext) -> None:
    """The controller's JUnit and rerun records in the run folder.

    (--collect-only runs nothing: no run folder, no summary); the folder is made once camit is used.
    """
    rundir = ctx.ensure_rundir() if ctx.active else ctx.plan_rundir()
    # our run folder also holds pytest's own JUnit unless the user chose a path (written if camit is used)
    if not getattr(config.option, "xmlpath", None):
        reporting.register_junit(config, ctx, rundir.path / "junit.xml")
    config.pluginmanager.register(reporting.RerunRecorder(config, ctx), "camit-reruns")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> xdist.ClusterScheduling | None:
    """A cluster run under ``-n``: the first tests (the launches, sorted first) are dealt one per worker."""
    if not context_of(config).active:  # (with $CAMIT_ENV alone, unrelated tests keep xdist's own)
        return None
    return xdist.make_scheduler(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    signals = signals_of(config)
    if signals is not None:
        signals.restore()
        if config.pluginmanager.is_registered(signals):
            config.pluginmanager.unregister(signals)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodeready(node: WorkerNode) -> None:
    """pytest-xdist, controller: the worker's pid, to forward SIGTERM/SIGHUP to (execnet's popen gateway)."""
    signals = signals_of(node.config)
    if signals is not None:
        signals.add_worker(getattr(getattr(getattr(node.gateway, "_io", None), "popen", None), "pid", None))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: WorkerNode) -> None:
    """pytest-xdist (``node`` is its ``WorkerController``): hand the run folder, the seed and the host share
    to a worker; a replacement for a worker that died gets the dead one's share (:class:`xdist.ShareBook`)."""
    ctx = context_of(node.config)
    if ctx.rundir is not None:
        node.workerinput["camit_rundir"] = str(ctx.rundir.path)
    node.workerinput["camit_seed"] = ctx.seed
    share = ctx.worker_share(str(node.workerinput["workerid"]), int(str(node.workerinput["workercount"])))
    if share is not None:
        node.workerinput["camit_hosts"] = share


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: WorkerNode, error: object | None) -> None:
    """pytest-xdist, controller: a worker that ended its session on an infrastructure failure ends the run's;
    a worker that died gives its host share back, for the replacement xdist starts."""
    ended = getattr(node, "workeroutput", {}).get("camit_exit")
    resources = node.config.stash.get(RESOURCES_KEY, None)
    if isinstance(ended, (list, tuple)) and resources is not None and resources.ended is None:
        resources.ended = (int(ended[0]), str(ended[1]))
    ctx = context_of(node.config)
    if error and ctx.shares is not None:
        ctx.shares.give_back(str(node.workerinput["workerid"]))


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    return reporting.header_lines(context_of(config))


def uses_camit(item: pytest.Item) -> bool:
    """The test asks for a camit fixture (or one that depends on one), or is a ``BaseTest`` method."""
    if CAMIT_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    return markers.is_base_test(getattr(item, "cls", None))


def _activate(config: pytest.Config, ctx: RunContext) -> None:
    """A collected test uses camit: activate it (an env that does not load ends the session on the
    controller; a worker leaves it to the tests), then start the progress display and header."""
    try:
        ctx.activate()
    except pytest.UsageError:
        if ctx.is_controller:
            raise
        return
    progress.start(config, ctx)
    reporting.show_header(config, ctx)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """camit is in use when a collected test uses it (an env that does not load then ends the session here,
    with one line; under xdist a worker leaves it to the tests); under pytest-xdist: tests that launch
    across the cluster first, the largest world first."""
    ctx = context_of(config)
    if _first_used(ctx, items):
        _activate(config, ctx)
    if ctx.is_controller or not ctx.active:
        return
    xdist.sort_for_workers(items, ctx.options.worlds)


def _first_used(ctx: RunContext, items: list[pytest.Item]) -> bool:
    """Whether camit, not active yet but with an env file, is used by one of the collected tests."""
    return not ctx.active and bool(ctx.options.env_path) and any(uses_camit(item) for item in items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """``--launch-per world``: which of the collected (and selected) tests share a launch
    (:mod:`framework.ranksuite.batches`)."""
    ctx = context_of(session.config)
    if ctx.active and not session.config.option.collectonly:
        session.config.stash[batches.BATCHES_KEY] = batches.plan(
            session.items, ctx, lambda item: _fewest_nodes(item, ctx))


def _fewest_nodes(item: pytest.Item, ctx: RunContext) -> int | None:
    """A test's fewest nodes for its batch (its ``nodes`` marker); None: the env lacks what it needs."""
    return None if markers.requirements(item, ctx) is not None else markers.min_nodes(item, ctx)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Hand a ``BaseTest`` class the session's resources (before its ``setup_class``: this plugin's
    hook runs before pytest's own, which sets the class up); skip what the env lacks. The test (and its
    attempt under pytest-rerunfailures) is noted first: its launches are named after it in the report."""
    context_of(item.config).test = (item.nodeid, int(getattr(item, "execution_count", 1) or 1))
    cls = getattr(item, "cls", None)
    if markers.is_base_test(cls):
        setattr(cls, markers.RESOURCES_ATTR, resources_of(item.config))
    why = markers.requirements(item, context_of(item.config))
    if why:
        pytest.skip(why)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Every test that drives the cluster runs inside the core watch (:func:`framework.plugin.cores.around_test`)."""
    ctx = context_of(item.config)
    if not cores.watched(item, ctx):
        return (yield)
    with cores.around_test(item, ctx, resources_of(item.config)):
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_sessionfinish")
def pytest_sessionfinish_exit_status(session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
    """Before every other session-finish hook: no signal breaks the finish off; an infrastructure failure's
    exit status and reason go where they count. A worker puts them in its ``workeroutput`` and asks xdist to
    stop the run (``shouldstop``, read by xdist's own finish hook); the controller returns the code."""
    signals = signals_of(session.config)
    if signals is not None:
        signals.finishing()
    resources = session.config.stash.get(RESOURCES_KEY, None)
    ended = resources.ended if resources is not None else None
    if ended is not None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput["camit_exit"] = list(ended)
            session.shouldstop = ended[1]
        else:
            session.exitstatus = ended[0]
    return (yield)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After pytest's junitxml wrote its file (trylast): release the lease, close; cluster.xml, manifest, index.

    The terminal summary (a hook wrapper around this one) then reads the finished folder. The status is
    the infrastructure failure's that ended the session, if one did (a worker's, under xdist).
    """
    if CONTEXT_KEY not in session.config.stash:
        return
    resources = resources_of(session.config)
    resources.close()
    progress.stop(session.config)  # camit.log closed before the folder is scrubbed
    signals = signals_of(session.config)
    exitstatus, error = _ending(resources, signals, exitstatus)
    if signals is not None and signals.running and _reports_junit(session.config):
        name_cut_cases(Path(str(reporting.junit_path(session.config))), signals.running,
                       error or "interrupted")
    reporting.finalize(context_of(session.config), exitstatus, error=error)


def _ending(resources: Resources, signals: Signals | None, exitstatus: int
            ) -> tuple[int, str | None]:
    """The session's exit status and why it ended early: the infrastructure failure that ended
    it, else the signal that stopped it (no reason when it ran out)."""
    if resources.ended is not None:
        return resources.ended
    if signals is not None and signals.received is not None:
        return exitstatus, f"stopped by {signals.received_name}"
    return exitstatus, None


def _reports_junit(config: pytest.Config) -> bool:
    """Whether pytest writes a JUnit file and this process reports it."""
    return bool(reporting.junit_path(config)) and reporting.reports_here(context_of(config))


def pytest_terminal_summary(terminalreporter: TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    if CONTEXT_KEY not in config.stash:
        return
    lines = reporting.summary_lines(context_of(config))
    if lines is None:
        return
    terminalreporter.section("camit")
    for line in lines:
        terminalreporter.write_line(line)


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    # pytest also comes here for collection errors (Session.Interrupted) and pytest.exit(): not a Ctrl-C
    reporting.say_interrupted(excinfo)
