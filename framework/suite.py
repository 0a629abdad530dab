"""Running a rank-side pytest tree across the cluster: ship it, place the ranks, launch, judge.

The controller-level tests in ``suites/cam`` call :meth:`RankSuite.run` with a rank-side
module and a world size. The tree (``suites/cam/rank``, or an upstream ``test/cam/ut``) is
shipped once per content hash to ``<workdir>/suites/<sha>/``; every rank runs
``python -m pytest <module> --junitxml=rank{rank}.xml`` through :class:`~framework.launch.Launcher`,
and the per-rank JUnit files are read back so a failure names the rank, the host, the
rank-side test and its message.
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
from framework.launch import Launcher, LaunchResult, Target
from framework.launch.plan import devices_per_node
from framework.remote.layout import HostLayout

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.coverage import RankCoverage

log = logging.getLogger("camit.suite")

RANK_TREE = Path(__file__).resolve().parents[1] / "suites" / "cam" / "rank"
DEFAULT_SLOTS = 2  # ranks per node on a CPU host when the env declares none


def slots_per_node(env: EnvConfig, override: int | None = None) -> int:
    """Ranks one node can host: the option, else the visible NPUs per host (``npu.visible``, else
    ``npu.count``), else launch.nproc_per_node, else 2 (CPU)."""
    if override:
        return override
    return devices_per_node(env) or env.launch.nproc_per_node or DEFAULT_SLOTS


def placement(world: int, hosts: int, slots: int) -> tuple[int, int] | str:
    """(nodes, ranks per node) for ``world`` ranks, fewest nodes first; or why it cannot be placed."""
    for nodes in range(1, hosts + 1):
        if world % nodes == 0 and world // nodes <= slots:
            return nodes, world // nodes
    return (f"needs {world} ranks; the env has {hosts} host(s) x {slots} rank(s) per node = {hosts * slots}"
            if world > hosts * slots else f"cannot split {world} ranks evenly over <= {hosts} hosts of {slots} slots")


def tree_archive(root: Path) -> tuple[bytes, str]:
    """A reproducible tar.gz of ``root`` (no caches) and its sha256."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if any(p in ("__pycache__", ".pytest_cache") for p in rel.parts) or path.suffix == ".pyc":
                continue
            if not path.is_file():
                continue
            info = tar.gettarinfo(str(path), arcname=str(rel))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


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

    @property
    def ok(self) -> bool:
        return self.launch.ok and not self.failures and not self.missing_junit

    def message(self) -> str:
        lines = []
        if self.failures:
            first = self.failures[0]
            lines.append(f"{len(self.failures)} rank-side failure(s) in {self.module} (world {self.world}); "
                         f"first: rank {first.rank} on {first.host}: {first.test}")
            for f in self.failures[:12]:
                lines.append(f"  rank {f.rank} on {f.host}: {f.test}: {f.message}")
        if not self.launch.ok:
            lines.append(self.launch.message())
        if self.missing_junit:
            lines.append(f"no JUnit from rank(s) {self.missing_junit}")
        return "\n".join(lines) or "ok"

    def check(self) -> SuiteResult:
        __tracebackhide__ = True
        if not self.ok:
            raise RankSuiteFailed(self)
        return self


class RankSuiteFailed(FrameworkError, AssertionError):
    """A rank-side suite did not pass on every rank (an AssertionError, so pytest shows it as a failure)."""

    exit_code = 1

    def __init__(self, result: SuiteResult) -> None:
        self.result = result
        super().__init__(result.message())


