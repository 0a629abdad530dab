"""Finding core dumps: which appeared on a host between two scans (pure, no I/O).

The one scan script per host, the parsers of its output into a :class:`HostScan`, and the cores that
appeared between two scans (:func:`new_candidates`). Design: docs/internals/cores.md.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import posixpath
import re
import signal as _signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from framework import commands
from framework.cores.pattern import PIPE_HANDLERS, CorePattern, parse_core_pattern
from framework.remote.sections import Record, read_records, sh_tag

log = logging.getLogger("camit.coredump")

#: coredumpctl's time is the journal entry's, a little after the crash: look back this far
JOURNAL_LAG = 300
SCAN_LIMIT = 5000
_NEEDLE = dict(PIPE_HANDLERS)


# -- the scan script -------------------------------------------------------------------------------
@dataclass(frozen=True)
class CoreSources:
    """Where the handlers keep their cores (tests point these at fakes)."""

    proc_dir: str = "/proc/sys/kernel"
    coredumpctl: str = "coredumpctl"
    apport_dirs: tuple[str, ...] = ("/var/crash", "/var/lib/apport/coredump")
    abrt_dirs: tuple[str, ...] = ("/var/spool/abrt", "/var/tmp/abrt")


def scan_script(sources: CoreSources, relative_dirs: Sequence[tuple[str, int]] = (), *,
                since: float | None = None, limit: int = SCAN_LIMIT) -> str:
    """The shell script behind a snapshot and a scan: one round trip, any pattern.

    It prints ``@@key value`` lines (``now``, ``uptime``, ``boot``, ``pattern``,
    ``ulimit``, ``gdb``, ``uid``) and then, for the pattern it read, either ``@@files``
    followed by one line of base64 of NUL-terminated ``F|D <size> <mtime> <inode> <path>``
    records, or ``@@journal json|text`` followed by one line of base64 of ``coredumpctl list``
    output since ``since`` (default: ``JOURNAL_LAG`` seconds ago): no byte a host's file name
    or an executable's name holds can read as a record. ``relative_dirs`` are ``(dir, depth)`` pairs
    searched for a relative pattern.
    """
    q = commands.quote
    ctl = q(sources.coredumpctl)
    since_expr = (f"@{int(since) - JOURNAL_LAG}" if since is not None
                  else f"@$(( ${{now%%.*}} - {JOURNAL_LAG} ))")
    rel = " ".join(f"{q(d)}:{int(depth)}" for d, depth in relative_dirs)
    apport, abrt = (" ".join(map(q, dirs)) for dirs in (sources.apport_dirs, sources.abrt_dirs))
    return "\n".join([
        "LC_ALL=C; export LC_ALL",
        f"K={q(sources.proc_dir)}",
        "now=$(date +%s.%N 2>/dev/null); case $now in *N*|'') now=$(date +%s);; esac",
        "pat=$(cat \"$K/core_pattern\" 2>/dev/null)",
        sh_tag("now", '"$now"'),
        sh_tag("uptime", "\"$(cut -d' ' -f1 /proc/uptime 2>/dev/null)\""),
        sh_tag("boot", '"$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"'),
        sh_tag("pattern", '"$pat"'),
        sh_tag("ulimit", '"$(ulimit -S -c) $(ulimit -H -c)"'),
        sh_tag("gdb", '"$(command -v gdb 2>/dev/null)"'),
        sh_tag("uid", '"$(id -u 2>/dev/null)"'),
        # names are data: NUL-terminated records, base64 on one line (no byte of a name can read
        # as a record)
        f"lst() {{ find \"$@\" -printf 'F %s %T@ %i %p\\0' 2>/dev/null | head -z -n {limit}; }}",
        "b64() { base64 -w0; printf '\\n'; }",
        "slashes() { printf %s \"$1\" | tr -cd / | wc -c; }",
        "case $pat in",
        f"'|'*{_NEEDLE['systemd']}*)",
        f"  since={since_expr}",
        f"  out=$({ctl} --no-pager --json=short list --since=\"$since\" 2>/dev/null)",
        "  case $out in",
        "  '['*) printf '@@journal json\\n'; printf %s \"$out\" | b64 ;;",
        f"  *) printf '@@journal text\\n'; TZ=UTC {ctl} --no-pager --no-legend list "
        f"--since=\"$since\" 2>/dev/null | head -n {limit} | b64 ;;",
        "  esac ;;",
        f"'|'*{_NEEDLE['apport']}*) printf '@@files\\n'; lst {apport} -maxdepth 1 -type f | b64 ;;",
        f"'|'*{_NEEDLE['abrt']}*) printf '@@files\\n'; find {abrt} -mindepth 1 -maxdepth 1 -type d "
        f"-name 'ccpp-*' -printf 'D %s %T@ %i %p\\0' 2>/dev/null | head -z -n {limit} | b64 ;;",
        "'|'*|'@'*|'') ;;",
        "/*) pre=${pat%%\\%*}; dir=${pre%/*}",
        "  printf '@@files\\n'; lst \"${dir:-/}\" "
        "-maxdepth $(( $(slashes \"$pat\") - $(slashes \"$dir\") )) "
        "-type f -path \"$pre*\" | b64 ;;",
        "*) pre=${pat%%\\%*}; printf '@@files\\n'",
        f"  for dd in {rel}; do lst \"${{dd%:*}}\" "
        "-maxdepth $(( ${dd##*:} + $(slashes \"$pat\") )) -type f -path \"*/$pre*\"; done | b64 ;;"
        if rel else "  ;;",
        "esac",
        sh_tag("end"),
    ]) + "\n"


@dataclass(frozen=True)
class FileEntry:
    """One file (or abrt dump dir) seen by a scan."""

    path: str
    size: int
    mtime: float
    inode: int
    is_dir: bool = False


@dataclass(frozen=True)
class JournalEntry:
    """One row of ``coredumpctl list``."""

    time: float
    pid: int
    uid: int | None
    gid: int | None
    signal: str | None
    corefile: str | None
    exe: str
    size: int | None

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, int(self.time * 1e6)


@dataclass
class HostScan:
    """What one scan of one host found (a snapshot is the scan before the test)."""

    host: str
    now: float = 0.0
    uptime: float | None = None
    boot_id: str = ""
    pattern: CorePattern = field(default_factory=lambda: parse_core_pattern(""))
    limit_soft: str = ""
    limit_hard: str = ""
    gdb: str | None = None
    #: the SSH user's uid on the host (a core of another uid is not the run's)
    uid: int | None = None
    files: dict[str, FileEntry] = field(default_factory=dict)
    journal: list[JournalEntry] = field(default_factory=list)
    complete: bool = False
    error: str | None = None
    #: listed names refused (a control character, not UTF-8, not absolute): never candidates
    ignored: int = 0

    def name_notes(self) -> list[str]:
        """The listed names refused (never candidates), as a note."""
        if not self.ignored:
            return []
        return [f"{self.host}: {self.ignored} file name(s) with control characters or not absolute "
                "in the core directories were ignored"]

    def notes(self) -> list[str]:
        """Why cores on this host might be missed (for the verdict and the log)."""
        out = []
        if self.error:
            out.append(f"{self.host}: not checked for cores: {self.error}")
            return out
        if not self.pattern.checked:
            out.append(f"{self.host}: core_pattern {self.pattern.raw!r} is not one camit can read "
                       f"({self.pattern.kind}); cores there are not checked")
        out += self.name_notes()
        if self.limit_hard == "0":
            out.append(f"{self.host}: hard core size limit is 0: crashes leave no core")
        return out


#: the scan's records, in the order the script prints them; each at most once, ``end`` last
SCAN_ORDER = ("now", "uptime", "boot", "pattern", "ulimit", "gdb", "uid", "files", "journal", "end")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ScanFormatError(ValueError):
    """The scan's output breaks its format (a record repeated, out of order, or a body not
    base64)."""


def parse_scan(host: str, text: str) -> HostScan:
    """Parse the output of :func:`scan_script` (tagged records, ``framework.remote.sections``).

    Each record is accepted once, in :data:`SCAN_ORDER`; the listings are base64 of NUL-terminated
    records, so no byte of a host's file name can read as a record. A name with a control character
    is dropped (``ignored`` counts it). Output that breaks the format leaves the scan incomplete,
    with ``error`` saying why.
    """
    scan = HostScan(host)
    try:
        _parse_records(scan, text)
    except ScanFormatError as exc:
        scan.complete, scan.files, scan.journal = False, {}, []
        scan.error = f"core scan output is malformed: {exc}"
    return scan


def _parse_records(scan: HostScan, text: str) -> None:
    last = -1
    for rec in read_records(text):
        last = _in_order(rec.tag, last)
        _READERS[rec.tag](scan, rec)
        if rec.tag not in _LISTINGS and rec.body.strip():
            raise ScanFormatError(f"unexpected text after the {rec.tag!r} record")


#: the records with a body (a base64 listing)
_LISTINGS = ("files", "journal")


def _in_order(tag: str, last: int) -> int:
    """The record's place in :data:`SCAN_ORDER`, after ``last`` (the place of the one before it)."""
    if tag not in SCAN_ORDER:
        raise ScanFormatError(f"record {tag[:40]!r} unknown")
    rank = SCAN_ORDER.index(tag)
    if rank <= last:
        raise ScanFormatError(f"record {tag!r} repeated or out of order")
    if last >= SCAN_ORDER.index("files") and tag != "end":
        raise ScanFormatError(f"record {tag!r} after the listing")
    return rank


