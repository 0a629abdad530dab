"""Core dumps: notice every crash on the hosts under test, attribute it, bring it back.

Pure plan: :func:`parse_core_pattern` maps ``kernel.core_pattern`` to where
cores land and how to read their names (absolute file pattern with ``%``
specifiers, relative pattern — the crashing process's cwd, i.e. a launch's run
dir under the host's workdir — ``systemd-coredump``, apport, abrt);
:func:`scan_script` is the one shell script that, in one round trip, reads the
pattern, the core size limits and lists what is present where the pattern
points (``coredumpctl list`` for systemd); :func:`parse_scan` and
:func:`new_candidates` turn two scans into the cores that appeared in the
window; :func:`core_facts` reads the ELF notes of a core (pid, ppid, session,
signal, ``psargs``, ``execfn``, and the run tag and ``RANK`` from the
environment strings at the top of the dumped stack); :func:`attribute` ties a
core to a rank.

Executor: :class:`CoreWatch` runs the scan on every host in parallel before the
test (:meth:`~CoreWatch.snapshot`, never raising for one bad host), then after
it (:meth:`~CoreWatch.collect`) inspects each new core on its host, runs a
bounded ``gdb`` backtrace when gdb exists there, gzips the core (up to a size
cap) and fetches it into ``<report>/<host>/cores/``; :meth:`~CoreWatch.verdict`
applies the policy (``fail``/``warn``/``ignore``).

Attribution (what we do, in order): the core's pid (``%p`` or the ELF
``NT_PRPSINFO`` note) equals a rank's pid from its status JSON → that rank;
its parent pid (``NT_PRPSINFO.pr_ppid``) equals a rank's pid → child of that
rank; the environment strings at the top of its stack carry
``CAMIT_RUN_ID=<launch>.<host>`` of one of the launches and ``RANK=N`` → a
process of rank N (any depth of descendant); the tag without ``RANK`` → the
launch's torchrun/supervisor. Nothing matches → no rank, the core still counts.

Only cores that appeared between the two scans *and* are no older than the
snapshot count; each host is scanned in its own mount namespace (the lab's
``/var/crash/camit`` is per host), so other hosts' cores are never seen. A pipe
handler stores a core after its process is gone: when a rank died of a
core-dumping signal and its core is not there yet, the scan is repeated for up
to ``SETTLE_TIMEOUT`` seconds.

Limits: a relative pattern is searched in ``<workdir>/runs/*`` (a launch's cwd),
``<workdir>`` and ``search_dirs`` — not in home directories (the lab's hosts
share ``/root``); the collect scan reads the pattern in force at that time.
"""

from __future__ import annotations

import enum
import inspect
import json
import logging
import math
import os
import posixpath
import re
import secrets
import signal as _signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from filelock import FileLock

from framework import commands
from framework.errors import FrameworkError, UsageError
from framework.hostlogs import Signature, scan_signatures
from framework.hosts import Cluster, Host
from framework.rundir import write_atomic

log = logging.getLogger("camit.coredump")

DEFAULT_CAP_BYTES = 1 << 30
DEFAULT_GDB_TIMEOUT = 60.0
#: coredumpctl's time is the journal entry's, a little after the crash: look back this far
JOURNAL_LAG = 300
SCAN_LIMIT = 5000
BACKTRACE_BYTES = 256 * 1024
RUN_TAG = "CAMIT_RUN_ID"
POLICY_ENV = "CAMIT_CORE_POLICY"
#: signals whose default action dumps core (signal(7))
CORE_SIGNALS = frozenset({"SIGABRT", "SIGBUS", "SIGFPE", "SIGILL", "SIGQUIT", "SIGSEGV", "SIGSYS", "SIGTRAP",
                          "SIGXCPU", "SIGXFSZ"})
#: pipe handlers store a core after the process is gone: how long to wait for one we expect
SETTLE_TIMEOUT = 10.0


class CorePolicy(str, enum.Enum):
    """What a core dump does to the outcome: fail it, warn (outcome kept), or nothing."""

    FAIL = "fail"
    WARN = "warn"
    IGNORE = "ignore"

    @classmethod
    def parse(cls, value: str | CorePolicy) -> CorePolicy:
        try:
            return cls(value.value if isinstance(value, CorePolicy) else str(value).strip().lower())
        except ValueError:
            raise UsageError(f"invalid core policy {value!r}: use fail, warn or ignore") from None


# -- pattern plan -----------------------------------------------------------------------------------
#: specifier -> regex of its expansion (kernel format_corename; '/' in names is written as '!')
_SPEC_RE = {
    "p": r"\d+", "P": r"\d+", "i": r"\d+", "I": r"\d+", "u": r"\d+", "g": r"\d+", "d": r"\d+",
    "s": r"\d+", "t": r"\d+", "c": r"\d+", "C": r"\d+", "F": r"\d+",
    "h": r"[^/]*", "e": r"[^/]*", "f": r"[^/]*", "E": r"[^/]*",
}
_PIPES = (("systemd", "systemd-coredump"), ("apport", "apport"), ("abrt", "abrt-hook-ccpp"))


@dataclass(frozen=True)
class CorePattern:
    """Where ``kernel.core_pattern`` sends cores and how to read their names.

    ``kind``: ``file`` (absolute), ``relative`` (the process's cwd), ``systemd``,
    ``apport``, ``abrt``, ``pipe`` (an unknown handler), ``socket`` (``@…``) or
    ``none`` (empty). For file kinds ``regex`` matches a whole path (absolute) or
    a path suffix (relative) and names each specifier's group ``<spec><n>``.
    """

    raw: str
    kind: str
    regex: re.Pattern[str] | None = None
    handler: str | None = None

    @property
    def checked(self) -> bool:
        return self.kind in ("file", "relative", "systemd", "apport", "abrt")

    def fields(self, path: str) -> dict[str, str] | None:
        """The specifier values in ``path`` (``{'e': 'python3', 'p': '12'}``), None if it does not match."""
        if self.regex is None:
            return None
        m = self.regex.search(path) if self.kind == "relative" else self.regex.fullmatch(path)
        if m is None:
            return None
        out: dict[str, str] = {}
        for name, value in m.groupdict().items():
            if value is not None:
                out.setdefault(name.rstrip("0123456789"), value)
        return out


