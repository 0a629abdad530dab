"""Inspecting a core dump: read it, tie it to a rank, backtrace it, judge it (pure, no I/O).

The inspection and backtrace scripts, the core-notes reader shipped to the hosts, attribution and
the verdict; ``framework.cores.watch`` runs them. Design: docs/internals/cores.md.
"""

from __future__ import annotations

import enum
import inspect
import itertools
import json
import posixpath
import re
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from framework import commands
from framework.cores.scan import Candidate, CoreSources, signal_name
from framework.errors import UsageError
from framework.remote import hostfile
from framework.remote.sections import MARK, Record, read_records, sh_tag

T = TypeVar("T")

BACKTRACE_BYTES = 256 * 1024
RUN_TAG = "CAMIT_RUN_ID"


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


# -- reading a core on its host --------------------------------------------------------------------
def _allowed_uids(cand: Candidate) -> str:
    """Who may own the file: the SSH user (``$U``); for a pipe handler's store also root, the
    handler."""
    return "$U" if cand.source == "file" else "$U,0"


def inspect_script(cands: Sequence[Candidate], tmp: str, python: str, sources: CoreSources,
                   cap_bytes: int) -> str:
    """Script: for each candidate ``@@core <i>``, then ``@@open <json>``
    (:mod:`framework.remote.hostfile`: the file opened once, judged by its descriptor, its notes
    read, copied and gzipped from it within ``cap_bytes``), ``@@meta`` / ``@@hdr`` from the
    handlers' records, or ``@@err``."""
    q = commands.quote
    lines = [
        "LC_ALL=C; export LC_ALL",
        # a core materialised here (coredumpctl dump, apport-unpack) is readable by us alone
        "umask 077",
        f"T={q(tmp)}; mkdir -p \"$T\"; U=$(id -u)",
        f"PY=$(command -v {q(python)} 2>/dev/null || command -v python3 2>/dev/null "
        "|| command -v python 2>/dev/null)",
        f"HF={q(hostfile_program())}",
        # one <index> <uids> <path>: the program's JSON line (escaped: one line whatever the
        # name holds)
        "one() { if [ -n \"$PY\" ]; then printf '@@open %s\\n' "
        f"\"$(\"$PY\" -I -c \"$HF\" \"$T\" {int(cap_bytes)} "
        "\"$1\" \"$2\" \"$3\" 2>&1 | head -c 65536 | tr '\\n' ' ')\"; "
        "else printf '@@err no python on the host: the core is not read\\n'; fi; }",
    ]
    for i, c in enumerate(cands):
        lines.append(sh_tag(f"core {i}"))
        lines += _MATERIALISE.get(c.source, _open_file)(i, c, sources, cap_bytes)
    return "\n".join(lines) + "\n"


def _open_file(i: int, c: Candidate, sources: CoreSources, cap_bytes: int) -> list[str]:
    """A core file where the pattern or a handler put it: opened once by the host program."""
    return [f"one {i} \"{_allowed_uids(c)}\" {commands.quote(c.location)}"]


def _systemd_dump(i: int, c: Candidate, sources: CoreSources, cap_bytes: int) -> list[str]:
    """``coredumpctl dump`` into the scratch folder (not when the journal says it is over the
    cap)."""
    e = c.journal
    if e is not None and e.size is not None and e.size > cap_bytes:
        return [f"printf '@@err stored core is {e.size} bytes, over the cap: not extracted\\n'"]
    since = f"@{int(c.time) - 1}"
    return [f"if {commands.quote(sources.coredumpctl)} --no-pager -q -o \"$T/d{i}\" "
            f"--since={since} dump {int(c.pid or 0)} >/dev/null 2>\"$T/{i}.err\"; "
            f"then one {i} \"$U\" \"$T/d{i}\"; "
            f"else printf '@@err coredumpctl dump failed: %s\\n' \"$(head -c 300 \"$T/{i}.err\" "
            "| tr '\\n' ' ')\"; fi"]


