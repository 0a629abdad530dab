"""The run's report: one JUnit file for Jenkins, a manifest, a summary and a page, all from the run folder.

Everything here reads ``reports/<run-id>/`` and nothing else, so a report can be
rebuilt at any time — after a crash, from an archived folder — and an interrupted
run still leaves a consistent folder (:func:`finalize` never raises). Only the
controller calls these functions; every file is written atomically.

Read (written by others)::

    launch-<id>.json            LaunchResult.to_json(), one per launch (framework.launch)
    <host>/rank<N>.log|json|xml per-rank output, status (rankwrap) and pytest JUnit
    <host>/cores/, <host>/*     core files and collected host logs
    deploy-manifest.json        DeployResult.to_json() (framework.deploy)
    phases.json                 [{host, phase, start, end}], appended by :func:`record_phase`
    junit.xml                   pytest's own ``--junitxml`` (controller-level tests)

Written: ``cluster.xml``, ``cores.json`` (the cores handed to :func:`write_cluster_junit`,
kept so later rebuilds see them), ``manifest.json``, ``index.html`` (:mod:`framework.report_html`).

``cluster.xml`` layout (junit-10.xsd valid, see ``shared/reference/junit-jenkins.md`` §4): one
``<testsuite name="rank<N>@<host>" hostname="<host>">`` per expected rank, classnames rewritten to
``<host>.rank<N>.<original>`` (dots in host names become ``_``). With several launches in one run
each launch's suites are named ``<launch>.rank<N>@<host>`` and classnames
``<host>.rank<N>.<launch>.<original>``, ``<launch>`` being the launch id without the run id and
random suffix (``alltoall1``); a superseded port-retry attempt (``…-r<k>`` present) is left out.
A rank without JUnit gets one synthetic ``rank_report`` testcase: an error naming how it ended
(signal, exit status, never reported: lost host, timeout) with the tail of its log — or a pass
when it exited 0 and no rank of its launch was a pytest run. Core dumps, per-host deploy results
and an unfinished run are testcases of a final ``cluster`` suite.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import re
import shlex
import socket
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from filelock import FileLock

from framework import __version__
from framework.hosts import sha256_file
from framework.rundir import write_atomic

log = logging.getLogger("camit.report")

__all__ = ["CoreView", "LaunchView", "Phase", "RankView", "RunView", "finalize", "read_run", "record_phase",
           "terminal_summary", "validate_junit", "write_cluster_junit", "write_index", "write_manifest"]

SCHEMA_FILE = "xunit-plugin-junit-10.xsd"
PHASE_ORDER = ("connect", "deploy", "launch", "run", "collect", "teardown")
#: signals that end a rank as a consequence (torchrun or our teardown stopping it), not a crash
SECONDARY_SIGNALS = ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP")
OUTCOMES = ("pass", "fail", "crash", "killed", "lost")
TAIL_LINES = 40
HASH_LIMIT = 256 * 1024 * 1024  # files above this are listed in the manifest without a sha256
#: statuses of a run that did not finish normally: cluster.xml gets an error entry for them
_FINISHED = ("ok", "passed", "failed", "running", None)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_CASE_CHILDREN = {"skipped", "error", "failure", "rerunFailure", "rerunError", "flakyFailure", "flakyError",
                  "system-out", "system-err"}
_RANK_FILE = re.compile(r"^rank(\d+)\.(log|json|xml)$")
_PHASE_LOCK = threading.Lock()


# -- the run folder as data -----------------------------------------------------
@dataclass
class CoreView:
    """One core dump from ``cores.json`` (entries in ``framework.coredump.Core.to_json()`` shape)."""

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
        bt_path = _inside(root, entry.get("backtrace_path"))
        backtrace = str(entry.get("backtrace") or "")
        if not backtrace and entry.get("backtrace_path"):
            p = Path(str(entry["backtrace_path"]))
            backtrace = _tail(root, bt_path, lines=400) if bt_path else (_tail(p.parent, p.name, 400) if p.is_file()
                                                                         else "")
        exe = entry.get("exe") or entry.get("executable") or entry.get("comm")
        return cls(host=str(entry.get("host") or "unknown"), pid=entry.get("pid"), exe=str(exe) if exe else None,
                   signal=_signame(entry.get("signal")), rank=rank if isinstance(rank, int) else None,
                   backtrace=backtrace, local_path=_inside(root, entry.get("local_path")) or entry.get("local_path"),
                   description=str(entry.get("describe") or entry.get("description") or ""), backtrace_path=bt_path)

    @property
    def top_frame(self) -> str:
        """The crashing thread's first frame, without its address (gdb's ``bt`` after ``@@crashing``)."""
        crashing = self.backtrace.split("@@crashing", 1)[-1]
        line = next((ln.strip() for ln in crashing.splitlines() if ln.strip().startswith("#")), "")
        return re.sub(r"^#\d+\s+(0x[0-9a-fA-F]+ in )?", "", line)

    @property
    def anchor(self) -> str:
        return f"core-{_slug(self.host)}-{self.pid if self.pid is not None else 'x'}"


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

    @property
    def duration(self) -> float | None:
        if self.start is not None and self.end is not None:
            return max(0.0, self.end - self.start)
        return self.junit_time

    def counts(self) -> dict[str, int]:
        return _counts(self.cases)


@dataclass
class LaunchView:
    launch_id: str
    name: str
    world_size: int
    data: dict[str, Any]
    mtime: float
    ranks: list[RankView] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)

    @property
    def failure(self) -> str | None:
        return self.data.get("failure")


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
    junit: dict[str, Any] | None  # counts and failed cases of pytest's junit.xml
    problems: list[str]

    @property
    def ranks(self) -> list[RankView]:
        return [r for lv in self.launches for r in lv.ranks] + self.orphans

    @property
    def hosts(self) -> list[str]:
        seen: dict[str, None] = {}
        for h in (self.manifest.get("hosts") or {}):
            seen.setdefault(h)
        for h in (self.deploy or {}).get("hosts", {}):
            seen.setdefault(h)
        for lv in self.launches:
            for h in lv.data.get("nodes", {}):
                seen.setdefault(h)
        for r in self.ranks:
            seen.setdefault(r.host)
        for p in self.phases:
            seen.setdefault(p.host)
        return list(seen)


def read_run(rundir_path: str | os.PathLike[str]) -> RunView:
    """Read a (possibly partial) run folder; never raises for missing or corrupt files."""
    root = Path(rundir_path)
    problems: list[str] = []
    run_id = root.resolve().name
    cores = [CoreView.from_json(c, root) for c in _read_json(root / "cores.json", problems, []) or []
             if isinstance(c, dict)]
    launches = _read_launches(root, run_id, problems)
    claimed: set[tuple[str, int]] = set()
    owners = _rank_owners(root, launches)
    for lv in launches:
        lv.ranks = _launch_ranks(root, lv, owners, launches, problems)
        claimed.update((r.host, r.rank) for r in lv.ranks)
    orphans = []
    for host_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) \
            if root.is_dir() else []:
        for n in sorted({int(m.group(1)) for f in host_dir.iterdir() if (m := _RANK_FILE.match(f.name))}):
            if (host_dir.name, n) not in claimed:
                rv = RankView(n, host_dir.name)
                _load_rank_files(root, rv, host_dir, problems)
                orphans.append(rv)
    for rv in [r for lv in launches for r in lv.ranks] + orphans:
        _attach_cores(rv, cores, launches)
    for lv in launches:
        for rv in lv.ranks:
            _classify(rv, lv, any(r.junit for r in lv.ranks))
    for rv in orphans:
        _classify(rv, None, rv.junit is not None)
    deploy = _read_json(root / "deploy-manifest.json", problems, None)
    return RunView(root, run_id, launches, orphans, cores, _phases(root, launches, deploy, problems),
                   _read_json(root / "manifest.json", problems, {}) or {}, deploy,
                   _junit_summary(root / "junit.xml", problems), problems)


def _read_json(path: Path, problems: list[str], default: Any) -> Any:
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name}: unreadable ({exc})")
        return default


def _read_launches(root: Path, run_id: str, problems: list[str]) -> list[LaunchView]:
    found = []
    for p in sorted(root.glob("launch-*.json")) if root.is_dir() else []:
        data = _read_json(p, problems, None)
        if not isinstance(data, dict) or not isinstance(data.get("world_size"), int):
            if data is not None:
                problems.append(f"{p.name}: not a launch record")
            continue
        lid = str(data.get("launch_id") or p.stem[len("launch-"):])
        found.append(LaunchView(lid, lid, data["world_size"], data, p.stat().st_mtime))
    found.sort(key=lambda lv: (lv.mtime, lv.launch_id))
    # a port-collision retry (<id>-r2) supersedes its earlier attempts: report the last one only
    def attempt(lid: str) -> tuple[str, int]:
        m = re.search(r"-r(\d+)$", lid)
        return (lid[: m.start()], int(m.group(1))) if m else (lid, 1)

    last: dict[str, LaunchView] = {}
    for lv in found:
        base, n = attempt(lv.launch_id)
        if base not in last or n > attempt(last[base].launch_id)[1]:
            last[base] = lv
    kept = [lv for lv in found if last[attempt(lv.launch_id)[0]] is lv]
    for lv in kept:
        lv.superseded = [o.launch_id for o in found if o is not lv and attempt(o.launch_id)[0] == attempt(lv.launch_id)[0]]
    names = []
    for lv in kept:
        short = lv.launch_id[len(run_id) + 1:] if lv.launch_id.startswith(run_id + "-") else lv.launch_id
        short = re.sub(r"-[0-9a-f]{4}(-r\d+)?$", "", short) or short
        names.append(short.replace(".", "_"))
    for lv, name in zip(kept, names):
        lv.name = name if names.count(name) == 1 else lv.launch_id.replace(".", "_")
    return kept


def _expected_host(data: Mapping[str, Any], rank: int) -> str:
    nodes = data.get("nodes") or {}
    if not nodes:
        return "unknown"
    per_node = max(1, int(data.get("world_size", 0)) // len(nodes))
    for host, node in nodes.items():
        if isinstance(node, dict) and node.get("node_rank") == rank // per_node:
            return host
    return "unknown"


def _remote_launch(status: Mapping[str, Any]) -> str | None:
    """The launch a rank status file belongs to: its remote log path is ``…/runs/<launch-id>/rank<N>.log``."""
    m = re.search(r"/runs/([^/]+)/rank\d+\.log$", str(status.get("log") or ""))
    return m.group(1) if m else None


def _rank_owners(root: Path, launches: list[LaunchView]) -> dict[tuple[str, int], str]:
    """Which launch the shared ``<host>/rank<N>.*`` files belong to (launches fetch into the same folder)."""
    owners: dict[tuple[str, int], str] = {}
    for lv in launches:  # in order: the last launch that had the rank wrote its files last
        for r in range(lv.world_size):
            owners[(_expected_host(lv.data, r), r)] = lv.launch_id
        for key, rr in (lv.data.get("ranks") or {}).items():
            if str(key).isdigit() and isinstance(rr, dict):
                owners[(str(rr.get("host")), int(key))] = lv.launch_id
    ids = {lv.launch_id for lv in launches} | {s for lv in launches for s in lv.superseded}
    for (host, rank) in list(owners):
        status = root / host / f"rank{rank}.json"
        with contextlib.suppress(OSError, ValueError):
            lid = _remote_launch(json.loads(status.read_text())) if status.exists() else None
            if lid in ids:
                owners[(host, rank)] = next((lv.launch_id for lv in launches if lid == lv.launch_id
                                             or lid in lv.superseded), lid)
    return owners


def _launch_ranks(root: Path, lv: LaunchView, owners: Mapping[tuple[str, int], str], launches: list[LaunchView],
                  problems: list[str]) -> list[RankView]:
    order = {x.launch_id: i for i, x in enumerate(launches)}
    names = {x.launch_id: x.name for x in launches}
    multi = len(launches) > 1
    recorded = {int(k): v for k, v in (lv.data.get("ranks") or {}).items() if str(k).isdigit() and isinstance(v, dict)}
    out = []
    for r in sorted(set(range(lv.world_size)) | set(recorded)):
        rec = recorded.get(r, {})
        host = str(rec.get("host") or _expected_host(lv.data, r))
        rv = RankView(r, host, launch=lv.name if multi else "", launch_id=lv.launch_id,
                      exit_code=rec.get("exit_code"), signal=rec.get("signal"))
        own_dir = root / host / lv.launch_id  # a per-launch fetch layout, if launch.py grows one
        if (own_dir / f"rank{r}.json").exists() or (own_dir / f"rank{r}.log").exists():
            _load_rank_files(root, rv, own_dir, problems)
        elif owners.get((host, r), lv.launch_id) == lv.launch_id:
            _load_rank_files(root, rv, root / host, problems)
        elif order.get(owners[(host, r)], -1) > order[lv.launch_id]:
            rv.overwritten_by = names.get(owners[(host, r)], owners[(host, r)])
        # else: the files on disk are an earlier launch's; this launch fetched none for the rank
        out.append(rv)
    return out


def _load_rank_files(root: Path, rv: RankView, folder: Path, problems: list[str]) -> None:
    status = folder / f"rank{rv.rank}.json"
    st = _read_json(status, problems, None)
    if isinstance(st, dict):
        if rv.exit_code is None and rv.signal is None:
            rv.exit_code, rv.signal = st.get("exit_code"), st.get("signal")
        rv.start = st.get("start") if isinstance(st.get("start"), int | float) else None
        rv.end = st.get("end") if isinstance(st.get("end"), int | float) else None
    logf = folder / f"rank{rv.rank}.log"
    if logf.exists():
        rv.log = logf.relative_to(root).as_posix()
    xml = folder / f"rank{rv.rank}.xml"
    if xml.exists():
        rv.junit = xml.relative_to(root).as_posix()
        _load_junit(xml, rv)


def _load_junit(path: Path, rv: RankView) -> None:
    try:
        tree = ET.parse(path)
    except (ET.ParseError, OSError) as exc:
        rv.junit_problem = f"{path.name} is not valid XML ({exc})"
        return
    top = tree.getroot()
    suites = [top] if top.tag == "testsuite" else list(top.iter("testsuite"))
    cases = list(top.iter("testcase"))
    for s in suites:
        for p in s.findall("properties/property"):
            rv.props.append((p.get("name", ""), p.get("value", "")))
    if suites:
        rv.junit_timestamp = suites[0].get("timestamp")
        rv.junit_time = sum(_f(s.get("time")) for s in suites if s.find("testcase") is not None)
    rv.cases = _fold_reruns(cases)


def _outcome_of(case: ET.Element) -> str:
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
        earlier, last = items[:-1], items[-1]
        # a teardown error after a failing call also repeats the name, but never with an empty first entry
        if not earlier or any(len(c) or _outcome_of(c) != "passed" for c in earlier):
            out.extend(items)
            continue
        tag = "rerunFailure" if _outcome_of(last) in ("failure", "error") else "flakyFailure"
        for i, _ in enumerate(earlier, 1):
            ET.SubElement(last, tag, type="rerun",
                          message=f"attempt {i} of {len(items)} failed (the rerun plugin records no details)")
        out.append(last)
    return out


def _attach_cores(rv: RankView, cores: list[CoreView], launches: list[LaunchView]) -> None:
    for core in cores:
        if core.host != rv.host or core.rank != rv.rank:
            continue
        # a core does not name its launch: give it to the last launch where this rank died by a signal,
        # else to the last launch that ran the rank
        holders = [r for lv in launches for r in lv.ranks if r.host == rv.host and r.rank == rv.rank]
        died = [r for r in holders if r.signal]
        if not holders or rv is (died or holders)[-1]:
            rv.cores.append(core)


def _describe(rv: RankView, lv: LaunchView | None) -> str:
    where = f"rank {rv.rank} on {rv.host}"
    if rv.signal:
        text = f"{where} died of {rv.signal}"
    elif rv.exit_code is None:
        node = ((lv.data.get("nodes") or {}).get(rv.host) or {}) if lv else {}
        text = f"{where} never reported" + (f" (lost {rv.host}: {node['lost']})" if node.get("lost") else "")
    else:
        text = f"{where} exited {rv.exit_code}"
    # stopped (never reported, or killed) because something else failed first
    consequence = (rv.exit_code is None and not rv.signal) or rv.signal in SECONDARY_SIGNALS
    if consequence and lv is not None and lv.failure and lv.data.get("failure_rank") != rv.rank \
            and lv.failure not in text:
        kind = lv.data.get("failure_kind")
        text += f"; the launch {'timed out' if kind == 'timeout' else 'failed'}: {lv.failure}"
    return text


def _classify(rv: RankView, lv: LaunchView | None, junit_expected: bool) -> None:
    c = rv.counts()
    if rv.cores or (rv.signal and rv.signal not in SECONDARY_SIGNALS):
        rv.outcome = "crash"
    elif rv.signal:
        rv.outcome = "killed"
    elif rv.exit_code is None and not rv.cases:
        rv.outcome = "lost"
    elif c["failures"] or c["errors"] or (rv.exit_code not in (0, None)) or rv.junit_problem \
            or (junit_expected and not rv.junit and not rv.overwritten_by):
        rv.outcome = "fail"
    else:
        rv.outcome = "pass"
    if rv.outcome != "pass":
        # pytest exits 1 when tests failed: then the failing tests are the reason, not the exit status
        plain_failure = rv.exit_code == 1 and not rv.signal and (c["failures"] or c["errors"])
        reasons = [_describe(rv, lv)] if (rv.signal or rv.exit_code != 0) and not plain_failure else []
        if rv.junit_problem:
            reasons.append(rv.junit_problem)
        elif c["failures"] or c["errors"]:
            first = next(x for x in rv.cases if _outcome_of(x) in ("failure", "error"))
            el = first.find("error") if first.find("error") is not None else first.find("failure")
            msg = (el.get("message") or "").splitlines()[0] if el is not None and el.get("message") else ""
            reasons.append(f"{c['failures'] + c['errors']} failing test(s), first {first.get('name')}"
                           + (f": {msg}" if msg else ""))
        elif junit_expected and not rv.junit and rv.exit_code == 0:
            reasons.append("exited 0 but wrote no JUnit report")
        reasons += [f"core dumped ({Path(core.exe or '?').name}, pid {core.pid})" for core in rv.cores]
        if rv.overwritten_by:
            reasons.append(f"its files were overwritten by launch {rv.overwritten_by}")
        rv.reason = "; ".join(reasons)


def _counts(cases: Iterable[ET.Element]) -> dict[str, int]:
    c = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for case in cases:
        c["tests"] += 1
        kind = _outcome_of(case)
        if kind == "error":
            c["errors"] += 1
        elif kind == "failure":
            c["failures"] += 1
        elif kind == "skipped":
            c["skipped"] += 1
    return c


def _junit_summary(path: Path, problems: list[str]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        top = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        problems.append(f"junit.xml: unreadable ({exc})")
        return None
    cases = list(top.iter("testcase"))
    failed = []
    for case in cases:
        kind = _outcome_of(case)
        if kind in ("failure", "error"):
            el = case.find(kind)
            failed.append({"classname": case.get("classname", ""), "name": case.get("name", ""), "kind": kind,
                           "message": (el.get("message") or "") if el is not None else ""})
    return {**_counts(cases), "failed": failed}


# -- phases ---------------------------------------------------------------------
def record_phase(rundir_path: str | os.PathLike[str], host: str, phase: str, start: float, end: float) -> None:
    """Append ``{host, phase, start, end}`` (epoch seconds) to ``phases.json``.

    Atomic and safe from several threads (and processes: a file lock next to it).
    Example: ``record_phase(rundir.path, "node1", "deploy", t0, time.time())``.
    """
    root = Path(rundir_path)
    start, end = float(start), float(end)
    if end < start:
        log.warning("phase %s on %s ends before it starts (%s < %s): recorded as zero length", phase, host, end, start)
        end = start
    entry = {"host": str(host), "phase": str(phase), "start": round(start, 3), "end": round(end, 3)}
    root.mkdir(parents=True, exist_ok=True)
    with _PHASE_LOCK, FileLock(str(root / ".phases.json.lock")):
        path = root / "phases.json"
        phases: list[Any] = []
        if path.exists():
            try:
                phases = json.loads(path.read_text())
                if not isinstance(phases, list):
                    raise ValueError("not a list")
            except ValueError as exc:
                log.warning("%s is unreadable (%s): starting it again", path, exc)
                phases = []
        phases.append(entry)
        write_atomic(path, json.dumps(phases, indent=1) + "\n")


def _phases(root: Path, launches: list[LaunchView], deploy: Mapping[str, Any] | None,
            problems: list[str]) -> list[Phase]:
    recorded = []
    for p in _read_json(root / "phases.json", problems, []) or []:
        try:
            recorded.append(Phase(str(p["host"]), str(p["phase"]), float(p["start"]), float(p["end"])))
        except (KeyError, TypeError, ValueError):
            problems.append(f"phases.json: bad entry {p!r}")
    have = {(p.host, p.phase) for p in recorded}
    derived = []
    # deploy: the manifest is written when deploy ends; steps ran in order on each host
    dm = root / "deploy-manifest.json"
    if isinstance(deploy, dict) and dm.exists():
        end = dm.stat().st_mtime
        start = end - float(deploy.get("duration") or 0.0)
        for host, m in (deploy.get("hosts") or {}).items():
            steps = {k: float(v) for k, v in (m.get("durations") or {}).items() if isinstance(v, int | float)}
            if (host, "deploy") not in have:
                detail = ", ".join(f"{k} {v:.1f}s" for k, v in steps.items())
                derived.append(Phase(host, "deploy", start, min(end, start + sum(steps.values())) if steps else end,
                                     True, detail))
    # run: from each rank's status file (host clock); collect: last rank end until the launch record
    for lv in launches:
        by_host: dict[str, list[tuple[int, float, float]]] = {}
        for r in lv.ranks:
            if r.start is not None and r.end is not None:
                by_host.setdefault(r.host, []).append((r.rank, r.start, r.end))
        for host, spans in by_host.items():
            s, e = min(x[1] for x in spans), max(x[2] for x in spans)
            tag = f" ({lv.name})" if lv.name and len(launches) > 1 else ""
            if (host, "run") not in have:
                derived.append(Phase(host, "run", s, e, True, f"ranks {_ranges([x[0] for x in spans])}{tag}"))
            if (host, "collect") not in have and lv.mtime > e:
                derived.append(Phase(host, "collect", e, lv.mtime, True, f"teardown and fetch{tag}"))
    return sorted(recorded + derived, key=lambda p: (p.start, p.host))


# -- cluster.xml -----------------------------------------------------------------
def write_cluster_junit(rundir_path: str | os.PathLike[str], cores: Sequence[Any] = ()) -> Path:
    """Merge every rank's JUnit into ``cluster.xml`` and return its path.

    Reads ``launch-*.json`` and ``<host>/rank*.xml``; every rank a launch expected
    gets a suite (a synthetic error when it never reported). ``cores``: objects with
    ``host, pid, exe, signal, rank, backtrace, local_path`` and ``describe()``
    (``framework.coredump.Core``); they are added to ``cores.json`` and become failures.
    """
    return _write_cluster(Path(rundir_path), cores, _Scrubber(()), None, None)


def _write_cluster(root: Path, cores: Sequence[Any], scrub: _Scrubber, status: str | None,
                   error: str | None) -> Path:
    if cores:
        _record_cores(root, cores, scrub)
    run = read_run(root)
    if status is None:
        status, error = run.manifest.get("status"), run.manifest.get("error")
    top = ET.Element("testsuites", name=run.run_id)
    for rv in run.ranks:
        top.append(_rank_suite(rv, run, scrub))
    cluster = _cluster_suite(run, status, error, scrub)
    if len(cluster):
        top.append(cluster)
    totals = {k: sum(int(s.get(k, "0")) for s in top) for k in ("tests", "failures", "errors")}
    for k, v in totals.items():
        top.set(k, str(v))
    top.set("time", _t(sum(float(s.get("time", "0")) for s in top)))
    ET.indent(top)
    path = write_atomic(root / "cluster.xml", scrub(ET.tostring(top, encoding="unicode", xml_declaration=True)))
    for problem in validate_junit(path):  # our own output must never be dropped by the xunit plugin
        log.error("cluster.xml does not validate: %s", problem)
    return path


def _rank_suite(rv: RankView, run: RunView, scrub: _Scrubber) -> ET.Element:
    lv = next((x for x in run.launches if x.launch_id == rv.launch_id), None)
    prefix = f"{_slug(rv.host)}.rank{rv.rank}" + (f".{rv.launch}" if rv.launch else "")
    name = (f"{rv.launch}." if rv.launch else "") + f"rank{rv.rank}@{rv.host}"
    suite = ET.Element("testsuite", name=name)
    props: list[tuple[str, str]] = [("rank", str(rv.rank)), ("host", rv.host), ("outcome", rv.outcome)]
    if lv is not None:
        props += [("world_size", str(lv.world_size)), ("launch_id", lv.launch_id)]
    props += [(k, str(v)) for k, v in (("exit_code", rv.exit_code), ("signal", rv.signal), ("log", rv.log),
                                       ("junit", rv.junit), ("start", rv.start), ("end", rv.end),
                                       ("overwritten_by", rv.overwritten_by)) if v is not None]
    props += [p for p in rv.props if p[0] not in {k for k, _ in props}]
    pe = ET.SubElement(suite, "properties")
    for k, v in props:
        ET.SubElement(pe, "property", name=k, value=scrub(_xml_text(v)))
    cases = [_clean_case(c, prefix) for c in rv.cases]
    synthetic = _synthetic_case(rv, lv, run, prefix, scrub)
    if synthetic is not None:
        cases.append(synthetic)
    suite.extend(cases)
    for name, count in _counts(cases).items():
        suite.set(name, str(count))
    duration = rv.duration if rv.duration is not None else sum(_f(c.get("time")) for c in cases)
    suite.set("time", _t(duration))
    stamp = _iso(rv.start) if rv.start is not None else rv.junit_timestamp
    if stamp:
        suite.set("timestamp", stamp)
    suite.set("hostname", rv.host)
    return suite


def _synthetic_case(rv: RankView, lv: LaunchView | None, run: RunView, prefix: str,
                    scrub: _Scrubber) -> ET.Element | None:
    """The testcase standing for how a rank ended when its own JUnit does not say it."""
    case = ET.Element("testcase", classname=prefix, name="rank_report", time=_t(rv.duration or 0.0))
    if rv.overwritten_by:
        note = (f"rank {rv.rank} on {rv.host}: per-rank files were overwritten by launch {rv.overwritten_by} "
                f"(same {rv.host}/rank{rv.rank}.* paths); only the exit status is known")
        ok = rv.exit_code == 0 and not rv.signal
        if ok:
            ET.SubElement(case, "system-out").text = note
        else:
            ET.SubElement(case, "error", type="RankFailed", message=scrub(_describe(rv, lv))).text = note
        return case
    if rv.cases and not rv.junit_problem:
        c = rv.counts()
        if rv.signal or (rv.exit_code not in (0, 1, None)) or (rv.exit_code == 1 and not
                                                                            (c["failures"] or c["errors"])):
            case.set("name", "rank_exit")  # the tests reported, then the process ended badly
        else:
            return None
    elif rv.outcome == "pass":
        ET.SubElement(case, "system-out").text = scrub(_xml_text(f"{_describe(rv, lv)}\n{_tail(run.path, rv.log)}"))
        return case
    message = rv.reason or _describe(rv, lv)
    kind = {"lost": "RankLost", "crash": "RankCrashed", "killed": "RankKilled"}.get(rv.outcome, "RankFailed")
    body = [message]
    if rv.log:
        body += [f"--- tail of {rv.log} ---", _tail(run.path, rv.log)]
    else:
        body.append("(no log was fetched for this rank)")
    ET.SubElement(case, "error", type=kind, message=scrub(_xml_text(message))).text = scrub(_xml_text("\n".join(body)))
    return case


def _cluster_suite(run: RunView, status: str | None, error: str | None, scrub: _Scrubber) -> ET.Element:
    suite = ET.Element("testsuite", name="cluster")
    for core in run.cores:
        where = f"{_slug(core.host)}.rank{core.rank}" if core.rank is not None else _slug(core.host)
        case = ET.SubElement(suite, "testcase", classname=f"{where}.cores",
                             name=f"core_dump[{Path(core.exe or 'unknown').name}:{core.pid}]", time="0")
        text = core.description + (f"\nfile: {core.local_path}" if core.local_path else "") + \
            (f"\n\n{core.backtrace}" if core.backtrace else "")
        ET.SubElement(case, "failure", type="CoreDump",
                      message=scrub(_xml_text(core.description or f"core dump of {core.exe}"))
                      ).text = scrub(_xml_text(text))
    for host, m in ((run.deploy or {}).get("hosts") or {}).items():
        if not isinstance(m, dict):
            continue
        case = ET.SubElement(suite, "testcase", classname=f"{_slug(host)}.deploy", name="deploy",
                             time=_t(sum(v for v in (m.get("durations") or {}).values() if isinstance(v, int | float))))
        if m.get("status") == "failed" or m.get("error"):
            msg = f"deploy on {host} failed at {m.get('step')}: {m.get('error')}"
            ET.SubElement(case, "error", type="DeployFailed", message=scrub(_xml_text(msg))).text = scrub(_xml_text(msg))
    for problem in run.problems:
        case = ET.SubElement(suite, "testcase", classname="camit.report", name="read_run_folder", time="0")
        ET.SubElement(case, "error", type="ReportProblem", message=scrub(_xml_text(problem)))
    if status not in _FINISHED:
        what = f"run {status or 'failed'}" + (f": {error}" if error else "")
        case = ET.SubElement(suite, "testcase", classname="camit.run", name="run", time="0")
        ET.SubElement(case, "error", type=f"Run{(status or 'error').capitalize()}",
                      message=scrub(_xml_text(what))).text = scrub(_xml_text(
                          what + "\nWhat finished is reported above; anything after this point did not run."))
    for k, v in _counts(suite).items():
        suite.set(k, str(v))
    suite.set("time", _t(sum(_f(c.get("time")) for c in suite)))
    return suite


def _clean_case(case: ET.Element, prefix: str) -> ET.Element:
    """A copy of ``case`` with the classname prefixed and only what junit-10.xsd allows."""
    original = case.get("classname") or ""
    out = ET.Element("testcase", classname=f"{prefix}.{original}" if original else prefix,
                     name=case.get("name") or "unnamed")
    for attr in ("time", "group"):
        if case.get(attr) is not None:
            out.set(attr, case.get(attr))  # type: ignore[arg-type]
    extra_out = []
    for child in case:
        if child.tag == "properties":  # record_property: testcase properties are invalid in junit-10
            extra_out += [f"property {p.get('name')} = {p.get('value')}" for p in child.iter("property")]
        elif child.tag in _CASE_CHILDREN:
            el = ET.SubElement(out, child.tag, {k: v for k, v in child.attrib.items() if k in ("type", "message")})
            el.text = child.text
            el.extend(list(child))
            if child.tag in ("failure", "error") and not el.get("message"):  # a failure must say something
                el.set("message", ((child.text or "").strip().splitlines() or [child.tag])[0][:200])
            if child.tag.startswith(("rerun", "flaky")) and not el.get("type"):
                el.set("type", "rerun")
    if extra_out:
        ET.SubElement(out, "system-out").text = "\n".join(extra_out)
    return out


def _record_cores(root: Path, cores: Sequence[Any], scrub: _Scrubber) -> None:
    """Merge ``cores`` into ``cores.json``, the file ``framework.coredump`` also writes (same entry shape)."""
    known = [c for c in _read_json(root / "cores.json", [], []) or [] if isinstance(c, dict)]

    def key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
        return (entry.get("host"), entry.get("pid"), entry.get("executable") or entry.get("exe"),
                _inside(root, entry.get("local_path")) or entry.get("local_path"))

    for core in cores:
        entry: dict[str, Any] = {}
        if callable(getattr(core, "to_json", None)):
            with contextlib.suppress(Exception):
                entry = dict(core.to_json())
        try:
            description = str(core.describe())
        except Exception as exc:  # a describe() that fails must not lose the core
            description = f"core dump on {getattr(core, 'host', '?')} (describe() failed: {exc})"
        rank = getattr(core, "rank", None)
        exe = getattr(core, "executable", None) or getattr(core, "exe", None) or getattr(core, "comm", None)
        entry.update({"host": str(getattr(core, "host", "unknown")), "pid": getattr(core, "pid", None),
                      "executable": str(exe) if exe else None, "signal": _signame(getattr(core, "signal", None)),
                      "rank": rank if isinstance(rank, int) else None, "describe": scrub(description),
                      "backtrace": scrub(str(getattr(core, "backtrace", "") or ""))})
        for attr in ("local_path", "backtrace_path"):
            value = getattr(core, attr, None)
            entry[attr] = (_inside(root, value) or str(value)) if value else None
        known = [k for k in known if key(k) != key(entry)]
        known.append(json.loads(json.dumps(entry, default=str)))
    known.sort(key=lambda c: (str(c.get("host")), c.get("rank") if isinstance(c.get("rank"), int) else -1,
                              c.get("pid") or 0))
    write_atomic(root / "cores.json", json.dumps(known, indent=2) + "\n")


# -- validation --------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _schema() -> Any:
    from lxml import etree

    with resources.as_file(resources.files("framework") / "data" / SCHEMA_FILE) as xsd:
        return etree.XMLSchema(etree.parse(str(xsd)))


def validate_junit(path: str | os.PathLike[str]) -> list[str]:
    """Problems of a JUnit file against junit-10.xsd (jenkinsci/xunit-plugin); ``[]`` when valid.

    Each problem is ``<file>:<line>: <message>``. The xunit plugin silently skips files
    that fail this schema, so every file we hand to Jenkins must return ``[]``.
    """
    try:
        from lxml import etree
    except ImportError:  # never report "valid" without having checked
        return ["lxml is not installed: cannot validate (pip install 'lxml>=5.2')"]
    p = Path(path)
    if not p.is_file():
        return [f"{p}: no such file"]
    try:
        doc = etree.parse(str(p), etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError as exc:
        return [f"{p}:{exc.lineno}: not well-formed XML: {exc.msg}"]
    schema = _schema()
    if schema.validate(doc):
        return []
    return [f"{p}:{e.line}: {e.message}" for e in schema.error_log]  # type: ignore[attr-defined]


# -- manifest.json --------------------------------------------------------------------
def write_manifest(rundir_path: str | os.PathLike[str], *, env: Any = None, seed: Any = None,
                   argv: Sequence[str] | None = None, started: Any = None, ended: Any = None, status: str = "ok",
                   error: Any = None, extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``manifest.json``: what ran, where, with what, and how it ended.

    Values left ``None`` keep what an earlier call recorded, so the plugin can write
    ``status="running"`` with env, seed and argv at the start and only the status at
    the end. ``env`` is an ``EnvConfig`` (stored as ``env.redacted()``: no secret is
    ever written), a mapping (secret-looking keys redacted) or a path.
    """
    return _write_manifest(Path(rundir_path), _Scrubber.from_env(env), env=env, seed=seed, argv=argv,
                           started=started, ended=ended, status=status, error=error, extra=extra)