def parse_core_pattern(raw: str) -> CorePattern:
    """Classify a ``core_pattern`` value and, for file patterns, build its path regex.

    >>> parse_core_pattern("/var/crash/core.%e.%p").fields("/var/crash/core.python3.12")
    {'e': 'python3', 'p': '12'}
    """
    raw = raw.strip()
    if not raw:
        return CorePattern(raw, "none")
    if raw.startswith("|"):
        handler = raw[1:].split()[0] if raw[1:].split() else ""
        for kind, needle in _PIPES:
            if needle in posixpath.basename(handler):
                return CorePattern(raw, kind, handler=handler)
        return CorePattern(raw, "pipe", handler=handler)
    if raw.startswith("@"):
        return CorePattern(raw, "socket", handler=raw[1:].lstrip("@"))
    parts: list[str] = []
    has_pid = False
    i, n = 0, 0
    while i < len(raw):
        ch = raw[i]
        if ch == "%" and i + 1 < len(raw):
            spec = raw[i + 1]
            i += 2
            if spec == "%":
                parts.append("%")
            elif spec in _SPEC_RE:
                parts.append(f"(?P<{spec}{n}>{_SPEC_RE[spec]})")
                n += 1
                has_pid = has_pid or spec == "p"
            continue  # unknown specifiers expand to nothing
        if ch != "%":  # a trailing lone '%' is dropped too
            parts.append(re.escape(ch))
        i += 1
    body = "".join(parts)
    if not has_pid:  # kernel.core_uses_pid appends ".<pid>" to patterns without %p
        body += r"(?:\.(?P<p99>\d+))?"
    if raw.startswith("/"):
        return CorePattern(raw, "file", re.compile(body))
    return CorePattern(raw, "relative", re.compile(r"(?:^|/)" + body + "$"))


