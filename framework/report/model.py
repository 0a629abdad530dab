"""The run folder as data: :func:`read_run` turns ``reports/<run-id>/`` into a :class:`RunView`.

It only reads and never raises for a missing or corrupt file (``RunView.problems`` says what it
could not read); junit, manifest, html and summary build their files from this view. Which files it
reads and how launches, reruns and ranks are told apart: docs/internals/report.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.launch.result import LaunchResult, RankResult
from framework.launch.stacks import StackGroup
from framework.report.fmt import number, ranges, signame, slug, strip_ansi

__all__ = ["OUTCOMES", "PHASE_ORDER", "CoreView", "DeployHost", "FailedTest", "JunitSummary",
           "LaunchView", "Phase", "RankView", "RunFacts", "RunView", "by_host", "case_counts",
           "case_outcome", "describe_rank", "inside_run", "launch_name", "log_tail",
           "outcome_tally", "read_json", "read_run"]

PHASE_ORDER = ("connect", "deploy", "launch", "run", "collect", "teardown")
#: signals that end a rank as a consequence (torchrun or our teardown stopping it), not a crash
SECONDARY_SIGNALS = ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP")
OUTCOMES = ("pass", "fail", "crash", "killed", "lost")
TAIL_LINES = 40

_RANK_FILE = re.compile(r"^rank(\d+)\.(log|json|xml)$")


# -- the run folder as data -----------------------------------------------------
@dataclass
class CoreView:
    """One core dump from ``cores.json`` (entries in ``framework.cores.inspection.Core.to_json()`` shape)."""

    host: str
    pid: int | None = None
    exe: str | None = None
    signal: str | None = None
    rank: int | None = None
    backtrace: str = ""
    local_path: str | None = None  # run-folder relative when inside it
    description: str = ""
    backtrace_path: str | None = None

    @classmethod
    def from_json(cls, entry: Mapping[str, Any], root: Path) -> CoreView:
        rank = entry.get("rank")
        bt_path = inside_run(root, entry.get("backtrace_path"))
        exe = _first(entry, "exe", "executable", "comm")
        return cls(host=str(entry.get("host") or "unknown"), pid=entry.get("pid"), exe=str(exe) if exe else None,
                   signal=signame(entry.get("signal")), rank=rank if isinstance(rank, int) else None,
                   backtrace=_core_backtrace(entry, root, bt_path),
                   local_path=inside_run(root, entry.get("local_path")) or entry.get("local_path"),
                   description=str(_first(entry, "describe", "description") or ""), backtrace_path=bt_path)

    @property
    def top_frame(self) -> str:
        """The crashing thread's first frame, without its address (gdb's ``bt`` after ``@@crashing``)."""
        crashing = self.backtrace.split("@@crashing", 1)[-1]
        line = next((ln.strip() for ln in crashing.splitlines() if ln.strip().startswith("#")), "")
        return re.sub(r"^#\d+\s+(0x[0-9a-fA-F]+ in )?", "", line)

    @property
    def anchor(self) -> str:
        return f"core-{slug(self.host)}-{self.pid if self.pid is not None else 'x'}"


def _first(entry: Mapping[str, Any], *keys: str) -> Any:
    """The first of ``keys`` with a non-empty value in ``entry`` (the spellings writers used); None."""
    return next((entry[k] for k in keys if entry.get(k)), None)


def _core_backtrace(entry: Mapping[str, Any], root: Path, bt_path: str | None) -> str:
    """The entry's backtrace, else the end of its backtrace file (in the run folder or, still, elsewhere)."""
    backtrace = str(entry.get("backtrace") or "")
    if backtrace or not entry.get("backtrace_path"):
        return backtrace
    if bt_path:
        return log_tail(root, bt_path, lines=400)
    p = Path(str(entry["backtrace_path"]))
    return log_tail(p.parent, p.name, 400) if p.is_file() else ""


@dataclass
class RankView:
    rank: int
    host: str
    launch: str = ""  # display name of the launch ('' when the run has one)
    launch_id: str = ""
    exit_code: int | None = None
    signal: str | None = None
    start: float | None = None
    end: float | None = None
    log: str | None = None  # run-folder relative paths
    junit: str | None = None
    cases: list[ET.Element] = field(default_factory=list)
    props: list[tuple[str, str]] = field(default_factory=list)
    junit_time: float | None = None
    junit_timestamp: str | None = None
    junit_problem: str | None = None  # the rank's JUnit exists but cannot be read
    overwritten_by: str | None = None  # a later launch wrote the same <host>/rank<N>.* files
    cores: list[CoreView] = field(default_factory=list)
    outcome: str = "pass"
    reason: str = ""  # one sentence when the outcome is not 'pass'
    #: stopped only because another rank or host failed first: "torn down after rank 3 on node2 failed"
    torn_down: str | None = None

    @property
    def duration(self) -> float | None:
        if self.start is not None and self.end is not None:
            return max(0.0, self.end - self.start)
        return self.junit_time

    def counts(self) -> dict[str, int]:
        return case_counts(self.cases)


