"""A failed launch's cluster timeline on one clock, and its root cause: the earliest causal
event."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from framework.launch.cause import CONSEQUENCE, first_error
from framework.launch.stacks import read_tail
from framework.records.folder import update_json

SCHEMA = 1
FILE = "timeline.json"
#: events kept in timeline.json (causes and consequences first, then the earliest of the rest)
MAX_EVENTS = 400
MAX_TEXT = 240
READ_BYTES = 4 * 1024 * 1024
CAUSE, CONSEQ, INFO = "cause", "consequence", "info"
#: kernel fault codes a device reports (torch_npu/csrc/core/npu/NPUErrorCodes.h; see framework/cores/logs.py)
DEVICE_FAULT = re.compile(r"\b50701[4-6]\b|\b50703[3-6]\b|\b50704[2-7]\b|\b507901\b")
#: signals that mean the rank itself crashed (SIGKILL/SIGTERM are usually the teardown's)
CRASH_SIGNALS = frozenset({"SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL", "SIGSYS", "SIGTRAP"})
PLOG_LINE = re.compile(r"^\[(?P<level>[A-Z]+)\] (?P<mod>[A-Z_]+)\((?P<pid>\d+),[^)]{0,64}\):"
                       r"(?P<stamp>\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d)\.(?P<ms>\d{3})\.(?P<us>\d{3}) ?(?P<text>.*)$")
#: a log line that starts with a date and time (python logging, ISO): ``2026-12-06 05:58:46,123``
LOG_STAMP = re.compile(r"^(?:\[[^\]\n]{0,40}\]:\s?)?(?P<stamp>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)"
                       r"(?:[.,](?P<frac>\d{1,6}))?")
OOM_KILL = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (?P<pid>\d+)")
#: a dmesg line as ``dmesg`` prints it by default: ``[ 1234.567890] text`` (seconds since boot)
DMESG_LINE = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]\s?(?P<text>.*)$")
#: the pid a kernel line is about: ``python3[4242]: segfault at``, ``Killed process 4242 (python3)``,
#: ``pid=4242``
DMESG_PID = re.compile(r"^[^\s\[]{1,64}\[(?P<a>\d+)\]:|\b(?:[Pp]rocess|pid)[ =:]?(?P<b>\d+)\b")
#: kernel lines worth an event even when they name no rank: a host's own trouble
KERNEL_TROUBLE = re.compile(
    r"oom-kill|Out of memory|segfault at|traps:|general protection|Hardware Error|\bmce\b|\bEDAC\b|"
    r"I/O error|NETDEV WATCHDOG|[Ll]ink is [Dd]own|soft lockup|hung_task|blocked for more than|"
    r"BUG:|Oops|"
    r"\bdavinci|\bdevmm|\bhisi|\bnpu", re.IGNORECASE)
#: a rank's crash as the kernel saw it (the rank's exit, from its status, stays the cause)
KERNEL_CRASH = re.compile(r"segfault at|traps:|general protection")
#: supervisor lines kept as events (``HB`` and ``TREE`` are not events)
SUPERVISOR_WORDS = frozenset(
    {"STARTED", "RANK", "EXIT", "KILLED", "SWEPT", "STACKS", "LEFT", "DONE", "CLOSED"})
SUPERVISOR_FILE = "supervisor-lines.jsonl"
DMESG_CLOCK = "dmesg-clock.json"


@dataclass(frozen=True)
class Event:
    """Something a host (or camit) recorded at ``t`` (controller clock, epoch seconds)."""

    t: float
    host: str
    rank: int | None
    source: str  # rank-exit | rank-log | plog | dmesg | supervisor | phase
    kind: str  # cause | consequence | info
    what: str  # device fault | crash | oom kill | raised | peer absence | exit | phase | error
    text: str

    def key(self) -> tuple[float, str, int, str]:
        return (self.t, self.host, -1 if self.rank is None else self.rank, self.text)

    def describe(self) -> str:
        who = f"rank {self.rank} on {self.host}" if self.rank is not None else self.host
        return f"{who}: {self.what}: {self.text}"


@dataclass(frozen=True)
class Timeline:
    events: tuple[Event, ...]
    offsets: Mapping[str, float]
    note: str

    @property
    def root(self) -> Event | None:
        return next((e for e in self.events if e.kind == CAUSE), None)

    @property
    def consequences(self) -> list[Event]:
        return [e for e in self.events if e.kind == CONSEQ]

    @property
    def t0(self) -> float:
        """The timeline's origin: the root cause's time, else the first event's."""
        if self.root:
            return self.root.t
        return self.events[0].t if self.events else 0.0

    def kept(self) -> list[Event]:
        """The events timeline.json keeps: causes and consequences first, then the earliest of the rest."""
        telling = [e for e in self.events if e.kind != INFO][:MAX_EVENTS]
        info = [e for e in self.events if e.kind == INFO][:MAX_EVENTS // 4]
        return sorted(telling + info, key=Event.key)

    def to_json(self) -> dict[str, Any]:
        root, keep, t0 = self.root, self.kept(), self.t0
        return {
            "schema": SCHEMA,
            "clock": {"reference": "controller", "offsets": dict(self.offsets), "note": self.note},
            "t0": t0,
            "root_cause": asdict(root) if root else None,
            "consequences": [asdict(e) for e in self.consequences[:MAX_EVENTS]],
            "events": [{**asdict(e), "dt": round(e.t - t0, 6)} for e in keep],
            "dropped": len(self.events) - len(keep),
        }


def _clip(text: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text.strip())
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def _local(stamp: str, fmt: str, frac: float) -> float | None:
    """A host's local wall-clock stamp as epoch seconds (read in the controller's time zone)."""
    try:
        return time.mktime(time.strptime(stamp, fmt)) + frac
    except (ValueError, OverflowError):
        return None


def classify(text: str) -> tuple[str, str]:
    """(kind, what) of an error text: a peer's absence is a consequence; a fault code a device fault."""
    if CONSEQUENCE.search(text):
        return CONSEQ, "peer absence"
    if DEVICE_FAULT.search(text):
        return CAUSE, "device fault"
    return CAUSE, "raised"


# -- parsers (pure: text in, host-clock events out) -------------------------------------------------------
def plog_events(text: str, host: str, ranks_by_pid: Mapping[int, int]) -> list[Event]:
    """ERROR lines of a plog that name a device fault or a peer's absence (other lines are not events)."""
    return [e for e in (_plog_event(line, host, ranks_by_pid) for line in text.splitlines()) if e]


def _plog_event(line: str, host: str, ranks_by_pid: Mapping[int, int]) -> Event | None:
    m = PLOG_LINE.match(line)
    if not m or m["level"] != "ERROR":
        return None
    kind, what = classify(m["text"])
    if what == "raised":  # an ERROR line that is neither: context, not a cause
        kind, what = INFO, "error"
    t = _local(m["stamp"], "%Y-%m-%d-%H:%M:%S", int(m["ms"]) / 1e3 + int(m["us"]) / 1e6)
    if t is None:
        return None
    rank = ranks_by_pid.get(int(m["pid"]))
    return Event(t, host, rank, "plog", kind, what, _clip(f"{m['mod']}: {m['text']}"))


def log_events(text: str, host: str, rank: int | None) -> list[Event]:
    """Timestamped lines of a rank log that carry a device fault code or report a peer's absence."""
    return [e for e in (_log_event(line, host, rank) for line in text.splitlines()) if e]


def _log_event(line: str, host: str, rank: int | None) -> Event | None:
    m = LOG_STAMP.match(line)
    if not m or not _telling(line):
        return None
    frac = float("0." + m["frac"]) if m["frac"] else 0.0
    t = _local(m["stamp"].replace("T", " "), "%Y-%m-%d %H:%M:%S", frac)
    if t is None:
        return None
    kind, what = classify(line)
    return Event(t, host, rank, "rank-log", kind, what, _clip(line[m.end():]))


def _telling(line: str) -> bool:
    """A log line worth an event: it carries a device fault code or reports a peer's absence."""
    return bool(DEVICE_FAULT.search(line) or CONSEQUENCE.search(line))


def oom_pids(dmesg: str) -> set[int]:
    return {int(m["pid"]) for m in OOM_KILL.finditer(dmesg)}


def boot_time(clock: Mapping[str, Any]) -> float | None:
    """A host's boot time on its own wall clock from ``dmesg-clock.json`` (``now`` and ``uptime``
    read together)."""
    now, up = clock.get("now"), clock.get("uptime")
    if not (_is_seconds(now) and _is_seconds(up)):
        return None
    return float(now) - float(up)  # type: ignore[arg-type]


def _is_seconds(value: object) -> bool:
    """A JSON number of seconds: an int or float (not a bool), not negative."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value >= 0


def _dmesg_pid(text: str) -> int | None:
    m = DMESG_PID.search(text)
    return int(m["a"] or m["b"]) if m else None


def _dmesg_kind(text: str, rank: int | None) -> tuple[str, str] | None:
    """(kind, what) of a kernel line; None: about neither a rank nor a host's trouble."""
    if OOM_KILL.search(text):
        return (CAUSE, "oom kill") if rank is not None else (INFO, "oom kill")
    if KERNEL_CRASH.search(text):
        return INFO, "kernel: crash"
    if rank is not None or KERNEL_TROUBLE.search(text):
        return INFO, "kernel"
    return None


def dmesg_events(text: str, host: str, boot: float, ranks_by_pid: Mapping[int, int]) -> list[Event]:
    """Kernel lines about a rank's pid or a host's trouble, placed at ``boot`` + their seconds."""
    found = (_dmesg_event(line, host, boot, ranks_by_pid) for line in text.splitlines())
    return [e for e in found if e]


def _dmesg_event(line: str, host: str, boot: float,
                 ranks_by_pid: Mapping[int, int]) -> Event | None:
    m = DMESG_LINE.match(line)
    if not m:
        return None
    pid = _dmesg_pid(m["text"])
    rank = ranks_by_pid.get(pid) if pid is not None else None
    found = _dmesg_kind(m["text"], rank)
    if not found:
        return None
    return Event(round(boot + float(m["s"]), 6), host, rank, "dmesg", *found, _clip(m["text"]))


def supervisor_events(text: str, host: str) -> list[Event]:
    """The supervisor's lines as the controller received them (``{"t": epoch, "line": text}``)."""
    items = (_supervisor_item(raw) for raw in text.splitlines())
    return [_supervisor_event(t, line, host) for t, line in filter(None, items)]


def _supervisor_item(raw: str) -> tuple[float, str] | None:
    """(t, line) of one received line that is a supervisor event; None: not JSON, or not an event."""
    try:
        item = json.loads(raw)
    except ValueError:
        return None
    t, line = _field(item, "t"), _field(item, "line")
    if not isinstance(t, (int, float)) or not isinstance(line, str):
        return None
    return (float(t), line) if _is_event_line(line) else None


def _is_event_line(line: str) -> bool:
    """A supervisor line kept as an event (its first word in SUPERVISOR_WORDS)."""
    words = line.split()
    return bool(words) and words[0] in SUPERVISOR_WORDS


def _rank_named(words: list[str]) -> int | None:
    """The rank a ``RANK <n> ...`` line is about (None: another line)."""
    if words[0] != "RANK" or len(words) < 2 or not words[1].isdigit():
        return None
    return int(words[1])


def _supervisor_event(t: float, line: str, host: str) -> Event:
    """A supervisor line as an event: a connection closed outside the teardown is the host lost."""
    words = line.split()
    rank = _rank_named(words)
    lost = words[0] == "CLOSED" and "teardown" not in words
    kind, what = (CAUSE, "host lost") if lost else (INFO, "supervisor")
    return Event(t, host, rank, "supervisor", kind, what, _clip(line))


def _absence(text: str) -> str | None:
    """The first line of ``text`` reporting a peer's absence, when no line of it names a device fault."""
    if DEVICE_FAULT.search(text):
        return None
    return next((line.strip() for line in text.splitlines() if CONSEQUENCE.search(line)), None)


def exit_event(status: Mapping[str, Any], host: str, log_text: str | None, oom: set[int]) -> Event | None:
    """A rank's exit from its status JSON (rankwrap), classified by how it ended and what its log says."""
    end, rank = status.get("end"), status.get("rank")
    if not isinstance(end, (int, float)) or not isinstance(rank, int):
        return None
    kind, what, text = _how_it_ended(status, log_text or "", oom)
    return Event(float(end), host, rank, "rank-exit", kind, what, _clip(text))


def _how_it_ended(status: Mapping[str, Any], log_text: str, oom: set[int]) -> tuple[str, str, str]:
    """(kind, what, text) of a rank's exit: by its signal first, then by its exit code and first error."""
    sig = status.get("signal")
    if sig:
        return _signal_end(sig, status.get("pid") in oom, log_text)
    code, error = status.get("exit_code"), first_error(log_text)
    if code and error:
        return (*classify(error), error)
    return INFO, "exit", f"exited {code}"


def _signal_end(sig: str, oom_killed: bool, log_text: str) -> tuple[str, str, str]:
    """(kind, what, text) of a rank a signal ended: a crash, the OOM killer, else the teardown's."""
    if sig in CRASH_SIGNALS:
        return _crash(sig, first_error(log_text), log_text)
    if sig == "SIGKILL" and oom_killed:
        return CAUSE, "oom kill", "killed by the kernel's OOM killer (dmesg)"
    return INFO, "exit", f"died of {sig}"


def _crash(sig: str, error: str | None, log_text: str) -> tuple[str, str, str]:
    """A fatal signal: the rank's crash, or, after a peer's absence (HCCL's watchdog aborts), its consequence."""
    absent = _absence(error or log_text)
    kind, what = (CONSEQ, "peer absence") if absent else (CAUSE, "crash")
    detail = error or absent
    return kind, what, f"died of {sig}: {detail}" if detail else f"died of {sig}"


# -- reading a run folder --------------------------------------------------------------------------------
def _read(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - READ_BYTES))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _json_doc(path: Path) -> object:
    """A JSON file's document; None when the file is missing or unreadable or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _field(doc: object, key: str) -> object:
    """``doc[key]`` of a JSON object; None when ``doc`` is not an object or has no ``key``."""
    return doc.get(key) if isinstance(doc, dict) else None


def _statuses(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("rank*.json")):
        data = _json_doc(path)
        if isinstance(data, dict):
            out.append({**data, "_log": path.with_suffix(".log")})
    return out


def _ranks_by_pid(statuses: list[dict[str, Any]]) -> dict[int, int]:
    return {s["pid"]: s["rank"] for s in statuses
            if isinstance(s.get("pid"), int) and isinstance(s.get("rank"), int)}


def host_events(host: str, folder: Path, dmesg: str = "", boot: float | None = None) -> list[Event]:
    """Every event of one host's fetched launch folder (host clock); dmesg's need its ``boot``."""
    statuses = _statuses(folder)
    by_pid = _ranks_by_pid(statuses)
    oom = oom_pids(dmesg)
    events: list[Event] = []
    for s in statuses:
        events += _rank_events(s, host, oom)
    for plog in sorted(folder.rglob("plog-*.log")):
        events += plog_events(_read(plog), host, by_pid)
    return events + (dmesg_events(dmesg, host, boot, by_pid) if boot is not None else [])


def _rank_events(status: Mapping[str, Any], host: str, oom: set[int]) -> list[Event]:
    """One rank's exit and its log's timestamped lines (a rank without a log: its exit only)."""
    log_path: Path = status["_log"]
    has_log = log_path.is_file()
    end = exit_event(status, host, read_tail(log_path) if has_log else None, oom)
    found = [end] if end is not None else []
    if has_log:
        found += log_events(_read(log_path), host, status.get("rank"))
    return found


def phase_events(phases: Iterable[Mapping[str, Any]]) -> list[Event]:
    """camit's own phases (controller clock already): one event at each phase's start."""
    return [e for e in map(_phase_event, phases) if e]


def _phase_event(phase: Mapping[str, Any]) -> Event | None:
    """One phase's start as an event; None: a record without a numeric start, a host or a name."""
    start, host, name = phase.get("start"), phase.get("host"), phase.get("phase")
    if not isinstance(start, (int, float)) or not isinstance(host, str):
        return None
    if not isinstance(name, str):
        return None
    return Event(float(start), host, None, "phase", INFO, "phase", _clip(f"{name} began"))


