"""Why a launch failed, in a rank's own words: the error its log ends with, a peer's absence set
aside."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from framework.launch.result import RankResult
from framework.launch.stacks import read_tail

#: pytest's short test summary line of a failed test (``-ra`` / ``-rf``)
PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR) (?P<test>\S+) - (?P<text>.+)$")
#: CPython's fatal-signal report (faulthandler): "Fatal Python error: Segmentation fault"
FATAL = re.compile(r"^(?P<text>Fatal Python error: .+)$")
TRACEBACK = "Traceback (most recent call last):"
#: what launchers put before a rank's lines (torchrun's ``--tee``/``--log-line-prefix``: ``[rank3]:``)
PREFIX = re.compile(r"^\[[^\]\n]{0,40}\]:\s?")
#: an exception's last line: ``pkg.ModError: text`` at column 0 (or pytest's ``E   `` prefix)
EXCEPTION = re.compile(r"^(?:E +)?(?P<text>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Failed|Timeout)"
                       r"(?::.*)?)$")
#: errors that report a peer's absence, not their own cause
CONSEQUENCE = re.compile(r"\bEI000[26]\b|[Cc]onnection (?:closed|reset) by peer|remote rank did not send|"
                         r"Broken pipe|[Cc]onnection refused|Socket Timeout|recvBytes|Read error")
#: the cause is shown on one line
MAX_CHARS = 300


@dataclass(frozen=True)
class Cause:
    rank: int
    host: str
    text: str
    consequence: bool

    def describe(self) -> str:
        note = " (reports a peer's absence: no rank's own error was found)" if self.consequence else ""
        return f"rank {self.rank} on {self.host}: {self.text}{note}"


def _clip(text: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text.strip())
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1] + "…"


def first_error(text: str) -> str | None:
    """The error a rank log reports: pytest's first FAILED line, else CPython's fatal-error line, else the
    last traceback's exception line."""
    lines = [PREFIX.sub("", line, count=1) for line in text.splitlines()]
    found = _first(lines, PYTEST_FAILED) or _first(lines, FATAL) or _last_exception(lines)
    return None if found is None else _clip(found)


def _first(lines: list[str], rule: re.Pattern[str]) -> str | None:
    """The ``text`` of the first line ``rule`` matches."""
    return next((m["text"] for m in map(rule.match, lines) if m), None)


def _last_exception(lines: list[str]) -> str | None:
    """The exception line of the last traceback in ``lines``."""
    starts = [i for i, line in enumerate(lines) if line.startswith(TRACEBACK)]
    return _first(lines[starts[-1] + 1:], EXCEPTION) if starts else None


def of_ranks(ranks: Iterable[RankResult], first: int | None) -> Cause | None:
    """The launch's cause: the first failing rank's own error, else the lowest failed rank with one of its
    own; a peer's-absence error only when no failed rank has anything else."""
    ordered = sorted(ranks, key=lambda r: (r.rank != first, r.rank))
    found = [c for c in map(_own_error, ordered) if c is not None]
    primary = [c for c in found if not c.consequence]
    return next(iter(primary or found), None)


def _own_error(rr: RankResult) -> Cause | None:
    """A failed rank's error from its fetched log (None: it passed, has no log, or its log names none)."""
    if rr.ok or not rr.log or not Path(rr.log).is_file():
        return None
    text = first_error(read_tail(Path(rr.log)))
    return None if text is None else Cause(rr.rank, rr.host, text, bool(CONSEQUENCE.search(text)))


__all__ = ["Cause", "first_error", "of_ranks"]
