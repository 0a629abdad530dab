"""The straggler: a rank (and its host) consistently slower than its peers, named with its factor.

Per iteration each rank's time is divided by that iteration's median over the ranks; a rank's *score* is
the median of its ratios over the iterations (median of ratios: one slow iteration, a hiccup of the host's
scheduler, moves it by nothing), and it is a straggler when the score reaches ``1 + THRESHOLD`` and it was
slower than the median rank in at least ``CONSISTENT`` of the iterations (the emulated lab's shared cores
give a healthy rank a 1.06 median now and then over 5 iterations; a really slow rank is slower every time). A host's
score is the lowest of its ranks' scores: a slow link or a hot host slows all its ranks, and when even its
fastest rank is slow the host is named as a whole. The iterations
are needed because a single run's numbers cannot tell a slow rank from a slow moment.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CONSISTENT", "MIN_ITERATIONS", "THRESHOLD", "Straggler", "find", "scores"]

#: a rank 5 % slower than the median rank, in the median iteration, is named
THRESHOLD = 0.05
#: the share of iterations in which a straggler is slower than the median rank
CONSISTENT = 0.8
#: fewer timed iterations than this name nobody
MIN_ITERATIONS = 5


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    factor: float
    #: the lowest score of the host's ranks; a host is slow as a whole when it reaches the threshold too
    host_factor: float

    def describe(self) -> str:
        whole = f"; host {self.host} as a whole x{self.host_factor:.2f}" if self.host_factor >= 1 + THRESHOLD \
            else ""
        return f"straggler: rank {self.rank} on {self.host} x{self.factor:.2f} the median rank{whole}"


def _ratios(times: Sequence[Sequence[float]]) -> list[list[float]]:
    """``[rank][iteration]``: the rank's time over the iteration's median rank."""
    mids = [statistics.median(it) for it in times]
    return [[it[rank] / mid if mid > 0 else 1.0 for it, mid in zip(times, mids)] for rank in range(len(times[0]))]


def scores(times: Sequence[Sequence[float]]) -> list[float]:
    """Each rank's median over iterations of its time / the iteration's median over ranks."""
    return [statistics.median(r) for r in _ratios(times)]


def find(times: Sequence[Sequence[float]], hosts: Sequence[str], threshold: float = THRESHOLD) -> list[Straggler]:
    """The stragglers among ``times[iteration][rank]`` (slowest first); ``hosts[rank]`` names their hosts."""
    if len(times) < MIN_ITERATIONS or len(hosts) < 3:
        return []  # two ranks have no majority to be slower than
    if any(len(it) != len(hosts) for it in times):
        raise ValueError(f"every iteration needs one time per rank ({len(hosts)} ranks)")
    ratios = _ratios(times)
    s = [statistics.median(r) for r in ratios]
    steady = [sum(v > 1 for v in r) >= CONSISTENT * len(r) for r in ratios]
    by_host: dict[str, list[float]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(s[rank])
    found = [Straggler(r, hosts[r], s[r], min(by_host[hosts[r]]))
             for r in range(len(hosts)) if s[r] >= 1 + threshold and steady[r]]
    return sorted(found, key=lambda x: -x.factor)