def offsets_of(root: Path) -> tuple[dict[str, float], str]:
    """Each host's clock offset from the controller's (``preflight.json``), and a note on where they came from."""
    offsets = _preflight_offsets(root)
    if offsets:
        return offsets, "host stamps moved to the controller's clock by preflight's clock offsets"
    return {}, "no preflight clock offsets in this run: every host's offset taken as 0"


def _preflight_offsets(root: Path) -> dict[str, float]:
    """``preflight.json``'s ``clock.offsets`` (host -> seconds); {}: none, or not readable."""
    offsets = _field(_field(_json_doc(root / "preflight.json"), "clock"), "offsets")
    if not isinstance(offsets, dict):
        return {}
    try:
        return {str(h): float(v) for h, v in offsets.items()}
    except (TypeError, ValueError):
        return {}


def _phases(root: Path) -> list[Mapping[str, Any]]:
    data = _json_doc(root / "phases.json")
    items = data.get("phases", data) if isinstance(data, dict) else data
    return [p for p in items if isinstance(p, dict)] if isinstance(items, list) else []


def _boot(root: Path, host: str) -> float | None:
    clock = _json_doc(root / host / DMESG_CLOCK)
    return boot_time(clock) if isinstance(clock, dict) else None


def build(root: Path, folders: Mapping[str, Path]) -> Timeline:
    """The timeline of a launch whose hosts' files are in ``folders`` ({host: folder}) below run folder ``root``."""
    offsets, note = offsets_of(root)
    events: list[Event] = []
    for host in sorted(folders):
        dmesg = _read(root / host / "dmesg.txt")
        off = offsets.get(host, 0.0)
        found = host_events(host, folders[host], dmesg, _boot(root, host))
        events += [_shift(e, off) for e in found]
        # the supervisors' lines are on the controller's clock already
        events += supervisor_events(_read(folders[host] / SUPERVISOR_FILE), host)
    events += phase_events(_phases(root))
    return Timeline(tuple(sorted(set(events), key=Event.key)), offsets, note)