def _b64(body: str) -> bytes:
    try:
        return base64.b64decode("".join(body.split()), validate=True)
    except ValueError:
        raise ScanFormatError("a listing is not base64") from None


def _file_entries(data: bytes, scan: HostScan) -> list[FileEntry]:
    """The ``F|D <size> <mtime> <inode> <path>`` records of a NUL-terminated listing."""
    out = []
    for raw in filter(None, data.split(b"\0")):
        entry = _file_entry(raw.decode("utf-8", errors="replace"))
        if entry is None or not _is_listable(entry.path):
            scan.ignored += 1
            continue
        out.append(entry)
    return out


def _is_listable(path: str) -> bool:
    """An absolute path, valid UTF-8, without control characters."""
    return path.startswith("/") and "\ufffd" not in path and not _CONTROL.search(path)


# -- one reader per record of the scan (each sets its part of the HostScan) ------------------------
def _read_now(scan: HostScan, rec: Record) -> None:
    scan.now = _float(rec.value) or 0.0


def _read_uptime(scan: HostScan, rec: Record) -> None:
    scan.uptime = _float(rec.value)


def _read_boot(scan: HostScan, rec: Record) -> None:
    scan.boot_id = rec.value.strip()


def _read_pattern(scan: HostScan, rec: Record) -> None:
    scan.pattern = parse_core_pattern(rec.value)