@dataclass
class LaunchView:
    """A launch of the run: its record (``launch-<id>.json``, parsed) and what the report made of
    it."""

    name: str
    record: LaunchResult
    mtime: float
    ranks: list[RankView] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    #: the same launch of the test's earlier attempts (pytest-rerunfailures), first attempt first
    reruns: list[LaunchView] = field(default_factory=list)
    #: an earlier attempt's launch that the test's final attempt did not repeat
    stale: bool = False

    @property
    def launch_id(self) -> str:
        return self.record.launch_id

    @property
    def world_size(self) -> int:
        return self.record.world_size

    @property
    def failure(self) -> str | None:
        return self.record.failure

    @property
    def stacks(self) -> list[str]:
        """The launch's stack groups, one line each (majority first): ``launch-<id>.json``'s ``stacks``."""
        return [_stack_line(g) for g in self.record.stacks]

    @property
    def test(self) -> str | None:
        """The pytest nodeid of the test that made the launch (None: no test recorded)."""
        return self.record.test or None

    @property
    def attempt(self) -> int:
        """The test's attempt that made the launch (pytest-rerunfailures; 1 when none is
        recorded)."""
        return 1 if self.record.attempt is None else self.record.attempt


#: the end of a failed controller test's failure text kept for the report (its "failed commands" section)
TEXT_CHARS = 16000


def _stack_line(group: StackGroup) -> str:
    ranks = group.ranks
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks ({ranges(ranks)})"
    return f"{who} on {', '.join(sorted(set(group.hosts.values())))} {group.where()}"


@dataclass
class Phase:
    host: str
    phase: str
    start: float
    end: float
    derived: bool = False  # estimated from deploy/launch files rather than recorded
    detail: str = ""

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class RunFacts:
    """What ``manifest.json`` says about the run, typed: a key that is absent, empty or of the wrong shape
    is None (the readers test one value instead of re-deriving it from the dict)."""

    status: str | None = None
    error: str | None = None
    started: float | None = None  # epoch seconds
    ended: float | None = None
    duration: float | None = None
    seed: str | None = None
    env_file: str | None = None
    version: str | None = None  # camit's version and git commit that wrote it
    git: str | None = None
    repro: str | None = None  # the command line that reproduces the run
    problems: tuple[str, ...] = ()  # what the previous report could not read
    #: the deployed artifacts (the entries that are objects)
    artifacts: tuple[Mapping[str, Any], ...] = ()
    #: the installed version each deployed host reported, by host (hosts that reported none left
    #: out)
    versions: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_manifest(cls, m: Mapping[str, Any]) -> RunFacts:
        fw = _table(m, "framework")
        return cls(status=_text(m.get("status")), error=_text(m.get("error")),
                   started=_seconds(_table(m, "started").get("epoch")),
                   ended=_seconds(_table(m, "ended").get("epoch")), duration=_seconds(m.get("duration")),
                   seed=None if m.get("seed") is None else str(m["seed"]),
                   env_file=_text(_table(m, "env").get("file")), version=_text(fw.get("version")),
                   git=_text(fw.get("git")), repro=_text(_table(m, "command").get("repro")),
                   problems=tuple(str(p) for p in _list(m.get("report_problems"))),
                   artifacts=tuple(a for a in _list(m.get("artifacts")) if isinstance(a, dict)),
                   versions=_installed_versions(_table(m, "versions")))


def _installed_versions(versions: Mapping[str, Any]) -> dict[str, str]:
    """``installed_version`` of each host entry of manifest.json's ``versions`` that names one."""
    found = {host: _text(v.get("installed_version"))
             for host, v in versions.items() if isinstance(v, dict)}
    return {host: v for host, v in found.items() if v is not None}


@dataclass(frozen=True)
class DeployHost:
    """One host's entry of ``deploy-manifest.json``, typed (what the deployer recorded for it)."""

    host: str
    status: str | None = None
    step: str | None = None  # the step it failed at
    error: str | None = None
    durations: dict[str, float] = field(default_factory=dict)  # seconds by step
    installed_version: str | None = None
    vendor: str | None = None
    artifacts: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_json(cls, host: str, d: Mapping[str, Any]) -> DeployHost:
        return cls(host, status=_opt(d.get("status")), step=_opt(d.get("step")), error=_opt(d.get("error")),
                   durations={k: float(v) for k, v in _table(d, "durations").items() if isinstance(v, int | float)},
                   installed_version=_text(d.get("installed_version")), vendor=_text(d.get("vendor")),
                   artifacts=tuple(a for a in _list(d.get("artifacts")) if isinstance(a, dict)))

    @property
    def failed(self) -> bool:
        return self.status == "failed" or bool(self.error)

    @property
    def seconds(self) -> float:
        return sum(self.durations.values())


def _opt(value: object) -> str | None:
    """A present value as text (an empty one too); None for an absent one."""
    return None if value is None else str(value)


