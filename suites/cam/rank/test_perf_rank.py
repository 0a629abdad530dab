"""Performance sample: dispatch and combine latency and bytes/s per rank over repeated iterations.

Each rank writes ``perf-rank<N>.json`` into its working directory (the run folder camit
fetches); the controller compares the cluster's numbers with a stored baseline.
"""

from __future__ import annotations

import json
import os
import time

import torch
import torch.distributed as dist
from camref import dispatch_layout, prefill_inputs
from cases import prefill_case

ITERS = int(os.environ.get("CAMIT_PERF_ITERS", "10"))
WARMUP = 2


def test_dispatch_combine_latency(cam, seed):
    case = prefill_case(cam.world)
    x, topk, w = prefill_inputs(seed, cam.rank, case)
    xt = cam.to_device(torch.from_numpy(x).to(torch.bfloat16))
    topk_t, w_t = cam.to_device(torch.from_numpy(topk)), cam.to_device(torch.from_numpy(w))
    ntpe, sti = cam.ops.get_dispatch_layout(topk_t, case.experts, cam.world)
    sync = (lambda: torch.npu.synchronize()) if cam.backend == "hccl" else (lambda: None)
    disp, comb = [], []
    rows = 0
    for it in range(WARMUP + ITERS):
        dist.barrier()
        t0 = time.perf_counter()
        recv_x, scales, expand, recv_count, _ = cam.ops.moe_dispatch_prefill(
            xt, topk_t, w_t, ntpe, sti, cam.group_ep, cam.rank, cam.world, False)
        sync()
        t1 = time.perf_counter()
        cam.ops.moe_combine_prefill(recv_x, topk_t, w_t, expand, recv_count, cam.group_ep, cam.rank, cam.world)
        sync()
        t2 = time.perf_counter()
        if it >= WARMUP:
            disp.append(t1 - t0)
            comb.append(t2 - t1)
            rows = int(recv_count[-1])
    sent = int(dispatch_layout(topk, case.experts)[0].sum()) * case.hidden * 2  # bf16 bytes leaving this rank
    median = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    result = {"rank": cam.rank, "world": cam.world, "case": case.__dict__, "iters": ITERS,
              "dispatch_us": round(median(disp) * 1e6, 1), "combine_us": round(median(comb) * 1e6, 1),
              "dispatch_bytes_per_s": round(sent / median(disp)), "combine_bytes_per_s": round(rows * case.hidden * 2
                                                                                              / median(comb))}
    with open(f"perf-rank{cam.rank}.json", "w") as fh:
        json.dump(result, fh)
    assert result["dispatch_us"] > 0 and result["combine_us"] > 0