def _read_ulimit(scan: HostScan, rec: Record) -> None:
    soft, _, hard = rec.value.partition(" ")
    scan.limit_soft, scan.limit_hard = soft.strip(), hard.strip()


def _read_gdb(scan: HostScan, rec: Record) -> None:
    scan.gdb = rec.value.strip() or None


def _read_uid(scan: HostScan, rec: Record) -> None:
    uid = rec.value.strip()
    scan.uid = int(uid) if uid.isdigit() else None


def _read_files(scan: HostScan, rec: Record) -> None:
    for entry in _file_entries(_b64(rec.body), scan):
        scan.files[entry.path] = entry


def _read_journal(scan: HostScan, rec: Record) -> None:
    body = _b64(rec.body).decode(errors="replace")
    parse = parse_coredumpctl_json if rec.value == "json" else parse_coredumpctl_text
    scan.journal = parse(body)


def _read_end(scan: HostScan, rec: Record) -> None:
    scan.complete = True


_READERS: Mapping[str, Callable[[HostScan, Record], None]] = {
    "now": _read_now, "uptime": _read_uptime, "boot": _read_boot, "pattern": _read_pattern,
    "ulimit": _read_ulimit, "gdb": _read_gdb, "uid": _read_uid, "files": _read_files,
    "journal": _read_journal, "end": _read_end,
}


