"""``--launch-per world``: the controller tests of one world share one launch of their rank-side
modules; :func:`plan` groups them at the end of collection, a :class:`Batch` runs the launch once
and hands each test its module's result and cores (docs/design.md, "The rank-side suites").
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from framework.ranksuite import batch

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.cores.inspection import Core
    from framework.hosts import Cluster
    from framework.launch import Launcher, LaunchResult
    from framework.launch.runwatch import WatchOutcome
    from framework.ranksuite.suite import RankSuite, SuiteResult
    from framework.records.folder import RunDir

#: the ``camit`` logger's progress events (``camit_event``: shown by framework.plugin.progress)
log = logging.getLogger("camit")


class LaunchOptions(Protocol):
    @property
    def launch_per(self) -> str | None: ...


class Session(Protocol):
    """What a batch needs of the pytest session's camit context (framework.plugin.context.RunContext)."""

    @property
    def env(self) -> EnvConfig | None: ...

    @property
    def options(self) -> LaunchOptions: ...

    @property
    def is_controller(self) -> bool: ...

    def ensure_rundir(self) -> RunDir: ...


class Hosts(Protocol):
    """What a batch needs of the session's resources (framework.plugin.resources.Resources)."""

    @property
    def launcher(self) -> Launcher | None: ...

    def open_cluster(self) -> Cluster: ...


#: a test's fewest nodes (its ``nodes`` marker), or None when it cannot run here (it is skipped)
FewestNodes = Callable[[pytest.Item], "int | None"]


def _event(message: str) -> None:
    log.info("%s: %s", "launch", message, extra={"camit_event": ("launch", message)})

BATCHES_KEY = pytest.StashKey[dict[str, "Batch"]]()


@dataclass(frozen=True)
class BatchKey:
    """What the tests of one launch share: the world size, the (merged) launch env and the fewest nodes."""

    world: int
    env: tuple[tuple[str, str], ...]
    min_nodes: int

    def describe(self) -> str:
        extra = f", env {' '.join(f'{k}={v}' for k, v in self.env)}" if self.env else ""
        return f"world {self.world}{extra}" + (f", >= {self.min_nodes} nodes" if self.min_nodes > 1 else "")


def declared(item: pytest.Item) -> tuple[str, dict[str, str]] | None:
    """(module, launch env) of the test's ``rank_module`` marker, or None."""
    m = item.get_closest_marker("rank_module")
    if m is None or not m.args:
        return None
    env = m.kwargs.get("env") or {}
    return str(m.args[0]), {str(k): str(v) for k, v in dict(env).items()}