def refresh(root: Path) -> Timeline | None:
    """Build ``root``'s ``timeline.json`` again (the hosts' dmesg came after it); None: it has none."""
    data = _json_doc(root / FILE)
    if not isinstance(data, dict):
        return None
    folders = _folders(root, data)
    if not folders:
        return None
    found = build(root, folders)
    write(root, found, data.get("launch"), folders)
    _late_cause(root, found, data.get("launch"))
    return found


def _folders(root: Path, doc: object) -> dict[str, Path]:
    """The hosts' folders a timeline.json names ({host: path below ``root``}); empty: none."""
    folders = _field(doc, "folders")
    if not isinstance(folders, dict):
        return {}
    return {str(h): root / str(rel) for h, rel in folders.items()}


def _late_cause(root: Path, timeline: Timeline, launch_id: object) -> None:
    """A root cause only the kernel's lines show (an OOM kill of a rank): the launch record's cause line
    says it too, so the summary and the report's first lines name it (the launch wrote its cause before
    the hosts' dmesg came back)."""
    record = root / f"launch-{launch_id}.json"
    if timeline.root is None or timeline.root.source != "dmesg" or not record.is_file():
        return
    line = root_line(timeline)
    update_json(record, lambda doc: {**doc, "cause": line} if isinstance(doc, dict) else doc)