def _file_entry(line: str) -> FileEntry | None:
    parts = line.split(" ", 4)
    if len(parts) != 5 or parts[0] not in ("F", "D"):
        return None
    try:
        return FileEntry(parts[4], int(parts[1]), float(parts[2]), int(parts[3]), parts[0] == "D")
    except ValueError:
        return None


def _float(value: str) -> float | None:
    try:
        return float(value.strip())
    except ValueError:
        return None


# -- handler outputs -------------------------------------------------------------------------------
def parse_coredumpctl_json(text: str) -> list[JournalEntry]:
    """``coredumpctl --json=short list``: an array of {time (µs), pid, uid, gid, sig, corefile, exe,
    size}."""
    text = _without_source_lines(text)
    if not text:
        return []
    try:
        rows = json.loads(text)
    except ValueError:
        log.warning("coredumpctl printed JSON we cannot read: %.200s", text)
        return []
    if not isinstance(rows, list):
        return []
    return [_journal_row(row) for row in rows if _is_journal_row(row)]


def _without_source_lines(text: str) -> str:
    """The JSON without the ``# source:`` lines some systemd versions print before it."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("# source:")).strip()


def _is_journal_row(row: object) -> bool:
    return isinstance(row, dict) and isinstance(row.get("pid"), int)


def _int_field(row: Mapping[str, Any], key: str) -> int | None:
    value = row.get(key)
    return value if isinstance(value, int) else None


def _journal_row(row: Mapping[str, Any]) -> JournalEntry:
    """One row of ``coredumpctl --json``; fields of the wrong type are left out."""
    t = row.get("time")
    exe = row.get("exe")
    return JournalEntry(
        time=float(t) / 1e6 if isinstance(t, (int, float)) else 0.0, pid=row["pid"],
        uid=_int_field(row, "uid"), gid=_int_field(row, "gid"),
        signal=signal_name(row.get("sig")), corefile=row.get("corefile"),
        exe=str(exe) if exe else "", size=_int_field(row, "size"),
    )


_CTL_ROW = re.compile(
    r"^\s*(?:[A-Z][a-z]{2} )?(?P<date>\d{4}-\d{2}-\d{2}) (?P<clock>\d{2}:\d{2}:\d{2}) "
    r"(?P<tz>\S+)\s+"
    r"(?P<pid>\d+)\s+(?P<uid>\d+|-)\s+(?P<gid>\d+|-)\s+(?P<sig>SIG\w+|\d+|-)\s+(?P<corefile>\S+)\s+"
    r"(?P<exe>\S.*?)(?:\s+(?P<size>\d+(?:\.\d+)?[BKMGTPE]?|-|n/a))?\s*$"
)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50,
          "E": 1 << 60}


def parse_coredumpctl_text(text: str) -> list[JournalEntry]:
    """``TZ=UTC coredumpctl list`` (the table; systemd before 248 has no ``--json``).

    Times are read as UTC when the zone column says UTC (we run it with ``TZ=UTC``),
    else as the controller's local time.
    """
    return [_table_row(m) for m in map(_CTL_ROW.match, text.splitlines()) if m is not None]


def _table_row(m: re.Match[str]) -> JournalEntry:
    """One row of the ``coredumpctl list`` table."""
    return JournalEntry(
        time=_table_time(m), pid=int(m["pid"]), uid=_id(m["uid"]), gid=_id(m["gid"]),
        signal=signal_name(m["sig"]), corefile=m["corefile"], exe=m["exe"].strip(),
        size=_table_size(m["size"]),
    )


def _table_time(m: re.Match[str]) -> float:
    """The row's time: UTC when its zone says so (we run it with ``TZ=UTC``), else the controller's
    zone."""
    stamp = datetime.strptime(f"{m['date']} {m['clock']}", "%Y-%m-%d %H:%M:%S")
    if m["tz"].upper() in ("UTC", "GMT", "Z"):
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def _table_size(size: str | None) -> int | None:
    """``12.5M`` in bytes (None: ``-``, ``n/a`` or no column)."""
    if size is None or size in ("-", "n/a"):
        return None
    unit = size[-1] if size[-1].isalpha() else ""
    return int(float(size.rstrip("BKMGTPE")) * _UNITS[unit])


def _id(text: str) -> int | None:
    """A uid or gid column (None: ``-``)."""
    return int(text) if text.isdigit() else None


_APPORT_CORE = re.compile(r"^core\.(?P<exe>.+)\.(?P<uid>\d+)\.(?P<boot>[0-9a-f-]{32,36})"
                          r"\.(?P<pid>\d+)\.(?P<start>\d+)$")
_ABRT_DIR = re.compile(r"^ccpp-(?P<when>\d{4}-\d{2}-\d{2}-\d{2}:\d{2}:\d{2})(?:\.\d+)?"
                       r"-(?P<pid>\d+)(?:\.new)?$")


def signal_name(value: object) -> str | None:
    """``11``/``"11"``/``"SEGV"``/``"SIGSEGV"`` → ``"SIGSEGV"``; None when unknown or 0."""
    text = "" if value is None else str(value).strip().upper()
    if text in ("", "-"):
        return None
    if text.isdigit():
        return _numbered_signal(int(text))
    name = text if text.startswith("SIG") else "SIG" + text
    return name if _SIG_NAME.fullmatch(name) else None


_SIG_NAME = re.compile(r"SIG[A-Z0-9+-]+")


def _numbered_signal(num: int) -> str | None:
    """``11`` → ``SIGSEGV``; ``signal 99`` for a number this system does not name; None for 0."""
    if num <= 0:
        return None
    try:
        return _signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


# -- candidates: what appeared in the window -------------------------------------------------------
@dataclass
class Candidate:
    """A core that appeared on a host, as far as the scan can tell."""

    host: str
    source: str  # file | systemd | apport | abrt
    location: str  # path on the host (for systemd the stored file, or coredumpctl:<pid>)
    time: float
    size: int | None = None
    pid: int | None = None
    comm: str | None = None
    executable: str | None = None
    signal: str | None = None
    journal: JournalEntry | None = None


def scan_roots(pattern: CorePattern, sources: CoreSources,
               relative_dirs: Sequence[str]) -> tuple[str, ...]:
    """The directories a core of ``pattern`` may lie under: the pattern's own directory, the
    handler's store, or (relative pattern) the run directories the scan searched."""
    table: dict[str, tuple[str, ...]] = {
        "file": (pattern.directory or "/",), "relative": tuple(relative_dirs),
        "apport": sources.apport_dirs, "abrt": sources.abrt_dirs,
    }
    return table.get(pattern.kind, ())


