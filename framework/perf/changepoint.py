"""Regression or noise? Change points in a metric's history, found by ``ruptures``.

:func:`assess` returns a :class:`Verdict`. The method and its measured error rates:
docs/internals/perf.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import ruptures as rpt

__all__ = ["OUTLIER", "PENALTY", "Verdict", "assess", "change_points", "noise"]

#: the penalty per change point, times ln(n), on the noise-scaled series
PENALTY = 5.0
#: the newest point alone is a regression beyond this many σ of its segment (in the bad direction)
OUTLIER = 5.0
MIN_SIZE = 5
#: fewer points than this give no verdict (the noise cannot be told yet) unless a margin is given
MIN_HISTORY = 10
_SHOWN = 12


def noise(values: Sequence[float]) -> float:
    """The robust standard deviation of the noise of ``values`` (0 when it cannot be told)."""
    if len(values) < 3:
        return 0.0
    diffs = [b - a for a, b in zip(values, values[1:])]
    centre = statistics.median(diffs)
    return statistics.median(abs(d - centre) for d in diffs) / (0.6745 * math.sqrt(2))


def change_points(values: Sequence[float], penalty: float = PENALTY) -> list[int]:
    """Indices where a new segment of ``values`` starts (empty: one segment, noise only)."""
    n = len(values)
    sigma = noise(values)
    if n < max(2 * MIN_SIZE, MIN_HISTORY) or sigma <= 0:
        return []
    signal = (np.asarray(values, dtype=float) - statistics.median(values)) / sigma
    ends = rpt.KernelCPD(kernel="linear", min_size=MIN_SIZE).fit(signal).predict(pen=penalty * math.log(n))
    return [int(e) for e in ends[:-1]]


@dataclass(frozen=True)
class Verdict:
    """What the history says about its newest point."""

    series: list[float]
    change_points: list[int]
    regression: bool
    #: where the bad step starts (an index of ``series``), when there is one
    at: int | None = None
    before: float | None = None
    after: float | None = None
    how: str = "change point"
    labels: list[str] = field(default_factory=list)

    @property
    def step(self) -> float | None:
        """The relative size of the step (``after / before - 1``)."""
        if self.before is None or self.after is None or self.before == 0:
            return None
        return self.after / self.before - 1

    def describe(self, metric: str) -> str:
        """One paragraph: the verdict, the step, where it happened, the recent series."""
        cps = ", ".join(map(str, self.change_points)) or "none"
        if not self.regression or self.at is None or self.step is None:
            return f"{metric}: no regression (change points: {cps}); {self._recent()}"
        return (f"{metric}: regression by {self.how} at point {self.at}{self._label(self.at)} of "
                f"{len(self.series)}: {self.before:.4g} -> {self.after:.4g} "
                f"({self.step * 100:+.1f}%); change points: {cps}; {self._recent()}")

    def _recent(self) -> str:
        """``series [..]``: the newest points (and how many there are, when not all are shown)."""
        tail = ", ".join(f"{v:.4g}" for v in self.series[-_SHOWN:])
        more = f"… ({len(self.series)} points) " if len(self.series) > _SHOWN else ""
        return f"series {more}[{tail}]"

    def _label(self, index: int) -> str:
        """`` (<run id>)`` of point ``index`` when the points are named, else nothing."""
        return f" ({self.labels[index]})" if index < len(self.labels) else ""


def _worse(before: float, after: float, higher_is_better: bool) -> bool:
    return after < before if higher_is_better else after > before


def _holds(older: list[float], before: float, after: float) -> bool:
    """A step still there without the newest point (half of it at least): else the newest point made it."""
    return abs(statistics.mean(older) - before) >= 0.5 * abs(after - before)


def _by_margin(values: list[float], cps: list[int], margin: float, higher: bool) -> Verdict:
    start = cps[-1] if cps and cps[-1] < len(values) - 1 else 0
    ref = statistics.median(values[start:-1])
    bad = values[-1] < ref / (1 + margin) if higher else values[-1] > ref * (1 + margin)
    return Verdict(values, cps, bad, len(values) - 1, ref, values[-1], f"margin {margin:g}")


def _by_outlier(values: list[float], cps: list[int], higher: bool) -> Verdict:
    start = cps[-1] if cps else 0
    segment = values[start:-1]
    sigma = noise(values)
    ref = statistics.median(segment)
    newest = values[-1]
    bad = sigma > 0 and abs(newest - ref) > OUTLIER * sigma and _worse(ref, newest, higher)
    return Verdict(values, cps, bad, len(values) - 1, ref, newest, f"the newest point beyond {OUTLIER:g} sigma")


def assess(series: Sequence[float], *, higher_is_better: bool = False, margin: float | None = None,
           since: int = 0, labels: Sequence[str] = ()) -> Verdict:
    """Is the newest point of ``series`` (oldest first) a regression?

    A regression is the last change point at or after ``since`` (an accepted baseline's index) when the
    segment it starts is worse than the one before, or else the newest point far outside its segment.
    ``labels`` name the points (run ids) in :meth:`Verdict.describe`.
    """
    values = [float(v) for v in series]
    cps = change_points(values)
    if margin is not None and len(values) >= 2:
        return _with_labels(_by_margin(values, cps, margin, higher_is_better), labels)
    if len(values) < MIN_HISTORY:
        return Verdict(values, cps, False, labels=list(labels))
    step = _by_step(values, cps, since, higher_is_better)
    if step is None:
        step = _by_outlier(values, cps, higher_is_better)
    return _with_labels(step, labels)


def _by_step(values: list[float], cps: list[int], since: int, higher: bool) -> Verdict | None:
    """The regression the last change point after ``since`` makes, when its segment is worse than
    the one before and stays so without the newest point; else None."""
    if not cps or cps[-1] <= since:
        return None
    cut = cps[-1]
    start = cps[-2] if len(cps) > 1 else 0
    before, after = statistics.mean(values[start:cut]), statistics.mean(values[cut:])
    if _worse(before, after, higher) and _holds(values[cut:-1], before, after):
        return Verdict(values, cps, True, cut, before, after)
    return None


def _with_labels(v: Verdict, labels: Sequence[str]) -> Verdict:
    return Verdict(v.series, v.change_points, v.regression, v.at, v.before, v.after, v.how, list(labels))