def _abrt_dump(i: int, c: Candidate, sources: CoreSources, cap_bytes: int) -> list[str]:
    """abrt's metadata files as ``@@meta`` records, then the dump folder's ``coredump``."""
    loc = commands.quote(c.location)
    return [f"for k in executable pid global_pid time reason cmdline; do [ -f {loc}/$k ] && "
            f"printf '@@meta %s %s\\n' \"$k\" \"$(head -c 2000 {loc}/$k | tr '\\n' ' ')\"; done",
            f"one {i} \"{_allowed_uids(c)}\" {loc}/coredump"]


def _apport_report(i: int, c: Candidate, sources: CoreSources, cap_bytes: int) -> list[str]:
    """An apport ``.crash``: opened once and copied; the header and the unpacked core come from the
    copy."""
    if not c.location.endswith(".crash"):
        return _open_file(i, c, sources, cap_bytes)
    return [f"one c{i} \"{_allowed_uids(c)}\" {commands.quote(c.location)}",
            f"if [ -f \"$T/c{i}.core\" ]; then sed -n '/^CoreDump:/q; p' \"$T/c{i}.core\" "
            "| head -c 65536 | tr -d '\\r' | sed 's/^/@@hdr /'; "
            "if command -v apport-unpack >/dev/null 2>&1 && "
            f"apport-unpack \"$T/c{i}.core\" \"$T/{i}.d\" >/dev/null 2>&1 && "
            f"[ -f \"$T/{i}.d/CoreDump\" ]; then one {i} \"$U\" \"$T/{i}.d/CoreDump\"; "
            "else printf '@@err apport-unpack is not available: "
            "the .crash file is the artifact\\n'; fi; fi"]


#: how a core of each handler is made a file the host program can open (others: :func:`_open_file`)
_MATERIALISE: Mapping[str, Callable[[int, Candidate, CoreSources, int], list[str]]] = {
    "systemd": _systemd_dump, "abrt": _abrt_dump, "apport": _apport_report}


# -- reading a core's notes (shipped to the hosts: standard library only, self-contained) ----------
# core_facts and its helpers are sent as source (facts_program): only `struct` and builtins.
def _elf_segments(f: BinaryIO,
                  head: bytes) -> tuple[str, list[tuple[int, int, int]], list[tuple[int, int]]]:
    """(byte order, PT_LOAD (vaddr, filesz, offset) list, PT_NOTE (offset, size) list) of a 64-bit
    core."""
    e = "<" if head[5] == 1 else ">"
    phoff, shoff = struct.unpack(e + "QQ", head[32:48])
    phentsize, phnum = struct.unpack(e + "HH", head[54:58])
    if phnum == 0xFFFF and shoff:  # extended numbering: the count is in section 0
        f.seek(shoff + 44)
        phnum = struct.unpack(e + "I", f.read(4))[0]
    f.seek(phoff)
    table = f.read(phentsize * phnum)
    loads, notes = [], []
    for i in range(phnum):
        row = table[i * phentsize:i * phentsize + 40]
        p_type, _fl, off, vaddr, _pa, filesz = struct.unpack(e + "IIQQQQ", row)
        if p_type == 1 and filesz:
            loads.append((vaddr, filesz, off))
        elif p_type == 4:
            notes.append((off, filesz))
    return e, loads, notes


def _prstatus(e: str, desc: bytes, out: dict[str, Any]) -> None:
    """NT_PRSTATUS of the dumping thread (the first one): its signal."""
    if "cursig" not in out and len(desc) >= 48:
        out["cursig"] = struct.unpack(e + "h", desc[12:14])[0]


def _prpsinfo(e: str, desc: bytes, out: dict[str, Any]) -> None:
    """NT_PRPSINFO: the process's ids, command name and (cut) arguments."""
    if len(desc) < 136:
        return
    out["uid"], out["gid"], out["pid"], out["ppid"], out["pgrp"], out["sid"] = \
        struct.unpack(e + "IIiiii", desc[16:40])
    out["comm"] = desc[40:56].split(b"\0")[0].decode(errors="replace")
    out["psargs"] = desc[56:136].split(b"\0")[0].decode(errors="replace").strip()


def _siginfo(e: str, desc: bytes, out: dict[str, Any]) -> None:
    """NT_SIGINFO: the signal's number."""
    if "signal" not in out and len(desc) >= 4:
        out["signal"] = struct.unpack(e + "i", desc[:4])[0]


