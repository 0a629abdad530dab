"""Core dumps: notice every crash on the hosts under test, attribute it, bring it back.

The executor :class:`CoreWatch` (snapshot before a test, collect and judge after it); the plan is
pure and lives in ``framework.cores.scan`` and ``framework.cores.inspection``. Design:
docs/internals/cores.md.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from framework import fetchcaps
from framework.commands import ShellScript
from framework.cores import missing
from framework.cores.inspection import (
    BACKTRACE_BYTES,
    BacktraceJob,
    Core,
    CorePolicy,
    RankProc,
    apply_inspection,
    attribute,
    backtrace_script,
    clean_backtrace,
    human_size,
    inspect_script,
    is_ours,
    local_name,
    split_sections,
    unique_base,
    verdict_message,
)
from framework.cores.logs import DEFAULT_ASCEND_DIRS, collect_logs
from framework.cores.scan import (
    Baseline,
    Candidate,
    CoreSources,
    HostScan,
    new_candidates,
    parse_scan,
    scan_roots,
    scan_script,
)
from framework.errors import FrameworkError, reason_of
from framework.hosts import Cluster, Host
from framework.records.folder import RunDir, update_json
from framework.remote.layout import DEFAULT_WORKDIR, HostLayout

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig, HostSpec

T = TypeVar("T")
#: per core on its host: camit's copy to backtrace and the gzip to fetch (None: not made)
_Paths = tuple[str | None, str | None]


class RankOutcome(Protocol):
    """A rank of a finished launch as core attribution reads it
    (``framework.launch.result.RankResult``)."""

    @property
    def host(self) -> str: ...

    @property
    def signal(self) -> str | None: ...


class Launched(Protocol):
    """A finished launch as core attribution reads it (``framework.launch.result.LaunchResult``)."""

    @property
    def launch_id(self) -> str: ...

    @property
    def report_dir(self) -> str | None: ...

    @property
    def ranks(self) -> Mapping[int, RankOutcome]: ...


log = logging.getLogger("camit.coredump")

DEFAULT_CAP_BYTES = 1 << 30
DEFAULT_GDB_TIMEOUT = 60.0
POLICY_ENV = "CAMIT_CORE_POLICY"
#: signals whose default action dumps core (signal(7))
CORE_SIGNALS = frozenset({"SIGABRT", "SIGBUS", "SIGFPE", "SIGILL", "SIGQUIT", "SIGSEGV", "SIGSYS",
                          "SIGTRAP", "SIGXCPU", "SIGXFSZ"})
#: the ranks that died of a core-dumping signal and left no core, with why (report folder)
MISSING_FILE = "cores-missing.json"
#: pipe handlers store a core after the process is gone: how long to wait for one we expect
SETTLE_TIMEOUT = 10.0


# -- the ranks' pids, for attribution --------------------------------------------------------------
def rank_procs(launches: Launched | Sequence[Launched] | None) -> list[RankProc]:
    """Rank processes of ``LaunchResult``\\ s, pids read from ``<report>/<host>/rank<N>.json``."""
    if launches is None:
        return []
    runs: list[Launched] = list(launches) if isinstance(launches, Sequence) else [launches]
    return [RankProc(lr.launch_id, rank, rr.host, _rank_pid(lr.report_dir, rr.host, rank),
                     rr.signal)
            for lr in runs for rank, rr in sorted(lr.ranks.items())]


def _rank_pid(report_dir: str | None, host: str, rank: int) -> int | None:
    """The pid in ``<report>/<host>/rank<N>.json`` when the file is that rank's (None: no such
    file)."""
    if not report_dir:
        return None
    try:
        status = json.loads((Path(report_dir) / host / f"rank{rank}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict) or status.get("rank") != rank:
        return None
    pid = status.get("pid")
    return pid if isinstance(pid, int) else None


# -- the executor ----------------------------------------------------------------------------------
def _append_cores(path: Path, entries: list[dict[str, object]]) -> None:
    """Add ``entries`` to the run's cores.json (one collect per test: earlier tests' cores stay)."""
    def key(e: dict[str, object]) -> tuple[object, ...]:
        return e.get("host"), e.get("pid"), e.get("executable"), e.get("local_path")

    def add(known: object) -> list[dict[str, object]]:
        known = known if isinstance(known, list) else []
        seen = {key(e) for e in known}
        return known + [e for e in entries if key(e) not in seen]

    update_json(path, add)


def _first(*choices: T | None) -> T:
    """The first choice that is set (neither None nor empty): explicit, defaults, environment,
    built-in."""
    return next(c for c in choices if c)


def _absolute(path: str | None) -> str | None:
    """``path`` when it is absolute (gdb is given only an executable it can open as such)."""
    return path if path is not None and path.startswith("/") else None


def _dies_dumping(proc: RankProc, host: str) -> bool:
    """Whether the rank ran on ``host`` and died of a signal whose default action dumps core."""
    return proc.host == host and proc.signal in CORE_SIGNALS


def _rundir_path(rundir: RunDir | Path | str | None) -> Path | None:
    if rundir is None:
        return None
    return rundir.path if isinstance(rundir, RunDir) else Path(rundir)


@dataclass(frozen=True)
class CoreDefaults:
    """Defaults a caller gives a :class:`CoreWatch` (the env file has no ``cores`` section: the
    schema forbids it)."""

    policy: str | CorePolicy | None = None
    cap_bytes: int | None = None
    gdb_timeout: float | None = None


class CoreWatch:
    """Snapshot the hosts before a test, collect the cores that appeared after it, judge them.

    The policy is the explicit ``policy``, else ``defaults.policy``, else
    ``$CAMIT_CORE_POLICY``, else ``fail``; ``cap_bytes`` and ``gdb_timeout`` likewise
    (explicit, ``defaults``, built-in). ``env`` (the ``EnvConfig``) gives each host's
    workdir and python and the launch's ``ASCEND_PROCESS_LOG_PATH`` — nothing else is
    read from it. ``cap_bytes`` bounds the size of a
    core we gzip and fetch (larger ones stay on the host, still backtraced).
    ``search_dirs`` add places to look for a relative core_pattern (the host's
    ``<workdir>/runs`` and ``<workdir>`` always are). ``ascend_log_dirs`` replace
    ``$HOME/ascend/log`` (plus the env's ``ASCEND_PROCESS_LOG_PATH``) for
    :meth:`collect_logs`.

        watch = CoreWatch(cluster, env)
        baseline = watch.snapshot()
        ... run the test ...
        cores = watch.collect(baseline, rundir=rundir, ranks=[launch_result])
        failed, message = watch.verdict(cores)
    """

    def __init__(self, cluster: Cluster, env: EnvConfig | None = None,
                 policy: str | CorePolicy | None = None, cap_bytes: int | None = None, *,
                 gdb_timeout: float | None = None, sources: CoreSources | None = None,
                 search_dirs: Sequence[str] = (), ascend_log_dirs: Sequence[str] | None = None,
                 defaults: CoreDefaults | None = None) -> None:
        defaults = defaults or CoreDefaults()
        self.policy = CorePolicy.parse(_first(policy, defaults.policy, os.environ.get(POLICY_ENV),
                                              CorePolicy.FAIL))
        self.cluster = cluster
        self.env = env
        # an explicit 0 keeps every core on its host
        self.cap_bytes = (cap_bytes if cap_bytes is not None
                          else _first(defaults.cap_bytes, DEFAULT_CAP_BYTES))
        self.gdb_timeout = float(_first(gdb_timeout, defaults.gdb_timeout, DEFAULT_GDB_TIMEOUT))
        self.sources = sources or CoreSources()
        self.search_dirs = tuple(search_dirs)
        self.ascend_log_dirs = tuple(ascend_log_dirs) if ascend_log_dirs is not None else None
        self.errors: dict[str, str] = {}
        self.notes: list[str] = []
        self.missing: list[missing.MissingCore] = []
        self.log_summary = ""

    def _spec(self, host: Host) -> HostSpec | None:
        spec: HostSpec | None = host.spec
        if spec is None and self.env is not None:
            spec = self.env.hosts.get(host.name)
        return spec

    def _layout(self, host: Host) -> HostLayout:
        spec = self._spec(host)
        return HostLayout.of(spec) if spec is not None else HostLayout(DEFAULT_WORKDIR)

    def _workdir(self, host: Host) -> str:
        return self._layout(host).workdir

    def _relative_dirs(self, host: Host) -> list[tuple[str, int]]:
        layout = self._layout(host)
        return [(layout.runs, 2), (layout.workdir, 1)] + [(d, 1) for d in self.search_dirs]

    def _script(self, host: Host, since: float | None) -> str:
        return scan_script(self.sources, self._relative_dirs(host), since=since)

    def _scan(self, host: Host, since: float | None) -> HostScan:
        result = host.run(ShellScript(self._script(host, since)), timeout=120)
        scan = parse_scan(host.name, result.stdout)
        if not scan.complete:
            why = scan.error or f"rc {result.rc}: {result.tail(3) or 'no output'}"
            raise FrameworkError(f"{host.name}: core scan did not complete: {why}")
        return scan

    def _new(self, host: Host, before: HostScan, after: HostScan) -> list[Candidate]:
        dirs = [d for d, _depth in self._relative_dirs(host)]
        return new_candidates(before, after, scan_roots(after.pattern, self.sources, dirs))

    # -- before ------------------------------------------------------------------------------------
    def snapshot(self) -> Baseline:
        """One round trip per host, in parallel; a host that fails is recorded, never raised."""
        got = self.cluster.map(lambda h: self._scan(h, None))
        hosts: dict[str, HostScan] = {}
        for name, value in got.items():
            if isinstance(value, BaseException):
                hosts[name] = HostScan(name, error=reason_of(value, name))
                log.warning("%s: core snapshot failed: %s", name, value)
            else:
                hosts[name] = value
        baseline = Baseline(hosts, time.time())
        for note in baseline.notes():
            log.warning("%s", note)
        return baseline

    # -- after -------------------------------------------------------------------------------------
    def collect(self, baseline: Baseline, *, rundir: RunDir | Path | str | None = None,
                ranks: Launched | Sequence[Launched] | None = None) -> list[Core]:
        """The cores that appeared on the cluster's hosts since ``baseline``: attributed, fetched,
        backtraced.

        ``rundir`` (a ``RunDir`` or a path) receives ``<host>/cores/<name>.gz`` and
        ``<name>.bt.txt`` and a ``cores.json``; ``ranks`` is a ``LaunchResult`` or a list of them.
        Hosts that fail are recorded in ``errors`` (never raised).
        """
        report = _rundir_path(rundir)
        procs = rank_procs(ranks)
        self.errors = {}
        self.notes = baseline.notes()
        self.missing = []
        names = [n for n, s in baseline.hosts.items()
                 if s.error is None and n in self.cluster.hosts]
        got = self.cluster.map(
            lambda h: self._collect_host(h, baseline.hosts[h.name], report, procs), names)
        cores = self._gathered(got)
        for c in cores:
            log.warning("%s", c.describe())
        for m in self.missing:
            log.warning("%s", m.describe())
            self.notes.append(m.describe())
        if report is not None:
            self._record(report, cores)
        return cores

    def _gathered(self, got: Mapping[str, list[Core] | BaseException]) -> list[Core]:
        """Every host's cores, by host and time; a host that failed goes into ``errors`` and
        ``notes``."""
        cores: list[Core] = []
        for name, value in got.items():
            if isinstance(value, BaseException):
                self.errors[name] = str(value)
                self.notes.append(f"{name}: cores not collected: {value}")
                log.warning("%s: collecting cores failed: %s", name, value)
            else:
                cores += value
        return sorted(cores, key=lambda c: (c.host, c.time))

    def _record(self, report: Path, cores: Sequence[Core]) -> None:
        """The cores (unless ignored) into the run's ``cores.json``, the missing ones into
        ``MISSING_FILE``."""
        if cores and self.policy is not CorePolicy.IGNORE:
            _append_cores(report / "cores.json", [c.to_json() for c in cores])
        if self.missing:
            _append_cores(report / MISSING_FILE, [m.to_json() for m in self.missing])

    def _collect_host(self, host: Host, before: HostScan, report: Path | None,
                      procs: Sequence[RankProc]) -> list[Core]:
        after, cands = self._settled_scan(host, before, procs)
        self.notes += [n for n in after.name_notes() if n not in self.notes]
        if _rebooted(before, after):
            self.notes.append(f"{host.name}: rebooted during the test (boot id changed)")
        if not cands:
            self._note_missing(host, after, procs, [])
            return []
        cores = [Core(c.host, c.source, c.location, c.time, c.pid, None, c.executable, c.comm,
                      c.signal, c.size) for c in cands]
        if self.policy is CorePolicy.IGNORE:
            return cores
        cores = self._inspect_and_fetch(host, after, cands, cores, procs, report)
        self._note_missing(host, after, procs, cores)
        return cores

    def _settled_scan(self, host: Host, before: HostScan,
                      procs: Sequence[RankProc]) -> tuple[HostScan, list[Candidate]]:
        """The host's scan after the test and its new cores.

        A pipe handler (systemd-coredump, apport, abrt) stores the core after the process is
        gone: when a rank here died of a core-dumping signal, give it a moment to appear.
        """
        after = self._scan(host, before.now)
        cands = self._new(host, before, after)
        expected = sum(1 for p in procs if _dies_dumping(p, host.name))
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while _may_still_come(after, len(cands), expected) and time.monotonic() < deadline:
            time.sleep(0.5)
            after = self._scan(host, before.now)
            cands = self._new(host, before, after)
        return after, cands

    def _inspect_and_fetch(self, host: Host, after: HostScan, cands: Sequence[Candidate],
                           cores: list[Core], procs: Sequence[RankProc],
                           report: Path | None) -> list[Core]:
        """Inspect the new cores in a scratch folder, keep the run's own, backtrace and fetch
        them."""
        tmp = self._layout(host).scratch(f".camit-cores/{secrets.token_hex(4)}")
        try:
            paths = self._inspect(host, cands, cores, tmp, procs)
            cores, paths = _keep_ours(host.name, cores, paths, procs, after.uid)
            self._backtrace_and_fetch(host, after.gdb, cores, paths, tmp, report)
        except FrameworkError as exc:  # the cores were seen: report them with what we could not do
            log.warning("%s: inspecting cores failed: %s", host.name, exc)
            for core in cores:
                core.notes.append(f"could not inspect or fetch: {exc}")
        finally:
            _remove_scratch(host, tmp)
        return cores

    def _note_missing(self, host: Host, after: HostScan, procs: Sequence[RankProc],
                      cores: Sequence[Core]) -> None:
        """The ranks here that died of a core-dumping signal with no core of theirs found: say
        why."""
        found = {(c.pid, c.rank) for c in cores}
        dumped = [p for p in procs if _dies_dumping(p, host.name) and not _has_core(p, found)]
        if not dumped:
            return
        reason = missing.why(after, _writable(host, after.pattern.directory))
        for p in dumped:
            self.missing.append(
                missing.MissingCore(p.launch_id, p.rank, host.name, str(p.signal), reason))

    def _python(self, host: Host) -> str:
        spec = self._spec(host)
        return _first(None if spec is None else spec.python, "python3")

    def _inspect(self, host: Host, cands: Sequence[Candidate], cores: list[Core], tmp: str,
                 procs: Sequence[RankProc]) -> list[_Paths]:
        """Round trip 2: open each core file once (``framework.remote.hostfile``): judge it by its
        descriptor, read its notes, copy and gzip it within the cap.

        Returns per core (camit's copy to backtrace, gzip to fetch): paths camit chose under
        ``tmp``, never ones the host printed; the ``.crash``'s gzip for an apport report it could
        not unpack.
        """
        script = inspect_script(cands, tmp, self._python(host), self.sources, self.cap_bytes)
        result = host.run(ShellScript(script), timeout=120 + 60 * len(cands))
        sections = split_sections(result.stdout, "core")
        paths: list[_Paths] = []
        for i, (cand, core) in enumerate(zip(cands, cores)):
            sec = sections.get(str(i), {})
            apply_inspection(core, cand, sec)
            core.rank, core.relation = attribute(host.name, core.pid, core.ppid, core.env, procs)
            if sec.get("err"):
                core.notes.append(sec["err"][0][:300])
            paths.append(_scratch_paths(tmp, i, core))
        return paths

    def _backtrace_and_fetch(self, host: Host, gdb: str | None, cores: list[Core],
                             paths: Sequence[_Paths], tmp: str, report: Path | None) -> None:
        """Round trip 3 (backtraces on camit's copies), then one download per core."""
        for core, (_copy, gz) in zip(cores, paths):
            if gz is None and self._over_cap(core):
                core.notes.append(f"not copied, fetched or backtraced: {human_size(core.size)} is "
                                  f"over the cap of {human_size(self.cap_bytes)}; left on "
                                  f"{host.name} at {core.location}")
        sections = self._backtraces(host, gdb, cores, paths)
        taken: set[str] = set()
        for i, (core, (_copy, gz)) in enumerate(zip(cores, paths)):
            bt = sections.get(str(i), {}).get("raw", [""])[0]
            if bt.strip():
                core.backtrace = clean_backtrace(bt)
            if report is not None:
                self._store(host, core, gz, report / host.name / "cores", taken)

    def _backtraces(self, host: Host, gdb: str | None, cores: list[Core],
                    paths: Sequence[_Paths]) -> dict[str, dict[str, list[str]]]:
        """gdb's backtrace of each core camit copied, by the core's index (none without gdb: a note
        each)."""
        if not gdb:
            for core in cores:
                core.notes.append(f"gdb is not installed on {host.name}: no backtrace")
            return {}
        jobs = [BacktraceJob(i, copy, _absolute(core.executable))
                for i, (core, (copy, _gz)) in enumerate(zip(cores, paths)) if copy is not None]
        if not jobs:
            return {}
        script = backtrace_script(jobs, timeout=self.gdb_timeout)
        budget = len(jobs) * (self.gdb_timeout + 15) + 60
        result = host.run(ShellScript(script), timeout=budget,
                          max_output=len(jobs) * BACKTRACE_BYTES + 65536)
        return split_sections(result.stdout, "job", raw=True)

    def _over_cap(self, core: Core) -> bool:
        return core.size is not None and core.size > self.cap_bytes

    def _store(self, host: Host, core: Core, gz: str | None, out_dir: Path,
               taken: set[str]) -> None:
        """The core's backtrace and its gzip (within the cap) into ``out_dir``."""
        out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        base = unique_base(out_dir, local_name(core), core.pid, taken)
        if core.backtrace:
            core.backtrace_path = fetchcaps.write_private(out_dir / f"{base}.bt.txt",
                                                          core.backtrace)
        if gz is None:
            return
        try:  # bytes counted while reading: the cap holds whatever size the host reported
            cap = fetchcaps.caps().with_(max_bytes=self.cap_bytes)
            host.get(gz, out_dir / f"{base}.gz", cap=cap)
            core.local_path = out_dir / f"{base}.gz"
        except FrameworkError as exc:
            core.notes.append(f"fetch failed: {exc}")

    # -- judgement and logs ------------------------------------------------------------------------
    def verdict(self, cores: Sequence[Core]) -> tuple[bool, str]:
        """(failed, message) under this watch's policy (``warn``: never failed, message kept)."""
        return verdict_message(cores, self.policy, self.notes if cores else ())

    def collect_logs(self, rundir: RunDir | Path | str, since: Baseline,
                     label: str | None = None) -> dict[str, list[Path]]:
        """dmesg since the snapshot and recent Ascend logs of every host into ``<report>/<host>/``;
        bounded.

        The launches' own plogs came back with their run folders (``ASCEND_PROCESS_LOG_PATH`` points
        there); on the hosts only the env's ``ASCEND_PROCESS_LOG_PATH`` (when ``launch.env`` sets
        one) or else the default root are read. Also scans those files, the launch's rank logs and
        its fetched plogs for the Ascend failure signatures and adds them to
        ``<report>/signatures.txt`` (under ``label``, e.g. the failed test's id, when given), kept
        in ``log_summary``.
        """
        dirs = self._log_dirs() if self.ascend_log_dirs is None else self.ascend_log_dirs
        files, summary = collect_logs(self.cluster, _rundir_path(rundir) or Path("."), since,
                                      workdir_of=self._workdir, ascend_dirs=dirs, label=label)
        self.log_summary = summary
        return files

    def _log_dirs(self) -> tuple[str, ...]:
        """The env's ``launch.env`` ``ASCEND_PROCESS_LOG_PATH``, else ``$HOME/ascend/log`` (a
        launch's own root is its run folder's, fetched with it)."""
        if self.env is None:
            return DEFAULT_ASCEND_DIRS
        extra = self.env.launch.env.get("ASCEND_PROCESS_LOG_PATH")
        return (str(extra),) if extra else DEFAULT_ASCEND_DIRS


def _rebooted(before: HostScan, after: HostScan) -> bool:
    """Whether the host's boot id changed between the scans (both read)."""
    return bool(after.boot_id and before.boot_id) and after.boot_id != before.boot_id


def _may_still_come(after: HostScan, found: int, expected: int) -> bool:
    """Whether a pipe handler (which stores a core after its process is gone) may still store
    one."""
    return after.pattern.kind in ("systemd", "apport", "abrt") and found < expected


def _has_core(proc: RankProc, found: set[tuple[int | None, int | None]]) -> bool:
    """Whether a core of ``found`` (pid, rank) is this rank's, by pid or by rank."""
    return any(pid == proc.pid or rank == proc.rank for pid, rank in found)


def _writable(host: Host, directory: str | None) -> bool | None:
    """Whether the core pattern's folder is writable on the host (None: the pattern names none)."""
    return host.run(["test", "-w", directory], timeout=30).ok if directory else None


def _scratch_paths(tmp: str, i: int, core: Core) -> _Paths:
    """camit's copy of core ``i`` to backtrace and the gzip to fetch (the ``.crash``'s for an apport
    report it could not unpack), under ``tmp``."""
    if core.copied:
        return f"{tmp}/{i}.core", f"{tmp}/{i}.gz"
    return None, f"{tmp}/c{i}.gz" if core.artifact_copied else None


def _keep_ours(host: str, cores: list[Core], paths: list[_Paths], procs: Sequence[RankProc],
               uid: int | None) -> tuple[list[Core], list[_Paths]]:
    """The run's own cores and their paths: another process's core (another user's, or not of the
    run's ranks) is neither fetched nor reported."""
    mine = [i for i, c in enumerate(cores) if is_ours(c, procs, uid)]
    if len(mine) < len(cores):
        log.info("%s: %d core(s) of processes outside the run left alone", host,
                 len(cores) - len(mine))
    return [cores[i] for i in mine], [paths[i] for i in mine]


def _remove_scratch(host: Host, tmp: str) -> None:
    try:
        host.run(["rm", "-rf", "--", tmp], timeout=60)
    except FrameworkError as exc:
        log.warning("%s: could not remove %s: %s", host.name, tmp, exc)


#: the executor, and the plan's types its API takes and returns
__all__ = ["Baseline", "Core", "CoreDefaults", "CorePolicy", "CoreSources", "CoreWatch",
           "rank_procs"]