def _write_manifest(root: Path, scrub: _Scrubber, *, env: Any, seed: Any, argv: Sequence[str] | None,
                    started: Any, ended: Any, status: str, error: Any, extra: Mapping[str, Any] | None,
                    report_errors: Sequence[str] = ()) -> Path:
    run = read_run(root)
    old = run.manifest
    doc: dict[str, Any] = {"schema": 1, "run_id": run.run_id, "status": status, "error": None}
    if error is not None:
        doc["error"] = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    elif status == old.get("status"):
        doc["error"] = old.get("error")
    times = [p.start for p in run.phases] + [p.end for p in run.phases]
    t0 = _epoch(started) or (old.get("started") or {}).get("epoch") or (min(times) if times else None)
    t1 = _epoch(ended) or (None if status == "running" else (old.get("ended") or {}).get("epoch") or time.time())
    doc["started"] = {"epoch": round(t0, 3), "iso": _iso(t0)} if t0 else None
    doc["ended"] = {"epoch": round(t1, 3), "iso": _iso(t1)} if t1 else None
    doc["duration"] = round(t1 - t0, 3) if t0 and t1 else None
    args = list(argv) if argv is not None else (old.get("command") or {}).get("argv")
    seed = seed if seed is not None else old.get("seed")
    doc["seed"] = seed
    doc["command"] = {"argv": args, "cwd": os.getcwd() if argv is not None else (old.get("command") or {}).get("cwd"),
                      "repro": _repro(args, seed)} if args else old.get("command")
    doc["framework"] = {"name": "camit", "version": __version__, "git": _git_sha(), "python": platform.python_version()}
    doc["controller"] = {"hostname": socket.gethostname(), "platform": platform.platform()}
    doc["env"] = _env_doc(env) if env is not None else old.get("env")
    doc["hosts"] = _hosts_doc(run, env, old.get("hosts") or {})
    doc["artifacts"], doc["versions"] = _artifacts_doc(run.deploy)
    doc["launches"] = [{"launch_id": lv.launch_id, "name": lv.name, "ok": lv.data.get("ok"),
                        "world_size": lv.world_size, "duration": lv.data.get("duration"),
                        "failure": lv.failure, "failure_kind": lv.data.get("failure_kind"),
                        "superseded": lv.superseded} for lv in run.launches]
    outcomes = {o: 0 for o in OUTCOMES}
    for r in run.ranks:
        outcomes[r.outcome] += 1
    doc["results"] = {"ranks": outcomes, "cores": len(run.cores), "controller": {k: v for k, v in (run.junit or {})
                                                                                 .items() if k != "failed"} or None}
    doc["files"] = _files(root)
    doc["extra"] = {**(old.get("extra") or {}), **dict(extra or {})}
    if report_errors or run.problems:
        doc["report_problems"] = list(report_errors) + run.problems
    text = json.dumps(doc, indent=2, default=str) + "\n"
    return write_atomic(root / "manifest.json", scrub(text))