def parse_rank_junit(path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(counts, [(test id, message)]) from one rank's pytest JUnit file."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            counts["failed"] += 1
            msg = (bad.get("message") or (bad.text or "").strip().splitlines()[-1:] or ["(no message)"])
            failures.append((name, msg if isinstance(msg, str) else msg[0]))
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, failures


class RankSuite:
    """Ship a rank-side tree and run its modules at a given world size."""

    def __init__(self, env: EnvConfig, cluster: Cluster, launcher: Launcher, *, tree: Path = RANK_TREE,
                 slots: int | None = None, rank_env: Mapping[str, str] | None = None, case_timeout: float = 600.0,
                 pytest_args: Sequence[str] = (), coverage: RankCoverage | None = None) -> None:
        self.env = env
        self.cluster = cluster
        self.launcher = launcher
        self.tree = tree
        self.slots = slots_per_node(env, slots)
        self.rank_env = dict(rank_env or {})
        self.case_timeout = case_timeout
        self.pytest_args = list(pytest_args)
        #: a framework.coverage.RankCoverage in coverage mode (--cov-ranks): ranks run under `coverage run`
        self.coverage = coverage
        self._shipped: dict[str, str] = {}

    def can_place(self, world: int) -> tuple[int, int] | str:
        return placement(world, len(self.cluster), self.slots)

    def ship(self) -> dict[str, str]:
        """Put the tree on every host (once per content hash); host → remote directory."""
        if self._shipped:
            return self._shipped
        data, sha = tree_archive(self.tree)
        base = Path(self.launcher.rundir.path) if self.launcher.rundir else Path(tempfile.gettempdir())
        # written once, read by every host's upload; a name of its own, because the xdist workers of a run
        # share the run folder and ship the same tree at the same time (one's cleanup took the other's file)
        fd, name = tempfile.mkstemp(prefix=f".suite-{sha[:16]}-", suffix=".tgz", dir=base)
        local = Path(name)

        def one(host: Host) -> str:
            dest = HostLayout.of(self.env.hosts[host.name]).suite(sha)
            q = commands.quote
            if host.run(["test", "-f", dest + "/.ok"], timeout=30).rc == 0:
                return dest
            host.put(local, f"{dest}.tgz", sha256=sha)
            host.check(commands.ShellScript(f"mkdir -p {q(dest)} && tar xzf {q(dest + '.tgz')} -C {q(dest)} && rm -f {q(dest + '.tgz')} "
                                           f"&& touch {q(dest + '/.ok')}"), timeout=120)
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
            select: str | None = None, name: str | None = None) -> SuiteResult:
        """Run rank-side ``module`` (a path inside the tree) on ``world`` ranks and judge every rank."""
        where = self.can_place(world)
        if isinstance(where, str):
            raise FrameworkError(where)
        nodes, per_node = where
        dirs = self.ship()
        hosts = list(self.cluster.hosts)[:nodes]
        remote_dir = dirs[hosts[0]]  # same path layout on every host when workdirs agree
        if len({dirs[h] for h in hosts}) != 1:
            raise FrameworkError("the rank-side tree landed in different paths on the hosts; use one workdir")
        # -p no:camit: ranks never load the controller's plugin (the lab's hosts share its python)
        args = [f"{remote_dir}/{module}", "-p", "no:cacheprovider", "-p", "no:camit", "--rootdir", remote_dir,
                "--junitxml=rank{rank}.xml", "-o", "junit_family=xunit2", *self.pytest_args]
        if select:
            args += ["-k", select]
        env = {"CAMIT_BACKEND": self.env.launch.backend, "CAMIT_CASE_TIMEOUT": f"{self.case_timeout:g}",
               "PYTHONDONTWRITEBYTECODE": "1", **self.rank_env, **dict(extra_env or {})}
        if self.tree == RANK_TREE:
            # our rank tree needs no third-party pytest plugin; loading every installed one costs each
            # rank about a second (hypothesis alone, measured by bench/launch.py). Upstream trees keep theirs.
            env.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        target = Target(module="pytest", args=tuple(args))
        if self.coverage is not None:
            target = self.coverage.prepare(target, hosts, remote_dir, self.tree)
        launch = self.launcher.run(target, env=env, timeout=self.case_timeout,
                                   nproc_per_node=per_node, hosts=hosts, name=name or Path(module).stem)
        if self.coverage is not None:
            self.coverage.collect_gcov(hosts)
        return self.judge(module, world, launch)

    def judge(self, module: str, world: int, launch: LaunchResult) -> SuiteResult:
        result = SuiteResult(module, world, launch, counts={"passed": 0, "failed": 0, "skipped": 0})
        for rank in range(world):
            rr = launch.ranks.get(rank)
            if rr is None or not rr.junit or not Path(rr.junit).exists():
                result.missing_junit.append(rank)
                continue
            try:
                counts, failures = parse_rank_junit(Path(rr.junit))
            except ET.ParseError as exc:
                result.failures.append(RankFailure(rank, rr.host, "(junit)", f"unreadable JUnit: {exc}"))
                continue
            for k, v in counts.items():
                result.counts[k] += v
            result.failures += [RankFailure(rank, rr.host, t, m) for t, m in failures]
        return result