@dataclass
class Batch:
    """The tests of one :class:`BatchKey` and, once run, their modules' results and cores."""

    key: BatchKey
    modules: list[str]
    #: nodeid -> the launch env that test declared (its ``run_ranks`` call must pass the same)
    declared: dict[str, dict[str, str]]
    results: dict[str, SuiteResult] | None = None
    error: Exception | None = None
    cores: dict[str, list[Core]] = field(default_factory=dict)
    log_summary: str = ""

    def covers(self, nodeid: str, module: str, world: int, kw: Mapping[str, Any]) -> bool:
        """Whether a ``run_ranks`` call is what the test declared (else it launches alone)."""
        return (module in self.modules and world == self.key.world and not kw.get("select")
                and dict(kw.get("extra_env") or {}) == self.declared.get(nodeid)
                and int(kw.get("min_nodes", 1)) == self.key.min_nodes)

    def ensure(self, suite: RankSuite, resources: Hosts, ctx: Session) -> None:
        """Run the shared launch once (the first test of the batch to set up), inside a core watch of its own."""
        if self.results is not None or self.error is not None:
            return
        _event(f"one launch for {len(self.modules)} modules at {self.key.describe()}: "
               f"{', '.join(self.modules)}")

        def run() -> None:
            self.results = suite.run_batch(self.modules, self.key.world, extra_env=dict(self.key.env),
                                           min_nodes=self.key.min_nodes, name=f"world{self.key.world}")

        self.error, outcome = watched(resources, ctx, f"shared launch, {self.key.describe()}", run,
                                      self._ran)
        self.log_summary = outcome.log_summary
        if outcome.cores:
            self._attribute(outcome.cores)

    def _ran(self) -> tuple[list[LaunchResult], bool]:
        """The launches the batch ran, and whether every module passed."""
        return self.launches(), all(r.ok for r in (self.results or {}).values())

    def _attribute(self, cores: Sequence[Core]) -> None:
        """Each core to the module its rank was running (:meth:`module_of`)."""
        records = [(launch, batch.records_of(launch)) for launch in self.launches()]
        for core in cores:
            self.cores.setdefault(self.module_of(core, records), []).append(core)

    def run_alone(self, item: pytest.Item, suite: RankSuite, resources: Hosts, ctx: Session, module: str,
                  world: int, kw: Mapping[str, Any], policy: str) -> SuiteResult:
        """A batch's test whose call is not what it declared launches alone, in a watch of its own (the core
        watch around the test's call is left out for a batch's tests: :func:`framework.plugin.cores.watched`);
        ``policy``: the test's core policy."""
        box: dict[str, SuiteResult] = {}

        def run() -> None:
            box["result"] = suite.run(module, world, **kw)

        error, outcome = watched(resources, ctx, item.nodeid, run,
                                 lambda: ([box["result"].launch], box["result"].ok) if box else ([], False))
        if error is not None:
            raise error
        result = box["result"]
        if not result.ok and outcome.log_summary:
            item.add_report_section("call", "failure signatures", outcome.log_summary)
        return report_cores(item, policy, module, result, outcome.cores)

    def launches(self) -> list[LaunchResult]:
        """The batch's launches in order (the shared one, then its rerun if it had one)."""
        seen: dict[str, LaunchResult] = {}
        for result in (self.results or {}).values():
            seen.setdefault(result.launch.launch_id, result.launch)
        return list(seen.values())

    def _running_module(self, core: Core, launch: LaunchResult,
                        by_rank: Mapping[int, Mapping[str, batch.ModuleProgress]]) -> str | None:
        """The module ``core``'s rank was running in ``launch`` when it dumped, if it was that
        launch's rank on the core's host and its record says."""
        if core.rank is None:
            return None
        rr = launch.ranks.get(core.rank)
        if rr is None or rr.host != core.host:
            return None
        # a whole-second time is %t (rounded down): the crash lies in that second
        coarse = 1.0 if float(core.time).is_integer() else 0.0
        return batch.module_at(by_rank.get(core.rank, {}), core.time, self.modules, coarse)

    def module_of(self, core: Core,
                  records: Sequence[tuple[LaunchResult, Mapping[int, Mapping[str, batch.ModuleProgress]]]]) -> str:
        """The module a core belongs to: the one its rank was running when it dumped (``records``: each launch
        of the batch with its ranks' records), else the module the launch failed in, else the batch's first."""
        for launch, by_rank in records:
            found = self._running_module(core, launch, by_rank)
            if found is not None:
                return found
        return self._failed_module() or self.modules[0]

    def _failed_module(self) -> str | None:
        """The last module a failed launch of the batch failed in (None: none)."""
        failed = [m for m, r in (self.results or {}).items()
                  if not r.launch.ok and r.launch_failed_here]
        return failed[-1] if failed else None

    def result_for(self, item: pytest.Item, module: str, policy: str) -> SuiteResult:
        """``module``'s result for ``item``; its cores reported on it under its own core ``policy``."""
        if self.error is not None:
            raise self.error
        assert self.results is not None
        result = self.results[module]
        if not result.ok and self.log_summary:
            item.add_report_section("call", "failure signatures", self.log_summary)
        item.user_properties.append(("shared_launch", f"{', '.join(self.modules)} ({self.key.describe()})"))
        return report_cores(item, policy, module, result, self.cores.get(module, []))


def watched(resources: Hosts, ctx: Session, label: str, run: Callable[[], None],
            launches: Callable[[], tuple[list[LaunchResult], bool]]) -> tuple[Exception | None, WatchOutcome]:
    """``run()`` inside a core watch of the cluster; (the exception it raised, the watch's outcome). ``launches()``
    gives the launches it ran and whether all passed, for attributing and judging cores; the launches' run
    folders on the hosts are removed after the scan (a relative core_pattern puts cores there)."""
    from framework.launch.runwatch import ClusterWatch

    watch = ClusterWatch(resources.open_cluster(), ctx.env, policy="fail", label=label)
    watch.begin()
    error: Exception | None = None
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - handed back: the tests that needed the run raise it
        error = exc
    ran, ok = launches()
    try:
        outcome = watch.end(ranks=ran or None, failed=error is not None or not ok, rundir=ctx.ensure_rundir())
    finally:
        if resources.launcher is not None:
            resources.launcher.cleanup_remote()
    return error, outcome