def _table(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``doc[key]`` when it is a JSON object, else an empty one."""
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str | None:
    """A non-empty value as text; None for an absent or empty one."""
    return str(value) if value else None


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass
class RunView:
    """Everything :func:`read_run` could make of a run folder; ``problems`` lists what it could not."""

    path: Path
    run_id: str
    launches: list[LaunchView]
    orphans: list[RankView]  # rank files that no launch record claims
    cores: list[CoreView]
    phases: list[Phase]
    manifest: dict[str, Any]
    deploy: dict[str, Any] | None
    junit: JunitSummary | None  # pytest's junit.xml: counts and failed cases
    problems: list[str]

    @property
    def ranks(self) -> list[RankView]:
        return [r for lv in self.launches for r in lv.ranks] + self.orphans

    @property
    def failed_tests(self) -> list[FailedTest]:
        """The controller's failing tests (pytest's junit.xml), in its order."""
        return self.junit.failed if self.junit is not None else []

    @property
    def facts(self) -> RunFacts:
        return RunFacts.from_manifest(self.manifest)

    @property
    def deploy_hosts(self) -> list[DeployHost]:
        """``deploy-manifest.json``'s hosts in its order (an entry that is not an object is left out)."""
        return _deploy_hosts(self.deploy)

    @property
    def hosts(self) -> list[str]:
        named = [*_table(self.manifest, "hosts"), *_table(self.deploy or {}, "hosts"),
                 *(h for lv in self.launches for h in lv.record.nodes),
                 *(r.host for r in self.ranks), *(p.host for p in self.phases)]
        return list(dict.fromkeys(named))

    @property
    def causes(self) -> list[tuple[str, str]]:
        """(launch name, cause) of each launch whose record names its failure's cause."""
        return [(lv.name, lv.record.cause) for lv in self.launches if lv.record.cause]


def _deploy_hosts(deploy: Mapping[str, Any] | None) -> list[DeployHost]:
    """The hosts of a deploy manifest in its order (an entry that is not an object is left out)."""
    hosts = _table(deploy or {}, "hosts")
    return [DeployHost.from_json(h, d) for h, d in hosts.items() if isinstance(d, dict)]


def read_run(rundir_path: str | os.PathLike[str]) -> RunView:
    """Read a (possibly partial) run folder; never raises for missing or corrupt files."""
    root = Path(rundir_path)
    problems: list[str] = []
    run_id = root.resolve().name
    cores = _read_cores(root, problems)
    launches = _read_launches(root, run_id, problems)
    every = [*launches, *(e for lv in launches for e in lv.reruns)]
    orphans = _read_ranks(root, every, launches, problems)
    _attach_all_cores([*(r for lv in launches for r in lv.ranks), *orphans], cores, launches)
    _classify_all(every, orphans)
    deploy = read_json(root / "deploy-manifest.json", problems, None)
    return RunView(root, run_id, launches, orphans, cores, _phases(root, launches, deploy, problems),
                   read_json(root / "manifest.json", problems, {}) or {}, deploy,
                   _junit_summary(root / "junit.xml", problems), problems)


def _attach_all_cores(ranks: list[RankView], cores: list[CoreView],
                      launches: list[LaunchView]) -> None:
    for rv in ranks:
        _attach_cores(rv, cores, launches)


def _read_cores(root: Path, problems: list[str]) -> list[CoreView]:
    """The core dumps ``cores.json`` lists."""
    entries = read_json(root / "cores.json", problems, []) or []
    return [CoreView.from_json(c, root) for c in entries if isinstance(c, dict)]


def _read_ranks(root: Path, every: list[LaunchView], launches: list[LaunchView],
                problems: list[str]) -> list[RankView]:
    """Fill each launch's (``every`` attempt's) ranks; return the ranks no launch claims."""
    claimed: set[tuple[str, int]] = set()
    owners = _rank_owners(root, launches)
    for lv in every:
        lv.ranks = _launch_ranks(root, lv, owners, launches, problems)
        claimed.update((r.host, r.rank) for r in lv.ranks)
    return _orphan_ranks(root, claimed, problems)


def _classify_all(launches: list[LaunchView], orphans: list[RankView]) -> None:
    """Every rank's outcome and reason (a launch expects JUnit from each rank when one of them wrote it)."""
    for lv in launches:
        for rv in lv.ranks:
            _classify(rv, lv, any(r.junit for r in lv.ranks))
    for rv in orphans:
        _classify(rv, None, rv.junit is not None)


def _orphan_ranks(root: Path, claimed: set[tuple[str, int]], problems: list[str]) -> list[RankView]:
    """The ranks whose files lie in a host folder but that no launch record claims."""
    orphans = []
    for host_dir in _host_dirs(root):
        for n in _rank_numbers(host_dir):
            if (host_dir.name, n) not in claimed:
                rv = RankView(n, host_dir.name)
                _load_rank_files(root, rv, host_dir, problems)
                orphans.append(rv)
    return orphans


