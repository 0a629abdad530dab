"""Seeded fuzz: N random valid configurations checked against the reference, N invalid ones that must fail cleanly.

The configuration of case i depends only on CAMIT_SEED and i, so every rank draws the same one
and a failing case reproduces with the seed printed by the controller (``--random-seed``).
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from camcheck import expect_close, expect_diff, expect_equal
from camref import FusedCase, PrefillCase, combine_reference, dispatch_layout, dispatch_reference, fused_reference
from test_fused_rank import run_fused
from test_prefill_rank import run_prefill

from conftest import SEED

N = int(os.environ.get("CAMIT_FUZZ_N", "6"))
WORLD = int(os.environ.get("WORLD_SIZE", "2"))


def prefill_config(i: int) -> tuple[PrefillCase, bool]:
    r = random.Random(f"{SEED}-prefill-{i}")
    experts = WORLD * r.randint(1, 4)
    case = PrefillCase(tokens=r.randint(1, 48), hidden=128 * r.randint(1, 4), experts=experts,
                       top_k=r.randint(1, min(16, experts)))
    return case, r.random() < 0.5


def fused_config(i: int) -> FusedCase:
    r = random.Random(f"{SEED}-fused-{i}")
    experts = WORLD * r.randint(1, 3)
    return FusedCase(batch=r.randint(1, 12), hidden=256 * r.randint(4, 5), inter=512 * r.randint(1, 2),
                     experts=experts, top_k=r.randint(1, min(12, experts - 1)) if experts > 1 else 1,
                     with_share=r.random() < 0.3, with_smooth=r.random() < 0.3, with_mask=r.random() < 0.3,
                     separated=r.random() < 0.3, dynamic_bs=r.random() < 0.3)


INVALID = ["id_out_of_range", "experts_not_divisible", "top_k_over_limit", "empty_batch", "int64_counts",
           "rank_mismatch", "x_3d"]


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
    expect_diff("moe_combine_prefill", f"combined_x [{what}]", got["out"].float().cpu().numpy(),
                combine_reference(got["x"], got["w"]), cam.rank, 1e-4 if quant else 5e-5)


@pytest.mark.parametrize("i", range(max(1, N // 2)), ids=lambda i: f"valid{i}")
def test_fused_fuzz_valid(cam, i):
    case = fused_config(i)
    if case.experts % cam.world or case.top_k >= case.experts:
        pytest.skip(f"drawn case not valid for world {cam.world}: {case}")
    out, share, counts = run_fused(cam, SEED + i, case)
    ref = fused_reference(SEED + i, cam.rank, cam.world, case)
    what = f"case {case} seed={SEED}"
    expect_equal("fused_deep_moe", f"expert_token_nums [{what}]", counts.cpu().numpy(), ref.expert_token_nums,
                 cam.rank)
    expect_close("fused_deep_moe", f"output [{what}]", out.float().cpu().numpy()[ref.active], ref.output[ref.active],
                 cam.rank, rtol=0.02, atol=2.0)


@pytest.mark.parametrize("i", range(N), ids=lambda i: f"invalid{i}")
def test_prefill_fuzz_invalid(cam, i):
    r = random.Random(f"{SEED}-invalid-{i}")
    kind = INVALID[r.randrange(len(INVALID))]
    experts = cam.world * r.randint(1, 3)
    case = PrefillCase(tokens=r.randint(1, 16), hidden=128, experts=experts, top_k=min(4, experts))
    from camref import prefill_inputs

    x, topk, w = prefill_inputs(SEED + i, cam.rank, case)
    ntpe, sti = (torch.from_numpy(a) for a in dispatch_layout(topk, experts))
    rank, world, n_exp = cam.rank, cam.world, experts
    if kind == "id_out_of_range":
        topk[0, 0] = experts + r.randint(0, 5)
    elif kind == "experts_not_divisible":
        n_exp = experts + 1
    elif kind == "top_k_over_limit":
        topk = np.tile(topk[:, :1], (1, 17))
        w = np.tile(w[:, :1], (1, 17))
        sti = torch.zeros(topk.shape, dtype=torch.int32)
    elif kind == "empty_batch":
        x, topk, w, sti = x[:0], topk[:0], w[:0], sti[:0]
        ntpe = torch.zeros(experts, dtype=torch.int32)
    elif kind == "int64_counts":
        ntpe = ntpe.to(torch.int64)
    elif kind == "rank_mismatch":
        world = world + 1
    elif kind == "x_3d":
        x = x.reshape(x.shape[0], 2, -1)
    with pytest.raises(RuntimeError):
        if kind in ("id_out_of_range", "experts_not_divisible"):
            cam.ops.get_dispatch_layout(cam.to_device(torch.from_numpy(topk)), n_exp, cam.world)
        else:
            cam.ops.moe_dispatch_prefill(cam.to_device(torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16)),
                                         cam.to_device(torch.from_numpy(np.ascontiguousarray(topk))),
                                         cam.to_device(torch.from_numpy(np.ascontiguousarray(w))),
                                         cam.to_device(ntpe), cam.to_device(sti), cam.group_ep, rank, world, False)