def _shift(e: Event, offset: float) -> Event:
    return Event(round(e.t - offset, 6), e.host, e.rank, e.source, e.kind, e.what, e.text)


def write(root: Path, timeline: Timeline, launch_id: str | None = None,
          folders: Mapping[str, Path] | None = None) -> Path:
    """``<root>/timeline.json`` (the run's last failed launch's, named by ``launch_id``; ``folders``
    kept for :func:`refresh`)."""
    path = root / FILE
    tmp = path.with_name(f".{FILE}.tmp")
    rel = {h: Path(f).relative_to(root).as_posix() for h, f in (folders or {}).items()
           if Path(f).is_relative_to(root)}
    doc = {"launch": launch_id, "folders": rel, **timeline.to_json()}
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def root_line(timeline: Timeline) -> str | None:
    """The cause line: the root cause, with how many consequences followed it."""
    root = timeline.root
    if root is None:
        return None
    n = len(timeline.consequences)
    after = f" (root cause by the timeline; {n} consequence event(s) on other ranks after it)" if n else \
        " (root cause by the timeline)"
    return root.describe() + after


__all__ = ["Event", "Timeline", "boot_time", "build", "classify", "dmesg_events", "exit_event",
           "host_events", "log_events", "plog_events", "refresh", "root_line", "supervisor_events",
           "write"]
