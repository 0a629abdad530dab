"""One performance row per configuration: the JSON line a sweep writes, its schema and the
arithmetic behind it.

Bandwidths as nccl-tests defines them; GB/s are 10⁹ bytes per second. Design:
docs/internals/perf.md.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from framework.perf import straggler

__all__ = ["SCHEMA_ID", "Bandwidth", "Bytes", "Config", "Environment", "RankStats", "Reference", "Row", "Stats",
           "build_row", "json_schema", "read_rows", "stats"]

SCHEMA_ID: Literal["camit.perf.row/1"] = "camit.perf.row/1"

Op = Literal["dispatch", "combine", "fused_deep_moe"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Config(_Model):
    """The independent variables of one configuration."""

    op: Op
    tokens: int = Field(gt=0, description="tokens per rank")
    hidden: int = Field(gt=0)
    top_k: int = Field(gt=0)
    experts: int = Field(gt=0, description="routed experts in the whole group")
    world: int = Field(gt=0, description="ranks in the expert-parallel group")
    dtype: str = Field(description="activation dtype, e.g. bfloat16")
    quant: str = Field(description="quantisation of the dispatched rows: none, int8, ...")

    def key(self) -> str:
        """The configuration's stable name, e.g. ``dispatch.t4096.h7168.k8.e64.w16.bfloat16.none``."""
        c = self
        return f"{c.op}.t{c.tokens}.h{c.hidden}.k{c.top_k}.e{c.experts}.w{c.world}.{c.dtype}.{c.quant}"


class Stats(_Model):
    """Microseconds over the timed iterations."""

    min: float
    avg: float
    p50: float
    p99: float
    max: float


class RankStats(Stats):
    rank: int = Field(ge=0)
    host: str


class Bytes(_Model):
    """Bytes of one iteration, summed over the ranks: all sent, to other ranks, to a rank of the same host,
    to a rank of another host."""

    total: int = Field(ge=0)
    moved: int = Field(ge=0)
    intra: int = Field(ge=0)
    inter: int = Field(ge=0)


class Bandwidth(_Model):
    """GB/s (10⁹ B/s), defined in the module docstring."""

    algbw: float
    busbw: float
    intra: float
    inter: float


class Reference(_Model):
    """The reference collective moving the same bytes over the same group in the same launch."""

    collective: str
    time_us: Stats
    bandwidth: Bandwidth


class Environment(_Model):
    cluster: str
    soc: str
    cann: str
    driver: str
    op_lib_version: str
    op_lib_hash: str
    hccl: dict[str, str] = Field(description="the HCCL_* settings of the launch")


