"""``camit check --pairs``: timed gloo send/recv between node pairs, in rounds, to isolate a slow
node.

Design: docs/internals/launch-preflight-config.md.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster
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
    ring: list[int | None] = [*range(n), *([None] if n % 2 else [])]
    m = len(ring)
    out: list[list[Pair]] = []
    for _ in range(m - 1):
        pairs = [
            (a, b)
            for a, b in zip(ring[: m // 2], reversed(ring[m // 2 :]))
            if a is not None and b is not None
        ]
        out.append(sorted((min(a, b), max(a, b)) for a, b in pairs))
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out if rounds is None else out[:rounds]


def _score(times: Mapping[Pair, float], node: int) -> tuple[float, int] | None:
    """``node``'s (fastest pair / median pair without it, pair count), None when it is in fewer
    than two pairs or no pair (of positive median time) is without it."""
    own = [t for p, t in times.items() if node in p]
    rest = [t for p, t in times.items() if node not in p]
    if len(own) < 2 or not rest:
        return None
    median = statistics.median(rest)
    return (min(own) / median, len(own)) if median > 0 else None


def scores(times: Mapping[Pair, float]) -> dict[int, tuple[float, int]]:
    """node -> (its fastest pair's time / the median of the pairs without it, its pair count);
    only nodes in at least two pairs with at least one pair without them."""
    nodes = sorted({x for pair in times for x in pair})
    scored = {node: _score(times, node) for node in nodes}
    return {node: score for node, score in scored.items() if score is not None}


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
            cells = [
                f"{self.hosts[a]}-{self.hosts[b]} "
                + (f"{self.times[(a, b)] * 1e3:.1f}ms" if (a, b) in self.times else "-")
                for a, b in r
            ]
            out.append(f"round {i + 1}: " + ", ".join(cells))
        if self.failure:
            out.append(f"FAILED: {self.failure}")
        out += [s.describe() for s in self.slow]
        if not self.failure and not self.slow:
            out.append(
                "no slow node"
                + ("" if len(self.hosts) > 2 else " (two nodes cannot be told apart)")
            )
        return out


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
    text = "\n".join(
        Path(r.log).read_text(errors="replace")
        for r in result.ranks.values()
        if r.log and Path(r.log).is_file()
    )
    report.times = parse_times(text)
    if not result.ok:
        report.failure = result.message()
    report.slow = find(report.times, hosts)
    return report