def _note_facts(e: str, ntype: int, desc: bytes, out: dict[str, Any]) -> None:
    """Fill ``out`` from one ``CORE`` note: NT_PRSTATUS, NT_PRPSINFO, NT_SIGINFO (others:
    nothing)."""
    readers = {1: _prstatus, 3: _prpsinfo, 0x53494749: _siginfo}
    read = readers.get(ntype)
    if read is not None:
        read(e, desc, out)


def _core_notes(e: str, data: bytes) -> list[tuple[int, bytes]]:
    """(type, payload) of each note named ``CORE`` in a PT_NOTE segment."""
    found = []
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack(e + "III", data[pos:pos + 12])
        name = data[pos + 12:pos + 12 + namesz].rstrip(b"\0")
        dpos = pos + 12 + ((namesz + 3) & ~3)
        if name == b"CORE":
            found.append((ntype, data[dpos:dpos + descsz]))
        pos = dpos + ((descsz + 3) & ~3)
    return found


def _read_notes(f: BinaryIO, e: str, notes: list[tuple[int, int]], out: dict[str, Any]) -> bytes:
    """Walk the PT_NOTE segments into ``out``; returns the NT_AUXV payload (empty when absent)."""
    auxv = b""
    for off, size in notes:
        f.seek(off)
        for ntype, desc in _core_notes(e, f.read(min(size, 16 << 20))):
            if ntype == 6 and not auxv:  # NT_AUXV
                auxv = desc
            else:
                _note_facts(e, ntype, desc, out)
    return auxv


def _execfn_address(e: str, auxv: bytes) -> int:
    """``AT_EXECFN`` from the NT_AUXV payload: where the executable's name lies on the stack (0:
    none)."""
    execfn = 0
    for i in range(0, len(auxv) - 15, 16):
        a_type, a_val = struct.unpack(e + "QQ", auxv[i:i + 16])
        if a_type == 31:  # AT_EXECFN
            execfn = a_val
    return execfn


def _run_tags(strings: bytes) -> dict[str, str]:
    """The run tag, ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` among NUL-separated environment
    strings."""
    keys = (b"CAMIT_RUN_ID=", b"RANK=", b"LOCAL_RANK=", b"WORLD_SIZE=")
    env = {}
    for word in strings.split(b"\0"):
        for k in keys:
            if word.startswith(k):
                env[k[:-1].decode()] = word[len(k):].decode(errors="replace")
    return env


def _stack_facts(f: BinaryIO, e: str, auxv: bytes, loads: list[tuple[int, int, int]],
                 out: dict[str, Any]) -> None:
    """``execfn`` and the run-tag environment strings just below ``AT_EXECFN`` at the top of the
    stack."""
    execfn = _execfn_address(e, auxv)
    if not execfn:
        return
    for vaddr, filesz, off in loads:
        if vaddr <= execfn < vaddr + filesz:
            start = max(vaddr, execfn - (256 << 10))
            f.seek(off + (start - vaddr))
            blob = f.read(min(execfn - start + 4096, vaddr + filesz - start))
            cut = execfn - start
            out["execfn"] = blob[cut:].split(b"\0")[0].decode(errors="replace")
            out["env"] = _run_tags(blob[:cut])
            return


def _not_a_core(head: bytes) -> str:
    """Why an ELF header (its first 64 bytes) is not a 64-bit core's ("": it is one)."""
    if head[:4] != b"\x7fELF":
        return "not an ELF file"
    if head[4] != 2:
        return "not a 64-bit core"
    if struct.unpack(("<" if head[5] == 1 else ">") + "H", head[16:18])[0] != 4:
        return "not a core file"
    return ""


def core_facts_file(f: BinaryIO) -> dict[str, Any]:
    """Facts from an ELF core's notes and stack, read from an open file (see :func:`core_facts`)."""
    out: dict[str, Any] = {}
    head = f.read(64)
    why = _not_a_core(head)
    if why:
        return {"error": why}
    e, loads, notes = _elf_segments(f, head)
    auxv = _read_notes(f, e, notes, out)
    if not out.get("signal") and out.get("cursig"):
        out["signal"] = out["cursig"]
    _stack_facts(f, e, auxv, loads, out)
    return out