def _host_dirs(root: Path) -> list[Path]:
    """The run folder's visible subfolders (a host's each, when it holds rank files)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def _rank_numbers(folder: Path) -> list[int]:
    """The rank numbers of the ``rank<N>.*`` files in ``folder``, sorted."""
    return sorted({int(m.group(1)) for f in folder.iterdir() if (m := _RANK_FILE.match(f.name))})


def read_json(path: Path, problems: list[str], default: Any) -> Any:
    """The JSON file ``path``; ``default`` when it is absent, and also when unreadable (then said in ``problems``)."""
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name}: unreadable ({exc})")
        return default


def _launch_records(root: Path, problems: list[str]) -> list[LaunchView]:
    """Every ``launch-*.json`` that is a launch record, oldest first."""
    paths = sorted(root.glob("launch-*.json")) if root.is_dir() else []
    found = [lv for lv in (_launch_record(p, problems) for p in paths) if lv is not None]
    return sorted(found, key=lambda lv: (lv.mtime, lv.launch_id))


def _launch_record(path: Path, problems: list[str]) -> LaunchView | None:
    """The launch record ``path`` holds (named by its id for now); None for no file or not a
    record."""
    data = read_json(path, problems, None)
    if data is None:
        return None
    try:
        record = LaunchResult.from_json(data, launch_id=path.stem[len("launch-"):])
    except ValueError as exc:  # not a record, or a newer camit's
        problems.append(f"{path.name}: {exc}")
        return None
    except TypeError:
        problems.append(f"{path.name}: not a launch record")
        return None
    return LaunchView(record.launch_id, record, path.stat().st_mtime)


def _last_port_attempts(found: list[LaunchView]) -> list[LaunchView]:
    """A retry after a taken port (its record names the first try) supersedes the earlier tries:
    keep the highest-numbered (the first found among equals), naming the others."""
    kept: set[int] = set()  # ids: two views may be equal without being the same launch
    for group in _port_groups(found):
        last = max(group, key=lambda lv: lv.record.port_try)
        last.superseded = [o.launch_id for o in group if o is not last]
        kept.add(id(last))
    return [lv for lv in found if id(lv) in kept]


def _port_groups(found: list[LaunchView]) -> list[list[LaunchView]]:
    """The launches by their first try's id, each group in the order found."""
    groups: dict[str, list[LaunchView]] = {}
    for lv in found:
        groups.setdefault(lv.record.first_id, []).append(lv)
    return list(groups.values())


def _launch_label(lv: LaunchView, run_id: str) -> str:
    """A launch's name before de-duplication: the test's launch name, or its id without run id and salt."""
    if lv.test is not None:
        return launch_name(lv.test, lv.world_size, lv.record.seq)
    short = lv.launch_id[len(run_id) + 1:] if lv.launch_id.startswith(run_id + "-") else lv.launch_id
    short = re.sub(r"-[0-9a-f]{4}(-r\d+)?$", "", short) or short
    return short.replace(".", "_")


def _read_launches(root: Path, run_id: str, problems: list[str]) -> list[LaunchView]:
    kept = _fold_test_attempts(_last_port_attempts(_launch_records(root, problems)))
    names = [_launch_label(lv, run_id) for lv in kept]
    for lv, name in zip(kept, names):
        lv.name = name if names.count(name) == 1 else lv.launch_id.replace(".", "_")
        for earlier in lv.reruns:
            earlier.name = lv.name
    return kept


def launch_name(test: str, world_size: int, seq: object = None) -> str:
    """A test's launch as the report names it, the same in every build: the pytest nodeid (``.py`` dropped,
    every character but letters, digits, ``_``, ``-`` and ``[]`` made ``_``: no dot, so Jenkins adds no
    package level), ``-w<world size>``, and ``-<n>`` for the test's n-th launch of that world (n > 1).

    ``suites/cam/test_cam.py::test_dispatch[4]`` on 4 ranks → ``suites_cam_test_cam_test_dispatch[4]-w4``.
    """
    label = re.sub(r"[^A-Za-z0-9_\-\[\]]+", "_", re.sub(r"\.py(?=::|$)", "", test)).strip("_")
    n = seq if isinstance(seq, int) else 1
    return f"{label or 'test'}-w{world_size}" + (f"-{n}" if n > 1 else "")


def _fold_test_attempts(launches: list[LaunchView]) -> list[LaunchView]:
    """Keep the final attempt's launches of each test; an earlier attempt's go into the final one's ``reruns``.

    Launches match by (test, world size, place in the attempt). An earlier attempt's launch the final
    attempt did not repeat stays, marked ``stale`` (the report turns its failures into flaky ones).
    """
    final_attempt: dict[str | None, int] = {}
    groups: dict[tuple[object, ...], list[LaunchView]] = {}
    for lv in launches:
        final_attempt[lv.test] = max(final_attempt.get(lv.test, 0), lv.attempt)
        groups.setdefault(_same_launch(lv), []).append(lv)
    out = []
    for lv in launches:
        group = sorted(groups[_same_launch(lv)], key=lambda x: (x.attempt, x.mtime))
        if lv is group[-1]:  # the others fold into the group's last attempt
            lv.reruns = group[:-1]
            lv.stale = lv.attempt < final_attempt[lv.test]
            out.append(lv)
    return out


def _same_launch(lv: LaunchView) -> tuple[object, ...]:
    """What the attempts of one test's launch share: (test, world size, place in the attempt); a
    launch of no test is its own."""
    return (lv.launch_id,) if lv.test is None else (lv.test, lv.world_size, lv.record.seq)


