"""Seeded fuzz: N random valid configurations checked against the reference, N invalid ones that must fail cleanly.

The configuration of case i depends only on CAMIT_SEED and i, so every rank draws the same one
and a failing case reproduces with the seed printed by the controller (``--random-seed``).
Valid cases lie inside the kernels' limits (prefill: H in [1024, 7168], tokens in [1, 8000], top_k in
(0, 16]; fused: see ``fused_config``), invalid ones outside a limit the op checks. Expert ids outside
[0, E) are no invalid case: get_dispatch_layout does not check them (umdk
src/cam/comm_operator/pybind/get_dispatch_layout.cpp), the kernel faults on the device instead.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from camcheck import OP_ERROR, expect_equal
from camref import FusedCase, PrefillCase, dispatch_layout, dispatch_reference, fused_reference
from test_fused_rank import check_fused, run_fused
from test_prefill_rank import check_combine, run_prefill

from conftest import SEED

N = int(os.environ.get("CAMIT_FUZZ_N", "6"))
WORLD = int(os.environ.get("WORLD_SIZE", "2"))


def prefill_config(i: int) -> tuple[PrefillCase, bool]:
    r = random.Random(f"{SEED}-prefill-{i}")
    experts = WORLD * r.randint(1, 4)
    # H in [1024, 7168] (moe_dispatch_normal_tiling.cpp), a multiple of 128 for the quant path's
    # per-block dequantisation; the lower end and few tokens keep the CPU lab's cost down
    case = PrefillCase(tokens=r.randint(1, 16), hidden=128 * r.randint(8, 12), experts=experts,
                       top_k=r.randint(1, min(16, experts)))
    return case, r.random() < 0.5


def fused_config(i: int) -> FusedCase:
    """Inside the fused limits: batch ≤ 256, top_k ≤ 12 and < E, H in [1024, 7168] with H % 256 == 0,
    2I in [1024, 6144] with 2I % 1024 == 0, E ≤ 512 (cam-ops.md §8, the fused tiling)."""
    r = random.Random(f"{SEED}-fused-{i}")
    experts = WORLD * r.randint(1, 3)
    return FusedCase(batch=r.randint(1, 12), hidden=256 * r.randint(4, 5), inter=512 * r.randint(1, 2),
                     experts=experts, top_k=r.randint(1, min(12, experts - 1)) if experts > 1 else 1,
                     with_share=r.random() < 0.3, with_smooth=r.random() < 0.3, with_mask=r.random() < 0.3,
                     separated=r.random() < 0.3, dynamic_bs=r.random() < 0.3)


#: each outside one limit the op checks at the call or in its tiling (pybind moe_dispatch_prefill.cpp,
#: get_dispatch_layout.cpp; dispatch_layout_tiling.cpp, moe_dispatch_normal_tiling.cpp)
INVALID = ["experts_not_divisible", "top_k_over_limit", "empty_batch", "too_many_tokens", "int64_counts",
           "rank_mismatch", "x_3d"]


@pytest.fixture(autouse=True)
def _healthy_after(cam, request):
    yield
    cam.check_healthy(request.node.name)


@pytest.mark.parametrize("i", range(N), ids=lambda i: f"valid{i}")
def test_prefill_fuzz_valid(cam, i):
    case, quant = prefill_config(i)
    seed = SEED + i
    got = run_prefill(cam, seed, case, quant)
    what = f"case {case} quant={quant} seed={SEED}"
    ref = dispatch_reference(seed, cam.rank, cam.world, case)
    expect_equal("moe_dispatch_prefill", f"recv_count [{what}]", got["recv_count"].cpu().numpy(), ref.recv_count,
                 cam.rank)
    n = ref.rows
    expect_equal("moe_dispatch_prefill", f"expand_idx [{what}]", got["expand"].cpu().numpy()[: 3 * n],
                 ref.expand_idx[: 3 * n], cam.rank)
    check_combine(got, cam.rank, quant, what)


@pytest.mark.parametrize("i", range(max(1, N // 2)), ids=lambda i: f"valid{i}")
def test_fused_fuzz_valid(cam, i):
    case = fused_config(i)
    if case.experts % cam.world or case.top_k >= case.experts:
        pytest.skip(f"drawn case not valid for world {cam.world}: {case}")
    out, share, counts = run_fused(cam, SEED + i, case)
    ref = fused_reference(SEED + i, cam.rank, cam.world, case)
    check_fused(cam, ref, out, share, counts, f"case {case} seed={SEED}")


@pytest.mark.parametrize("i", range(N), ids=lambda i: f"invalid{i}")
def test_prefill_fuzz_invalid(cam, i):
    r = random.Random(f"{SEED}-invalid-{i}")
    kind = INVALID[r.randrange(len(INVALID))]
    experts = cam.world * r.randint(1, 3)
    case = PrefillCase(tokens=r.randint(1, 16), hidden=1024, experts=experts, top_k=min(4, experts))
    from camref import prefill_inputs

    x, topk, w = prefill_inputs(SEED + i, cam.rank, case)
    rank, world, n_exp = cam.rank, cam.world, experts
    if kind == "experts_not_divisible":
        n_exp = experts + 1
    elif kind == "top_k_over_limit":
        topk = np.tile(topk[:, :1], (1, 17))
        w = np.tile(w[:, :1], (1, 17))
    elif kind == "empty_batch":
        x, topk, w = x[:0], topk[:0], w[:0]
    elif kind == "too_many_tokens":  # past BS_UPPER_BOUND = 8000 (and past 8192, the old stand-in's bound)
        reps = -(-(8193 + r.randint(0, 100)) // case.tokens)
        x, topk, w = (np.tile(a, (reps, 1)) for a in (x, topk, w))
    elif kind == "rank_mismatch":
        world = world + 1
    elif kind == "x_3d":
        x = x.reshape(x.shape[0], 2, -1)
    ntpe, sti = (torch.from_numpy(a) for a in dispatch_layout(topk, experts))
    if kind == "top_k_over_limit":
        sti = torch.zeros(topk.shape, dtype=torch.int32)
    elif kind == "int64_counts":
        ntpe = ntpe.to(torch.int64)
    with pytest.raises(RuntimeError, match=OP_ERROR):
        if kind == "experts_not_divisible":
            cam.ops.get_dispatch_layout(cam.to_device(torch.from_numpy(topk)), n_exp, cam.world)
        else:
            cam.ops.moe_dispatch_prefill(cam.to_device(torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16)),
                                         cam.to_device(torch.from_numpy(np.ascontiguousarray(topk))),
                                         cam.to_device(torch.from_numpy(np.ascontiguousarray(w))),
                                         cam.to_device(ntpe), cam.to_device(sti), cam.group_ep, rank, world, False)
        cam.sync()
