"""Where each rank of a hung launch was: its stacks (py-spy's native dump, else faulthandler's),
grouped."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from framework.remote.protocol import PYSPY_SUFFIX

#: a thread's header in a faulthandler dump (``Current thread`` is the one the signal interrupted)
HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
FRAME = re.compile(r'^  File "(?P<file>[^"\n]*)", line (?P<line>\d+) in (?P<func>\S+)$')
#: py-spy dump: ``Thread 8433 (idle): "MainThread"`` then ``    func (file:line)`` / ``    func (lib.so)``
SPY_THREAD = re.compile(r'^Thread (?:\d+|0x[0-9A-Fa-f]+) \([\w-]+\): "(?P<name>[^"\n]*)"$')
SPY_FRAME = re.compile(r"^ {4}(?P<func>\S[^\n]*?) \((?P<loc>[^()\n]*?)(?::(?P<line>\d+))?\)$")
#: a native frame py-spy could not name: an address, different in every process (ASLR)
ADDRESS = re.compile(r"^0x[0-9a-fA-F]+$")
#: at most this many bytes of a log's end are read (a dump is a few KiB; a log may be huge)
TAIL_BYTES = 256 * 1024
#: frames of this many innermost levels make the description of a group
SHOWN = 1


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    @property
    def native(self) -> bool:
        return self.line == 0

    def short(self) -> str:
        where = Path(self.file).name
        return f"{self.func} ({where})" if self.native else f"{self.func} ({where}:{self.line})"


Stack = tuple[Frame, ...]


@dataclass
class StackGroup:
    """Ranks whose main thread had the same stack (innermost frame first); ``stack`` empty: no dump."""

    stack: Stack
    ranks: list[int] = field(default_factory=list)
    hosts: dict[int, str] = field(default_factory=dict)

    def where(self) -> str:
        if not self.stack:
            return "with no stack dump in its log"
        inner = self.stack[0]
        python = next((f for f in self.stack if not f.native), None)
        below = f" from {python.short()}" if inner.native and python is not None else ""
        return f"in {inner.short()}{below}"

    def describe(self) -> str:
        if len(self.ranks) == 1:
            rank = self.ranks[0]
            return f"rank {rank} on {self.hosts[rank]} {self.where()}"
        return f"{len(self.ranks)} ranks ({_span(self.ranks)}) {self.where()}"

    def to_json(self) -> dict[str, object]:
        return {"ranks": self.ranks, "hosts": {str(r): h for r, h in self.hosts.items()}, "where": self.where(),
                "stack": [f"{f.file}:{f.line} in {f.func}" for f in self.stack]}


def _span(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 4 else f"{ranks[0]}..{ranks[-1]}"


def threads_of_last_dump(text: str) -> list[tuple[str, Stack]]:
    """The threads of the last dump in `text`: (header kind, frames innermost first) each."""
    dump: list[tuple[str, list[Frame]]] = []  # the last dump so far
    in_dump = False
    for line in text.splitlines():
        header = HEADER.match(line)
        frame = FRAME.match(line)
        if header:
            dump = dump if in_dump else []
            dump.append((header.group(1), []))
            in_dump = True
        elif frame and in_dump:
            dump[-1][1].append(Frame(frame["file"], int(frame["line"]), frame["func"]))
        elif line.strip():
            in_dump = False
    return [(kind, tuple(frames)) for kind, frames in dump]


def main_stack(text: str) -> Stack:
    """The main thread's stack of the last dump: the thread whose outermost frame runs a module, else the
    thread the signal interrupted; ``()`` when the text holds no dump."""
    threads = threads_of_last_dump(text)
    found = next((frames for _, frames in threads if _runs_module(frames)), None)
    if found is not None:
        return found
    return next((frames for kind, frames in threads if kind == "Current thread"), ())


def _runs_module(frames: Stack) -> bool:
    """A thread whose outermost frame runs a module: the main thread."""
    return bool(frames) and frames[-1].func == "<module>"


def pyspy_main(text: str) -> Stack:
    """The MainThread's frames of a ``py-spy dump`` (innermost first, unnamed addresses left out)."""
    found = (SPY_FRAME.match(line) for line in _spy_main_lines(text))
    return tuple(Frame(f["loc"], int(f["line"] or 0), f["func"]) for f in found
                 if f and not ADDRESS.match(f["func"]))


def _spy_main_lines(text: str) -> list[str]:
    """The lines of a ``py-spy dump``'s MainThread section, its thread header left out."""
    lines: list[str] = []
    main = False
    for line in text.splitlines():
        thread = SPY_THREAD.match(line)
        if thread:
            if main:
                break
            main = thread["name"] == "MainThread"
        elif main:
            lines.append(line)
    return lines


def read_tail(path: Path) -> str:
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        fh.seek(max(0, fh.tell() - TAIL_BYTES))
        return fh.read().decode("utf-8", errors="replace")


def python_frames(stack: Stack) -> tuple[tuple[str, int, str], ...]:
    """What makes two ranks' stacks the same: their Python frames (native ones vary with timing), each as
    (file name, line, function) the way both py-spy and faulthandler print it (py-spy gives a relative path
    and a qualified name, ``torch/...py`` and ``_exception_logger.<locals>.wrapper``; faulthandler the
    absolute path and the bare name)."""
    return tuple((Path(f.file).name, f.line, f.func.rsplit(".", 1)[-1]) for f in stack if not f.native)


def group(stacks: Mapping[int, Stack], hosts: Mapping[int, str]) -> list[StackGroup]:
    """Identical stacks (by their Python frames) together, shown with the first rank's native frames; the
    largest group first, ranks without a dump last."""
    groups: dict[tuple[tuple[str, int, str], ...], StackGroup] = {}
    for rank in sorted(stacks):
        g = groups.setdefault(python_frames(stacks[rank]), StackGroup(stacks[rank]))
        g.ranks.append(rank)
        g.hosts[rank] = hosts[rank]
    return sorted(groups.values(), key=lambda g: (not g.stack, -len(g.ranks), g.ranks[0]))


def rank_stack(log: Path | None) -> Stack:
    """A rank's main stack: py-spy's dump beside its log (``rank<r>.pyspy``) when it holds one, else the
    log's last faulthandler dump; ``()`` for neither."""
    if log is None:
        return ()
    spy = log.with_suffix(f".{PYSPY_SUFFIX}")
    native = pyspy_main(read_tail(spy)) if spy.is_file() else ()
    return native or (main_stack(read_tail(log)) if log.is_file() else ())


def from_logs(logs: Mapping[int, tuple[str, Path | None]]) -> list[StackGroup]:
    """Groups from each rank's (host, log path); a missing log counts as no dump."""
    return group({r: rank_stack(p) for r, (_, p) in logs.items()}, {r: h for r, (h, _) in logs.items()})


def summary(groups: Iterable[StackGroup]) -> str:
    """One line: the majority first, then the odd ones out, e.g. ``7 ranks (0..7) in all_reduce (...);
    odd one out: rank 5 on host3 in stuck (test_x.py:12)``."""
    groups = list(groups)
    if not groups:
        return ""
    head, rest = groups[0], groups[1:]
    if not rest:
        return f"stacks: all {len(head.ranks)} ranks {head.where()}"
    odd = "odd one out" if len(rest) == 1 else "odd ones out"
    return f"stacks: {head.describe()}; {odd}: " + "; ".join(g.describe() for g in rest)


__all__ = ["Frame", "StackGroup", "from_logs", "group", "main_stack", "pyspy_main", "rank_stack", "summary",
           "threads_of_last_dump"]
