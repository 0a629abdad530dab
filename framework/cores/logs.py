"""Host logs after a failure: kernel messages since the test began, recent Ascend logs, failure
signatures.

Pure parts (the signature rules, the per-host script and its parsers) and the executor
:func:`collect_logs`; what it writes where: docs/internals/cores.md.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
import tarfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from framework import commands, fetchcaps, suspects
from framework.cores import faultbundle
from framework.cores.scan import Baseline
from framework.errors import FrameworkError
from framework.hosts import Cluster, GroupResult, Host
from framework.records.folder import append_text, write_atomic
from framework.remote.layout import DEFAULT_WORKDIR
from framework.remote.packing import pack_program, sh_pack
from framework.remote.sections import Record, read_records, sh_tag

log = logging.getLogger("camit.hostlogs")

DMESG_BYTES = 2 * 1024 * 1024
ASCEND_BYTES = 32 * 1024 * 1024
SCAN_BYTES = 16 * 1024 * 1024
DEFAULT_ASCEND_DIRS = ("$HOME/ascend/log",)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# -- signatures ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Signature:
    """One failure signature found in a text: its first line, how often, and what it usually
    means."""

    code: str
    meaning: str
    line: str
    lineno: int
    count: int = 1
    detail: str = ""
    primary: bool = True  # False: a wrapper (torch_npu RuntimeError) around a primary cause
    source: str = ""

    def describe(self) -> str:
        where = f"{self.source}:{self.lineno}" if self.source else f"line {self.lineno}"
        times = f" (x{self.count})" if self.count > 1 else ""
        detail = f" [{self.detail}]" if self.detail else ""
        return f"{self.code}{times}: {self.meaning}{detail}\n    {where}: {self.line}"


def _no_detail(text: str) -> str:
    return ""


@dataclass(frozen=True)
class _Rule:
    code: str
    regex: re.Pattern[str]
    meaning: str
    detail: Callable[[str], str] = _no_detail  # applied to the whole text
    primary: bool = True


def _all(pattern: str, fmt: Callable[[list[Any]], str]) -> Callable[[str], str]:
    """Every distinct match of ``pattern`` (str or tuple items), formatted by ``fmt``."""
    rx = re.compile(pattern)

    def detail(text: str) -> str:
        found = list(dict.fromkeys(rx.findall(text)))
        return fmt(found) if found else ""

    return detail


def _first(pattern: str, fmt: Callable[[re.Match[str]], str]) -> Callable[[str], str]:
    """The first match of ``pattern``, formatted by ``fmt``."""
    rx = re.compile(pattern)

    def detail(text: str) -> str:
        m = rx.search(text)
        return fmt(m) if m else ""

    return detail


_RULES: tuple[_Rule, ...] = (
    _Rule("EI0006", re.compile(r"\bEI0006\b"),
          "HCCL socket timeout: a peer did not connect within HCCL_CONNECT_TIMEOUT (peer died or "
          "started late, TLS mismatch, wrong NIC, busy port)",
          _all(r"dst_rank\[(\d+)\]", lambda r: "peer ranks " + ", ".join(r))),
    _Rule("EI0002", re.compile(r"\bEI0002\b"),
          "HCCL notify wait timeout: a peer never reached the collective (crashed, slow, diverged, "
          "packet loss); fires after HCCL_EXEC_TIMEOUT",
          _all(r"remote rank:\s*\[(\d+)\]", lambda r: "remote rank " + ", ".join(r))),
    _Rule("EI9999", re.compile(r"\bEI9999\b"),
          "HCCL task timeout (fftsplus task, 30 min by default)"),
    _Rule("EI0011", re.compile(r"\bEI0011\b"), "device memory insufficient (at QP allocation)"),
    _Rule("EI0019", re.compile(r"\bEI0019\b"), "HCCL port bind failure"),
    _Rule("HCCL_BUFFSIZE", re.compile(r"HCCL_BUFFSIZE is too SMALL"),
          "HCCL_BUFFSIZE is too small for the message size"),
    _Rule("HCCL-WATCHDOG", re.compile(r"HCCL watchdog thread terminated with exception"),
          "HCCL watchdog abort: std::terminate -> SIGABRT (torchrun exitcode -6), a core is "
          "written"),
    # a kernel past torch_npu's op-execute timeout, seen at the rank's own synchronize: a CAM kernel
    # waits for its peers in vector-core code, outside HCCL (npu-fidelity.md §1), so no EI0002 and
    # no HCCL_EXEC_TIMEOUT
    _Rule("OP-EXECUTE-TIMEOUT",
          re.compile(r"AclrtSynchronizeDeviceWithTimeout, error code is 5070[13]4\b"),
          "CAM op did not finish (op-execute timeout): a kernel on this rank's stream (a CAM op "
          "waiting for its peers in vector-core code) ran past torch_npu's op-execute timeout (547 "
          "s by default, torch_npu.npu.set_op_timeout_ms) and the next synchronize failed; "
          "HCCL_EXEC_TIMEOUT does not bound CAM kernels and no EI0002 names the peer: look for the "
          "rank that never entered the op",
          _first(r"error code is (5070[13]4)", lambda m: f"error code {m[1]}")),
    _Rule("ACL-507014", re.compile(r"\b507014\b"), "ACL 507014: AI Core execution timeout"),
    _Rule("ACL-507048", re.compile(r"\b507048\b"),
          "ACL 507048: internal task timeout (AclrtSynchronizeDeviceWithTimeout); also linked to a "
          "bad card"),
    _Rule("ACL-507901", re.compile(r"\b507901\b"),
          "ACL 507901: HDC disconnected (device or driver lost)"),
    # device faults a kernel raises; they surface at the process's next synchronize, and that
    # process's stream stays unusable (meanings: torch_npu/csrc/core/npu/NPUErrorCodes.h;
    # npu-fidelity.md §1: an expert id outside [0, E) is one way, as get_dispatch_layout checks no
    # values)
    _Rule("ACL-507015", re.compile(r"\b507015\b"),
          "ACL 507015: aicore execution is abnormal (a kernel faulted, e.g. an out-of-range "
          "index); the process's stream is unusable from here on"),
    _Rule("ACL-507035", re.compile(r"\b507035\b"),
          "ACL 507035: vector core execution is abnormal (a kernel faulted, e.g. an out-of-range "
          "index); the process's stream is unusable from here on"),
    _Rule("ACL-507016", re.compile(r"\b507016\b"),
          "ACL 507016: an aicore trap was executed (a kernel faulted); the process's stream is "
          "unusable from here on"),
    _Rule("ACL-507036", re.compile(r"\b507036\b"),
          "ACL 507036: a vector core trap was executed (a kernel faulted); the process's stream is "
          "unusable from here on"),
    _Rule("ACL-507034", re.compile(r"\b507034\b"),
          "ACL 507034: vector core execution timed out (a kernel hung; also linked to a bad card)"),
    _Rule("ACL-507033", re.compile(r"\b507033\b"), "ACL 507033: failed to start the device"),
    _Rule("ACL-50704X", re.compile(r"\b50704[2-5]\b"),
          "ACL 507042-507045: a kernel trapped on an out-of-bounds read or write (aicore "
          "507042/507043, vector core 507044/507045)"),
    _Rule("ACL-50704X-WAIT", re.compile(r"\b50704[67]\b"),
          "ACL 507046/507047: a stream or event did not complete within the synchronize timeout (a "
          "kernel hung)"),
    _Rule("ACL-207018", re.compile(r"\b207018\b"),
          "ACL 207018: device memory exhausted (HCCL_BUFFSIZE per communicator is a common cause)"),
    _Rule("EZ9999", re.compile(r"\bEZ9999\b"),
          "EZ9999: an op's tiling or inner check refused the call (shape, dtype or buffer outside "
          "its limits)"),
    _Rule("HCCL-LINK-TIMEOUT", re.compile(r"wait socket establish timeout"),
          "HCCL link establishment timed out (host-side detail of EI0006)",
          _first(r"role\[(\d+)\] rank\[(\d+)\] timeout\[(\d+)\]",
                 lambda m: f"rank {m[2]}, role {m[1]}, timeout {m[3]} s")),
    _Rule("HCCL-LINK-ERROR-INFO", re.compile(r"LINK_ERROR_INFO"),
          "HCCL printed its LINK_ERROR_INFO table (dest/src ip and port, role, TLS status)"),
    _Rule("HCCL-LISTEN-FAIL", re.compile(r"listen on ip\[[^\]]*\] and specific port\[\d+\] fail"),
          "HCCL could not listen on its port (used by another process?)",
          _first(r"listen on ip\[([^\]]*)\] and specific port\[(\d+)\]",
                 lambda m: f"ip {m[1]}, port {m[2]}")),
    _Rule("OPS-ERROR", re.compile(r"OPS function error: \w+, error code is \d+"),
          "torch_npu: an HCCL operator call failed",
          _first(r"OPS function error: (\w+), error code is (\d+)",
                 lambda m: f"{m[1]}, error code {m[2]}"),
          primary=False),
    _Rule("NPU-ERROR", re.compile(r"NPU function error: [\w:]+"),
          "torch_npu: an ACL runtime call failed",
          _first(r"NPU function error: ([\w:]+).*?error code is (\d+)",
                 lambda m: f"{m[1]}, error code {m[2]}"),
          primary=False),
    _Rule("ERR01100", re.compile(r"\bERR01100\b"), "torch_npu: OPS call acl api failed",
          primary=False),
    _Rule("ERR00100", re.compile(r"\bERR00100\b"), "torch_npu: PTA call acl api failed",
          primary=False),
    _Rule("ERR02005", re.compile(r"\bERR02005\b"), "torch_npu: DIST internal error", primary=False),
    _Rule("TERMINATE", re.compile(r"terminate called after throwing an instance of"),
          "C++ std::terminate: the process aborts (SIGABRT)", primary=False),
    # kernel (dmesg): a rank that "died of SIGKILL" with nobody killing it was usually this
    _Rule("OOM-KILL",
          re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process \d+"),
          "the kernel's OOM killer ended a process (host memory exhausted; the victim dies of "
          "SIGKILL)",
          _all(r"Killed process (\d+) \(([^)]*)\)[^\n]*?anon-rss:(\d+)kB",
               lambda found: "; ".join(f"pid {pid} ({comm}), {int(kb) // 1024} MiB resident"
                                       for pid, comm, kb in found))),
)


def scan_signatures(text: str, source: str = "") -> list[Signature]:
    """The failure signatures in ``text``, one per kind, in order of first appearance.

    >>> [s.code for s in scan_signatures("EI0002: ... remote rank: [24]")]
    ['EI0002']
    """
    first, counts = _first_lines(text)
    out = [Signature(rule.code, rule.meaning, *first[rule.code], counts[rule.code],
                     rule.detail(text), rule.primary, source)
           for rule in _RULES if rule.code in first]
    return sorted(out, key=lambda s: (s.lineno, not s.primary))


def _first_lines(text: str) -> tuple[dict[str, tuple[str, int]], Counter[str]]:
    """Per rule code: its first matching line (text, number) and how many lines match."""
    first: dict[str, tuple[str, int]] = {}
    counts: Counter[str] = Counter()
    for lineno, line in enumerate(text.splitlines(), 1):
        for rule in _RULES:
            if rule.regex.search(line):
                counts[rule.code] += 1
                first.setdefault(rule.code, (line.strip()[:300], lineno))
    return first, counts


#: a summary line's mark: a primary cause, or a wrapper around one
_MARK = {True: "!!", False: "  "}


def summarize(found: Mapping[str, Sequence[Signature]]) -> str:
    """A readable summary: per host, primary causes first, then the wrappers."""
    return "".join(line + "\n" for host, sigs in found.items() if sigs
                   for line in _host_summary(host, sigs))


def _host_summary(host: str, sigs: Iterable[Signature]) -> list[str]:
    ordered = sorted(sigs, key=lambda s: (not s.primary, s.source, s.lineno))
    return [f"{host}:"] + [f"  {_MARK[s.primary]} " + s.describe().replace("\n", "\n     ")
                           for s in ordered]


# -- dmesg -----------------------------------------------------------------------------------------
_DMESG_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")


def dmesg_since(text: str, uptime: float | None) -> list[str]:
    """Kernel lines stamped at or after ``uptime`` (seconds since boot); unstamped lines follow
    their stamped one."""
    out: list[str] = []
    keep = uptime is None
    for line in text.splitlines():
        m = _DMESG_STAMP.match(line)
        if m:
            keep = uptime is None or float(m.group(1)) >= uptime
        if keep:
            out.append(line)
    return out


# -- the per-host script ---------------------------------------------------------------------------
def _shell_dir(path: str) -> str:
    """A directory as a shell word: ``$HOME/x`` keeps ``$HOME`` expandable, the rest is quoted."""
    if path.startswith("$HOME/"):
        return '"$HOME"/' + commands.quote(path[len("$HOME/"):])
    return commands.quote(path)


def home_logs_script(guard: str, tgz: str, cap: int) -> commands.ShellScript:
    """sh for ``camit collect --logs``: after ``guard`` (the workdir's), ``~/ascend/log`` packed
    into ``tgz`` by :func:`sh_pack` (newest first up to ``cap`` bytes); exit 3 when there is no
    ``~/ascend/log``, 4 with the program's line when nothing could be packed."""
    q = commands.quote(tgz)
    return commands.ShellScript("\n".join([
        f"{guard} && {{ [ -d \"$HOME/ascend/log\" ] || exit 3; }} || exit $?",
        f"rm -f -- {q}",
        sh_pack(q, cap, 0, '"$HOME"/ascend/log'),
        f"[ -n \"$n\" ] && [ -s {q} ] || {{ printf '%s\\n' \"$r\"; exit 4; }}",
    ]))


def logs_script(since: float, tmp: str, ascend_dirs: Sequence[str], *,
                dmesg_bytes: int = DMESG_BYTES, ascend_bytes: int = ASCEND_BYTES) -> str:
    """Script: ``@@dmesg`` + the tail of dmesg (``@@dmesg-failed`` on error), then ``@@ascend <tgz>
    <n>`` if any (else ``@@ascend-none <the pack program's line, or why it did not run>``).

    Ascend files under ``<dir>/{debug,run}`` changed since ``since`` (epoch) are packed newest first
    until ``ascend_bytes`` by :mod:`framework.remote.hostfile`'s pack mode: every folder opened
    ``O_NOFOLLOW`` and walked by descriptor, every file opened once and judged by its descriptor
    (the SSH user's own, one link), read from that descriptor; a folder swapped for a symlink is
    never followed.
    """
    q = commands.quote
    dirs = " ".join(f"{_shell_dir(d)}/debug {_shell_dir(d)}/run" for d in ascend_dirs)
    lines = [
        "LC_ALL=C; export LC_ALL",
        # the host's wall clock and seconds since boot, read with dmesg: its [stamps] placed in time
        sh_tag("clock", "\"$(date +%s.%N) $(cut -d' ' -f1 /proc/uptime 2>/dev/null)\""),
        sh_tag("dmesg"),
        f"{{ dmesg 2>&1 || printf '\\n@@dmesg-failed\\n'; }} | tail -c {int(dmesg_bytes)}",
        "printf '\\n@@end-dmesg\\n'",
    ]
    if dirs:
        lines += [
            f"T={q(tmp)}",
            sh_pack('"$T.tgz"', ascend_bytes, since, dirs),
            "if [ \"${n:-0}\" -gt 0 ]; then printf '@@ascend %s %s\\n' \"$T.tgz\" \"$n\"; "
            "else rm -f \"$T.tgz\"; printf '@@ascend-none %s\\n' \"$r\"; fi",
        ]
    return "\n".join(lines) + "\n"


def parse_logs_output(text: str) -> tuple[str, bool, str | None]:
    """(dmesg text, dmesg failed?, remote tgz path or None) from :func:`logs_script` output.

    Its tagged records (``framework.remote.sections``): ``dmesg`` opens the kernel text (a tag line
    inside it, but ``dmesg-failed``, is kernel text too) up to ``end-dmesg``; then ``ascend <tgz>
    <n>``.
    """
    records = read_records(text)
    start = _index(records, 0, "dmesg")
    end = _index(records, start + 1, "end-dmesg")
    kernel = records[start:end]
    failed = any(r.tag == "dmesg-failed" for r in kernel)
    dmesg = "".join(r.body if r.tag in _DMESG_TAGS else r.raw for r in kernel)
    return dmesg.strip("\n"), failed, _tgz(records[end:])


#: the records whose body is kernel text (any other tag line inside the kernel text is kernel text
#: too)
_DMESG_TAGS = ("dmesg", "dmesg-failed")


def _index(records: Sequence[Record], start: int, tag: str) -> int:
    """The index of the first record tagged ``tag`` from ``start`` on (past the end: none is)."""
    return next((i for i in range(start, len(records)) if records[i].tag == tag), len(records))


def _tgz(records: Iterable[Record]) -> str | None:
    """The archive path of the first ``ascend <tgz> <n>`` record."""
    words = [r.value.split() for r in records if r.tag == "ascend"]
    return next((w[0] for w in words if w), None)


def parse_clock(text: str) -> dict[str, float] | None:
    """``{"now": epoch, "uptime": seconds}`` from :func:`logs_script`'s ``clock`` record (None: not
    both numbers)."""
    words = next((r.value.split() for r in read_records(text) if r.tag == "clock"), [])
    values = _readings(words)
    if len(values) != 2:
        return None
    return {"now": values[0], "uptime": values[1]}


def _readings(words: Sequence[str]) -> list[float]:
    """The words as clock readings (finite, not negative); none if one is not."""
    try:
        values = [float(w) for w in words]
    except ValueError:
        return []
    return values if all(map(_is_reading, values)) else []


def _is_reading(value: float) -> bool:
    return math.isfinite(value) and value >= 0


# -- executor --------------------------------------------------------------------------------------
def _log_member(member: tarfile.TarInfo) -> Path | None:
    """Where an Ascend log member goes below ``ascend/``: its relative path, nothing hidden or
    outside."""
    parts = [p for p in PurePosixPath(member.name).parts if p not in ("", ".")]
    if not parts or _leaves_its_folder(member.name):
        return None
    return Path(*parts)


def _leaves_its_folder(name: str) -> bool:
    """Whether a member name is absolute, climbs with ``..`` or holds a control character."""
    path = PurePosixPath(name)
    return path.is_absolute() or ".." in path.parts or bool(_CONTROL.search(name))


def _dmesg_text(host: str, dmesg: str, failed: bool, uptime: float | None) -> str:
    """dmesg.txt: the kernel messages since the test started, or why dmesg could not be read."""
    if failed:
        return f"# dmesg is not readable on {host}:\n{dmesg.strip()}\n"
    kept = dmesg_since(dmesg, uptime)
    return "\n".join(kept) + "\n" if kept else "# no kernel messages since the test started\n"


def _fetch_ascend_logs(host: Host, tgz: str, out_dir: Path) -> list[Path]:
    """The host's Ascend log archive, fetched (bounded), unpacked under ``ascend/`` and removed on
    both sides."""
    local = out_dir / ".ascend-logs.tgz"
    try:
        try:  # bounded download; a cut one keeps its first members
            host.get(tgz, local, keep_partial=True)
        except fetchcaps.FetchCapError as exc:
            log.warning("%s", exc)
        got = fetchcaps.extract_tar(local, out_dir / "ascend", host=host.name,
                                    what=f"Ascend logs {tgz}", place=_log_member)
        for note in got.notes or []:
            log.warning("%s", note)
        return sorted(got.files)
    except (FrameworkError, OSError) as exc:
        log.warning("%s: could not fetch Ascend logs: %s", host.name, exc)
        return []
    finally:
        local.unlink(missing_ok=True)
        _remove_on(host, tgz)


def _remove_on(host: Host, path: str) -> None:
    """Best effort: a host that cannot be reached keeps the file."""
    try:
        host.run(["rm", "-f", "--", path], timeout=30)
    except FrameworkError:
        pass


def _default_workdir(host: Host) -> str:
    return DEFAULT_WORKDIR


def _window(baseline: Baseline, name: str) -> tuple[float, float | None]:
    """Since when to collect on host ``name``: its own clock at the snapshot (else the
    controller's), and its seconds since boot then (None: its snapshot failed)."""
    scan = baseline.hosts.get(name)
    if scan is None:
        return baseline.taken, None
    return scan.now or baseline.taken, scan.uptime if scan.error is None else None


def _collect_host(host: Host, report: Path, baseline: Baseline, tmp: str,
                  dirs: Sequence[str]) -> list[Path]:
    """One host's ``dmesg.txt`` (and its clock) and Ascend logs since ``baseline``: the files
    written."""
    since, uptime = _window(baseline, host.name)
    out_dir = report / host.name
    result = host.run(commands.ShellScript(logs_script(since, tmp, dirs)), timeout=120,
                      max_output=DMESG_BYTES + 65536)
    dmesg, failed, tgz = parse_logs_output(result.stdout)
    text = _dmesg_text(host.name, dmesg, failed, uptime)
    files = [write_atomic(out_dir / "dmesg.txt", text)]
    clock = parse_clock(result.stdout)
    if clock:  # the timeline places dmesg's seconds since boot by it
        write_atomic(out_dir / "dmesg-clock.json", json.dumps(clock) + "\n")
    faultbundle.add_dmesg(report, host.name, text)  # a failed NPU launch's bundle gets it too
    if tgz:
        files += _fetch_ascend_logs(host, tgz, out_dir)
    return files


def _files_by_host(got: GroupResult[list[Path]]) -> dict[str, list[Path]]:
    """Each host's files; none for a host that failed (logged)."""
    collected: dict[str, list[Path]] = {}
    for name, value in got.items():
        if isinstance(value, BaseException):
            log.warning("%s: collecting logs failed: %s", name, value)
            value = []
        collected[name] = list(value)
    return collected


def _is_launch_log(path: Path) -> bool:
    return path.name.startswith(("rank", "plog-")) or path.name == "torchrun.log"


def _launch_logs(host_dir: Path, taken: float) -> list[Path]:
    """The launch logs fetched since the snapshot ``taken``: ``<host>/rank*.log``, or
    ``<host>/<launch>/rank*.log`` when a run holds several launches (the per-test case), and the
    plogs that came back with the run folder (``<host>/[<launch>/]ascend/``); older launches' logs
    are not this failure's."""
    logs = filter(_is_launch_log, sorted(host_dir.rglob("*.log")))
    return [p for p in logs if _mtime(p) >= taken - 1.0]


def _tail(path: Path, size: int) -> str | None:
    """The last ``size`` bytes of a file as text (None: not readable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - size))
            return fh.read().decode(errors="replace")
    except OSError:
        return None


def _signatures_in(paths: Iterable[Path], report: Path) -> list[Signature]:
    """The signatures in each file's tail, each with its path relative to ``report``."""
    sigs: list[Signature] = []
    for path in dict.fromkeys(paths):
        text = _tail(path, SCAN_BYTES)
        if text is not None:
            sigs += [replace(s, source=_source(path, report)) for s in scan_signatures(text)]
    return sigs


def _source(path: Path, report: Path) -> str:
    """A scanned file's name in the signatures: relative to the report folder."""
    return path.relative_to(report).as_posix() if path.is_relative_to(report) else str(path)


def _host_signatures(report: Path, collected: dict[str, list[Path]], taken: float,
                     head: str) -> dict[str, list[Signature]]:
    """Each host's signatures, also added to its ``signatures.txt`` (appended to its files)."""
    found: dict[str, list[Signature]] = {}
    for name, files in collected.items():
        host_dir = report / name
        found[name] = sigs = _signatures_in(_launch_logs(host_dir, taken) + files, report)
        if sigs:
            files.append(append_text(host_dir / "signatures.txt", head + summarize({name: sigs})))
    return found


def collect_logs(cluster: Cluster, report: Path, baseline: Baseline, *,
                 workdir_of: Callable[[Host], str] = _default_workdir,
                 ascend_dirs: Sequence[str] = DEFAULT_ASCEND_DIRS,
                 label: str | None = None) -> tuple[dict[str, list[Path]], str]:
    """Collect dmesg and Ascend logs since ``baseline`` from every host; scan for signatures.

    The signatures are added to ``<report>/signatures.txt`` and ``<report>/<host>/signatures.txt``
    as a section headed ``== <label> ==`` (the failed test) when given, so each failure of a run
    keeps its own.

    ``baseline`` is a ``framework.cores.scan.Baseline`` (its per-host ``now``/``uptime`` are the
    hosts' own clocks). Returns ``({host: [files]}, summary)``; a host that fails is logged and gets
    what could be written. Never raises for one host.
    """
    dirs = tuple(ascend_dirs)

    def one(host: Host) -> list[Path]:
        tmp = f"{workdir_of(host)}/.camit-logs-{secrets.token_hex(4)}"
        return _collect_host(host, report, baseline, tmp, dirs)

    got = cluster.map(one)
    collected = _files_by_host(got)
    head = f"== {label} ==\n" if label else ""
    found = _host_signatures(report, collected, baseline.taken, head)
    suspects.mark(cluster, oom_faults(found), on=[n for n in collected if n not in got.failed])
    summary = summarize(found)
    if summary:
        append_text(report / "signatures.txt", head + summary)
        log.warning("failure signatures:\n%s", summary.rstrip())
    return collected, summary


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def oom_faults(found: Mapping[str, Sequence[Signature]]) -> dict[str, tuple[str, str]]:
    """The hosts whose kernel log (``dmesg.txt``) holds an OOM kill, with its line: what makes a
    host suspect (framework.suspects)."""
    out: dict[str, tuple[str, str]] = {}
    for host, sigs in found.items():
        oom = next(filter(_is_kernel_oom_kill, sigs), None)
        if oom is not None:
            out[host] = ("oom", f"{oom.meaning}: {oom.line.strip()[:200]}")
    return out


def _is_kernel_oom_kill(sig: Signature) -> bool:
    return sig.code == "OOM-KILL" and sig.source.endswith("dmesg.txt")


__all__ = ["Signature", "collect_logs", "dmesg_since", "home_logs_script", "logs_script",
           "oom_faults", "pack_program", "parse_clock", "parse_logs_output", "scan_signatures",
           "sh_pack", "summarize"]
