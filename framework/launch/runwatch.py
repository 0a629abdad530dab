"""Watching cores around one run: the one orchestration that pytest, ``BaseTest`` and ``camit run`` share.

    with ClusterWatch(cluster, env, policy="fail", rundir=rundir) as watch:
        result = launcher.run(target)
        outcome = watch.end(ranks=[result], failed=not result.ok)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from framework.cores.inspection import Core, CorePolicy
from framework.cores.scan import Baseline, CoreSources
from framework.cores.watch import CoreDefaults, CoreWatch, Launched, _rundir_path
from framework.errors import FrameworkError
from framework.hosts import Cluster
from framework.launch import timeline

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.records.folder import RunDir

log = logging.getLogger("camit.coredump")


@dataclass
class WatchOutcome:
    """What a watched run left behind: its cores, the policy's verdict, and the logs of a failure.

    ``failed`` says whether the policy fails the run because of ``cores``; ``message`` is the
    verdict text (empty without cores or under ``ignore``). ``log_summary`` holds the failure
    signatures when logs were collected; ``log_error`` why collecting them failed.
    """

    cores: list[Core]
    policy: CorePolicy
    failed: bool = False
    message: str = ""
    notes: list[str] = field(default_factory=list)
    logs: dict[str, list[Path]] = field(default_factory=dict)
    log_summary: str = ""
    log_error: str | None = None


class ClusterWatch:
    """Snapshot before a run, then scan, attribute, fetch, judge and (on failure) collect host logs after it.

    ``policy`` is the effective core policy (explicit, else ``$CAMIT_CORE_POLICY``, else
    ``fail``; see :class:`CoreWatch`). ``rundir`` (a ``RunDir`` or a path) receives cores and
    logs; :meth:`end` may name it instead, for callers that create it late. ``label`` heads the
    run's section in ``signatures.txt`` (e.g. the failed test's id). Other keywords go to
    :class:`CoreWatch`. Nothing here raises for one bad host.
    """

    def __init__(self, cluster: Cluster, env: EnvConfig | None = None, policy: str | CorePolicy | None = None,
                 *, rundir: RunDir | Path | str | None = None, label: str | None = None,
                 cap_bytes: int | None = None, gdb_timeout: float | None = None,
                 sources: CoreSources | None = None, search_dirs: Sequence[str] = (),
                 ascend_log_dirs: Sequence[str] | None = None, defaults: CoreDefaults | None = None) -> None:
        self.watch = CoreWatch(cluster, env, policy, cap_bytes, gdb_timeout=gdb_timeout, sources=sources,
                               search_dirs=search_dirs, ascend_log_dirs=ascend_log_dirs, defaults=defaults)
        self.rundir = rundir
        self.label = label
        self.baseline: Baseline | None = None
        self.outcome: WatchOutcome | None = None

    @property
    def policy(self) -> CorePolicy:
        return self.watch.policy

    def begin(self) -> Baseline:
        """Snapshot every host (one round trip each, in parallel); a host that fails is noted, never raised."""
        self.baseline = self.watch.snapshot()
        self.outcome = None
        return self.baseline

    def end(self, *, ranks: Launched | Sequence[Launched] | None = None, failed: bool = False,
            rundir: RunDir | Path | str | None = None) -> WatchOutcome:
        """The run is over: collect its cores and judge them; ``failed`` says the run itself failed.

        ``ranks`` are the run's launches (for attribution). Host logs are collected when the run
        failed or its cores fail it under the policy, and only with a run folder to put them in.
        """
        if self.baseline is None:
            raise FrameworkError("ClusterWatch.end() without begin()")
        where = rundir if rundir is not None else self.rundir
        cores = self.watch.collect(self.baseline, rundir=where, ranks=ranks)
        core_failed, message = self.watch.verdict(cores)
        out = WatchOutcome(cores, self.policy, core_failed, message, list(self.watch.notes))
        if (failed or core_failed) and where is not None:
            self._collect_logs(out, where, self.baseline)
        self.outcome = out
        return out

    def _collect_logs(self, out: WatchOutcome, where: RunDir | Path | str, since: Baseline) -> None:
        """The hosts' kernel and Ascend logs into the run folder, then the timeline again."""
        try:
            out.logs = self.watch.collect_logs(where, since=since, label=self.label)
        except FrameworkError as exc:
            out.log_error = str(exc)
            log.warning("collecting host logs failed: %s", exc)
            return
        out.log_summary = self.watch.log_summary
        _refresh_timeline(where)

    def __enter__(self) -> ClusterWatch:
        self.begin()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # an interrupt (Ctrl-C, SIGTERM as KeyboardInterrupt) leaves at once; an error still collects
        if self.outcome is None and self.baseline is not None and (exc is None or isinstance(exc, Exception)):
            self.end(failed=exc is not None)


def _refresh_timeline(where: RunDir | Path | str) -> None:
    """The failed launch's timeline again, now with the hosts' dmesg placed in time (no raise)."""
    try:
        timeline.refresh(_rundir_path(where) or Path("."))
    except OSError as exc:
        log.warning("timeline: %s", exc)


__all__ = ["ClusterWatch", "WatchOutcome"]