def core_facts(path: str) -> dict[str, Any]:
    """Facts from an ELF core's notes and stack: pid, ppid, pgrp, sid, uid, comm, psargs, signal,
    execfn, env.

    Reads ``NT_PRSTATUS``/``NT_PRPSINFO``/``NT_SIGINFO``/``NT_AUXV``; ``env`` holds the
    ``CAMIT_RUN_ID``/``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` strings found just below ``AT_EXECFN``
    at the top of the dumped stack. 64-bit cores only.
    """
    with open(path, "rb") as f:
        return core_facts_file(f)


_FACTS_HEAD = ("from __future__ import annotations\nimport struct\n"
               "from typing import Any, BinaryIO\n\n")
_FACTS_MAIN = ("\nimport json, sys\nfor _p in sys.argv[1:]:\n    try:\n"
               "        print(json.dumps(core_facts(_p)))\n"
               "    except Exception as _e:\n        print(json.dumps({'error': repr(_e)}))\n")


#: core_facts and what it calls, shipped in this order
_FACTS_FNS = (_elf_segments, _prstatus, _prpsinfo, _siginfo, _note_facts, _core_notes, _read_notes,
              _execfn_address, _run_tags, _stack_facts, _not_a_core, core_facts_file, core_facts)


def facts_program() -> str:
    """Python source that prints :func:`core_facts` as one JSON line per path argument."""
    return _FACTS_HEAD + "\n\n".join(inspect.getsource(fn) for fn in _FACTS_FNS) + _FACTS_MAIN


def hostfile_program() -> str:
    """Python source of :mod:`framework.remote.hostfile` with the core-notes reader, standalone."""
    body = inspect.getsource(hostfile).replace("from __future__ import annotations\n", "")
    return (_FACTS_HEAD + "\n\n".join(inspect.getsource(fn) for fn in _FACTS_FNS) + "\n\n" + body
            + "\n\nsys.exit(main(sys.argv[1:], core_facts_file))\n")


# -- handler metadata and the inspection's output --------------------------------------------------
def parse_crash_header(text: str) -> dict[str, str]:
    """The header of an apport ``.crash`` file (``Key: value``, continuation lines start with a
    space)."""
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
    uid = re.search(r"^Uid:\s*(\d+)", status, re.M)
    return {
        "pid": int(pid.group(1)) if pid else None, "ppid": int(ppid.group(1)) if ppid else None,
        "uid": int(uid.group(1)) if uid else None,
        "executable": header.get("ExecutablePath"), "signal": signal_name(header.get("Signal")),
        "cmdline": header.get("ProcCmdline"),
    }


def split_sections(text: str, key: str, raw: bool = False) -> dict[str, dict[str, list[str]]]:
    """Group the tagged records (``framework.remote.sections``) under each ``@@<key> <i>`` record.

    Inside a group each ``@@name value`` record adds ``value`` to ``[name]``; with ``raw`` the
    group's whole text (tag lines included) is ``["raw"][0]`` instead.
    """
    out: dict[str, dict[str, list[str]]] = {}
    for head, recs in _groups(read_records(text), key):
        sec = out.setdefault(head.value.strip(), {})
        if raw:
            sec["raw"] = ["\n".join("".join([head.body] + [r.raw for r in recs]).splitlines())]
            continue
        for rec in recs:
            sec.setdefault(rec.tag, []).append(rec.value)
    return out


def _groups(records: Sequence[Record], key: str) -> list[tuple[Record, list[Record]]]:
    """Each ``@@<key> <i>`` record with the records after it, up to the next one (those before the
    first are dropped)."""
    groups: list[tuple[Record, list[Record]]] = []
    for rec in records:
        if rec.tag == key and rec.line.startswith(f"{MARK}{key} "):
            groups.append((rec, []))
        elif groups:
            groups[-1][1].append(rec)
    return groups


