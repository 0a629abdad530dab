"""Small text helpers every report module shares: durations, timestamps, rank ranges, one-line shortening,
names safe in classnames and ids, signal names, SUREFIRE numbers and ANSI stripping.

Pure functions of their arguments, with no I/O; this is their one home, so ``cluster.xml``, ``manifest.json``,
``index.html`` and the terminal summary spell a duration, a time or a rank range the same way.
"""

from __future__ import annotations

import contextlib
import re
import signal as _signal
from collections.abc import Iterable
from datetime import datetime, timezone

__all__ = ["ANSI", "capped", "dur", "iso", "number", "ranges", "short", "signame", "slug",
           "strip_ansi"]

#: terminal colour and cursor sequences, as rank logs hold them
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor sequences."""
    return ANSI.sub("", text)


def dur(seconds: float) -> str:
    """``4.2s``, ``1m01s``, ``2h05m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


def iso(epoch: float | None) -> str | None:
    """ISO 8601 in UTC to the second (``2026-08-01T10:00:00+00:00``); None for no (or a zero) time."""
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds") if epoch else None


def ranges(numbers: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``0-2,5,7-8``."""
    nums = sorted(set(numbers))
    parts, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts)


def short(text: str, n: int) -> str:
    """``text`` on one line (whitespace runs folded) and at most ``n`` characters, ``…`` marking a cut."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def capped(lines: list[str], limit: int, more: str) -> list[str]:
    """The first ``limit`` of ``lines``, then ``more`` with ``{n}`` made the number left out (when
    any was)."""
    left = len(lines) - limit
    return lines[:limit] + ([more.format(n=left)] if left > 0 else [])


def slug(host: str) -> str:
    """``host`` with every character but letters, digits, ``_`` and ``-`` replaced by ``_`` (classnames, ids)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", host)


def signame(sig: object) -> str | None:
    """A signal's name (``11`` → ``SIGSEGV``); a name or unknown number stays as it is, as text."""
    if sig is None:
        return None
    if isinstance(sig, int):
        with contextlib.suppress(ValueError):
            return _signal.Signals(sig).name
    return str(sig)


def number(text: str | None) -> float:
    """A JUnit ``time`` attribute as seconds (``1,234.5`` too); 0 for none or garbage."""
    try:
        return float((text or "0").replace(",", ""))
    except ValueError:
        return 0.0
