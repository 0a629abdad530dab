"""The branch budget's ratchet: radon's cyclomatic complexity of framework/ against a baseline.

Fails (exit 1) when the average rises above the baseline's, when a block above the limit appears that
the baseline does not list, or when a listed block grows; `--update` lowers the baseline, never raises it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from radon.complexity import cc_visit

LIMIT = 15
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = ROOT / "framework"
DEFAULT_BASELINE = ROOT / "tools" / "complexity-baseline.json"


@dataclass(frozen=True)
class Figures:
    """One tree's measure: every block's complexity, keyed `<file under root>::<qualified name>`."""

    blocks: dict[str, int]
    count: int
    total: int

    @property
    def average(self) -> float:
        return self.total / self.count if self.count else 0.0

    def above(self, limit: int) -> dict[str, int]:
        return {key: cc for key, cc in self.blocks.items() if cc > limit}


@dataclass
class Baseline:
    """The committed budget: the average it may not exceed and the offenders it tolerates, as they are."""

    average: float
    offenders: dict[str, int] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Baseline:
        doc = json.loads(path.read_text())
        return cls(average=float(doc["average"]), offenders={k: int(v) for k, v in doc["offenders"].items()})

    def write(self, path: Path) -> None:
        doc = {"limit": LIMIT, "average": self.average, "offenders": dict(sorted(self.offenders.items()))}
        path.write_text(json.dumps(doc, indent=1) + "\n")


def measure(root: Path) -> Figures:
    """radon's figures for every .py file under root (the blocks `radon cc -a` counts)."""
    blocks: dict[str, int] = {}
    total = count = 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for block in cc_visit(path.read_text()):
            key = f"{rel}::{block.fullname}"
            blocks[key] = max(blocks.get(key, 0), block.complexity)
            total += block.complexity
            count += 1
    return Figures(blocks=blocks, count=count, total=total)


def ceil4(value: float) -> float:
    """The average as the baseline stores it: rounded up to 4 places, so a re-measure never exceeds it."""
    return math.ceil(value * 10_000 - 1e-6) / 10_000


def regressions(now: Figures, base: Baseline, limit: int = LIMIT) -> list[str]:
    """What breaks the budget, one line each; empty when the tree is within it."""
    problems = []
    if ceil4(now.average) > base.average:
        problems.append(f"average {now.average:.4f} is above the baseline's {base.average:.4f}")
    for key, cc in sorted(now.above(limit).items()):
        allowed = base.offenders.get(key)
        if allowed is None:
            problems.append(f"{key}: complexity {cc} > {limit} (a new block above the limit)")
        elif cc > allowed:
            problems.append(f"{key}: complexity {cc}, was {allowed} (an offender grew)")
    return problems


def lowered(now: Figures, base: Baseline, limit: int = LIMIT) -> Baseline:
    """The baseline moved down to the tree: offenders that left the list are dropped, none is added."""
    above = now.above(limit)
    kept = {key: min(cc, above[key]) for key, cc in base.offenders.items() if key in above}
    return Baseline(average=min(base.average, ceil4(now.average)), offenders=kept)


def summary(now: Figures, limit: int, packages: Iterable[str] = ()) -> list[str]:
    lines = [f"radon: {now.count} blocks, average {now.average:.4f}, {len(now.above(limit))} above {limit}"]
    for package in packages:
        part = [cc for key, cc in now.blocks.items() if key.startswith(f"{package}/")]
        if part:
            lines.append(f"  {package}/: {len(part)} blocks, average {sum(part) / len(part):.4f}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the tree measured (framework/)")
    parser.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE, help="the committed budget (JSON)")
    parser.add_argument("--update", action="store_true", help="lower the baseline to the tree (never raises it)")
    parser.add_argument("--package", action="append", default=[], help="also print this subfolder's average")
    args = parser.parse_args(argv)
    now = measure(args.root)
    print("\n".join(summary(now, LIMIT, args.package)))
    base = Baseline.read(args.baseline)
    problems = regressions(now, base)
    for line in problems:
        print(f"complexity: {line}", file=sys.stderr)
    if problems:
        print(f"complexity: over the budget in {args.baseline}; simplify (it is only ever lowered)", file=sys.stderr)
        return 1
    if args.update:
        new = lowered(now, base)
        new.write(args.baseline)
        print(f"baseline: average {base.average:.4f} -> {new.average:.4f}, "
              f"offenders {len(base.offenders)} -> {len(new.offenders)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