def opened_records(sec: Mapping[str, list[str]]) -> dict[str, dict[str, Any]]:
    """The ``@@open`` JSON records of an inspection section by their index (``<i>``, or ``c<i>`` for
    an apport ``.crash``); a line that is not the program's JSON (a traceback) is dropped."""
    out: dict[str, dict[str, Any]] = {}
    for raw in sec.get("open", []):
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("i"), str):
            out[rec["i"]] = rec
    return out


def _int_value(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _first_set(*values: T | None) -> T | None:
    """The first value that is set (neither None nor empty nor 0): the sources in order of trust."""
    return next((v for v in values if v), None)


@dataclass(frozen=True)
class _Opened:
    """One ``@@open`` record of the host program: the file as its descriptor showed it."""

    owner: int | None = None
    size: int | None = None
    #: camit copied (and gzipped) it
    copied: bool = False
    #: why the program refused the file, or the error that stopped it ("": none)
    refused: str = ""
    error: str = ""
    #: the core's notes (:func:`core_facts`)
    facts: Mapping[str, Any] = field(default_factory=dict)
    present: bool = True

    @classmethod
    def of(cls, rec: Mapping[str, Any]) -> _Opened:
        facts = rec.get("facts")
        return cls(_int_value(rec.get("owner")), _int_value(rec.get("size")),
                   isinstance(rec.get("sha256"), str), _said(rec.get("refused")),
                   _said(rec.get("error")), facts if isinstance(facts, dict) else {})

    def unread(self) -> list[str]:
        """Why the program did not read the file (refused by its descriptor checks, or an error)."""
        return [f"not read: {why[:200]}" for why in (self.refused, self.error) if why]


def _said(value: object) -> str:
    return str(value) if value else ""


#: no such record in the section
_ABSENT = _Opened(present=False)


def _apply_descriptor(core: Core, crash: _Opened, main: _Opened) -> None:
    """Owner (the first file's, unless refused), size (the core's, else the report's) and copies
    made."""
    first = crash if crash.present else main
    if first.owner is not None and not first.refused:
        core.owner = first.owner
    core.size = next((s for s in (main.size, crash.size) if s is not None), core.size)
    core.copied = main.copied
    core.artifact_copied = main.copied or crash.copied


def _opened(core: Core, sec: Mapping[str, list[str]]) -> Mapping[str, Any]:
    """The file's descriptor facts into ``core`` (owner, size, copy made); returns the core's
    notes."""
    recs = opened_records(sec)
    crash = next((_Opened.of(r) for i, r in recs.items() if i.startswith("c")), _ABSENT)
    main = next((_Opened.of(r) for i, r in recs.items() if not i.startswith("c")), _ABSENT)
    core.notes += crash.unread() + main.unread()
    _apply_descriptor(core, crash, main)
    return main.facts


@dataclass(frozen=True)
class _Told:
    """What one source tells of the crashed process (None: it does not tell)."""

    pid: int | None = None
    ppid: int | None = None
    uid: int | None = None
    comm: str | None = None
    signal: str | None = None
    executable: str | None = None
    cmdline: str | None = None


def _from_notes(facts: Mapping[str, Any]) -> _Told:
    """What the core's own notes tell (:func:`core_facts`)."""
    return _Told(pid=_int_value(facts.get("pid")), ppid=_int_value(facts.get("ppid")),
                 uid=_int_value(facts.get("uid")), comm=_text(facts.get("comm")),
                 signal=signal_name(facts.get("signal")), executable=_text(facts.get("execfn")),
                 cmdline=_psargs(_text(facts.get("psargs"))))


def _from_abrt(meta: Mapping[str, str]) -> _Told:
    """What abrt's metadata files tell."""
    return _Told(pid=_int(meta.get("pid")), signal=_reason_signal(meta.get("reason", "")),
                 executable=meta.get("executable"), cmdline=meta.get("cmdline"))


def _from_crash(hdr: Sequence[str]) -> _Told:
    """What an apport ``.crash`` header tells (nothing without one)."""
    if not hdr:
        return _Told()
    return _Told(**crash_header_facts(parse_crash_header("\n".join(hdr))))


def _meta(lines: Sequence[str]) -> dict[str, str]:
    """abrt's ``<key> <value>`` records (a key alone: empty)."""
    return {key: value.strip() for key, _, value in (line.partition(" ") for line in lines)}


def apply_inspection(core: Core, cand: Candidate, sec: Mapping[str, list[str]]) -> None:
    """Fill ``core`` from an inspection section (facts beat the pattern's fields, metadata fills
    gaps)."""
    facts = _opened(core, sec)
    if facts.get("error"):
        core.notes.append(f"core notes unreadable: {str(facts['error'])[:200]}")
    meta = _meta(sec.get("meta", []))
    notes, abrt, crash = _from_notes(facts), _from_abrt(meta), _from_crash(sec.get("hdr", []))
    _apply_process(core, notes, abrt, crash)
    _apply_command(core, cand, notes, abrt, crash)
    env = facts.get("env")
    core.env = dict(env) if isinstance(env, dict) else {}
    recorded = cand.journal.uid if cand.journal is not None else crash.uid
    core.uid = notes.uid if notes.uid is not None else recorded
    core.facts_read = notes.pid is not None
    if cand.source == "abrt" and _int(meta.get("time")):
        core.time = float(meta["time"])


def _apply_process(core: Core, notes: _Told, abrt: _Told, crash: _Told) -> None:
    """The crashed process's pid, parent, name and signal."""
    core.pid = _first_set(notes.pid, abrt.pid, crash.pid, core.pid)
    core.ppid = _first_set(notes.ppid, crash.ppid)
    core.comm = _first_set(notes.comm, core.comm)
    # the kernel's (%s, the journal) first, then the core's NT_SIGINFO, then the handlers' files
    core.signal = _first_set(core.signal, notes.signal, crash.signal, abrt.signal)


def _apply_command(core: Core, cand: Candidate, notes: _Told, abrt: _Told, crash: _Told) -> None:
    """The crashed process's executable (the scan's, the handlers', else the core's ``AT_EXECFN``)
    and command line."""
    core.executable = _first_set(cand.executable, abrt.executable, crash.executable,
                                 notes.executable, core.executable)
    core.cmdline = _first_set(abrt.cmdline, crash.cmdline, notes.cmdline)


def _psargs(psargs: str | None) -> str | None:
    """The command line from the core's notes, marked cut where the kernel cut it (at 80 bytes)."""
    if not psargs:
        return None
    return psargs + "…" if len(psargs) >= 79 else psargs


def _int(value: object) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _reason_signal(reason: str) -> str | None:
    m = re.search(r"\b(SIG[A-Z0-9]+)\b", reason)
    return m.group(1) if m else None


# -- attribution -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RankProc:
    """A launched rank's process as its status JSON recorded it."""

    launch_id: str
    rank: int
    host: str
    pid: int | None
    signal: str | None = None


def _proc_of(procs: Sequence[RankProc], pid: int | None) -> RankProc | None:
    """The first rank process with this (known) pid."""
    if pid is None:
        return None
    return next((p for p in procs if p.pid == pid), None)


def attribute(host: str, pid: int | None, ppid: int | None, env: Mapping[str, str],
              procs: Sequence[RankProc]) -> tuple[int | None, str | None]:
    """(rank, relation) of a core on ``host``: relation is ``rank``, ``child``, ``process`` or
    ``launch``."""
    mine = [p for p in procs if p.host == host]
    for wanted, relation in ((pid, "rank"), (ppid, "child")):
        found = _proc_of(mine, wanted)
        if found is not None:
            return found.rank, relation
    if env.get(RUN_TAG) in {f"{p.launch_id}.{host}" for p in mine}:
        return _tagged(env.get("RANK", ""))
    return None, None


def _tagged(rank: str) -> tuple[int | None, str]:
    """A process with one of the launches' run tags: of rank ``RANK``, else the launch's own."""
    return (int(rank), "process") if rank.isdigit() else (None, "launch")


# -- the result ------------------------------------------------------------------------------------
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
    #: the crashed process's uid (NT_PRPSINFO, else the journal) and whether its notes were read at
    #: all
    uid: int | None = None
    facts_read: bool = False
    #: the file's owner by its descriptor (None: not opened, or refused) and whether camit copied it
    owner: int | None = None
    copied: bool = False
    artifact_copied: bool = False

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
               "process": f"process of rank {self.rank}",
               "launch": "torchrun/supervisor of the launch"}
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
            "backtrace_path": str(self.backtrace_path) if self.backtrace_path else None,
            "notes": self.notes,
        }