def _under(path: str, roots: Sequence[str]) -> bool:
    norm = posixpath.normpath(path)
    absolute = [r.rstrip("/") + "/" for r in roots if r.startswith("/")]
    return norm == path and any(norm.startswith(r) for r in absolute)


def _journal_candidates(before: HostScan, after: HostScan) -> list[Candidate]:
    """systemd-coredump: the journal's entries that are new since ``before`` (allowing its lag)."""
    seen = {e.key for e in before.journal}
    oldest = before.now - JOURNAL_LAG
    return [_journal_candidate(after.host, e) for e in after.journal
            if e.key not in seen and e.time >= oldest]


def _journal_candidate(host: str, e: JournalEntry) -> Candidate:
    exe = e.exe if e.exe.startswith("/") else None
    return Candidate(host, "systemd", f"coredumpctl:{e.pid}", e.time, e.size, e.pid,
                     posixpath.basename(e.exe) or None, exe, e.signal, journal=e)


def _changed(old: FileEntry | None, entry: FileEntry) -> bool:
    """Whether a listed file is new: a new path, or the same name rewritten (its mtime or inode
    changed)."""
    return old is None or (old.mtime, old.inode) != (entry.mtime, entry.inode)


def new_candidates(before: HostScan, after: HostScan,
                   roots: Sequence[str] | None = None) -> list[Candidate]:
    """Cores in ``after`` that were not in ``before`` and are no older than ``before.now``.

    A file counts as new when its path is new or its mtime/inode changed (a
    pattern without ``%p``/``%t`` rewrites the same name). A core whose own time
    (``%t``, else mtime) precedes the snapshot never counts. With ``roots``
    (:func:`scan_roots`), a file counts only at a normal absolute path under one of them.
    """
    if after.pattern.kind == "systemd":
        return _journal_candidates(before, after)
    t0 = math.floor(before.now)
    found = [_file_candidate(after.host, after.pattern, e)
             for e in _new_files(before, after, roots)]
    return [c for c in found if c is not None and c.time >= t0]