def _env_doc(env: Any) -> dict[str, Any]:
    if hasattr(env, "redacted"):
        return {"file": str(getattr(env, "path", "") or getattr(env, "source", "")) or None,
                "document": env.redacted()}
    if isinstance(env, Mapping):
        return {"file": None, "document": _redact_mapping(env)}
    return {"file": os.fspath(env), "document": None}  # a path: never read here (it may hold clear secrets)


def _redact_mapping(doc: Any, key: str = "") -> Any:
    if isinstance(doc, Mapping):
        return {k: _redact_mapping(v, str(k)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_redact_mapping(v, key) for v in doc]
    if re.search(r"passw|pass$|token|secret|credential", key, re.I) or type(doc).__name__ == "Secret":
        return "***"
    return doc


def _hosts_doc(run: RunView, env: Any, old: Mapping[str, Any]) -> dict[str, Any]:
    specs = getattr(env, "hosts", None) or {}
    deploy_hosts = (run.deploy or {}).get("hosts") or {}
    out: dict[str, Any] = {}
    for h in dict.fromkeys([*specs, *old, *run.hosts]):
        entry = dict(old.get(h) or {})
        spec = specs.get(h)
        if spec is not None:
            entry.update({"address": getattr(spec, "address", None), "user": getattr(spec, "user", None),
                          "npu": spec.npu.describe() if hasattr(getattr(spec, "npu", None), "describe") else None})
        m = deploy_hosts.get(h)
        if isinstance(m, dict):
            entry["deploy"] = {k: m.get(k) for k in ("status", "installed_version", "vendor", "install_path",
                                                     "interpreter", "durations", "step", "error")}
        ranks = [r for r in run.ranks if r.host == h]
        if ranks:
            entry["ranks"] = {(f"{r.launch}." if r.launch else "") + f"rank{r.rank}": r.outcome for r in ranks}
        folder = run.path / h
        if folder.is_dir():
            entry["files"] = sorted(p.relative_to(run.path).as_posix() for p in folder.rglob("*")
                                    if p.is_file() and not p.name.startswith("."))
        out[h] = entry
    return out


def _artifacts_doc(deploy: Mapping[str, Any] | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    arts: dict[str, dict[str, Any]] = {}
    versions: dict[str, Any] = {}
    for host, m in ((deploy or {}).get("hosts") or {}).items():
        if not isinstance(m, dict):
            continue
        for a in m.get("artifacts") or []:
            rec = arts.setdefault(a.get("sha256", "?"), {k: a.get(k) for k in ("kind", "name", "sha256", "size")}
                                  | {"hosts": {}})
            rec["hosts"][host] = a.get("via")
        versions[host] = {"installed_version": m.get("installed_version"), "vendor": m.get("vendor"),
                          "ops": m.get("ops") or []}
    return list(arts.values()), versions


def _files(root: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or any(part.startswith(".") for part in p.relative_to(root).parts) \
                or rel in ("manifest.json", "index.html"):
            continue
        size = p.stat().st_size
        out.append({"path": rel, "size": size, "sha256": sha256_file(p) if size <= HASH_LIMIT else None})
    return out




@functools.lru_cache(maxsize=1)
def _git_sha() -> str | None:
    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _repro(argv: Sequence[str] | None, seed: Any) -> str | None:
    if not argv:
        return None
    args = list(argv)
    if Path(args[0]).name in ("pytest", "py.test", "__main__.py"):
        args[:1] = ["python", "-m", "pytest"]
    if seed is not None and not any(a == "--random-seed" or a.startswith("--random-seed=") for a in args):
        args += ["--random-seed", str(seed)]
    return shlex.join(args)


# -- index.html, finalize ------------------------------------------------------------
def write_index(rundir_path: str | os.PathLike[str]) -> Path:
    """Write ``index.html``: offline page with the phase timeline and the rank grid."""
    from framework.report_html import render

    root = Path(rundir_path)
    return write_atomic(root / "index.html", render(read_run(root)))


def finalize(rundir_path: str | os.PathLike[str], *, cores: Sequence[Any] = (), **manifest_kwargs: Any) -> None:
    """Write ``cluster.xml``, ``manifest.json`` and ``index.html`` from whatever the folder holds.

    Never raises: a step that fails is logged, replaced by a minimal file saying so
    and listed in the manifest's ``report_problems``. Call it from ``finally:`` with
    ``status="interrupted", error=exc`` when the run did not complete.
    """
    root = Path(rundir_path)
    try:
        root.mkdir(parents=True, exist_ok=True)
        scrub = _Scrubber.from_env(manifest_kwargs.get("env"))
    except Exception:
        log.exception("cannot prepare the report folder %s", root)
        return
    kw = {"env": None, "seed": None, "argv": None, "started": None, "ended": None, "status": "ok", "error": None,
          "extra": None, **manifest_kwargs}
    err = kw["error"]
    err_text = (f"{type(err).__name__}: {err}" if isinstance(err, BaseException) else str(err)) if err else None
    problems: list[str] = []
    steps = [
        ("cluster.xml", lambda: _write_cluster(root, cores, scrub, kw["status"], err_text), _fallback_cluster),
        ("manifest.json", lambda: _write_manifest(root, scrub, report_errors=problems, **kw), _fallback_manifest),
        ("index.html", lambda: write_atomic(root / "index.html", scrub(_render(root))), _fallback_index),
    ]
    for name, step, fallback in steps:
        try:
            step()
        except Exception as exc:
            log.exception("report: writing %s failed", name)
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            try:
                fallback(root, kw["status"], scrub(err_text or ""), scrub(problems[-1]))
            except Exception:
                log.exception("report: even the fallback %s failed", name)


def _render(root: Path) -> str:
    from framework.report_html import render

    return render(read_run(root))


def _fallback_cluster(root: Path, status: str, error: str, problem: str) -> None:
    top = ET.Element("testsuites", name=root.resolve().name, tests="1", failures="0", errors="1", time="0")
    suite = ET.SubElement(top, "testsuite", name="cluster", tests="1", failures="0", errors="1", time="0")
    case = ET.SubElement(suite, "testcase", classname="camit.report", name="cluster_report", time="0")
    ET.SubElement(case, "error", type="ReportFailed", message=_xml_text(f"could not merge rank results: {problem}")
                  ).text = _xml_text(f"run status: {status}\n{error}")
    write_atomic(root / "cluster.xml", ET.tostring(top, encoding="unicode", xml_declaration=True))


def _fallback_manifest(root: Path, status: str, error: str, problem: str) -> None:
    doc = {"schema": 1, "run_id": root.resolve().name, "status": status, "error": error or None,
           "framework": {"name": "camit", "version": __version__}, "report_problems": [problem]}
    write_atomic(root / "manifest.json", json.dumps(doc, indent=2) + "\n")


def _fallback_index(root: Path, status: str, error: str, problem: str) -> None:
    from html import escape

    write_atomic(root / "index.html", f"<!doctype html><meta charset=utf-8><title>{escape(root.name)}</title>"
                 f"<h1>camit run {escape(root.resolve().name)}: {escape(status)}</h1><p>{escape(error)}</p>"
                 f"<p>The report page could not be built: {escape(problem)}</p>"
                 "<p><a href='cluster.xml'>cluster.xml</a> · <a href='junit.xml'>junit.xml</a> · "
                 "<a href='manifest.json'>manifest.json</a></p>")


# -- terminal summary ------------------------------------------------------------------
_CHAR = {"pass": ".", "fail": "F", "crash": "C", "killed": "K", "lost": "L"}


def terminal_summary(rundir_path: str | os.PathLike[str], repro: str | None = None) -> str:
    """One screen for the end of a pytest run: ranks per host, problems, slowest phases, how to reproduce.

    Pure: reads the folder's files only. ``repro`` overrides the command built from the
    manifest's argv and seed.
    """
    run = read_run(rundir_path)
    m = run.manifest
    status = str(m.get("status") or "unknown")
    head = f"camit run {run.run_id}: {status.upper()}"
    if m.get("error"):
        head += f" ({_short(str(m['error']), 60)})"
    if m.get("duration"):
        head += f" in {_dur(float(m['duration']))}"
    lines = [head]
    cx = run.path / "cluster.xml"
    counts = []
    if cx.exists():
        with contextlib.suppress(ET.ParseError, OSError):
            counts.append("cluster.xml " + _count_text(_counts(ET.parse(cx).getroot().iter("testcase"))))
    if run.junit:
        counts.append("junit.xml " + _count_text(run.junit))
    if counts:
        lines.append("  " + "; ".join(counts))
    if run.ranks:
        lines.append("  ranks  (. pass  F fail  C crash  K killed  L lost)")
        groups: list[tuple[str, list[RankView]]] = [(lv.name if len(run.launches) > 1 else "", lv.ranks)
                                                    for lv in run.launches]
        if run.orphans:
            groups.append(("(no launch record)", run.orphans))
        width = max(len(h) for h in run.hosts) if run.hosts else 4
        for name, ranks in groups:
            if name:
                lines.append(f"  {name}")
            for host in dict.fromkeys(r.host for r in ranks):
                mine = sorted((r for r in ranks if r.host == host), key=lambda r: r.rank)
                chars = "".join(_CHAR[r.outcome] for r in mine)
                tally = ", ".join(f"{n} {o}" for o in OUTCOMES if (n := sum(r.outcome == o for r in mine)))
                label = f"r{_ranges([r.rank for r in mine])}"
                for i in range(0, len(chars), 64):  # 64 ranks a line keeps a 1024-rank host on one screen
                    first = i == 0
                    row = f"    {host if first else '':<{width}}  {label if first else '':<9} {chars[i:i + 64]:<{min(64, len(chars))}}"
                    lines.append(f"{row}  {tally}" if first else row)
    bad = [r for r in run.ranks if r.outcome != "pass"]
    for r in bad[:5]:
        where = (f"{r.launch} " if r.launch else "") + f"{r.host} r{r.rank}"
        lines.append(f"  {r.outcome.upper():6} {where}: " + _short(r.reason.removeprefix(f"rank {r.rank} on {r.host} "), 90))
    if len(bad) > 5:
        lines.append(f"  … {len(bad) - 5} more rank(s) not passing: see index.html")
    for core in run.cores[:3]:
        frame = core.top_frame
        where = f"{core.host} r{core.rank}" if core.rank is not None else core.host
        what = f"{Path(core.exe or '?').name} pid {core.pid} {core.signal or ''}".rstrip()
        lines.append("  CORE   " + _short(f"{where}: {what}" + (f" — {frame}" if frame else ""), 100))
    if len(run.cores) > 3:
        lines.append(f"  … {len(run.cores) - 3} more core dump(s)")
    for failed in (run.junit or {}).get("failed", [])[:3]:
        first = (failed["message"].splitlines() or [""])[0]
        lines.append("  TEST   " + _short(f"{failed['classname']}::{failed['name']}: {first}", 100))
    slow = sorted(run.phases, key=lambda p: -p.duration)[:6]
    if slow:
        row = "  slowest phases (~ estimated):"
        for p in slow:
            item = f"  {p.host} {p.phase} {_dur(p.duration)}{'~' if p.derived else ''}"
            if len(row) + len(item) > 100:
                lines.append(row)
                row = "   "
            row += item
        lines.append(row)
    lines.append(f"  report: {run.path / 'index.html'}")
    command = repro or (m.get("command") or {}).get("repro")
    lines.append(f"  reproduce: {command}" if command else "  reproduce: (no command line recorded)")
    if run.problems:
        lines.append("  report problems: " + _short("; ".join(run.problems), 90))
    return "\n".join(lines)


def _count_text(c: Mapping[str, int]) -> str:
    return f"{c['tests']} tests, {c['failures']} failed, {c['errors']} errors, {c['skipped']} skipped"


# -- small helpers ------------------------------------------------------------------------
class _Scrubber:
    """Replaces known secret values (the env's passwords and secret launch variables) by ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True)

    @classmethod
    def from_env(cls, env: Any) -> _Scrubber:
        found = []
        for spec in (getattr(env, "hosts", None) or {}).values():
            pw = getattr(spec, "password", None)
            if pw is not None and hasattr(pw, "reveal"):
                found.append(pw.reveal())
        for value in (getattr(getattr(env, "launch", None), "env", None) or {}).values():
            if hasattr(value, "reveal"):
                found.append(value.reveal())
        return cls(found)

    def __call__(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, "***")
        return text


def _xml_text(text: Any) -> str:
    return _NOT_XML.sub("", _ANSI.sub("", str(text)))


def _tail(root: Path, rel: str | None, lines: int = TAIL_LINES) -> str:
    if not rel:
        return ""
    path = root / rel
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - 64 * 1024))
            data = fh.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {rel}: {exc})"
    return "\n".join(_ANSI.sub("", data).splitlines()[-lines:])


def _inside(root: Path, path: Any) -> str | None:
    """``path`` relative to the run folder when it lies inside it (absolute or relative), else None."""
    if not path:
        return None
    p = Path(str(path))
    if not p.is_absolute():
        return p.as_posix() if (root / p).exists() else None
    with contextlib.suppress(ValueError, OSError):
        return p.resolve().relative_to(root.resolve()).as_posix()
    return None


def _slug(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", host)


def _signame(sig: Any) -> str | None:
    if sig is None:
        return None
    if isinstance(sig, int):
        import signal as _signal

        with contextlib.suppress(ValueError):
            return _signal.Signals(sig).name
    return str(sig)


def _t(seconds: float) -> str:
    """SUREFIRE_TIME: no sign, at most three decimals."""
    return f"{max(0.0, float(seconds)):.3f}"


def _f(text: str | None) -> float:
    try:
        return float((text or "0").replace(",", ""))
    except ValueError:
        return 0.0


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(str(value)).timestamp()
    return None


def _iso(epoch: float | None) -> str | None:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds") if epoch else None


def _ranges(numbers: Iterable[int]) -> str:
    nums = sorted(set(numbers))
    parts, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts)


def _dur(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"

