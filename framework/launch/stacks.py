"""Where each rank of a hung launch was: faulthandler dumps from the rank logs, identical stacks grouped.

The rank wrapper registers ``faulthandler`` on SIGUSR1 and the supervisor sends it before a timeout's kill
(framework.remote.rankwrap, framework.remote.supervisor), so each rank log ends with its threads' stacks.
A log is host output: it is parsed as data, and a rank whose log holds no dump is reported as such.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: a thread's header in a faulthandler dump (``Current thread`` is the one the signal interrupted)
HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
FRAME = re.compile(r'^  File "(?P<file>[^"\n]*)", line (?P<line>\d+) in (?P<func>\S+)$')
#: at most this many bytes of a log's end are read (a dump is a few KiB; a log may be huge)
TAIL_BYTES = 256 * 1024
#: frames of this many innermost levels make the description of a group
SHOWN = 1


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def short(self) -> str:
        return f"{self.func} ({Path(self.file).name}:{self.line})"


Stack = tuple[Frame, ...]


@dataclass
class StackGroup:
    """Ranks whose main thread had the same stack (innermost frame first); ``stack`` empty: no dump."""

    stack: Stack
    ranks: list[int] = field(default_factory=list)
    hosts: dict[int, str] = field(default_factory=dict)

    def where(self) -> str:
        return f"in {self.stack[0].short()}" if self.stack else "with no stack dump in its log"

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
    dumps: list[list[tuple[str, list[Frame]]]] = []
    in_dump = False
    for line in text.splitlines():
        header = HEADER.match(line)
        frame = FRAME.match(line)
        if header:
            if not in_dump:
                dumps.append([])
            dumps[-1].append((header.group(1), []))
            in_dump = True
        elif frame and in_dump:
            dumps[-1][-1][1].append(Frame(frame["file"], int(frame["line"]), frame["func"]))
        elif line.strip():
            in_dump = False
    return [(kind, tuple(frames)) for kind, frames in dumps[-1]] if dumps else []


def main_stack(text: str) -> Stack:
    """The main thread's stack of the last dump: the thread whose outermost frame runs a module, else the
    thread the signal interrupted; ``()`` when the text holds no dump."""
    threads = threads_of_last_dump(text)
    for _, frames in threads:
        if frames and frames[-1].func == "<module>":
            return frames
    current = [frames for kind, frames in threads if kind == "Current thread"]
    return current[0] if current else ()


def read_tail(path: Path) -> str:
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        fh.seek(max(0, fh.tell() - TAIL_BYTES))
        return fh.read().decode("utf-8", errors="replace")


def group(stacks: Mapping[int, Stack], hosts: Mapping[int, str]) -> list[StackGroup]:
    """Identical stacks together; the largest group first, ranks without a dump last."""
    groups: dict[Stack, StackGroup] = {}
    for rank in sorted(stacks):
        g = groups.setdefault(stacks[rank], StackGroup(stacks[rank]))
        g.ranks.append(rank)
        g.hosts[rank] = hosts[rank]
    return sorted(groups.values(), key=lambda g: (not g.stack, -len(g.ranks), g.ranks[0]))


def from_logs(logs: Mapping[int, tuple[str, Path | None]]) -> list[StackGroup]:
    """Groups from each rank's (host, log path); a missing log counts as no dump."""
    stacks = {r: main_stack(read_tail(p)) if p is not None and p.is_file() else () for r, (_, p) in logs.items()}
    return group(stacks, {r: h for r, (h, _) in logs.items()})


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


__all__ = ["Frame", "StackGroup", "from_logs", "group", "main_stack", "summary", "threads_of_last_dump"]
