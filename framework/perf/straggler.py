"""The straggler: a rank (and its host) consistently slower than its peers, named with its factor.

Design: docs/internals/perf.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["AGREE", "CONSISTENT", "MIN_ITERATIONS", "THRESHOLD", "SlowHost", "Straggler", "describe", "find",
           "find_hosts", "scores"]

#: a rank 5 % slower than the median rank, in the median iteration, is named
THRESHOLD = 0.05
#: the share of iterations in which a straggler is slower than the median rank
CONSISTENT = 0.8
#: fewer timed iterations than this name nobody
MIN_ITERATIONS = 5
#: a slow host's ranks agree: the highest of their scores over the lowest stays below 1 + AGREE
AGREE = 0.05


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


def _check_shape(times: Sequence[Sequence[float]], hosts: Sequence[str]) -> None:
    """Every iteration has one time per rank."""
    if any(len(it) != len(hosts) for it in times):
        raise ValueError(f"every iteration needs one time per rank ({len(hosts)} ranks)")


def _steady(factors: Sequence[float]) -> bool:
    """Slower than the rest in at least :data:`CONSISTENT` of the iterations."""
    return sum(v > 1 for v in factors) >= CONSISTENT * len(factors)


def _members(hosts: Sequence[str]) -> dict[str, list[int]]:
    """host → its ranks, in rank order."""
    members: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        members.setdefault(host, []).append(rank)
    return members


def find(times: Sequence[Sequence[float]], hosts: Sequence[str], threshold: float = THRESHOLD
         ) -> list[Straggler]:
    """The stragglers among ``times[iteration][rank]`` (slowest first); ``hosts[rank]`` names
    their hosts."""
    if len(times) < MIN_ITERATIONS or len(hosts) < 3:
        return []  # two ranks have no majority to be slower than
    _check_shape(times, hosts)
    ratios = _ratios(times)
    s = [statistics.median(r) for r in ratios]
    members = _members(hosts)
    found = [Straggler(r, hosts[r], s[r], min(s[m] for m in members[hosts[r]]))
             for r in range(len(hosts)) if s[r] >= 1 + threshold and _steady(ratios[r])]
    return sorted(found, key=lambda x: -x.factor)


@dataclass(frozen=True)
class SlowHost:
    host: str
    #: the median over iterations of the host's median rank over the other hosts' median rank
    factor: float
    ranks: tuple[int, ...]

    def describe(self) -> str:
        ranks = ",".join(map(str, self.ranks))
        return f"slow host: {self.host} (ranks {ranks}) x{self.factor:.2f} the other hosts"


def _host_factors(times: Sequence[Sequence[float]], members: dict[str, list[int]], host: str) -> list[float]:
    """Per iteration: ``host``'s median rank over the median rank of every other host's ranks."""
    others = [r for h, rs in members.items() if h != host for r in rs]
    return [_factor(it, members[host], others) for it in times]


def _factor(times: Sequence[float], mine: Sequence[int], others: Sequence[int]) -> float:
    """One iteration's median over ranks ``mine`` over that over ``others`` (1 when theirs is 0)."""
    theirs = statistics.median(times[r] for r in others)
    return statistics.median(times[r] for r in mine) / theirs if theirs > 0 else 1.0


def _agree(s: Sequence[float], ranks: Sequence[int]) -> bool:
    low = min(s[r] for r in ranks)
    return low > 0 and max(s[r] for r in ranks) / low < 1 + AGREE


def find_hosts(times: Sequence[Sequence[float]], hosts: Sequence[str],
               threshold: float = THRESHOLD) -> list[SlowHost]:
    """The hosts slower as a whole than the others among ``times[iteration][rank]`` (slowest
    first)."""
    members = _members(hosts)
    if len(times) < MIN_ITERATIONS or len(members) < 2:
        return []
    _check_shape(times, hosts)
    s = scores(times)
    found = []
    for host, ranks in members.items():
        f = _host_factors(times, members, host)
        factor = statistics.median(f)
        if factor >= 1 + threshold and _steady(f) and _agree(s, ranks):
            found.append(SlowHost(host, factor, tuple(ranks)))
    return sorted(found, key=lambda x: -x.factor)


def describe(times: Sequence[Sequence[float]], hosts: Sequence[str]) -> str | None:
    """The slow hosts and the slow ranks of one configuration in one line, None when there are
    none."""
    named = [h.describe() for h in find_hosts(times, hosts)] + [s.describe() for s in find(times, hosts)]
    return "; ".join(named) or None
