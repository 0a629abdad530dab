"""The perf sweep's controller side: the ranks' ``CAMIT_SWEEP`` and their files turned into perf rows.

:func:`spec` tells the ranks which shapes to run (``suites/cam/rank/test_sweep_rank.py``); :func:`rows` builds
one :class:`~framework.perf.row.Row` per configuration from the ``perf-sweep-rank<N>.json`` documents: the per-rank
times of every timed iteration, the send matrix (dispatch: rows x hidden x 2 bytes of bf16 from rank i to j;
combine: the same rows back, the transpose), the reference all_to_all's times and an output hash per
iteration (sha256 of the ranks' hashes of that iteration, in rank order). :func:`standin_env` forwards the
lab's op-time knobs (``standin/README.md``: a modelled op time, slow ranks) from the controller to the ranks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from framework.perf.row import Config, Environment, Row, build_row

__all__ = ["ELEMENT_BYTES", "STANDIN_KNOBS", "rows", "shapes", "spec", "standin_env"]

#: bytes per element of the dispatched rows, by dtype
ELEMENT_BYTES = {"bfloat16": 2}

#: the op stand-in's time-model knobs (standin/umdk_cam_op_lib/_timing.py), lab only
STANDIN_KNOBS = ("CAMIT_STANDIN_OP_BW_GBPS", "CAMIT_STANDIN_OP_LATENCY_US", "CAMIT_STANDIN_SLOW_RANKS")


def standin_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The stand-in's time-model knobs set in the controller's ``environ``, for the ranks' launch env."""
    return {k: environ[k] for k in STANDIN_KNOBS if k in environ}


def shapes(configs: Sequence[Config]) -> list[tuple[int, int, int, int]]:
    """The distinct (tokens, hidden, top_k, experts) of ``configs``, in first-seen order."""
    return list(dict.fromkeys((c.tokens, c.hidden, c.top_k, c.experts) for c in configs))


def spec(configs: Sequence[Config], warmup: int, iterations: int) -> str:
    """``CAMIT_SWEEP`` for the ranks: ``warmup;iterations;tokens:hidden:top_k:experts,...``."""
    return f"{warmup};{iterations};" + ",".join(":".join(map(str, s)) for s in shapes(configs))


def _combined_hash(docs: Sequence[Mapping[str, Any]], index: int, op: str, iteration: int) -> str:
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(str(doc["shapes"][index][f"{op}_hash"][iteration]).encode())
    return digest.hexdigest()


def _row(c: Config, index: int, docs: Sequence[Mapping[str, Any]], hosts: Sequence[str], run_id: str,
         environment: Environment) -> Row:
    world = c.world
    per_shape = [d["shapes"][index] for d in docs]
    iterations = len(per_shape[0][f"{c.op}_us"])
    rows_ = per_shape[0]["rows"]
    sent = [[rows_[i][j] * c.hidden * ELEMENT_BYTES[c.dtype] for j in range(world)] for i in range(world)]
    if c.op == "combine":
        sent = [list(col) for col in zip(*sent)]
    return build_row(run_id=run_id, seed=int(docs[0]["seed"]), config=c, warmup=int(docs[0]["warmup"]),
                     times_us=[[s[f"{c.op}_us"][it] for s in per_shape] for it in range(iterations)],
                     hosts=hosts, sent=sent, environment=environment,
                     output_hashes=[_combined_hash(docs, index, c.op, it) for it in range(iterations)],
                     reference_us=[[s["reference_us"][it] for s in per_shape] for it in range(iterations)])


def rows(configs: Sequence[Config], docs: Sequence[Mapping[str, Any]], hosts: Sequence[str], *, run_id: str,
         cluster: str, soc: str) -> list[Row]:
    """One row per configuration from the ranks' documents (``docs[rank]``); ``hosts[rank]`` names their hosts.
    A document that does not match the configurations raises ``ValueError`` naming the rank."""
    order = shapes(configs)
    for rank, doc in enumerate(docs):
        got = [(s["shape"]["tokens"], s["shape"]["hidden"], s["shape"]["top_k"], s["shape"]["experts"])
               for s in doc["shapes"]]
        if got != order:
            raise ValueError(f"rank {rank}: perf-sweep-rank{rank}.json has the shapes {got}, expected {order}")
    e = docs[0]["environment"]
    environment = Environment(cluster=cluster, soc=soc, cann=str(e["cann"]), driver=str(e["driver"]),
                              op_lib_version=str(e["op_lib_version"]), op_lib_hash=str(e["op_lib_hash"]),
                              hccl={str(k): str(v) for k, v in e["hccl"].items()})
    return [_row(c, order.index((c.tokens, c.hidden, c.top_k, c.experts)), docs, hosts, run_id, environment)
            for c in configs]