# -- backtraces and fetching -----------------------------------------------------------------------
@dataclass(frozen=True)
class BacktraceJob:
    """One core to backtrace: ``core`` is camit's own copy (None: none was made), ``executable`` a
    hint."""

    index: int
    core: str | None
    executable: str | None


def gdb_argv(core: str, executable: str | None) -> list[str]:
    """``gdb -batch`` printing the crashing thread's backtrace, then every thread's: no init files,
    no auto-loaded scripts, no debuginfod (``-nx``, ``-iex`` before anything is read)."""
    argv = ["gdb", "-batch", "-nx", "-iex", "set auto-load off",
            "-iex", "set debuginfod enabled off", "-ex", "set pagination off",
            "-ex", "echo @@crashing\\n", "-ex", "bt",
            "-ex", "echo @@threads\\n", "-ex", "thread apply all bt"]
    return argv + ([executable, core] if executable else ["-c", core])


#: sh: prints the resolved executable when root or the SSH user ($U) owns it and group/others cannot
#: write it
_EXE_OK = ("exe_ok() { r=$(readlink -f -- \"$1\" 2>/dev/null) && [ -f \"$r\" ] && "
           "s=$(stat -c '%u %A' -- \"$r\" 2>/dev/null) || return 1; "
           "case $s in \"0 \"*|\"$U \"*) ;; *) return 1;; esac; "
           "case ${s#* } in ?????w*|????????w*) return 1;; esac; printf %s \"$r\"; }")


