"""Performance baselines: per-rank samples -> cluster numbers -> comparison with a stored
baseline.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from framework.records.folder import locked, write_atomic

LATENCY = ("dispatch_us", "combine_us")
THROUGHPUT = ("dispatch_bytes_per_s", "combine_bytes_per_s")


def cluster_numbers(samples: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The cluster's view of per-rank samples: the slowest rank's latency, the slowest rank's throughput."""
    if not samples:
        raise ValueError("no performance samples")
    out: dict[str, float] = {}
    for key in LATENCY:
        out[key] = max(float(s[key]) for s in samples)
    for key in THROUGHPUT:
        out[key] = min(float(s[key]) for s in samples)
    return out


def regressions(current: Mapping[str, float], baseline: Mapping[str, float], margin: float) -> list[str]:
    """One sentence per metric that regressed beyond ``margin`` (empty when none did)."""
    problems = []
    for key in LATENCY:
        if key in baseline and current[key] > baseline[key] * (1 + margin):
            problems.append(f"{key} {current[key]:.1f} > baseline {baseline[key]:.1f} x {1 + margin:.2f} "
                            f"(+{(current[key] / baseline[key] - 1) * 100:.0f}%)")
    for key in THROUGHPUT:
        if key in baseline and current[key] < baseline[key] / (1 + margin):
            problems.append(f"{key} {current[key]:.0f} < baseline {baseline[key]:.0f} / {1 + margin:.2f} "
                            f"({(current[key] / baseline[key] - 1) * 100:.0f}%)")
    return problems


def load(path: Path) -> dict[str, Any]:
    """The baseline file's cases (``{}`` when there is none yet); a corrupt file raises ``ValueError``."""
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object of cases, got {type(doc).__name__}")
    return doc


def update(path: Path, key: str, numbers: Mapping[str, float], note: str = "") -> None:
    """Set one case's baseline, keeping the others: under the file's lock (``framework.records.folder.locked``),
    since the xdist workers of one ``--update-baseline`` run write their cases into the same file at once. Unlike
    ``update_json``, an unreadable baseline file is an error, not a fresh start."""
    with locked(path):
        data = load(path)
        data[key] = {**numbers, "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "note": note}
        write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