# -- the scan script --------------------------------------------------------------------------------
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
    ``ulimit``, ``gdb``) and then, for the pattern it read, either ``@@files``
    followed by ``F|D <size> <mtime> <inode> <path>`` lines, or ``@@journal
    json|text`` followed by ``coredumpctl list`` output since ``since`` (default:
    ``JOURNAL_LAG`` seconds ago). ``relative_dirs`` are ``(dir, depth)`` pairs
    searched for a relative pattern.
    """
    q = commands.quote
    ctl = q(sources.coredumpctl)
    since_expr = f"@{int(since) - JOURNAL_LAG}" if since is not None else f"@$(( ${{now%%.*}} - {JOURNAL_LAG} ))"
    rel = " ".join(f"{q(d)}:{int(depth)}" for d, depth in relative_dirs)
    return "\n".join([
        "LC_ALL=C; export LC_ALL",
        f"K={q(sources.proc_dir)}",
        "now=$(date +%s.%N 2>/dev/null); case $now in *N*|'') now=$(date +%s);; esac",
        "pat=$(cat \"$K/core_pattern\" 2>/dev/null)",
        "printf '@@now %s\\n' \"$now\"",
        "printf '@@uptime %s\\n' \"$(cut -d' ' -f1 /proc/uptime 2>/dev/null)\"",
        "printf '@@boot %s\\n' \"$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)\"",
        "printf '@@pattern %s\\n' \"$pat\"",
        "printf '@@ulimit %s %s\\n' \"$(ulimit -S -c)\" \"$(ulimit -H -c)\"",
        "printf '@@gdb %s\\n' \"$(command -v gdb 2>/dev/null)\"",
        f"lst() {{ find \"$@\" -printf 'F %s %T@ %i %p\\n' 2>/dev/null | head -n {limit}; }}",
        "slashes() { printf %s \"$1\" | tr -cd / | wc -c; }",
        "case $pat in",
        "'|'*systemd-coredump*)",
        f"  since={since_expr}",
        f"  out=$({ctl} --no-pager --json=short list --since=\"$since\" 2>/dev/null)",
        "  case $out in",
        "  '['*) printf '@@journal json\\n%s\\n' \"$out\" ;;",
        f"  *) printf '@@journal text\\n'; TZ=UTC {ctl} --no-pager --no-legend list --since=\"$since\" "
        f"2>/dev/null | head -n {limit} ;;",
        "  esac ;;",
        f"'|'*apport*) printf '@@files\\n'; lst {' '.join(q(d) for d in sources.apport_dirs)} -maxdepth 1 -type f ;;",
        f"'|'*abrt-hook-ccpp*) printf '@@files\\n'; find {' '.join(q(d) for d in sources.abrt_dirs)} -mindepth 1 "
        f"-maxdepth 1 -type d -name 'ccpp-*' -printf 'D %s %T@ %i %p\\n' 2>/dev/null | head -n {limit} ;;",
        "'|'*|'@'*|'') ;;",
        "/*) pre=${pat%%\\%*}; dir=${pre%/*}",
        "  printf '@@files\\n'; lst \"${dir:-/}\" -maxdepth $(( $(slashes \"$pat\") - $(slashes \"$dir\") )) "
        "-type f -path \"$pre*\" ;;",
        "*) pre=${pat%%\\%*}; printf '@@files\\n'",
        f"  for dd in {rel}; do lst \"${{dd%:*}}\" -maxdepth $(( ${{dd##*:}} + $(slashes \"$pat\") )) "
        "-type f -path \"*/$pre*\"; done ;;" if rel else "  ;;",
        "esac",
        "printf '@@end\\n'",
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
    files: dict[str, FileEntry] = field(default_factory=dict)
    journal: list[JournalEntry] = field(default_factory=list)
    complete: bool = False
    error: str | None = None

    def notes(self) -> list[str]:
        """Why cores on this host might be missed (for the verdict and the log)."""
        out = []
        if self.error:
            out.append(f"{self.host}: not checked for cores: {self.error}")
            return out
        if not self.pattern.checked:
            out.append(f"{self.host}: core_pattern {self.pattern.raw!r} is not one camit can read "
                       f"({self.pattern.kind}); cores there are not checked")
        if self.limit_hard == "0":
            out.append(f"{self.host}: hard core size limit is 0: crashes leave no core")
        return out


def parse_scan(host: str, text: str) -> HostScan:
    """Parse the output of :func:`scan_script`."""
    scan = HostScan(host)
    mode = ""
    body: list[str] = []
    journal_json = False
    for line in text.splitlines():
        if line.startswith("@@"):
            key, _, value = line[2:].partition(" ")
            if key in ("files", "journal", "end"):
                mode = f"{key} {value}".strip()
                scan.complete = scan.complete or key == "end"
                continue
            if key == "now":
                scan.now = _float(value) or 0.0
            elif key == "uptime":
                scan.uptime = _float(value)
            elif key == "boot":
                scan.boot_id = value.strip()
            elif key == "pattern":
                scan.pattern = parse_core_pattern(value)
            elif key == "ulimit":
                soft, _, hard = value.partition(" ")
                scan.limit_soft, scan.limit_hard = soft.strip(), hard.strip()
            elif key == "gdb":
                scan.gdb = value.strip() or None
            continue
        if mode == "files":
            entry = _file_entry(line)
            if entry is not None:
                scan.files[entry.path] = entry
        elif mode.startswith("journal"):
            body.append(line)
            journal_json = mode == "journal json"
    if body:
        joined = "\n".join(body)
        scan.journal = parse_coredumpctl_json(joined) if journal_json else parse_coredumpctl_text(joined)
    return scan


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


# -- handler outputs ----------------------------------------------------------------------------------
def parse_coredumpctl_json(text: str) -> list[JournalEntry]:
    """``coredumpctl --json=short list``: an array of {time (µs), pid, uid, gid, sig, corefile, exe, size}."""
    text = "\n".join(line for line in text.splitlines() if not line.startswith("# source:")).strip()
    if not text:
        return []
    try:
        rows = json.loads(text)
    except ValueError:
        log.warning("coredumpctl printed JSON we cannot read: %.200s", text)
        return []
    out = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("pid"), int):
            continue
        t = row.get("time")
        out.append(JournalEntry(
            time=float(t) / 1e6 if isinstance(t, (int, float)) else 0.0, pid=row["pid"],
            uid=row.get("uid") if isinstance(row.get("uid"), int) else None,
            gid=row.get("gid") if isinstance(row.get("gid"), int) else None,
            signal=signal_name(row.get("sig")), corefile=row.get("corefile"),
            exe=str(row.get("exe") or ""), size=row.get("size") if isinstance(row.get("size"), int) else None,
        ))
    return out


_CTL_ROW = re.compile(
    r"^\s*(?:[A-Z][a-z]{2} )?(?P<date>\d{4}-\d{2}-\d{2}) (?P<clock>\d{2}:\d{2}:\d{2}) (?P<tz>\S+)\s+"
    r"(?P<pid>\d+)\s+(?P<uid>\d+|-)\s+(?P<gid>\d+|-)\s+(?P<sig>SIG\w+|\d+|-)\s+(?P<corefile>\S+)\s+"
    r"(?P<exe>\S.*?)(?:\s+(?P<size>\d+(?:\.\d+)?[BKMGTPE]?|-|n/a))?\s*$"
)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}


def parse_coredumpctl_text(text: str) -> list[JournalEntry]:
    """``TZ=UTC coredumpctl list`` (the table; systemd before 248 has no ``--json``).

    Times are read as UTC when the zone column says UTC (we run it with ``TZ=UTC``),
    else as the controller's local time.
    """
    out = []
    for line in text.splitlines():
        m = _CTL_ROW.match(line)
        if m is None:
            continue
        stamp = datetime.strptime(f"{m['date']} {m['clock']}", "%Y-%m-%d %H:%M:%S")
        if m["tz"].upper() in ("UTC", "GMT", "Z"):
            stamp = stamp.replace(tzinfo=timezone.utc)
        size = m["size"]
        size_bytes = None
        if size and size not in ("-", "n/a"):
            unit = size[-1] if size[-1].isalpha() else ""
            size_bytes = int(float(size.rstrip("BKMGTPE")) * _UNITS[unit])
        out.append(JournalEntry(
            time=stamp.timestamp(), pid=int(m["pid"]), uid=int(m["uid"]) if m["uid"].isdigit() else None,
            gid=int(m["gid"]) if m["gid"].isdigit() else None, signal=signal_name(m["sig"]),
            corefile=m["corefile"], exe=m["exe"].strip(), size=size_bytes,
        ))
    return out


def parse_crash_header(text: str) -> dict[str, str]:
    """The header of an apport ``.crash`` file (``Key: value``, continuation lines start with a space)."""
    out: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if line.startswith((" ", "\t")) and key:
            out[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "CoreDump":
                break
            out[key] = value.strip()
    return out


def crash_header_facts(header: Mapping[str, str]) -> dict[str, Any]:
    """pid, ppid, executable, signal and cmdline from an apport ``.crash`` header."""
    status = header.get("ProcStatus", "")
    pid = re.search(r"^Pid:\s*(\d+)", status, re.M)
    ppid = re.search(r"^PPid:\s*(\d+)", status, re.M)
    return {
        "pid": int(pid.group(1)) if pid else None, "ppid": int(ppid.group(1)) if ppid else None,
        "executable": header.get("ExecutablePath"), "signal": signal_name(header.get("Signal")),
        "cmdline": header.get("ProcCmdline"),
    }


_APPORT_CORE = re.compile(r"^core\.(?P<exe>.+)\.(?P<uid>\d+)\.(?P<boot>[0-9a-f-]{32,36})\.(?P<pid>\d+)\.(?P<start>\d+)$")
_ABRT_DIR = re.compile(r"^ccpp-(?P<when>\d{4}-\d{2}-\d{2}-\d{2}:\d{2}:\d{2})(?:\.\d+)?-(?P<pid>\d+)(?:\.new)?$")


def signal_name(value: Any) -> str | None:
    """``11``/``"11"``/``"SEGV"``/``"SIGSEGV"`` → ``"SIGSEGV"``; None when unknown or 0."""
    if value is None or value == "" or value == "-":
        return None
    text = str(value).strip().upper()
    if text.isdigit():
        num = int(text)
        if num <= 0:
            return None
        try:
            return _signal.Signals(num).name
        except ValueError:
            return f"signal {num}"
    if not text.startswith("SIG"):
        text = "SIG" + text
    return text if re.fullmatch(r"SIG[A-Z0-9+-]+", text) else None


# -- candidates: what appeared in the window ------------------------------------------------------------
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


def new_candidates(before: HostScan, after: HostScan) -> list[Candidate]:
    """Cores in ``after`` that were not in ``before`` and are no older than ``before.now``.

    A file counts as new when its path is new or its mtime/inode changed (a
    pattern without ``%p``/``%t`` rewrites the same name). A core whose own time
    (``%t``, else mtime) precedes the snapshot never counts.
    """
    t0 = math.floor(before.now)
    pattern = after.pattern
    out: list[Candidate] = []
    if pattern.kind == "systemd":
        seen = {e.key for e in before.journal}
        for e in after.journal:
            if e.key in seen or e.time < before.now - JOURNAL_LAG:
                continue
            out.append(Candidate(after.host, "systemd", f"coredumpctl:{e.pid}", e.time, e.size, e.pid,
                                 posixpath.basename(e.exe) or None, e.exe if e.exe.startswith("/") else None,
                                 e.signal, journal=e))
        return out
    for path, entry in sorted(after.files.items()):
        old = before.files.get(path)
        if old is not None and (old.mtime, old.inode) == (entry.mtime, entry.inode):
            continue
        cand = _file_candidate(after.host, pattern, entry)
        if cand is not None and cand.time >= t0:
            out.append(cand)
    return out


def _file_candidate(host: str, pattern: CorePattern, entry: FileEntry) -> Candidate | None:
    name = posixpath.basename(entry.path)
    if pattern.kind == "abrt":
        m = _ABRT_DIR.match(name)
        if m is None or name.endswith(".new"):
            return None  # .new: abrt is still writing it; the next scan sees it renamed
        return Candidate(host, "abrt", entry.path, entry.mtime, None, int(m["pid"]))
    if pattern.kind == "apport":
        # names encode the executable with '/' as '_' (ambiguous): only a hint for the display name;
        # the executable comes from the .crash header or the core's notes
        if name.endswith(".crash"):
            hint = name[: -len(".crash")].rsplit(".", 1)[0]
            return Candidate(host, "apport", entry.path, entry.mtime, entry.size, None, hint.rsplit("_", 1)[-1])
        m = _APPORT_CORE.match(name)
        if m is None:
            return None
        return Candidate(host, "apport", entry.path, entry.mtime, entry.size, int(m["pid"]),
                         m["exe"].rsplit("_", 1)[-1])
    fields = pattern.fields(entry.path)
    if fields is None:
        return None
    when = float(fields["t"]) if "t" in fields else entry.mtime
    pid = fields.get("p") or fields.get("P")
    exe = fields.get("E", "").replace("!", "/") or None
    return Candidate(host, "file", entry.path, when, entry.size, int(pid) if pid else None,
                     fields.get("e") or fields.get("f"), exe, signal_name(fields.get("s")))


# -- reading a core's notes (shipped to the hosts: standard library only, self-contained) ----------------
def core_facts(path: str) -> dict:  # type: ignore[type-arg]
    """Facts from an ELF core's notes and stack: pid, ppid, pgrp, sid, uid, comm, psargs, signal, execfn, env.

    Reads ``NT_PRSTATUS``/``NT_PRPSINFO``/``NT_SIGINFO``/``NT_AUXV``; ``env`` holds the
    ``CAMIT_RUN_ID``/``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` strings found just below
    ``AT_EXECFN`` at the top of the dumped stack. 64-bit cores only.
    """
    import struct

    keys = (b"CAMIT_RUN_ID=", b"RANK=", b"LOCAL_RANK=", b"WORLD_SIZE=")
    out: dict = {}  # type: ignore[type-arg]
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            return {"error": "not an ELF file"}
        if head[4] != 2:
            return {"error": "not a 64-bit core"}
        e = "<" if head[5] == 1 else ">"
        if struct.unpack(e + "H", head[16:18])[0] != 4:
            return {"error": "not a core file"}
        phoff, shoff = struct.unpack(e + "QQ", head[32:48])
        phentsize, phnum = struct.unpack(e + "HH", head[54:58])
        if phnum == 0xFFFF and shoff:  # extended numbering: the count is in section 0
            f.seek(shoff + 44)
            phnum = struct.unpack(e + "I", f.read(4))[0]
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        loads, notes = [], []
        for i in range(phnum):
            p_type, _fl, off, vaddr, _pa, filesz = struct.unpack(e + "IIQQQQ", table[i * phentsize:i * phentsize + 40])
            if p_type == 1 and filesz:
                loads.append((vaddr, filesz, off))
            elif p_type == 4:
                notes.append((off, filesz))
        auxv = b""
        for off, size in notes:
            f.seek(off)
            data = f.read(min(size, 16 << 20))
            pos = 0
            while pos + 12 <= len(data):
                namesz, descsz, ntype = struct.unpack(e + "III", data[pos:pos + 12])
                name = data[pos + 12:pos + 12 + namesz].rstrip(b"\0")
                dpos = pos + 12 + ((namesz + 3) & ~3)
                desc = data[dpos:dpos + descsz]
                pos = dpos + ((descsz + 3) & ~3)
                if name != b"CORE":
                    continue
                if ntype == 1 and "cursig" not in out and len(desc) >= 48:  # NT_PRSTATUS of the dumping thread
                    out["cursig"] = struct.unpack(e + "h", desc[12:14])[0]
                elif ntype == 3 and len(desc) >= 136:  # NT_PRPSINFO
                    out["uid"], out["gid"], out["pid"], out["ppid"], out["pgrp"], out["sid"] = \
                        struct.unpack(e + "IIiiii", desc[16:40])
                    out["comm"] = desc[40:56].split(b"\0")[0].decode(errors="replace")
                    out["psargs"] = desc[56:136].split(b"\0")[0].decode(errors="replace").strip()
                elif ntype == 0x53494749 and "signal" not in out and len(desc) >= 4:  # NT_SIGINFO
                    out["signal"] = struct.unpack(e + "i", desc[:4])[0]
                elif ntype == 6 and not auxv:  # NT_AUXV
                    auxv = desc
        if not out.get("signal") and out.get("cursig"):
            out["signal"] = out["cursig"]
        execfn = 0
        for i in range(0, len(auxv) - 15, 16):
            a_type, a_val = struct.unpack(e + "QQ", auxv[i:i + 16])
            if a_type == 31:  # AT_EXECFN
                execfn = a_val
        for vaddr, filesz, off in loads:
            if execfn and vaddr <= execfn < vaddr + filesz:
                start = max(vaddr, execfn - (256 << 10))
                f.seek(off + (start - vaddr))
                blob = f.read(min(execfn - start + 4096, vaddr + filesz - start))
                cut = execfn - start
                out["execfn"] = blob[cut:].split(b"\0")[0].decode(errors="replace")
                env = {}
                for word in blob[:cut].split(b"\0"):
                    for k in keys:
                        if word.startswith(k):
                            env[k[:-1].decode()] = word[len(k):].decode(errors="replace")
                out["env"] = env
                break
    return out


_FACTS_MAIN = "\nimport json, sys\nfor _p in sys.argv[1:]:\n    try:\n        print(json.dumps(core_facts(_p)))\n" \
              "    except Exception as _e:\n        print(json.dumps({'error': repr(_e)}))\n"


def facts_program() -> str:
    """Python source that prints :func:`core_facts` as one JSON line per path argument."""
    src = inspect.getsource(core_facts)
    return src.replace("  # type: ignore[type-arg]", "") + _FACTS_MAIN


# -- attribution ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RankProc:
    """A launched rank's process as its status JSON recorded it."""

    launch_id: str
    rank: int
    host: str
    pid: int | None
    signal: str | None = None


def rank_procs(launches: Any) -> list[RankProc]:
    """Rank processes of ``LaunchResult``\\ s, pids read from ``<report>/<host>/rank<N>.json``."""
    if launches is None:
        return []
    if not isinstance(launches, (list, tuple)):
        launches = [launches]
    out = []
    for lr in launches:
        report = Path(lr.report_dir) if getattr(lr, "report_dir", None) else None
        for rank, rr in sorted(lr.ranks.items()):
            pid = None
            if report is not None:
                try:
                    st = json.loads((report / rr.host / f"rank{rank}.json").read_text())
                    pid = st.get("pid") if st.get("rank") == rank and isinstance(st.get("pid"), int) else None
                except (OSError, ValueError):
                    pid = None
            out.append(RankProc(lr.launch_id, rank, rr.host, pid, getattr(rr, "signal", None)))
    return out


def attribute(host: str, pid: int | None, ppid: int | None, env: Mapping[str, str],
              procs: Sequence[RankProc]) -> tuple[int | None, str | None]:
    """(rank, relation) of a core on ``host``: relation is ``rank``, ``child``, ``process`` or ``launch``."""
    mine = [p for p in procs if p.host == host]
    for p in mine:
        if pid is not None and p.pid == pid:
            return p.rank, "rank"
    for p in mine:
        if ppid is not None and p.pid is not None and p.pid == ppid:
            return p.rank, "child"
    tag = env.get(RUN_TAG)
    if tag and any(tag == f"{p.launch_id}.{host}" for p in mine):
        rank = env.get("RANK", "")
        return (int(rank), "process") if rank.isdigit() else (None, "launch")
    return None, None


# -- the result -----------------------------------------------------------------------------------------
@dataclass
class Core:
    """One core dump that appeared on a host during the window."""

    host: str
    source: str
    location: str
    time: float
    pid: int | None = None
    ppid: int | None = None
    executable: str | None = None
    comm: str | None = None
    signal: str | None = None
    size: int | None = None
    cmdline: str | None = None
    rank: int | None = None
    relation: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    local_path: Path | None = None
    backtrace: str | None = None
    backtrace_path: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """What crashed: the executable's file name, else the command name."""
        for value in (self.executable, self.comm):
            if value:
                return posixpath.basename(value)
        return "unknown process"

    def describe(self) -> str:
        """``core dump on host2: python3 (pid 1234, rank 2, SIGSEGV)``."""
        parts = [f"pid {self.pid}" if self.pid is not None else "pid unknown"]
        who = {"rank": f"rank {self.rank}", "child": f"child of rank {self.rank}",
               "process": f"process of rank {self.rank}", "launch": "torchrun/supervisor of the launch"}
        if self.relation in who:
            parts.append(who[self.relation])
        if self.signal:
            parts.append(self.signal)
        return f"core dump on {self.host}: {self.name} ({', '.join(parts)})"

    def crashing_frames(self, limit: int = 12) -> list[str]:
        """The first frames of the crashing thread's backtrace."""
        if not self.backtrace:
            return []
        text = self.backtrace.split("@@crashing", 1)[-1].split("@@threads", 1)[0]
        return [ln for ln in text.splitlines() if ln.startswith("#")][:limit]

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host, "source": self.source, "location": self.location, "time": self.time,
            "pid": self.pid, "ppid": self.ppid, "executable": self.executable, "comm": self.comm,
            "signal": self.signal, "size": self.size, "cmdline": self.cmdline, "rank": self.rank,
            "relation": self.relation, "env": self.env, "describe": self.describe(),
            "local_path": str(self.local_path) if self.local_path else None,
            "backtrace_path": str(self.backtrace_path) if self.backtrace_path else None, "notes": self.notes,
        }


@dataclass
class Baseline:
    """Per-host snapshots taken before the test (``error`` set for a host that could not be read)."""

    hosts: dict[str, HostScan]
    taken: float

    def notes(self) -> list[str]:
        return [n for s in self.hosts.values() for n in s.notes()]


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def verdict_message(cores: Sequence[Core], policy: CorePolicy, notes: Sequence[str] = ()) -> tuple[bool, str]:
    """(failed, message) for ``cores`` under ``policy``; the message shows each core and its top frames."""
    if policy is CorePolicy.IGNORE or not cores:
        return False, ""
    head = "core dump(s) appeared" if policy is CorePolicy.FAIL else "warning: core dump(s) appeared (policy warn)"
    lines = [f"{len(cores)} {head}:"]
    for c in cores:
        lines.append("  " + c.describe())
        if c.cmdline:
            lines.append(f"    command: {c.cmdline}")
        if c.local_path:
            lines.append(f"    core: {c.local_path} ({_human(c.size)} before gzip)")
        for note in c.notes:
            lines.append(f"    note: {note}")
        frames = c.crashing_frames()
        if frames:
            lines.append("    backtrace of the crashing thread:" + (f" (all threads: {c.backtrace_path})"
                                                                     if c.backtrace_path else ""))
            lines += ["      " + f for f in frames]
    lines += [f"  note: {n}" for n in notes]
    return policy is CorePolicy.FAIL, "\n".join(lines)


# -- the executor --------------------------------------------------------------------------------------
_CORES_LOCK = threading.Lock()


def _append_cores(path: Path, entries: list[dict[str, Any]]) -> None:
    """Add ``entries`` to the run's cores.json (one collect per test: earlier tests' cores stay)."""
    with _CORES_LOCK, FileLock(str(path) + ".lock"):
        known: list[dict[str, Any]] = []
        if path.exists():
            try:
                known = json.loads(path.read_text())
            except ValueError:
                known = []
        key = lambda e: (e.get("host"), e.get("pid"), e.get("executable"), e.get("local_path"))  # noqa: E731
        seen = {key(e) for e in known}
        known += [e for e in entries if key(e) not in seen]
        write_atomic(path, json.dumps(known, indent=2) + "\n")


class CoreWatch:
    """Snapshot the hosts before a test, collect the cores that appeared after it, judge them.

    ``env`` (an ``EnvConfig``) may carry defaults in an optional ``cores`` section
    (``policy``, ``cap_bytes``, ``gdb_timeout``); ``$CAMIT_CORE_POLICY`` comes next,
    then ``fail``. An explicit ``policy`` wins. ``cap_bytes`` bounds the size of a
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

    def __init__(self, cluster: Cluster, env: Any = None, policy: str | CorePolicy | None = None,
                 cap_bytes: int | None = None, *, gdb_timeout: float | None = None,
                 sources: CoreSources | None = None, search_dirs: Sequence[str] = (),
                 ascend_log_dirs: Sequence[str] | None = None) -> None:
        defaults = getattr(env, "cores", None)
        chosen = policy or getattr(defaults, "policy", None) or os.environ.get(POLICY_ENV) or CorePolicy.FAIL
        self.policy = CorePolicy.parse(chosen)
        self.cluster = cluster
        self.env = env
        self.cap_bytes = int(cap_bytes if cap_bytes is not None else getattr(defaults, "cap_bytes", None)
                             or DEFAULT_CAP_BYTES)
        self.gdb_timeout = float(gdb_timeout or getattr(defaults, "gdb_timeout", None) or DEFAULT_GDB_TIMEOUT)
        self.sources = sources or CoreSources()
        self.search_dirs = tuple(search_dirs)
        self.ascend_log_dirs = tuple(ascend_log_dirs) if ascend_log_dirs is not None else None
        self.errors: dict[str, str] = {}
        self.notes: list[str] = []
        self.log_summary = ""

    def _spec(self, host: Host) -> Any:
        spec = host.spec
        if spec is None and self.env is not None:
            spec = getattr(self.env, "hosts", {}).get(host.name)
        return spec

    def _workdir(self, host: Host) -> str:
        return str(getattr(self._spec(host), "workdir", None) or "/var/tmp/camit").rstrip("/") or "/"

    def _script(self, host: Host, since: float | None) -> str:
        wd = self._workdir(host)
        dirs = [(f"{wd}/runs", 2), (wd, 1)] + [(d, 1) for d in self.search_dirs]
        return scan_script(self.sources, dirs, since=since)

    def _scan(self, host: Host, since: float | None) -> HostScan:
        result = host.run(self._script(host, since), timeout=120)
        scan = parse_scan(host.name, result.stdout)
        if not scan.complete:
            raise FrameworkError(f"{host.name}: core scan did not complete (rc {result.rc}): "
                                 f"{result.tail(3) or 'no output'}")
        return scan

    # -- before -------------------------------------------------------------------------------------
    def snapshot(self) -> Baseline:
        """One round trip per host, in parallel; a host that fails is recorded, never raised."""
        got = self.cluster.map(lambda h: self._scan(h, None))
        hosts: dict[str, HostScan] = {}
        for name, value in got.items():
            if isinstance(value, BaseException):
                text = str(value)
                hosts[name] = HostScan(name, error=text[len(name) + 2:] if text.startswith(name + ": ") else text)
                log.warning("%s: core snapshot failed: %s", name, value)
            else:
                hosts[name] = value  # type: ignore[assignment]
        baseline = Baseline(hosts, time.time())
        for note in baseline.notes():
            log.warning("%s", note)
        return baseline

    # -- after --------------------------------------------------------------------------------------
    def collect(self, baseline: Baseline, *, rundir: Any = None, ranks: Any = None) -> list[Core]:
        """The cores that appeared on the cluster's hosts since ``baseline``: attributed, fetched, backtraced.

        ``rundir`` (a ``RunDir`` or a path) receives ``<host>/cores/<name>.gz`` and
        ``<name>.bt.txt`` and a ``cores.json``; ``ranks`` is a ``LaunchResult`` or a list
        of them. Hosts that fail are recorded in ``errors`` (never raised).
        """
        report = Path(getattr(rundir, "path", rundir)) if rundir is not None else None
        procs = rank_procs(ranks)
        self.errors = {}
        self.notes = baseline.notes()
        names = [n for n, s in baseline.hosts.items() if s.error is None and n in self.cluster.hosts]
        got = self.cluster.map(lambda h: self._collect_host(h, baseline.hosts[h.name], report, procs), names)
        cores: list[Core] = []
        for name, value in got.items():
            if isinstance(value, BaseException):
                self.errors[name] = str(value)
                self.notes.append(f"{name}: cores not collected: {value}")
                log.warning("%s: collecting cores failed: %s", name, value)
            else:
                cores += value  # type: ignore[arg-type]
        cores.sort(key=lambda c: (c.host, c.time))
        if report is not None and cores and self.policy is not CorePolicy.IGNORE:
            _append_cores(report / "cores.json", [c.to_json() for c in cores])
        for c in cores:
            log.warning("%s", c.describe())
        return cores

    def _collect_host(self, host: Host, before: HostScan, report: Path | None,
                      procs: Sequence[RankProc]) -> list[Core]:
        after = self._scan(host, before.now)
        cands = new_candidates(before, after)
        # a pipe handler (systemd-coredump, apport, abrt) stores the core after the process is
        # gone: when a rank here died of a core-dumping signal, give it a moment to appear
        expected = sum(1 for p in procs if p.host == host.name and p.signal in CORE_SIGNALS)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while after.pattern.kind in ("systemd", "apport", "abrt") and len(cands) < expected \
                and time.monotonic() < deadline:
            time.sleep(0.5)
            after = self._scan(host, before.now)
            cands = new_candidates(before, after)
        if after.boot_id and before.boot_id and after.boot_id != before.boot_id:
            self.notes.append(f"{host.name}: rebooted during the test (boot id changed)")
        if not cands:
            return []
        cores = [Core(c.host, c.source, c.location, c.time, c.pid, None, c.executable, c.comm, c.signal, c.size)
                 for c in cands]
        if self.policy is CorePolicy.IGNORE:
            return cores
        tmp = f"{self._workdir(host)}/.camit-cores/{secrets.token_hex(4)}"
        try:
            paths = self._inspect(host, cands, cores, tmp, procs)
            self._backtrace_and_fetch(host, after.gdb, cores, paths, tmp, report)
        except FrameworkError as exc:  # the cores were seen: report them with what we could not do
            log.warning("%s: inspecting cores failed: %s", host.name, exc)
            for core in cores:
                core.notes.append(f"could not inspect or fetch: {exc}")
        finally:
            try:
                host.run(["rm", "-rf", "--", tmp], timeout=60)
            except FrameworkError as exc:
                log.warning("%s: could not remove %s: %s", host.name, tmp, exc)
        return cores

    def _python(self, host: Host) -> str:
        return str(getattr(self._spec(host), "python", None) or "python3")

    def _inspect(self, host: Host, cands: Sequence[Candidate], cores: list[Core], tmp: str,
                 procs: Sequence[RankProc]) -> list[tuple[str | None, str | None]]:
        """Round trip 2: materialise each core file, read its facts and metadata.

        Returns per core (core file to backtrace, file to fetch): the same path,
        except for an apport ``.crash`` we cannot unpack (fetched, not backtraced).
        """
        script = inspect_script(cands, tmp, self._python(host), self.sources, self.cap_bytes)
        result = host.run(script, timeout=120 + 60 * len(cands))
        sections = _sections(result.stdout, "core")
        paths: list[tuple[str | None, str | None]] = []
        for i, (cand, core) in enumerate(zip(cands, cores)):
            sec = sections.get(str(i), {})
            _apply_inspection(core, cand, sec)
            core.rank, core.relation = attribute(host.name, core.pid, core.ppid, core.env, procs)
            path = sec.get("path", [""])[0] or None
            if path is None:
                core.notes.append(sec.get("err", ["no core file to read"])[0])
            artifact = path or (cand.location if cand.source == "apport" else None)
            paths.append((path, artifact))
        return paths

    def _backtrace_and_fetch(self, host: Host, gdb: str | None, cores: list[Core],
                             paths: Sequence[tuple[str | None, str | None]], tmp: str, report: Path | None) -> None:
        """Round trip 3 (backtraces, gzip), then one download per core."""
        jobs = []
        for i, (core, (path, artifact)) in enumerate(zip(cores, paths)):
            if path is None and artifact is None:
                continue
            fetch = (report is not None and artifact is not None and core.size is not None
                     and core.size <= self.cap_bytes)
            if report is not None and artifact is not None and not fetch:
                core.notes.append(f"not fetched: {_human(core.size)} is over the cap of {_human(self.cap_bytes)}; "
                                  f"left on {host.name} at {core.location}")
            exe = core.executable if (core.executable or "").startswith("/") else None
            jobs.append(BacktraceJob(i, path if gdb else None, exe, artifact if fetch else None,
                                     f"{tmp}/{i}.gz" if fetch else None))
        if not jobs:
            return
        if not gdb:
            for core in cores:
                core.notes.append(f"gdb is not installed on {host.name}: no backtrace")
        script = backtrace_script(jobs, timeout=self.gdb_timeout)
        budget = len(jobs) * (self.gdb_timeout + 15) + sum((c.size or 0) for c in cores) / 20e6 + 60
        result = host.run(script, timeout=budget, max_output=len(jobs) * BACKTRACE_BYTES + 65536)
        sections = _sections(result.stdout, "job", raw=True)
        for job in jobs:
            core = cores[job.index]
            text = sections.get(str(job.index), {}).get("raw", [""])[0]
            bt, _, tail = text.partition("@@gzip ")
            if job.core and bt.strip():
                core.backtrace = clean_backtrace(bt)
            if report is None:
                continue
            out_dir = report / host.name / "cores"
            base = local_name(core)
            if core.backtrace:
                    core.backtrace_path = write_atomic(out_dir / f"{base}.bt.txt", core.backtrace)
            if job.gzip_to and tail.startswith("ok"):
                try:
                    out_dir.mkdir(parents=True, exist_ok=True)
                    host.get(job.gzip_to, out_dir / f"{base}.gz")
                    core.local_path = out_dir / f"{base}.gz"
                except FrameworkError as exc:
                    core.notes.append(f"fetch failed: {exc}")
            elif job.gzip_to:
                core.notes.append(f"gzip on {host.name} failed: {tail.strip()[:200]}")

    # -- judgement and logs ---------------------------------------------------------------------------
    def verdict(self, cores: Sequence[Core]) -> tuple[bool, str]:
        """(failed, message) under this watch's policy (``warn``: never failed, message kept)."""
        return verdict_message(cores, self.policy, self.notes if cores else ())

    def collect_logs(self, rundir: Any, since: Baseline) -> dict[str, list[Path]]:
        """dmesg since the snapshot and recent Ascend logs of every host into ``<report>/<host>/``; bounded.

        Also scans those files and the launch's rank logs for the Ascend failure
        signatures and writes ``<report>/signatures.txt`` (kept in ``log_summary``).
        """
        from framework.hostlogs import DEFAULT_ASCEND_DIRS, collect_logs

        dirs = self.ascend_log_dirs
        if dirs is None:
            launch_env = getattr(getattr(self.env, "launch", None), "env", None) or {}
            extra = launch_env.get("ASCEND_PROCESS_LOG_PATH")
            dirs = DEFAULT_ASCEND_DIRS + ((str(extra),) if extra else ())
        files, summary = collect_logs(self.cluster, Path(getattr(rundir, "path", rundir)), since,
                                      workdir_of=self._workdir, ascend_dirs=dirs)
        self.log_summary = summary
        return files


# -- round-trip scripts (pure) --------------------------------------------------------------------------
def inspect_script(cands: Sequence[Candidate], tmp: str, python: str, sources: CoreSources,
                   cap_bytes: int) -> str:
    """Script: for each candidate ``@@core <i>`` then ``@@path``, ``@@size``, ``@@file``, ``@@facts``, ``@@meta``."""
    q = commands.quote
    lines = [
        "LC_ALL=C; export LC_ALL",
        f"T={q(tmp)}; mkdir -p \"$T\"",
        f"PY=$(command -v {q(python)} 2>/dev/null || command -v python3 2>/dev/null || command -v python 2>/dev/null)",
        f"facts() {{ if [ -n \"$PY\" ]; then \"$PY\" -c {q(facts_program())} \"$1\" 2>&1 | head -c 65536 "
        "| tr '\\n' ' '; fi; }",
        "one() { printf '@@path %s\\n' \"$1\"; printf '@@size %s\\n' \"$(stat -c %s -- \"$1\" 2>/dev/null)\"; "
        "printf '@@file %s\\n' \"$(file -b -- \"$1\" 2>/dev/null | head -c 2000 | tr '\\n' ' ')\"; "
        "printf '@@facts %s\\n' \"$(facts \"$1\")\"; }",
    ]
    for i, c in enumerate(cands):
        lines.append(f"printf '@@core {i}\\n'")
        loc = q(c.location)
        if c.source == "systemd":
            e = c.journal
            if e is not None and e.size is not None and e.size > cap_bytes:
                lines.append(f"printf '@@err stored core is {e.size} bytes, over the cap: not extracted\\n'")
                continue
            since = f"@{int(c.time) - 1}"
            lines.append(f"if {q(sources.coredumpctl)} --no-pager -q -o \"$T/{i}.core\" --since={since} "
                         f"dump {int(c.pid or 0)} >/dev/null 2>\"$T/{i}.err\"; then one \"$T/{i}.core\"; "
                         f"else printf '@@err coredumpctl dump failed: %s\\n' \"$(head -c 300 \"$T/{i}.err\" "
                         "| tr '\\n' ' ')\"; fi")
        elif c.source == "abrt":
            lines.append(f"for k in executable pid global_pid time reason cmdline; do [ -f {loc}/$k ] && "
                         f"printf '@@meta %s %s\\n' \"$k\" \"$(head -c 2000 {loc}/$k | tr '\\n' ' ')\"; done")
            lines.append(f"if [ -f {loc}/coredump ]; then one {loc}/coredump; "
                         "else printf '@@err no coredump file in the abrt dump dir\\n'; fi")
        elif c.source == "apport" and c.location.endswith(".crash"):
            lines.append(f"sed -n '/^CoreDump:/q; p' {loc} | head -c 65536 | sed 's/^/@@hdr /'")
            lines.append(f"printf '@@crash %s\\n' \"$(stat -c %s -- {loc} 2>/dev/null)\"")
            lines.append(f"if command -v apport-unpack >/dev/null 2>&1 && apport-unpack {loc} \"$T/{i}.d\" "
                         f">/dev/null 2>&1 && [ -f \"$T/{i}.d/CoreDump\" ]; then one \"$T/{i}.d/CoreDump\"; "
                         "else printf '@@err apport-unpack is not available: the .crash file is the artifact\\n'; fi")
        else:
            lines.append(f"one {loc}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class BacktraceJob:
    """One core to backtrace (``core``) and/or a file to gzip into ``gzip_to`` for fetching."""

    index: int
    core: str | None
    executable: str | None
    artifact: str | None = None
    gzip_to: str | None = None


def gdb_argv(core: str, executable: str | None) -> list[str]:
    """``gdb -batch`` printing the crashing thread's backtrace, then every thread's."""
    argv = ["gdb", "-batch", "-nx", "-iex", "set auto-load off", "-ex", "set pagination off",
            "-ex", "echo @@crashing\\n", "-ex", "bt", "-ex", "echo @@threads\\n", "-ex", "thread apply all bt"]
    return argv + ([executable, core] if executable else ["-c", core])


def backtrace_script(jobs: Sequence[BacktraceJob], *, timeout: float) -> str:
    """Script: per job ``@@job <i>``, the bounded gdb output, then ``@@gzip ok|failed``."""
    q = commands.quote
    lines = ["LC_ALL=C; export LC_ALL",
             f"TO=''; command -v timeout >/dev/null 2>&1 && TO='timeout -k 5 {timeout:g}'"]
    for job in jobs:
        lines.append(f"printf '@@job {job.index}\\n'")
        if job.core:
            lines.append(f"$TO {commands.join(gdb_argv(job.core, job.executable))} </dev/null 2>&1 "
                         f"| head -c {BACKTRACE_BYTES}")
        if job.artifact and job.gzip_to:
            lines.append(f"if gzip -1 -c -- {q(job.artifact)} > {q(job.gzip_to)}; then printf '\\n@@gzip ok\\n'; "
                         "else printf '\\n@@gzip failed\\n'; fi")
    return "\n".join(lines) + "\n"


_GDB_NOISE = re.compile(
    r"^(warning: Section `\.reg-xstate|\[Thread debugging using|Using host libthread_db|\[New LWP)")


def clean_backtrace(text: str) -> str:
    """gdb output without the noise lines (xstate warnings, thread-db banners)."""
    return "\n".join(ln for ln in text.splitlines() if not _GDB_NOISE.match(ln)).strip() + "\n"


def local_name(core: Core) -> str:
    """File name (without ``.gz``) for a fetched core: safe, unique per host."""
    if core.source == "file":
        base = posixpath.basename(core.location)
    elif core.source == "abrt":
        base = posixpath.basename(core.location) + ".core"
    elif core.source == "apport":
        base = posixpath.basename(core.location)
    else:
        base = f"core.{core.comm or 'unknown'}.{core.pid}.{int(core.time)}"
    return re.sub(r"[^A-Za-z0-9._+-]", "_", base) or "core"


def _sections(text: str, key: str, raw: bool = False) -> dict[str, dict[str, list[str]]]:
    """Split ``@@<key> <i>`` sections; inside, ``@@name value`` lines (or the raw text with ``raw``)."""
    out: dict[str, dict[str, list[str]]] = {}
    cur: dict[str, list[str]] | None = None
    buf: list[str] = []
    for line in text.splitlines():
        if line.startswith(f"@@{key} "):
            if raw and cur is not None:
                cur["raw"] = ["\n".join(buf)]
            cur, buf = out.setdefault(line.split(" ", 1)[1].strip(), {}), []
            continue
        if cur is None:
            continue
        if raw:
            buf.append(line)
        elif line.startswith("@@"):
            name, _, value = line[2:].partition(" ")
            cur.setdefault(name, []).append(value)
    if raw and cur is not None:
        cur["raw"] = ["\n".join(buf)]
    return out


def _apply_inspection(core: Core, cand: Candidate, sec: Mapping[str, list[str]]) -> None:
    """Fill ``core`` from an inspection section (facts beat the pattern's fields, metadata fills gaps)."""
    size = sec.get("size", [""])[0].strip()
    if size.isdigit():
        core.size = int(size)
    facts: dict[str, Any] = {}
    raw = sec.get("facts", [""])[0].strip()
    if raw.startswith("{"):
        try:
            facts = json.loads(raw)
        except ValueError:
            facts = {}
    if facts.get("error"):
        core.notes.append(f"core notes unreadable: {facts['error']}")
    meta = {v.split(" ", 1)[0]: (v.split(" ", 1)[1].strip() if " " in v else "") for v in sec.get("meta", [])}
    header = crash_header_facts(parse_crash_header("\n".join(sec.get("hdr", [])))) if sec.get("hdr") else {}
    if sec.get("crash") and not sec.get("size"):
        crash_size = sec["crash"][0].strip()
        core.size = int(crash_size) if crash_size.isdigit() else core.size
    core.pid = facts.get("pid") or _int(meta.get("pid")) or header.get("pid") or core.pid
    core.ppid = facts.get("ppid") or header.get("ppid")
    core.comm = facts.get("comm") or core.comm
    # the kernel's own word first (%s, the journal), then the core's NT_SIGINFO, then the handlers' files
    core.signal = (core.signal or signal_name(facts.get("signal")) or header.get("signal")
                   or _reason_signal(meta.get("reason", "")))
    exe = cand.executable or meta.get("executable") or header.get("executable")
    execfn = facts.get("execfn") or _file_execfn(sec.get("file", [""])[0])
    if not exe and execfn and execfn.startswith("/"):
        exe = execfn
    core.executable = exe or execfn or core.executable
    psargs = facts.get("psargs") or ""
    if len(psargs) >= 79:  # the kernel keeps the first 80 bytes of the command line
        psargs += "…"
    core.cmdline = meta.get("cmdline") or header.get("cmdline") or psargs or None
    core.env = dict(facts.get("env") or {})
    if cand.source == "abrt" and _int(meta.get("time")):
        core.time = float(meta["time"])


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _reason_signal(reason: str) -> str | None:
    m = re.search(r"\b(SIG[A-Z0-9]+)\b", reason)
    return m.group(1) if m else None


def _file_execfn(text: str) -> str | None:
    m = re.search(r"execfn: '([^']*)'", text)
    return m.group(1) if m else None


__all__ = ["Baseline", "Core", "CorePattern", "CorePolicy", "CoreSources", "CoreWatch", "RankProc", "attribute",
           "core_facts", "new_candidates", "parse_core_pattern", "parse_coredumpctl_json",
           "parse_coredumpctl_text", "parse_scan", "rank_procs", "scan_script", "scan_signatures", "Signature"]