def backtrace_script(jobs: Sequence[BacktraceJob], *, timeout: float) -> str:
    """Script: per job ``@@job <i>`` and the bounded gdb output on camit's copy of the core; the
    executable is given to gdb only when root or the SSH user owns it and nobody else can write
    it."""
    q = commands.quote
    lines = ["LC_ALL=C; export LC_ALL", "umask 077", "U=$(id -u)", _EXE_OK,
             f"TO=''; command -v timeout >/dev/null 2>&1 && TO='timeout -k 5 {timeout:g}'"]
    for job in jobs:
        lines.append(sh_tag(f"job {job.index}"))
        if not job.core:
            continue
        bounded = f"</dev/null 2>&1 | head -c {BACKTRACE_BYTES}"
        plain = f"$TO {commands.join(gdb_argv(job.core, None))} {bounded}"
        if job.executable:
            with_exe = commands.join(gdb_argv(job.core, "EXE")).replace(" EXE ", ' "$x" ')
            lines.append(f"if x=$(exe_ok {q(job.executable)}); then $TO {with_exe} {bounded}; "
                         f"else {plain}; fi")
        else:
            lines.append(plain)
    return "\n".join(lines) + "\n"


_GDB_NOISE = re.compile(
    r"^(warning: Section `\.reg-xstate|\[Thread debugging using|Using host libthread_db|\[New LWP)")


def clean_backtrace(text: str) -> str:
    """gdb output without the noise lines (xstate warnings, thread-db banners)."""
    return "\n".join(ln for ln in text.splitlines() if not _GDB_NOISE.match(ln)).strip() + "\n"


#: sources whose store a root-run handler writes (the file may be root's; the recorded uid decides)
HANDLER_SOURCES = frozenset({"systemd", "apport", "abrt"})


def is_ours(core: Core, procs: Sequence[RankProc], user_uid: int | None) -> bool:
    """Whether ``core`` belongs to the run (fail closed).

    The file was opened once and judged by its descriptor: owned by the SSH user (or, for a pipe
    handler's store, by root, the handler). Its uid (the core's notes, else the handler's record) is
    known and is the SSH user's — the file's owner and the notes agree. It is attributed to one of
    the run's ranks or launches (pid, parent pid or the run tag), or, without ranks to match (or
    notes unreadable), it is the SSH user's. A core of an unknown uid or owner is never the
    run's."""
    if user_uid is None or core.uid != user_uid or not _owned_by(core, user_uid):
        return False
    if core.relation is not None:
        return True
    return not (procs and core.facts_read)