def _expected_host(record: LaunchResult, rank: int) -> str:
    """The host the launch's node plan puts ``rank`` on; ``unknown`` without one."""
    per_node = max(1, record.world_size // max(1, len(record.nodes)))
    planned = (host for host, node in record.nodes.items() if node.node_rank == rank // per_node)
    return next(planned, "unknown")


def _remote_launch(status: Mapping[str, Any]) -> str | None:
    """The launch a rank status file belongs to: its remote log path is ``…/runs/<launch-id>/rank<N>.log``."""
    m = re.search(r"/runs/([^/]+)/rank\d+\.log$", str(status.get("log", "")))
    return m.group(1) if m else None


def _rank_owners(root: Path, launches: list[LaunchView]) -> dict[tuple[str, int], str]:
    """Which launch the shared ``<host>/rank<N>.*`` files belong to (launches fetch into the same folder)."""
    owners: dict[tuple[str, int], str] = {}
    for lv in launches:  # in order: the last launch that had the rank wrote its files last
        owners.update(dict.fromkeys(_launch_slots(lv), lv.launch_id))
    ids = {lid for lv in launches for lid in (lv.launch_id, *lv.superseded)}
    for (host, rank) in list(owners):
        lid = _status_launch(root / host / f"rank{rank}.json")
        if lid in ids:
            owners[(host, rank)] = _claiming_launch(lid, launches)
    return owners


def _claiming_launch(lid: str, launches: list[LaunchView]) -> str:
    """The launch that is ``lid`` or superseded it (a port retry); ``lid`` itself when none is."""
    claims = (lv.launch_id for lv in launches if lid == lv.launch_id or lid in lv.superseded)
    return next(claims, lid)


def _launch_slots(lv: LaunchView) -> list[tuple[str, int]]:
    """The (host, rank) places a launch had: by its node plan, then as its rank records say."""
    planned = [(_expected_host(lv.record, r), r) for r in range(lv.world_size)]
    return planned + [(rr.host, r) for r, rr in lv.record.ranks.items()]


def _status_launch(status: Path) -> str | None:
    """The launch a rank's status file says wrote it (None when there is none or it cannot be read)."""
    with contextlib.suppress(OSError, ValueError):
        return _remote_launch(json.loads(status.read_text())) if status.exists() else None
    return None


def _launch_ranks(root: Path, lv: LaunchView, owners: Mapping[tuple[str, int], str], launches: list[LaunchView],
                  problems: list[str]) -> list[RankView]:
    multi = len(launches) > 1 or lv.test is not None  # a test's launch is always named: stable across builds
    out = []
    for r in sorted(set(range(lv.world_size)) | set(lv.record.ranks)):
        rec = lv.record.ranks.get(r, RankResult(r, ""))
        host = _rank_host(lv.record, r)
        rv = RankView(r, host, launch=lv.name if multi else "", launch_id=lv.launch_id,
                      exit_code=rec.exit_code, signal=rec.signal)
        _find_rank_files(root, rv, lv, owners.get((host, r), lv.launch_id), launches, problems)
        out.append(rv)
    return out


def _find_rank_files(root: Path, rv: RankView, lv: LaunchView, owner: str,
                     launches: list[LaunchView], problems: list[str]) -> None:
    """Load the rank's files of ``lv``, or note which later launch (``owner``) overwrote them."""
    folder = _rank_folder(root, rv.host, rv.rank, lv.launch_id, owner)
    if folder is not None:
        _load_rank_files(root, rv, folder, problems)
        return
    order = {x.launch_id: i for i, x in enumerate(launches)}
    if order.get(owner, -1) > order.get(lv.launch_id, -1):  # -1: an earlier attempt (not kept)
        rv.overwritten_by = {x.launch_id: x.name for x in launches}.get(owner, owner)
    # else: the files on disk are an earlier launch's; this launch fetched none for the rank


def _rank_folder(root: Path, host: str, rank: int, launch_id: str, owner: str) -> Path | None:
    """Where the launch's files of the rank are: its own folder (a per-launch fetch layout, if launch.py
    grows one), the host's folder when the launch owns them there; None when another launch does."""
    own_dir = root / host / launch_id
    if (own_dir / f"rank{rank}.json").exists() or (own_dir / f"rank{rank}.log").exists():
        return own_dir
    return root / host if owner == launch_id else None


def _load_rank_files(root: Path, rv: RankView, folder: Path, problems: list[str]) -> None:
    st = read_json(folder / f"rank{rv.rank}.json", problems, None)
    if isinstance(st, dict):
        _apply_status(rv, st)
    logf = folder / f"rank{rv.rank}.log"
    if logf.exists():
        rv.log = logf.relative_to(root).as_posix()
    xml = folder / f"rank{rv.rank}.xml"
    if xml.exists():
        rv.junit = xml.relative_to(root).as_posix()
        _load_junit(xml, rv)


def _apply_status(rv: RankView, st: Mapping[str, Any]) -> None:
    """A rank status file's facts: how it ended (unless the launch record said) and its times."""
    if rv.exit_code is None and rv.signal is None:
        rv.exit_code, rv.signal = st.get("exit_code"), st.get("signal")
    rv.start = _status_time(st.get("start"))
    rv.end = _status_time(st.get("end"))


def _status_time(value: object) -> float | None:
    """A status file's time when it is a number, else None."""
    return value if isinstance(value, int | float) else None


def _load_junit(path: Path, rv: RankView) -> None:
    try:
        top = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        rv.junit_problem = f"{path.name} is not valid XML ({exc})"
        return
    suites = [top] if top.tag == "testsuite" else list(top.iter("testsuite"))
    rv.props += [(p.get("name", ""), p.get("value", "")) for s in suites
                 for p in s.findall("properties/property")]
    if suites:
        rv.junit_timestamp = suites[0].get("timestamp")
        rv.junit_time = _suites_time(suites)
    rv.cases = _fold_reruns(list(top.iter("testcase")))


def _suites_time(suites: list[ET.Element]) -> float:
    """The time of the suites that ran a test (an empty wrapper suite's own time is not added)."""
    return sum(number(s.get("time")) for s in suites if s.find("testcase") is not None)


def case_outcome(case: ET.Element) -> str:
    """A JUnit testcase's outcome: ``error``, ``failure``, ``skipped`` or ``passed``."""
    if case.find("error") is not None:
        return "error"
    if case.find("failure") is not None:
        return "failure"
    if case.find("skipped") is not None:
        return "skipped"
    return "passed"


def _fold_reruns(cases: list[ET.Element]) -> list[ET.Element]:
    """Fold pytest-rerunfailures attempts (same name repeated, earlier attempts empty) as Surefire does."""
    groups: dict[tuple[str, str], list[ET.Element]] = {}
    for c in cases:
        groups.setdefault((c.get("classname", ""), c.get("name", "")), []).append(c)
    out = []
    for items in groups.values():
        if _are_reruns(items):
            out.append(_fold_rerun_group(items))
        else:
            out.extend(items)
    return out


def _are_reruns(items: list[ET.Element]) -> bool:
    """Repeated cases of one name whose earlier entries are empty passes: rerunfailures' attempts
    (a teardown error after a failing call repeats the name too, never with an empty first one)."""
    earlier = items[:-1]
    return bool(earlier) and not any(len(c) or case_outcome(c) != "passed" for c in earlier)


def _fold_rerun_group(items: list[ET.Element]) -> ET.Element:
    """The final attempt, with a rerun or flaky failure for each earlier one."""
    last = items[-1]
    tag = "rerunFailure" if case_outcome(last) in ("failure", "error") else "flakyFailure"
    for i in range(1, len(items)):
        ET.SubElement(last, tag, type="rerun", message=f"attempt {i} of {len(items)} failed "
                      "(the rerun plugin records no details)")
    return last


def _attach_cores(rv: RankView, cores: list[CoreView], launches: list[LaunchView]) -> None:
    """The rank's cores, when it is the rank at its place that gets them (an orphan gets its
    own)."""
    place = (rv.host, rv.rank)
    holder = _core_holder(place, launches)
    if holder is None or rv is holder:
        rv.cores.extend(core for core in cores if (core.host, core.rank) == place)


def _core_holder(place: tuple[str, int], launches: list[LaunchView]) -> RankView | None:
    """Which launch's rank at ``place`` gets its cores (a core does not name its launch): the last
    where the rank died by a signal, else the last that ran it; None when no launch ran it."""
    holders = [r for lv in launches for r in lv.ranks if (r.host, r.rank) == place]
    return max(reversed(holders), key=lambda r: bool(r.signal), default=None)


def describe_rank(rv: RankView, lv: LaunchView | None) -> str:
    """How a rank ended, one sentence: ``rank 2 on node2 died of SIGSEGV`` (and why, when it was stopped)."""
    text = _ending(rv, lv)
    if lv is not None and _stopped_by(rv, lv, text):
        verb = "timed out" if lv.record.failure_kind == "timeout" else "failed"
        text += f"; the launch {verb}: {lv.failure}"
    return text


def _ending(rv: RankView, lv: LaunchView | None) -> str:
    """``rank 2 on node2`` died of its signal, exited its status, or never reported (with its host's loss)."""
    where = f"rank {rv.rank} on {rv.host}"
    if rv.signal:
        return f"{where} died of {rv.signal}"
    if rv.exit_code is not None:
        return f"{where} exited {rv.exit_code}"
    lost = _host_loss(lv, rv.host)
    return f"{where} never reported" + (f" (lost {rv.host}: {lost})" if lost else "")


def _host_loss(lv: LaunchView | None, host: str) -> str | None:
    """Why the launch lost ``host`` (None: it did not, or there is no launch record)."""
    node = lv.record.nodes.get(host) if lv is not None else None
    return None if node is None else node.lost


def _ended_as_consequence(rv: RankView) -> bool:
    """Never reported, or stopped by a teardown signal (torchrun or our teardown stopping it)."""
    return (rv.exit_code is None and not rv.signal) or rv.signal in SECONDARY_SIGNALS


def _stopped_by(rv: RankView, lv: LaunchView, text: str) -> bool:
    """The rank was stopped (never reported, or killed) because something else failed first."""
    if not (lv.failure and _ended_as_consequence(rv)):
        return False
    return lv.record.failure_rank != rv.rank and lv.failure not in text


def _crashed(rv: RankView) -> bool:
    """A core, or a signal of its own (not a teardown's)."""
    return bool(rv.cores) or (bool(rv.signal) and rv.signal not in SECONDARY_SIGNALS)


def _failed(rv: RankView, failing: int, junit_expected: bool) -> bool:
    """Failing tests, a bad exit, an unreadable report, or no report where one was expected."""
    missing = junit_expected and not rv.junit and not rv.overwritten_by
    return bool(failing or rv.exit_code not in (0, None) or rv.junit_problem or missing)


def _outcome(rv: RankView, failing: int, junit_expected: bool) -> str:
    if _crashed(rv):
        return "crash"
    if rv.signal:
        return "killed"
    if rv.exit_code is None and not rv.cases:
        return "lost"
    return "fail" if _failed(rv, failing, junit_expected) else "pass"


def _first_failure(rv: RankView, failing: int) -> str:
    """"2 failing test(s), first test_x: <its message's first line>"."""
    first = next(x for x in rv.cases if case_outcome(x) in ("failure", "error"))
    el = first.find(case_outcome(first))  # the error when it has one, else the failure
    line = next(iter(("" if el is None else el.get("message", "")).splitlines()), "")
    head = f"{failing} failing test(s), first {first.get('name')}"
    return f"{head}: {line}" if line else head


def _ending_matters(rv: RankView, failing: int) -> bool:
    """A signal or a bad exit says something, except pytest's exit 1 for failed tests (those are the reason)."""
    plain_failure = rv.exit_code == 1 and not rv.signal and failing
    return bool(rv.signal or rv.exit_code != 0) and not plain_failure


def _report_reason(rv: RankView, failing: int, junit_expected: bool) -> list[str]:
    """What the rank's JUnit says: unreadable, its first failing test, or that it is missing."""
    if rv.junit_problem:
        return [rv.junit_problem]
    if failing:
        return [_first_failure(rv, failing)]
    if junit_expected and not rv.junit and rv.exit_code == 0:
        return ["exited 0 but wrote no JUnit report"]
    return []


def _reasons(rv: RankView, lv: LaunchView | None, failing: int, junit_expected: bool) -> list[str]:
    """Why a rank did not pass, most telling first."""
    reasons = [describe_rank(rv, lv)] if _ending_matters(rv, failing) else []
    reasons += _report_reason(rv, failing, junit_expected)
    reasons += [f"core dumped ({Path(core.exe or '?').name}, pid {core.pid})" for core in rv.cores]
    if rv.overwritten_by:
        reasons.append(f"its files were overwritten by launch {rv.overwritten_by}")
    return reasons


def _classify(rv: RankView, lv: LaunchView | None, junit_expected: bool) -> None:
    c = rv.counts()
    failing = c["failures"] + c["errors"]
    rv.outcome = _outcome(rv, failing, junit_expected)
    rv.torn_down = _torn_down(rv, lv) if rv.outcome in ("killed", "lost") else None
    if rv.torn_down:
        rv.outcome = "killed"
    if rv.outcome != "pass":
        rv.reason = "; ".join(_reasons(rv, lv, failing, junit_expected))


def _torn_down(rv: RankView, lv: LaunchView | None) -> str | None:
    """"torn down after rank 3 on node2 failed" when ``rv`` (killed or lost, not crashed) died of a
    teardown signal (or never reported) only because the launch's first failure was another rank's
    or host's (:mod:`framework.launch.monitor` records which); None for the rank that failed first,
    a lost host's own ranks, timeouts and interruptions."""
    if lv is None or not lv.failure:
        return None
    first = _other_first_rank(lv.record, rv.rank)
    if first is not None:
        return f"torn down after rank {first} on {_rank_host(lv.record, first)} failed"
    return f"torn down after {lv.failure}" if _other_host_failed(lv.record, rv.host) else None


def _other_first_rank(record: LaunchResult, rank: int) -> int | None:
    """The rank the launch record says failed first, when that is a rank other than ``rank``."""
    first = record.failure_rank if record.failure_kind == "rank" else None
    return None if first == rank else first


def _other_host_failed(record: LaunchResult, host: str) -> bool:
    """The launch failed first by a host's loss or its torchrun's exit, and the monitor recorded a
    host other than ``host`` (a record older than ``failure_host`` attributes nothing)."""
    host_failure = record.failure_kind in ("lost", "node")
    return host_failure and record.failure_host not in (None, host)


def _rank_host(record: LaunchResult, rank: int) -> str:
    """The host a launch record gives the rank (an older record may name none), else the one its
    node plan puts it on."""
    recorded = record.ranks.get(rank)
    host = "" if recorded is None else recorded.host
    return host or _expected_host(record, rank)


def by_host(ranks: Iterable[RankView]) -> dict[str, list[RankView]]:
    """``ranks`` by host, hosts in the order the ranks first name them, each host's by rank
    number."""
    out: dict[str, list[RankView]] = {}
    for rv in ranks:
        out.setdefault(rv.host, []).append(rv)
    return {host: sorted(mine, key=lambda r: r.rank) for host, mine in out.items()}


def outcome_tally(ranks: Iterable[RankView]) -> list[str]:
    """``["3 pass", "1 crash"]``: how many of ``ranks`` had each outcome some had, in
    :data:`OUTCOMES` order."""
    counts = Counter(rv.outcome for rv in ranks)
    return [f"{counts[o]} {o}" for o in OUTCOMES if counts[o]]


def case_counts(cases: Iterable[ET.Element]) -> dict[str, int]:
    """``{tests, failures, errors, skipped}`` of JUnit testcases."""
    kinds = Counter(case_outcome(case) for case in cases)
    return {"tests": kinds.total(), "failures": kinds["failure"], "errors": kinds["error"],
            "skipped": kinds["skipped"]}


@dataclass(frozen=True)
class FailedTest:
    """A failing controller test of pytest's junit.xml: ``kind`` failure or error, its element's
    message and the end of its text (:data:`TEXT_CHARS`)."""

    classname: str
    name: str
    kind: str
    message: str
    text: str

    @classmethod
    def from_case(cls, case: ET.Element) -> FailedTest:
        kind = case_outcome(case)
        el = case.find(kind)
        message, text = ("", "") if el is None else (el.get("message", ""), el.text or "")
        return cls(case.get("classname", ""), case.get("name", ""), kind, message,
                   text[-TEXT_CHARS:])

    @property
    def first_line(self) -> str:
        """The message's first line (empty for none)."""
        return next(iter(self.message.splitlines()), "")


@dataclass(frozen=True)
class JunitSummary:
    """pytest's own junit.xml in short: ``counts`` as :func:`case_counts` gives them, the failing
    tests."""

    counts: dict[str, int]
    failed: list[FailedTest]


def _junit_summary(path: Path, problems: list[str]) -> JunitSummary | None:
    if not path.exists():
        return None
    try:
        top = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        problems.append(f"junit.xml: unreadable ({exc})")
        return None
    cases = list(top.iter("testcase"))
    failed = [FailedTest.from_case(case) for case in cases
              if case_outcome(case) in ("failure", "error")]
    return JunitSummary(case_counts(cases), failed)


# -- phases ---------------------------------------------------------------------
def _phases(root: Path, launches: list[LaunchView], deploy: Mapping[str, Any] | None,
            problems: list[str]) -> list[Phase]:
    recorded = _recorded_phases(root, problems)
    have = {(p.host, p.phase) for p in recorded}
    derived = [p for p in _deploy_phases(root, deploy) + _launch_phases(launches) if (p.host, p.phase) not in have]
    return sorted(recorded + derived, key=lambda p: (p.start, p.host))


def _recorded_phases(root: Path, problems: list[str]) -> list[Phase]:
    recorded = []
    for p in read_json(root / "phases.json", problems, []) or []:
        try:
            recorded.append(Phase(str(p["host"]), str(p["phase"]), float(p["start"]), float(p["end"])))
        except (KeyError, TypeError, ValueError):
            problems.append(f"phases.json: bad entry {p!r}")
    return recorded


def _deploy_phases(root: Path, deploy: Mapping[str, Any] | None) -> list[Phase]:
    """Estimated: the deploy manifest is written when deploy ends; the steps ran in order on each host."""
    dm = root / "deploy-manifest.json"
    if not isinstance(deploy, dict) or not dm.exists():
        return []
    end = dm.stat().st_mtime
    start = end - (_seconds(deploy.get("duration")) or 0.0)
    return [_host_deploy_phase(host, start, end) for host in _deploy_hosts(deploy)]


def _host_deploy_phase(host: DeployHost, start: float, end: float) -> Phase:
    """A host's deploy phase: from the deploy's start for the sum of its steps (until its end)."""
    detail = ", ".join(f"{k} {v:.1f}s" for k, v in host.durations.items())
    stop = min(end, start + host.seconds) if host.durations else end
    return Phase(host.host, "deploy", start, stop, True, detail)


def _launch_phases(launches: list[LaunchView]) -> list[Phase]:
    """Estimated: run from each rank's status file (host clock); collect from the last rank end until the
    launch record was written."""
    out = []
    for lv in launches:
        tag = f" ({lv.name})" if lv.name and len(launches) > 1 else ""
        for host, spans in _rank_spans(lv).items():
            out += _host_run_phases(host, spans, lv.mtime, tag)
    return out


def _rank_spans(lv: LaunchView) -> dict[str, list[tuple[int, float, float]]]:
    """(rank, start, end) of each rank of the launch whose status file gave both times, by host."""
    by_host: dict[str, list[tuple[int, float, float]]] = {}
    for r in lv.ranks:
        if r.start is not None and r.end is not None:
            by_host.setdefault(r.host, []).append((r.rank, r.start, r.end))
    return by_host


def _host_run_phases(host: str, spans: list[tuple[int, float, float]], written: float,
                     tag: str) -> list[Phase]:
    """A host's run phase and, when the launch record was ``written`` later, its collect phase."""
    s, e = min(x[1] for x in spans), max(x[2] for x in spans)
    out = [Phase(host, "run", s, e, True, f"ranks {ranges([x[0] for x in spans])}{tag}")]
    if written > e:
        out.append(Phase(host, "collect", e, written, True, f"teardown and fetch{tag}"))
    return out


# -- reading files of the folder (also used by framework.report.junit and framework.report.html) --------
def log_tail(root: Path, rel: str | None, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of the run-folder file ``rel`` (its last 64 KiB at most), colours stripped;
    a sentence saying so when it cannot be read, ``""`` for no file."""
    if not rel:
        return ""
    path = root / rel
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - 64 * 1024))
            data = fh.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {rel}: {exc})"
    return "\n".join(strip_ansi(data).splitlines()[-lines:])


def inside_run(root: Path, path: object) -> str | None:
    """``path`` relative to the run folder when it lies inside it (absolute or relative), else None."""
    if not path:
        return None
    p = Path(str(path))
    if not p.is_absolute():
        return p.as_posix() if (root / p).exists() else None
    with contextlib.suppress(ValueError, OSError):
        return p.resolve().relative_to(root.resolve()).as_posix()
    return None
