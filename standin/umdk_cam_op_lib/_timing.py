"""Modelled op time, lab only: a knob makes each prefill op and fused_deep_moe last
``bytes / bandwidth + latency`` (stand-in).

The knobs: docs/internals/standin.md.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["BW", "LATENCY", "SLOW", "Model", "from_env", "pace", "parse_slow", "row_bytes"]

BW = "CAMIT_STANDIN_OP_BW_GBPS"
LATENCY = "CAMIT_STANDIN_OP_LATENCY_US"
SLOW = "CAMIT_STANDIN_SLOW_RANKS"


@dataclass(frozen=True)
class Model:
    """GB/s (10⁹ B/s), a fixed latency in µs and a factor per slow rank."""

    bw_gbps: float
    latency_us: float = 0.0
    slow: Mapping[int, float] = field(default_factory=dict)

    def duration_s(self, nbytes: int, rank: int) -> float:
        """Seconds one op moving ``nbytes`` (per rank) lasts on ``rank``."""
        base = nbytes / (self.bw_gbps * 1e9) + self.latency_us * 1e-6
        return base * self.slow.get(rank, 1.0)


def row_bytes(tokens: int, top_k: int, hidden: int, element_size: int) -> int:
    """The bytes one rank sends in dispatch (and gets back in combine): ``S`` of the perf row."""
    return tokens * top_k * hidden * element_size


def _positive(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name}={text!r}: not a positive number")
    return value


def parse_slow(text: str) -> dict[int, float]:
    """``rank:factor,...`` → {rank: factor}; a bad item raises ValueError naming the variable and the item."""
    out: dict[int, float] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        rank, sep, factor = item.partition(":")
        if not sep or not rank.strip().isdigit():
            raise ValueError(f"{SLOW}: item {item!r} is not rank:factor (e.g. 3:1.1)")
        out[int(rank)] = _positive(f"{SLOW} rank {rank.strip()} factor", factor.strip())
    return out


def from_env(environ: Mapping[str, str]) -> Model | None:
    """The model the environment asks for, None when ``CAMIT_STANDIN_OP_BW_GBPS`` and the others are unset;
    a latency or slow ranks without a bandwidth, or a bad value, raise ValueError naming the variable."""
    if BW not in environ:
        stray = [k for k in (LATENCY, SLOW) if k in environ]
        if stray:
            raise ValueError(f"{', '.join(stray)} set without {BW}: the op time model needs a bandwidth")
        return None
    latency = environ.get(LATENCY, "0")
    return Model(bw_gbps=_positive(BW, environ[BW]),
                 latency_us=0.0 if latency.strip() in ("", "0") else _positive(LATENCY, latency),
                 slow=parse_slow(environ.get(SLOW, "")))


def pace(op: str, start: float, nbytes: int, rank: int) -> None:
    """Sleep until ``start`` (``time.perf_counter()`` at the op's entry) plus the modelled time, if any."""
    try:
        model = from_env(os.environ)
    except ValueError as exc:
        raise RuntimeError(f"umdk_cam_op_lib stand-in {op}: {exc}") from None
    if model is None:
        return
    modelled = model.duration_s(nbytes, rank)
    end = start + modelled
    if time.perf_counter() > end:  # the known answer is lost: say so where the rank's log shows it
        took = time.perf_counter() - start
        print(f"umdk_cam_op_lib stand-in {op}: rank {rank}: the op's own work took {took * 1e3:.1f} ms, past "
              f"its modelled {modelled * 1e3:.1f} ms ({BW}): its time is the work's", file=sys.stderr)
    while (left := end - time.perf_counter()) > 0:
        time.sleep(left)