def _owned_by(core: Core, uid: int) -> bool:
    """The file's owner by its descriptor is ``uid``, or root (the handler) for a pipe handler's
    store."""
    if core.owner == uid:
        return True
    return core.owner == 0 and core.source in HANDLER_SOURCES


def unique_base(out_dir: Path, base: str, pid: int | None, taken: set[str]) -> str:
    """``base``, else ``base.<pid>``, else ``base-<n>``: a name no fetched core or backtrace in
    ``out_dir`` has (two ``core`` files from two ranks or two tests never overwrite each other).
    Adds it to ``taken``."""
    name = next(n for n in _base_names(base, pid) if _is_free(out_dir, n, taken))
    taken.add(name)
    return name


def _base_names(base: str, pid: int | None) -> Iterator[str]:
    """``base``, ``base.<pid>`` (a known pid, not already its tail), then ``base-2``, ``base-3``,
    …"""
    yield base
    if pid is not None and not base.endswith(f".{pid}"):
        yield f"{base}.{pid}"
    yield from (f"{base}-{n}" for n in itertools.count(2))


def _is_free(out_dir: Path, name: str, taken: set[str]) -> bool:
    """Whether no core or backtrace of the report has ``name`` yet."""
    return name not in taken and not any((out_dir / f"{name}{ext}").exists()
                                         for ext in (".gz", ".bt.txt"))


#: a fetched core's name: its file name on the host and this suffix (the journal's cores: none)
_NAME_SUFFIX = {"file": "", "abrt": ".core", "apport": ""}


def local_name(core: Core) -> str:
    """File name (without ``.gz``) for a fetched core: safe, unique per host."""
    if core.source in _NAME_SUFFIX:
        base = posixpath.basename(core.location) + _NAME_SUFFIX[core.source]
    else:
        base = f"core.{core.comm or 'unknown'}.{core.pid}.{int(core.time)}"
    return re.sub(r"[^A-Za-z0-9._+-]", "_", base) or "core"


# -- judgement -------------------------------------------------------------------------------------
def human_size(n: int | None) -> str:
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024:
            return f"{size:.1f} {unit}"
    return f"{size / 1024:.1f} TiB"


#: the verdict's first line, by policy
_HEADS = {CorePolicy.FAIL: "core dump(s) appeared",
          CorePolicy.WARN: "warning: core dump(s) appeared (policy warn)"}


def verdict_message(cores: Sequence[Core], policy: CorePolicy,
                    notes: Sequence[str] = ()) -> tuple[bool, str]:
    """(failed, message) for ``cores`` under ``policy``; the message shows each core and its top
    frames."""
    if policy is CorePolicy.IGNORE or not cores:
        return False, ""
    lines = [f"{len(cores)} {_HEADS[policy]}:"]
    for c in cores:
        lines += _core_lines(c)
    lines += [f"  note: {n}" for n in notes]
    return policy is CorePolicy.FAIL, "\n".join(lines)


def _core_lines(c: Core) -> list[str]:
    """One core in the verdict: what crashed, its command, its fetched copy, its notes, its top
    frames."""
    lines = ["  " + c.describe()]
    if c.cmdline:
        lines.append(f"    command: {c.cmdline}")
    if c.local_path:
        lines.append(f"    core: {c.local_path} ({human_size(c.size)} before gzip)")
    lines += [f"    note: {note}" for note in c.notes]
    return lines + _frame_lines(c)


def _frame_lines(c: Core) -> list[str]:
    frames = c.crashing_frames()
    if not frames:
        return []
    also = f" (all threads: {c.backtrace_path})" if c.backtrace_path else ""
    return ["    backtrace of the crashing thread:" + also] + ["      " + f for f in frames]


__all__ = ["BACKTRACE_BYTES", "BacktraceJob", "Core", "CorePolicy", "RUN_TAG", "RankProc",
           "apply_inspection", "attribute", "backtrace_script", "clean_backtrace", "core_facts",
           "crash_header_facts", "facts_program", "gdb_argv", "hostfile_program", "opened_records",
           "human_size", "inspect_script", "local_name", "parse_crash_header", "split_sections",
           "verdict_message"]