class Row(_Model):
    """One configuration's measurement: a line of ``perf-rows.jsonl``."""

    schema_: Literal["camit.perf.row/1"] = Field(alias="schema")
    run_id: str
    seed: int
    config: Config
    warmup: int = Field(ge=0)
    iterations: int = Field(gt=0)
    time_us: Stats = Field(description="per iteration the slowest rank's time")
    iterations_us: list[float] = Field(description="the slowest rank's time of every timed iteration")
    ranks: list[RankStats]
    bytes: Bytes
    bandwidth: Bandwidth
    reference: Reference | None
    speedup: float | None = Field(description="reference p50 / op p50: above 1 the op beats the collective")
    environment: Environment
    output_hashes: list[str] = Field(description="sha256 of the outputs of every timed iteration")
    straggler: str | None = Field(default=None, description="the rank and host found slow, with the factor")

    def key(self) -> str:
        return self.config.key()

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Row:
        return cls.model_validate_json(line)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Row` (what ``framework/data/perf-row.schema.json`` holds)."""
    schema = Row.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    return schema


def packaged_schema() -> dict[str, Any]:
    """The schema file shipped in ``framework/data``."""
    text = (resources.files("framework") / "data" / "perf-row.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def read_rows(text: str, source: str) -> list[Row]:
    """The rows of a ``perf-rows.jsonl`` text; a bad line raises ``ValueError`` naming ``source`` and the line."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(Row.from_json(line))
        except ValueError as exc:
            first = str(exc).splitlines()[1:3]
            raise ValueError(f"{source}:{n}: not a perf row: {' '.join(first)}") from None
    return rows


def _pct(sorted_v: Sequence[float], q: float) -> float:
    """The ``q`` quantile by linear interpolation (numpy's default)."""
    pos = (len(sorted_v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_v) - 1)
    return sorted_v[lo] + (sorted_v[hi] - sorted_v[lo]) * (pos - lo)


def stats(values: Sequence[float]) -> Stats:
    """min/avg/p50/p99/max of ``values`` (at least one)."""
    if not values:
        raise ValueError("no timed iterations")
    v = sorted(values)
    return Stats(min=v[0], avg=sum(v) / len(v), p50=_pct(v, 0.5), p99=_pct(v, 0.99), max=v[-1])


def _pair_kind(hosts: Sequence[str], i: int, j: int) -> str:
    """What bytes from rank ``i`` to rank ``j`` are: ``self``, ``intra`` (same host) or ``inter``."""
    if i == j:
        return "self"
    return "intra" if hosts[i] == hosts[j] else "inter"


def _bytes(sent: Sequence[Sequence[int]], hosts: Sequence[str]) -> Bytes:
    """The bytes of one iteration by kind, from ``sent[i][j]`` (bytes rank i sends rank j)."""
    world = len(hosts)
    if len(sent) != world or any(len(r) != world for r in sent):
        raise ValueError(f"the send matrix must be {world} x {world} (one row and column per rank)")
    by = Counter({"self": 0, "intra": 0, "inter": 0})
    for i, row in enumerate(sent):
        for j, b in enumerate(row):
            by[_pair_kind(hosts, i, j)] += b
    return Bytes(total=sum(by.values()), moved=by["intra"] + by["inter"], intra=by["intra"],
                 inter=by["inter"])


def _bandwidth(b: Bytes, world: int, p50_us: float) -> Bandwidth:
    per_s = 1.0 / (world * p50_us * 1e-6) / 1e9
    return Bandwidth(algbw=b.total * per_s, busbw=b.moved * per_s, intra=b.intra * per_s, inter=b.inter * per_s)


def _reference(reference_us: Sequence[Sequence[float]] | None, collective: str, moved: Bytes,
               world: int) -> Reference | None:
    """The reference collective's timing and bandwidth (``[iteration][rank]``), when it ran."""
    if reference_us is None:
        return None
    ref = stats([max(t) for t in reference_us])
    return Reference(collective=collective, time_us=ref, bandwidth=_bandwidth(moved, world, ref.p50))


def build_row(*, run_id: str, seed: int, config: Config, warmup: int, times_us: Sequence[Sequence[float]],
              hosts: Sequence[str], sent: Sequence[Sequence[int]], environment: Environment,
              output_hashes: Sequence[str], reference_us: Sequence[Sequence[float]] | None = None,
              collective: str = "all_to_all_single") -> Row:
    """The row of one configuration from ``times_us[iteration][rank]`` (µs), ``hosts[rank]``,
    ``sent[i][j]`` (bytes rank i sends rank j in one iteration) and the reference's ``[iteration][rank]``."""
    world = config.world
    if len(hosts) != world or any(len(t) != world for t in times_us):
        raise ValueError(f"{config.key()}: every iteration needs one time per rank ({world} ranks)")
    slowest = [max(t) for t in times_us]
    total = stats(slowest)
    per_rank = [RankStats(rank=r, host=hosts[r], **stats([t[r] for t in times_us]).model_dump())
                for r in range(world)]
    moved = _bytes(sent, hosts)
    reference = _reference(reference_us, collective, moved, world)
    return Row(schema=SCHEMA_ID, run_id=run_id, seed=seed, config=config, warmup=warmup,
               iterations=len(times_us), time_us=total, iterations_us=slowest, ranks=per_rank, bytes=moved,
               bandwidth=_bandwidth(moved, world, total.p50), reference=reference,
               speedup=reference.time_us.p50 / total.p50 if reference else None, environment=environment,
               output_hashes=list(output_hashes), straggler=_straggler(times_us, hosts))


def _straggler(times_us: Sequence[Sequence[float]], hosts: Sequence[str]) -> str | None:
    return straggler.describe(times_us, hosts)