def report_cores(item: pytest.Item, policy: str, module: str, result: SuiteResult,
                 cores: Sequence[Core]) -> SuiteResult:
    """The cores of ``module``'s run on ``item``'s report, judged by its core policy: under ``fail`` a passing
    result fails with them, a failing one carries them after its own message; ``warn`` warns."""
    if not cores:
        return result
    text = "\n".join(_core_text(c) for c in cores)
    item.add_report_section("call", "core dumps", text)
    if policy == "fail":
        return _fail_with_cores(module, result, text)
    if policy == "warn":
        warnings.warn(pytest.PytestWarning(f"core dumps (policy warn):\n{text}"), stacklevel=3)
    return result


def _core_text(core: Core) -> str:
    """A core as the report shows it: its description, then its backtrace when there is one."""
    if not core.backtrace:
        return core.describe()
    return core.describe() + "\n" + core.backtrace


def _fail_with_cores(module: str, result: SuiteResult, text: str) -> SuiteResult:
    """The ``fail`` policy: a passing result fails with the cores; a failing one keeps its own
    failure first and carries the cores after it (as the core watch does)."""
    if result.ok:
        raise AssertionError(f"core dumps while {module} ran:\n{text}")
    if text not in result.notes:
        result.notes.append(text)
    return result


Member = tuple[str, str, dict[str, str]]  # (nodeid, module, its own launch env)


def _groups(items: Sequence[pytest.Item], fewest_nodes: FewestNodes
            ) -> dict[tuple[int, int], list[Member]]:
    """The shareable tests by (world, fewest nodes), in collection order."""
    groups: dict[tuple[int, int], list[Member]] = {}
    for item in items:
        what = declared(item)
        world = getattr(getattr(item, "callspec", None), "params", {}).get("world")
        nodes = fewest_nodes(item)
        if what is None or not isinstance(world, int) or nodes is None:
            continue
        groups.setdefault((world, nodes), []).append((item.nodeid, *what))
    return groups


def _batches(world: int, nodes: int, members: list[Member]) -> dict[str, Batch]:
    """nodeid → its batch among ``members`` (one world and node count): each group of agreeing
    envs that spans two modules or more."""
    out: dict[str, Batch] = {}
    for env, part in _merge_envs(members):
        modules = list(dict.fromkeys(m for _, m, _ in part))
        if len(modules) < 2:
            continue
        shared = Batch(BatchKey(world, tuple(sorted(env.items())), nodes), modules,
                       {nodeid: own for nodeid, _, own in part})
        out.update((nodeid, shared) for nodeid, _, _ in part)
    return out


def plan(items: Sequence[pytest.Item], ctx: Session, fewest_nodes: FewestNodes) -> dict[str, Batch]:
    """nodeid → its :class:`Batch`, for the tests that share a launch under ``--launch-per world``
    (``fewest_nodes``: the plugin's reading of a test's markers)."""
    if ctx.options.launch_per != "world" or ctx.env is None:
        return {}
    if not ctx.is_controller:
        _event("--launch-per world: under -n each test launches on its own (a worker does not "
               "know which tests it will get)")
        return {}
    out: dict[str, Batch] = {}
    for (world, nodes), members in _groups(items, fewest_nodes).items():
        out.update(_batches(world, nodes, members))
    return out


def _merge_envs(members: list[Member]) -> list[tuple[dict[str, str], list[Member]]]:
    """The members in groups whose launch envs agree (no variable with two values), in collection order:
    each member joins the first group it agrees with."""
    parts: list[tuple[dict[str, str], list[Member]]] = []
    for member in members:
        own = member[2]
        for env, part in parts:
            if all(env.get(k, v) == v for k, v in own.items()):
                env.update(own)
                part.append(member)
                break
        else:
            parts.append((dict(own), [member]))
    return parts


def for_item(item: pytest.Item) -> Batch | None:
    """The batch ``item`` runs in, or None: it launches on its own (no batch, or a rerun attempt)."""
    if int(getattr(item, "execution_count", 1) or 1) > 1:
        return None
    return item.config.stash.get(BATCHES_KEY, {}).get(item.nodeid)


__all__ = ["BATCHES_KEY", "Batch", "BatchKey", "declared", "for_item", "plan"]
