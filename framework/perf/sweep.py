"""The perf sweep's controller side: the ranks' ``CAMIT_SWEEP`` and their files turned into perf
rows.

Design: docs/internals/perf.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from framework.perf.row import Config, Environment, Row, build_row

__all__ = ["ELEMENT_BYTES", "FUSED", "STANDIN_KNOBS", "rows", "shapes", "spec", "standin_env"]

#: bytes per element of the dispatched rows, by dtype
ELEMENT_BYTES = {"bfloat16": 2}

#: the op stand-in's time-model knobs (standin/umdk_cam_op_lib/_timing.py), lab only
STANDIN_KNOBS = ("CAMIT_STANDIN_OP_BW_GBPS", "CAMIT_STANDIN_OP_LATENCY_US", "CAMIT_STANDIN_SLOW_RANKS")


def standin_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The stand-in's time-model knobs set in the controller's ``environ``, for the ranks' launch env."""
    return {k: environ[k] for k in STANDIN_KNOBS if k in environ}


#: the rank document's list of shapes each op's times are in
FUSED = "fused_deep_moe"
_SECTION = {"dispatch": "shapes", "combine": "shapes", FUSED: "fused"}


def shapes(configs: Sequence[Config], section: str = "shapes") -> list[tuple[int, int, int, int]]:
    """The distinct (tokens, hidden, top_k, experts) of the ``configs`` whose op's times are in ``section``
    (``shapes``: dispatch and combine; ``fused``: fused_deep_moe), in first-seen order."""
    return list(dict.fromkeys((c.tokens, c.hidden, c.top_k, c.experts) for c in configs
                              if _SECTION[c.op] == section))


def spec(configs: Sequence[Config], warmup: int, iterations: int, fused_inter: int = 512) -> str:
    """``CAMIT_SWEEP`` for the ranks: ``warmup;iterations;PREFILL;FUSED``, PREFILL the prefill shapes
    ``tokens:hidden:top_k:experts,...``, FUSED the fused_deep_moe shapes ``tokens:hidden:top_k:experts:inter,...``
    (either may be empty)."""
    prefill = ",".join(":".join(map(str, s)) for s in shapes(configs))
    fused = ",".join(":".join(map(str, (*s, fused_inter))) for s in shapes(configs, "fused"))
    return f"{warmup};{iterations};{prefill};{fused}"


def _combined_hash(docs: Sequence[Mapping[str, Any]], index: int, op: str, iteration: int) -> str:
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(str(doc[_SECTION[op]][index][f"{op}_hash"][iteration]).encode())
    return digest.hexdigest()


def _sent(c: Config, counts: Sequence[Sequence[int]]) -> list[list[int]]:
    """Bytes rank i sends rank j in one iteration, from the token ``counts`` of ``c``'s dispatch
    (a combine sends them back: the transpose)."""
    world = c.world
    sent = [[counts[i][j] * c.hidden * ELEMENT_BYTES[c.dtype] for j in range(world)]
            for i in range(world)]
    return [list(col) for col in zip(*sent)] if c.op == "combine" else sent


def _series(per_shape: Sequence[Mapping[str, Any]], key: str, iterations: int) -> list[list[float]]:
    """``[iteration][rank]`` of the ranks' ``key`` series."""
    return [[s[key][it] for s in per_shape] for it in range(iterations)]


def _row(c: Config, index: int, docs: Sequence[Mapping[str, Any]], hosts: Sequence[str],
         run_id: str, environment: Environment) -> Row:
    """The row of configuration ``c`` (shape ``index`` of its section) from the ranks' documents."""
    per_shape = [d[_SECTION[c.op]][index] for d in docs]
    iterations = len(per_shape[0][f"{c.op}_us"])
    return build_row(run_id=run_id, seed=int(docs[0]["seed"]), config=c,
                     warmup=int(docs[0]["warmup"]),
                     times_us=_series(per_shape, f"{c.op}_us", iterations),
                     hosts=hosts, sent=_sent(c, per_shape[0]["rows"]), environment=environment,
                     output_hashes=[_combined_hash(docs, index, c.op, it) for it in range(iterations)],
                     reference_us=_series(per_shape, "reference_us", iterations))


def rows(configs: Sequence[Config], docs: Sequence[Mapping[str, Any]], hosts: Sequence[str], *, run_id: str,
         cluster: str, soc: str) -> list[Row]:
    """One row per configuration from the ranks' documents (``docs[rank]``); ``hosts[rank]`` names their hosts.
    A document that does not match the configurations raises ``ValueError`` naming the rank."""
    order = {section: shapes(configs, section) for section in ("shapes", "fused")}
    for rank, doc in enumerate(docs):
        for section, expected in order.items():
            got = [(s["shape"]["tokens"], s["shape"]["hidden"], s["shape"]["top_k"], s["shape"]["experts"])
                   for s in doc.get(section, [])]
            if got != expected:
                raise ValueError(f"rank {rank}: perf-sweep-rank{rank}.json has the {section} {got}, "
                                 f"expected {expected}")
    e = docs[0]["environment"]
    environment = Environment(cluster=cluster, soc=soc, cann=str(e["cann"]), driver=str(e["driver"]),
                              op_lib_version=str(e["op_lib_version"]), op_lib_hash=str(e["op_lib_hash"]),
                              hccl={str(k): str(v) for k, v in e["hccl"].items()})
    return [_row(c, order[_SECTION[c.op]].index((c.tokens, c.hidden, c.top_k, c.experts)), docs, hosts, run_id,
                 environment) for c in configs]