def _new_files(before: HostScan, after: HostScan, roots: Sequence[str] | None) -> list[FileEntry]:
    """The files ``after`` lists that are new since ``before`` (under ``roots`` when given)."""
    fresh = [(path, e) for path, e in sorted(after.files.items())
             if _changed(before.files.get(path), e)]
    return [e for path, e in fresh if roots is None or _under(path, roots)]


def _abrt_candidate(host: str, pattern: CorePattern, entry: FileEntry) -> Candidate | None:
    """An abrt dump folder ``ccpp-<when>-<pid>`` (``.new``: abrt is still writing it; the next scan
    sees it renamed)."""
    name = posixpath.basename(entry.path)
    m = _ABRT_DIR.match(name)
    if m is None or name.endswith(".new"):
        return None
    return Candidate(host, "abrt", entry.path, entry.mtime, None, int(m["pid"]))


def _apport_candidate(host: str, pattern: CorePattern, entry: FileEntry) -> Candidate | None:
    """An apport ``.crash`` report or ``core.<exe>.<uid>.<boot>.<pid>.<start>``.

    The names encode the executable with '/' as '_' (ambiguous): only a hint for the display name;
    the executable comes from the .crash header or the core's notes."""
    name = posixpath.basename(entry.path)
    if name.endswith(".crash"):
        hint = name[: -len(".crash")].rsplit(".", 1)[0]
        return Candidate(host, "apport", entry.path, entry.mtime, entry.size, None,
                         hint.rsplit("_", 1)[-1])
    m = _APPORT_CORE.match(name)
    if m is None:
        return None
    return Candidate(host, "apport", entry.path, entry.mtime, entry.size, int(m["pid"]),
                     m["exe"].rsplit("_", 1)[-1])


def _pattern_candidate(host: str, pattern: CorePattern, entry: FileEntry) -> Candidate | None:
    """A file the kernel wrote by the pattern, its ``%`` fields read from its name."""
    fields = pattern.fields(entry.path)
    if fields is None:
        return None
    when = float(fields["t"]) if "t" in fields else entry.mtime
    pid = _field(fields, "pP")
    exe = fields.get("E", "").replace("!", "/") or None
    return Candidate(host, "file", entry.path, when, entry.size, int(pid) if pid else None,
                     _field(fields, "ef"), exe, signal_name(fields.get("s")))


def _field(fields: Mapping[str, str], specifiers: str) -> str | None:
    """The first of ``specifiers`` the name gave a value (``%p`` before ``%P``, ``%e`` before
    ``%f``)."""
    return next((fields[k] for k in specifiers if fields.get(k)), None)


_CANDIDATE_OF: Mapping[str, Callable[[str, CorePattern, FileEntry], Candidate | None]] = {
    "abrt": _abrt_candidate, "apport": _apport_candidate}


def _file_candidate(host: str, pattern: CorePattern, entry: FileEntry) -> Candidate | None:
    read = _CANDIDATE_OF.get(pattern.kind, _pattern_candidate)
    return read(host, pattern, entry)


@dataclass
class Baseline:
    """Per-host snapshots taken before the test (``error`` set for a host that could not be
    read)."""

    hosts: dict[str, HostScan]
    taken: float

    def notes(self) -> list[str]:
        return [n for s in self.hosts.values() for n in s.notes()]


__all__ = ["Baseline", "Candidate", "CorePattern", "CoreSources", "FileEntry", "HostScan",
           "JournalEntry", "ScanFormatError", "new_candidates", "parse_core_pattern",
           "parse_coredumpctl_json", "parse_coredumpctl_text", "parse_scan", "scan_roots",
           "scan_script", "signal_name"]
