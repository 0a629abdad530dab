"""Running a rank-side pytest tree across the cluster: ship it, place the ranks, launch, judge.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from framework import commands
from framework.errors import FrameworkError
from framework.hosts import Cluster, Host
from framework.launch import Launcher, LaunchResult, RankResult, Target
from framework.launch.plan import devices_per_node
from framework.ranksuite import batch
from framework.ranksuite.coverage import ENV_FLAG
from framework.remote.layout import HostLayout

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.ranksuite.coverage import RankCoverage

log = logging.getLogger("camit.suite")

RANK_TREE = Path(__file__).resolve().parents[2] / "suites" / "cam" / "rank"
DEFAULT_SLOTS = 2  # ranks per node on a CPU host when the env declares none


def slots_per_node(env: EnvConfig, override: int | None = None) -> int:
    """Ranks one node can host: the option, else the visible NPUs per host (``npu.visible``, else
    ``npu.count``), else launch.nproc_per_node, else 2 (CPU)."""
    if override:
        return override
    return devices_per_node(env) or env.launch.nproc_per_node or DEFAULT_SLOTS


#: the small world sizes every cluster runs (cam-ops.md: upstream's CASE_4RANK/CASE_8RANK and the 16-rank prefill)
SMALL_WORLDS = (4, 8, 16)


def default_worlds(hosts: int, per_node: int, selected: frozenset[int] | None = None) -> list[int]:
    """The world sizes the suite parametrizes: :data:`SMALL_WORLDS`, ``2 x per_node`` and ``hosts x per_node``
    (the worlds that cross nodes on a cluster of ``hosts`` nodes of ``per_node`` ranks: on a 16-device A3,
    32 ranks run on two nodes whatever the small sizes do), and any ``selected`` (``--world-sizes``) beside
    them; sorted, each once. Sizes the env cannot host stay in: they skip with the reason."""
    crossing = {2 * per_node, hosts * per_node} if per_node > 0 else set()
    return sorted(set(SMALL_WORLDS) | crossing | set(selected or ()))


def placement(world: int, hosts: int, slots: int, min_nodes: int = 1) -> tuple[int, int] | str:
    """(nodes, ranks per node) for ``world`` ranks, fewest nodes first but at least ``min_nodes``
    (``--spread`` or the test's ``nodes(n)`` marker: world 4 with min_nodes 2 runs 2+2); or why it cannot
    be placed."""
    if min_nodes > hosts:
        return f"needs {world} ranks on >= {min_nodes} nodes; the env has {hosts} host(s)"
    for nodes in range(max(1, min_nodes), hosts + 1):
        if world % nodes == 0 and world // nodes <= slots:
            return nodes, world // nodes
    return _unplaceable(world, hosts, slots, min_nodes)


def _unplaceable(world: int, hosts: int, slots: int, min_nodes: int) -> str:
    """Why ``world`` ranks cannot be placed: too many for the env, or no even split."""
    if world > hosts * slots:
        return f"needs {world} ranks; the env has {hosts} host(s) x {slots} rank(s) per node = {hosts * slots}"
    at_least = f" on >= {min_nodes} nodes" if min_nodes > 1 else ""
    return f"cannot split {world} ranks evenly{at_least} over <= {hosts} hosts of {slots} slots"


def describe_placement(world: int, hosts: Sequence[str], per_node: int) -> str:
    """``32 ranks on 2 nodes x 16 (a3-1, a3-2)``: the placement a test's report records."""
    return f"{world} ranks on {len(hosts)} node(s) x {per_node} ({', '.join(hosts)})"


def tree_archive(root: Path) -> tuple[bytes, str]:
    """A reproducible tar.gz of ``root`` (no caches) and its sha256."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if not _packed(path, rel):
                continue
            info = tar.gettarinfo(str(path), arcname=str(rel))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def _packed(path: Path, rel: Path) -> bool:
    """A file of the tree that its archive takes: no cache folder, no byte code."""
    if any(p in ("__pycache__", ".pytest_cache") for p in rel.parts) or path.suffix == ".pyc":
        return False
    return path.is_file()


def tree_digest(data: bytes) -> str:
    """The digest :func:`sh_tree_digest` prints for the extracted archive ``data``: sha256 over the
    ``sha256sum`` lines of its files in byte order (``LC_ALL=C sort``), so a reused tree is the shipped one."""
    lines = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                fh = tar.extractfile(member)
                assert fh is not None
                lines.append((f"./{member.name}".encode(), hashlib.sha256(fh.read()).hexdigest()))
    text = b"".join(f"{sha}  ".encode() + name + b"\n" for name, sha in sorted(lines))
    return hashlib.sha256(text).hexdigest()


def sh_tree_digest(dest: str) -> str:
    """Shell: print :func:`tree_digest` of the extracted tree at ``dest`` (its ``.ok`` marker left out)."""
    q = commands.quote
    return (f"cd {q(dest)} && find . -type f ! -path ./.ok -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum "
            "| sha256sum | cut -d' ' -f1")


@dataclass
class RankFailure:
    rank: int
    host: str
    test: str
    message: str


@dataclass
class SuiteResult:
    module: str
    world: int
    launch: LaunchResult
    failures: list[RankFailure] = field(default_factory=list)
    missing_junit: list[int] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # passed/failed/skipped over all ranks
    #: where the ranks ran (:func:`describe_placement`), for the test's report
    placed: str = ""
    #: (test id, reason) of every rank-side skip, rank 0's first
    skips: list[tuple[str, str]] = field(default_factory=list)
    #: ``--launch-per world``: the modules that shared the launch (empty: a launch of its own)
    shared_with: tuple[str, ...] = ()
    #: the shared launch's failure is this module's (it crashed in it, or no module began): False for a module
    #: every rank had finished before the launch failed
    launch_failed_here: bool = True
    #: why the module did not run (a shared launch crashed before it, twice); None: it ran
    not_run: str | None = None
    #: more lines for :meth:`message` (a shared launch's cores of this module: framework.ranksuite.batches)
    notes: list[str] = field(default_factory=list)

    def skip_reasons(self) -> list[str]:
        """Each distinct ``test: reason`` once, in the order the ranks reported them."""
        return list(dict.fromkeys(f"{t}: {r}" for t, r in self.skips))

    def require_ran(self) -> SuiteResult:
        """Fail when no rank-side test passed (all skipped, or none collected), with the skip reasons: a file
        whose every case skipped (a rank-count guard, a missing device) tested nothing."""
        __tracebackhide__ = True
        if self.ok and not self.counts.get("passed"):
            shown = self.skip_reasons()
            lines = [f"{self.module} (world {self.world}) ran nothing: {self.counts.get('skipped', 0)} skipped, "
                     f"0 passed over {self.world} ranks"] + [f"  skipped {s}" for s in shown[:12]]
            raise RankSuiteFailed(self, "\n".join(lines))
        return self

    @property
    def ok(self) -> bool:
        if self._launch_blamed or self.failures:
            return False
        return not self.missing_junit and self.not_run is None

    @property
    def _launch_blamed(self) -> bool:
        """The launch failed, and its failure counts against this module (not every rank had
        finished the module)."""
        return not self.launch.ok and self.launch_failed_here

    def add_rank(self, rank: int, host: str, counts: Mapping[str, int],
                 failures: Sequence[tuple[str, str]], skips: Sequence[tuple[str, str]]) -> None:
        """Add one rank's counts, failures and skips."""
        for k, v in counts.items():
            self.counts[k] += v
        self.failures += [RankFailure(rank, host, t, m) for t, m in failures]
        self.skips += skips

    def _failure_lines(self) -> list[str]:
        """The rank-side failures: a count naming the first, then up to 12 of them."""
        if not self.failures:
            return []
        first = self.failures[0]
        head = (f"{len(self.failures)} rank-side failure(s) in {self.module} (world {self.world}); "
                f"first: rank {first.rank} on {first.host}: {first.test}")
        return [head, *(f"  rank {f.rank} on {f.host}: {f.test}: {f.message}"
                        for f in self.failures[:12])]

    def _launch_lines(self) -> list[str]:
        """Why the launch this module ran in failed (when it failed here and the module ran)."""
        if not self._launch_blamed or self.not_run is not None:
            return []
        others = ", ".join(m for m in self.shared_with if m != self.module)
        shared = [f"{self.module} was running when the launch it shared with {others} failed:"]
        return [*(shared if self.shared_with else []), self.launch.message()]

    def message(self) -> str:
        lines = [] if self.not_run is None else [
            f"{self.module} (world {self.world}) did not run: {self.not_run}"]
        lines += self._failure_lines() + self._launch_lines()
        if self.missing_junit:
            lines.append(f"no JUnit from rank(s) {self.missing_junit}")
        if lines:
            lines += self.notes
        return "\n".join(lines) or "ok"

    def check(self) -> SuiteResult:
        __tracebackhide__ = True
        if not self.ok:
            raise RankSuiteFailed(self)
        return self


class RankSuiteFailed(FrameworkError, AssertionError):
    """A rank-side suite did not pass on every rank (an AssertionError, so pytest shows it as a failure)."""

    exit_code = 1

    def __init__(self, result: SuiteResult, message: str | None = None) -> None:
        self.result = result
        super().__init__(message or result.message())


def parse_rank_junit(path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(counts, [(test id, message)]) from one rank's pytest JUnit file."""
    counts, failures, _ = read_rank_junit(path)
    return counts, failures


def _failure_message(bad: ET.Element) -> str:
    """A failed case's message: its ``message``, else its text's last line."""
    lines = (bad.text or "").strip().splitlines()
    return bad.get("message") or (lines[-1] if lines else "(no message)")


def _skip_reason(skipped: ET.Element) -> str:
    """A skipped case's reason: its ``message``, else its text."""
    return skipped.get("message") or (skipped.text or "").strip() or "(no reason)"


def _case_outcome(case: ET.Element) -> tuple[str, str]:
    """``(passed|failed|skipped, message)`` of one ``<testcase>``."""
    for tag in ("failure", "error"):
        bad = case.find(tag)
        if bad is not None:
            return "failed", _failure_message(bad)
    skipped = case.find("skipped")
    if skipped is not None:
        return "skipped", _skip_reason(skipped)
    return "passed", ""


def _in_module(case: ET.Element, module: str | None) -> bool:
    """Whether ``case`` belongs to ``module`` (every case does without one)."""
    return module is None or batch.in_module(case.get("classname", ""), module)


def read_rank_junit(path: Path, module: str | None = None
                    ) -> tuple[dict[str, int], list[tuple[str, str]], list[tuple[str, str]]]:
    """(counts, failures, skips) from one rank's pytest JUnit file; failures and skips as
    (test id, message); with ``module``, only that module's cases (a launch that ran several:
    ``--launch-per world``)."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    listed: dict[str, list[tuple[str, str]]] = {"failed": [], "skipped": []}
    cases = [c for c in ET.parse(path).getroot().iter("testcase") if _in_module(c, module)]
    for case in cases:
        kind, message = _case_outcome(case)
        counts[kind] += 1
        if kind in listed:
            name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
            listed[kind].append((name, message))
    return counts, listed["failed"], listed["skipped"]


def _after_failure(state: str, failed_in: str | None) -> bool:
    """Whether a module in ``state`` never ran because the shared launch failed before it."""
    return state == batch.NOT_RUN or (state == batch.CRASHED and failed_in is not None)


def _not_run(module: str, world: int, launch: LaunchResult, shared: tuple[str, ...],
             failed_in: str | None) -> SuiteResult:
    """The result of ``module``, which the shared launch never ran (it failed in ``failed_in``)."""
    why = launch.failure or "not every rank reported success"
    return SuiteResult(module, world, launch, counts={"passed": 0, "failed": 0, "skipped": 0},
                       shared_with=shared, launch_failed_here=False,
                       not_run=f"the launch it shared failed in {failed_in} first ({why})")


def _junit_of(rr: RankResult | None) -> Path | None:
    """The rank's JUnit file, when it wrote one."""
    if rr is None or not rr.junit:
        return None
    path = Path(rr.junit)
    return path if path.exists() else None


def _progress_of(records: Mapping[int, Mapping[str, batch.ModuleProgress]] | None, rank: int,
                 only: str | None) -> batch.ModuleProgress | None:
    """The rank's record of module ``only`` (None without one)."""
    if only is None or records is None:
        return None
    return records.get(rank, {}).get(only)


class RankSuite:
    """Ship a rank-side tree and run its modules at a given world size."""

    def __init__(self, env: EnvConfig, cluster: Cluster, launcher: Launcher, *, tree: Path = RANK_TREE,
                 slots: int | None = None, rank_env: Mapping[str, str] | None = None, case_timeout: float = 600.0,
                 pytest_args: Sequence[str] = (), coverage: RankCoverage | None = None, spread: int = 1) -> None:
        self.env = env
        self.cluster = cluster
        self.launcher = launcher
        self.tree = tree
        self.slots = slots_per_node(env, slots)
        self.rank_env = dict(rank_env or {})
        self.case_timeout = case_timeout
        self.pytest_args = list(pytest_args)
        #: a framework.ranksuite.coverage.RankCoverage in coverage mode (--cov-ranks): ranks run under `coverage run`
        self.coverage = coverage
        #: every world on at least this many nodes (``--spread N``)
        self.spread = spread
        self._shipped: dict[str, str] = {}

    def can_place(self, world: int, min_nodes: int = 1) -> tuple[int, int] | str:
        return placement(world, len(self.cluster), self.slots, max(min_nodes, self.spread))

    def ship(self) -> dict[str, str]:
        """Put the tree on every host (once per content hash); host → remote directory."""
        if self._shipped:
            return self._shipped
        data, sha = tree_archive(self.tree)
        digest = tree_digest(data)
        base = Path(self.launcher.rundir.path) if self.launcher.rundir else Path(tempfile.gettempdir())
        # written once, read by every host's upload; a name of its own, because the xdist workers of a run
        # share the run folder and ship the same tree at the same time (one's cleanup took the other's file)
        fd, name = tempfile.mkstemp(prefix=f".suite-{sha[:16]}-", suffix=".tgz", dir=base)
        local = Path(name)

        def one(host: Host) -> str:
            dest = HostLayout.of(self.env.hosts[host.name]).suite(sha)
            q = commands.quote
            # the ranks import and run this tree: a tree left on the host is reused only when every file
            # still hashes as shipped (issue 17: nothing cached on a host is trusted without its hash)
            probe = host.run(commands.ShellScript(f"[ -f {q(dest + '/.ok')} ] && {{ {sh_tree_digest(dest)}; }}"),
                             timeout=60)
            if probe.rc == 0 and probe.stdout.strip() == digest:
                return dest
            host.put(local, f"{dest}.tgz", sha256=sha)
            host.check(commands.ShellScript(f"rm -rf {q(dest)} && {{ _um=$(umask); umask 077; mkdir -p {q(dest)}; "
                                            f"umask \"$_um\"; }} && tar xzf {q(dest + '.tgz')} -C {q(dest)} "
                                            f"&& rm -f {q(dest + '.tgz')} && touch {q(dest + '/.ok')}"), timeout=120)
            return dest

        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            shipped = self.cluster.map(one)
        finally:
            local.unlink(missing_ok=True)
        shipped.raise_on_failure()
        self._shipped = dict(shipped)  # type: ignore[arg-type]
        return self._shipped

    def run(self, module: str, world: int, *, extra_env: Mapping[str, str] | None = None,
            select: str | None = None, name: str | None = None, min_nodes: int = 1) -> SuiteResult:
        """Run rank-side ``module`` (a path inside the tree) on ``world`` ranks and judge every rank; the ranks
        go on the fewest nodes that hold them, but on at least ``min_nodes`` (and ``--spread``): torchrun
        runs ``--nnodes`` = those nodes, ``--nproc-per-node`` = world / nodes."""
        label = name or Path(module).stem
        launch, placed = self._launch([module], world, extra_env=extra_env, select=select, name=label,
                                      min_nodes=min_nodes, timeout=self.case_timeout)
        result = self.judge(module, world, launch)
        result.placed = placed
        log.info("%s: %s", label, placed)
        return result

    def run_batch(self, modules: Sequence[str], world: int, *, extra_env: Mapping[str, str] | None = None,
                  name: str | None = None, min_nodes: int = 1, rerun: bool = True) -> dict[str, SuiteResult]:
        """``--launch-per world``: every module of ``modules`` in one launch of ``world`` ranks, its results split
        back per module (:meth:`split`). The launch may take the case timeout once per module. When it fails
        after some module began, the modules no rank began run once more in a fresh launch (``rerun``); a
        module still not run then is reported not run, with the reason (framework.ranksuite.batch)."""
        label = name or f"world{world}"
        results = self._batch_once(modules, world, extra_env, label, min_nodes)
        left = [m for m, r in results.items() if r.not_run is not None]
        if left and rerun:
            log.info("%s: %s did not run before the launch failed; running them in a fresh launch", label,
                     ", ".join(left))
            results.update(self.run_batch(left, world, extra_env=extra_env, name=f"{label}-rerun",
                                          min_nodes=min_nodes, rerun=False))
        return results

    def _batch_once(self, modules: Sequence[str], world: int, extra_env: Mapping[str, str] | None,
                    label: str, min_nodes: int) -> dict[str, SuiteResult]:
        """One launch of every module of ``modules``, split back per module (no rerun)."""
        launch, placed = self._launch(list(modules), world, extra_env=extra_env, name=label,
                                      min_nodes=min_nodes, timeout=self.case_timeout * len(modules),
                                      record=True)
        results = self.split(modules, world, launch, batch.records_of(launch))
        for result in results.values():
            result.placed = placed
        log.info("%s: %s, %d module(s) in one launch", label, placed, len(modules))
        return results

    def split(self, modules: Sequence[str], world: int, launch: LaunchResult,
              records: Mapping[int, Mapping[str, batch.ModuleProgress]]) -> dict[str, SuiteResult]:
        """module → its :class:`SuiteResult` from one shared launch: a module every rank finished
        keeps its verdict even when the launch failed later; the launch's failure is the first
        unfinished module's (or every module's when none began); the modules after it are marked
        not run."""
        shared = tuple(modules)
        states = _module_states(modules, world, launch, records)
        began = any(state != batch.NOT_RUN for state in states.values())
        failed_in: str | None = None
        out: dict[str, SuiteResult] = {}
        for module in modules:
            state = states[module]
            if began and _after_failure(state, failed_in):
                out[module] = _not_run(module, world, launch, shared, failed_in)
                continue
            if state == batch.CRASHED:
                failed_in = module
            out[module] = self._judge_shared(module, world, launch, records, shared, state)
        return out

    def _judge_shared(self, module: str, world: int, launch: LaunchResult,
                      records: Mapping[int, Mapping[str, batch.ModuleProgress]],
                      shared: tuple[str, ...], state: str) -> SuiteResult:
        """A module of a shared launch judged from its own cases; the launch's failure is its own
        unless every rank finished it."""
        result = self.judge(module, world, launch, only=module, records=records)
        result.shared_with = shared
        result.launch_failed_here = state != batch.DONE
        return result

    def _remote_dir(self, hosts: list[str]) -> str:
        """Ship the tree; the one path it has on every host of ``hosts``."""
        dirs = self.ship()
        if len({dirs[h] for h in hosts}) != 1:
            raise FrameworkError(
                "the rank-side tree landed in different paths on the hosts; use one workdir")
        return dirs[hosts[0]]

    def _pytest_argv(self, modules: Sequence[str], remote_dir: str, select: str | None
                     ) -> list[str]:
        """The ranks' pytest arguments; ``-p no:camit``: ranks never load the controller's plugin
        (the lab's hosts share its python)."""
        args = [*(f"{remote_dir}/{m}" for m in modules), "-p", "no:cacheprovider", "-p",
                "no:camit", "--rootdir", remote_dir, "--junitxml=rank{rank}.xml", "-o",
                "junit_family=xunit2", *self.pytest_args]
        return [*args, "-k", select] if select else args

    def _rank_environ(self, extra_env: Mapping[str, str] | None, record: bool) -> dict[str, str]:
        """The ranks' environment."""
        env = {"CAMIT_BACKEND": self.env.launch.backend,
               "CAMIT_CASE_TIMEOUT": f"{self.case_timeout:g}", "PYTHONDONTWRITEBYTECODE": "1",
               **self.rank_env, **dict(extra_env or {})}
        if record:
            env[batch.RECORD_ENV] = "1"
        if self.tree == RANK_TREE:
            # our rank tree needs no third-party pytest plugin; loading every installed one costs
            # each rank about a second (hypothesis alone, measured by bench/launch.py). Upstream
            # trees keep theirs.
            env.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        return env

    def _launch(self, modules: Sequence[str], world: int, *, extra_env: Mapping[str, str] | None,
                name: str, min_nodes: int, timeout: float, select: str | None = None,
                record: bool = False) -> tuple[LaunchResult, str]:
        """One launch of ``world`` ranks running pytest on ``modules``; (its result, where it ran)."""
        where = self.can_place(world, min_nodes)
        if isinstance(where, str):
            raise FrameworkError(where)
        nodes, per_node = where
        hosts = list(self.cluster.hosts)[:nodes]
        remote_dir = self._remote_dir(hosts)
        args = self._pytest_argv(modules, remote_dir, select)
        env = self._rank_environ(extra_env, record)
        target = Target(module="pytest", args=tuple(args))
        if self.coverage is not None:
            # upstream test/cam/ut/util/tool.py is_run_for_cov() is `"ENABLE_COV" in os.environ` (its GE cases
            # return early under coverage); the ranks get it as the controller's coverage mode has it
            env[ENV_FLAG] = "1"
            target = self.coverage.prepare(target, hosts, remote_dir, self.tree)
        launch = self.launcher.run(target, env=env, timeout=timeout, nproc_per_node=per_node, hosts=hosts,
                                   name=name)
        if self.coverage is not None:
            self.coverage.collect_gcov(hosts)
        return launch, describe_placement(world, hosts, per_node)

    def judge(self, module: str, world: int, launch: LaunchResult, *, only: str | None = None,
              records: Mapping[int, Mapping[str, batch.ModuleProgress]] | None = None
              ) -> SuiteResult:
        """Every rank's verdict from its JUnit (with ``only``, that module's cases); a rank with no
        JUnit (it died before pytest wrote it) is judged from its record of ``only`` when it has
        one, else missing."""
        result = SuiteResult(module, world, launch, counts={"passed": 0, "failed": 0, "skipped": 0})
        for rank in range(world):
            rr = launch.ranks.get(rank)
            _add_verdict(result, rank, rr.host if rr is not None else "?", _junit_of(rr),
                         _progress_of(records, rank, only), only)
        return result


def _module_states(modules: Sequence[str], world: int, launch: LaunchResult,
                   records: Mapping[int, Mapping[str, batch.ModuleProgress]]) -> dict[str, str]:
    """Each module's state in a shared launch: all done when it passed, else by the ranks'
    records."""
    if launch.ok:
        return {m: batch.DONE for m in modules}
    return batch.module_states(modules, records, world)


def _add_verdict(result: SuiteResult, rank: int, host: str, junit: Path | None,
                 progress: batch.ModuleProgress | None, only: str | None) -> None:
    """One rank's verdict into ``result``: from its JUnit, else from its module record, else the
    rank is missing."""
    if junit is not None:
        try:
            result.add_rank(rank, host, *read_rank_junit(junit, only))
        except ET.ParseError as exc:
            result.failures.append(RankFailure(rank, host, "(junit)", f"unreadable JUnit: {exc}"))
    elif progress is not None:
        result.add_rank(rank, host, *batch.counts_of(progress))
    else:
        result.missing_junit.append(rank)
