"""``camit check --pairs``: timed gloo send/recv between node pairs, in rounds, to isolate a slow
node.

Design: docs/internals/launch-preflight-config.md.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster
    from framework.launch.result import LaunchResult
    from framework.records.folder import RunDir

__all__ = [
    "DEFAULT_ROUNDS",
    "PairsReport",
    "SlowNode",
    "THRESHOLD",
    "find",
    "run_pairs",
    "schedule",
    "scores",
]

DEFAULT_ROUNDS = 4
#: bytes each exchange sends (and receives back)
DEFAULT_SIZE = 4 << 20
DEFAULT_ITERS = 10
#: a node whose every pair is this many times slower than the pairs without it is named
THRESHOLD = 2.0
SCRIPT = Path(__file__).parent / "launch" / "pairs_rank.py"
_LINE = re.compile(r"^PAIRTIME (\d+) (\d+) (\d+) ([0-9.]+)$", re.M)

Pair = tuple[int, int]


def schedule(n: int, rounds: int | None = DEFAULT_ROUNDS) -> list[list[Pair]]:
    """The first ``rounds`` (None: all) rounds of the circle method over nodes ``0..n-1``."""
    ring = _ring(n)
    out: list[list[Pair]] = []
    for _ in range(len(ring) - 1):
        out.append(_round(ring))
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out[:rounds]


def _ring(n: int) -> list[int | None]:
    """The circle method's seats: nodes ``0..n-1``, and an empty seat (None) when ``n`` is odd."""
    return [*range(n), *([None] * (n % 2))]


def _round(ring: Sequence[int | None]) -> list[Pair]:
    """One round: the ring's first half facing its second half reversed, the empty seat's pair
    left out, each pair (low, high), sorted."""
    half = len(ring) // 2
    facing = zip(ring[:half], reversed(ring[half:]))
    return sorted((min(a, b), max(a, b)) for a, b in facing if a is not None and b is not None)


def _split(times: Mapping[Pair, float], node: int) -> tuple[list[float], list[float]]:
    """The times of the pairs ``node`` is in, and of the pairs it is not in."""
    own: list[float] = []
    rest: list[float] = []
    for pair, t in times.items():
        (own if node in pair else rest).append(t)
    return own, rest


def _score(times: Mapping[Pair, float], node: int) -> tuple[float, int] | None:
    """``node``'s (fastest pair / median pair without it, pair count), None when it is in fewer
    than two pairs or no pair (of positive median time) is without it."""
    own, rest = _split(times, node)
    if len(own) < 2 or not rest:
        return None
    median = statistics.median(rest)
    if median <= 0:
        return None
    return min(own) / median, len(own)


def scores(times: Mapping[Pair, float]) -> dict[int, tuple[float, int]]:
    """node -> (its fastest pair's time / the median of the pairs without it, its pair count);
    only nodes in at least two pairs with at least one pair without them."""
    out: dict[int, tuple[float, int]] = {}
    for node in sorted(set(itertools.chain.from_iterable(times))):
        score = _score(times, node)
        if score is not None:
            out[node] = score
    return out


@dataclass(frozen=True)
class SlowNode:
    node: int
    host: str
    factor: float
    pairs: int

    def describe(self) -> str:
        return (
            f"slow node: {self.host} x{self.factor:.2f} (in all {self.pairs} of its pairs; "
            f"its fastest pair against the median pair without it)"
        )


def find(
    times: Mapping[Pair, float], hosts: Sequence[str], threshold: float = THRESHOLD
) -> list[SlowNode]:
    """The nodes slow in every pair they are in (slowest first); ``hosts[node]`` names them."""
    found = [SlowNode(n, hosts[n], f, k) for n, (f, k) in scores(times).items() if f >= threshold]
    return sorted(found, key=lambda s: -s.factor)


def schedule_text(rounds: Sequence[Sequence[Pair]]) -> str:
    return ";".join(",".join(f"{a}-{b}" for a, b in r) for r in rounds)


def parse_times(text: str) -> dict[Pair, float]:
    """The ``PAIRTIME`` lines of the rank logs: pair -> seconds of its fastest round trip."""
    return {(int(m[2]), int(m[3])): float(m[4]) for m in _LINE.finditer(text)}


@dataclass
class PairsReport:
    hosts: list[str]
    rounds: list[list[Pair]]
    times: dict[Pair, float] = field(default_factory=dict)
    slow: list[SlowNode] = field(default_factory=list)
    failure: str | None = None

    def lines(self) -> list[str]:
        """What ``camit check --pairs`` prints: every pair's time by round, then the verdict."""
        out = [f"pairs: {len(self.hosts)} nodes, {len(self.rounds)} rounds"]
        for i, r in enumerate(self.rounds):
            out.append(f"round {i + 1}: " + ", ".join(self._cell(a, b) for a, b in r))
        return out + self._verdict()

    def _cell(self, a: int, b: int) -> str:
        """One pair of the table: its hosts and its time (``-``: not timed)."""
        t = self.times.get((a, b))
        shown = "-" if t is None else f"{t * 1e3:.1f}ms"
        return f"{self.hosts[a]}-{self.hosts[b]} {shown}"

    def _verdict(self) -> list[str]:
        """The lines after the table: the failure and the slow nodes, else that none was found."""
        slow = [s.describe() for s in self.slow]
        if self.failure:
            return [f"FAILED: {self.failure}", *slow]
        return slow or [self._no_slow()]

    def _no_slow(self) -> str:
        if len(self.hosts) > 2:
            return "no slow node"
        return "no slow node (two nodes cannot be told apart)"


def run_pairs(
    env: EnvConfig,
    cluster: Cluster,
    rundir: RunDir,
    *,
    rounds: int = DEFAULT_ROUNDS,
    size: int = DEFAULT_SIZE,
    iters: int = DEFAULT_ITERS,
    timeout: float = 300.0,
) -> PairsReport:
    """One launch over every host of ``cluster`` (one rank each) timing the schedule's pairs."""
    from framework.launch import Launcher, Target

    hosts = [h.name for h in cluster]
    report = PairsReport(hosts, schedule(len(hosts), rounds))
    target = Target(script=str(SCRIPT), args=(schedule_text(report.rounds), str(size), str(iters)))
    result = Launcher(env, cluster, rundir=rundir, nproc_per_node=1).run(
        target, hosts=hosts, timeout=timeout, name="pairs"
    )
    report.times = parse_times(_rank_logs(result))
    report.failure = None if result.ok else result.message()
    report.slow = find(report.times, hosts)
    return report


def _rank_logs(result: LaunchResult) -> str:
    """The ranks' logs that reached the controller, one after another."""
    logs = [Path(r.log) for r in result.ranks.values() if r.log]
    return "\n".join(log.read_text(errors="replace") for log in logs if log.is_file())
