"""Seeded fuzz: N random valid configurations checked against the reference, N invalid ones that
must fail cleanly.

The valid and invalid cases and the comparisons' bounds: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from camcheck import expect_equal, refused_for
from camcontract import LIMITS, dispatch_window, fits, hccl_buffsize_mb
from camref import FusedCase, PrefillCase, dispatch_layout, dispatch_reference, fused_reference, prefill_inputs
from test_fused_rank import check_fused, run_fused
from test_prefill_rank import check_combine, run_prefill

from conftest import SEED

N = int(os.environ.get("CAMIT_FUZZ_N", "6"))
WORLD = int(os.environ.get("WORLD_SIZE", "2"))
#: the prefill limits, from the contract the op stand-in enforces too
TOKENS_MAX = LIMITS["dispatch.tokens"].hi or 0
H_MIN, H_MAX = LIMITS["dispatch.hidden"].lo or 0, LIMITS["dispatch.hidden"].hi or 0
TOP_K_MAX = LIMITS["dispatch.top_k"].hi or 0
#: the fused limits: valid draws inside the contract, invalid ones past what the tiling refuses
_FH, _FG = LIMITS["fused.hidden"], LIMITS["fused.gmm1"]
F_BS_MAX, F_TOP_K_MAX, F_E_MAX = LIMITS["fused.batch"].hi or 0, LIMITS["fused.top_k"].hi or 0, \
    LIMITS["fused.experts"].hi or 0
F_H_MIN, F_H_MAX, F_H_STEP, F_H_REFUSED_BELOW = _FH.lo or 0, _FH.hi or 0, _FH.step, _FH.refused_lo or 0
F_GMM1_MIN, F_GMM1_MAX, F_GMM1_ALIGN = _FG.lo or 0, _FG.hi or 0, _FG.step
MAX_TOKENS = max(1, min(TOKENS_MAX, int(os.environ.get("CAMIT_FUZZ_MAX_TOKENS", "48"))))
#: the launch's HCCL window (MB): valid prefill cases are sized to fit it
WINDOW_MB = hccl_buffsize_mb(dict(os.environ))


def window_tokens(top_k: int, hidden: int, want: int) -> int:
    """``want`` tokens, fewer if the dispatch window of the launch's HCCL_BUFFSIZE cannot hold them."""
    while want > 1 and not fits(dispatch_window(want, top_k, hidden), WINDOW_MB):
        want = want * 3 // 4
    return want


def prefill_config(i: int) -> tuple[PrefillCase, bool, torch.dtype]:
    r = random.Random(f"{SEED}-prefill-{i}")
    experts = WORLD * r.randint(1, 4)
    edge = r.random()  # a quarter of the cases at an H edge
    hidden = H_MIN if edge < 0.125 else H_MAX if edge < 0.25 else 128 * r.randint(H_MIN // 128, H_MAX // 128)
    top_k = r.randint(1, min(TOP_K_MAX, experts))
    tokens = window_tokens(top_k, hidden, 1 if r.random() < 0.15 else r.randint(1, MAX_TOKENS))
    case = PrefillCase(tokens=tokens, hidden=hidden, experts=experts, top_k=top_k, uneven=r.random() < 0.4,
                       zero_rows=r.random() < 0.3)
    return case, r.random() < 0.5, r.choice([torch.bfloat16, torch.float16])


def fused_config(i: int) -> FusedCase:
    """Inside the fused contract (module docstring)."""
    r = random.Random(f"{SEED}-fused-{i}")
    experts = WORLD * r.randint(1, 3)
    return FusedCase(batch=r.randint(1, min(16, F_BS_MAX)),
                     hidden=F_H_STEP * r.randint(F_H_MIN // F_H_STEP, 6), inter=F_GMM1_ALIGN // 2 * r.randint(1, 2),
                     experts=experts, top_k=r.randint(1, min(F_TOP_K_MAX, experts - 1)),
                     with_share=r.random() < 0.3, with_smooth=r.random() < 0.3, with_mask=r.random() < 0.3,
                     separated=r.random() < 0.3, dynamic_bs=r.random() < 0.3, fp16=r.random() < 0.3,
                     placeholders=r.random() < 0.3)


#: each outside one limit the op checks at the call or in its tiling (pybind moe_dispatch_prefill.cpp,
#: moe_combine_prefill.cpp, get_dispatch_layout.cpp, fused_deep_moe.cpp; dispatch_layout_tiling.cpp,
#: moe_dispatch_normal_tiling.cpp, moe_combine_normal_tiling.cpp, fused_deep_moe_tiling.cpp)
PREFILL_INVALID = ["experts_not_divisible", "top_k_over_limit", "empty_batch", "too_many_tokens", "int64_counts",
                   "rank_mismatch", "x_3d", "hidden_below", "hidden_above", "x_fp32"]
COMBINE_INVALID = ["combine_hidden_below", "combine_hidden_above", "combine_x_fp32", "combine_too_many_tokens"]
FUSED_INVALID = ["fused_batch_over", "fused_hidden_below", "fused_hidden_above", "fused_gmm1_below",
                 "fused_gmm1_above", "fused_gmm1_unaligned", "fused_top_k_over", "fused_experts_over"]
INVALID = PREFILL_INVALID + COMBINE_INVALID + FUSED_INVALID
#: the one contract entry each invalid kind crosses: its refusal must name that entry's quantity
INVALID_ENTRY = {
    "experts_not_divisible": "layout.experts_per_rank", "top_k_over_limit": "dispatch.top_k",
    "empty_batch": "dispatch.tokens_notify", "too_many_tokens": "dispatch.tokens",
    "int64_counts": "dispatch.counts_dtype", "rank_mismatch": "dispatch.counts_per_rank", "x_3d": "dispatch.x_dim",
    "hidden_below": "dispatch.hidden", "hidden_above": "dispatch.hidden", "x_fp32": "dispatch.x_dtype",
    "combine_hidden_below": "combine.hidden", "combine_hidden_above": "combine.hidden",
    "combine_x_fp32": "combine.x_dtype", "combine_too_many_tokens": "combine.tokens",
    "fused_batch_over": "fused.batch", "fused_hidden_below": "fused.hidden", "fused_hidden_above": "fused.hidden",
    "fused_gmm1_below": "fused.gmm1", "fused_gmm1_above": "fused.gmm1", "fused_gmm1_unaligned": "fused.gmm1",
    "fused_top_k_over": "fused.top_k", "fused_experts_over": "fused.experts",
}


def refusal(kind: str, exc: BaseException) -> None:
    """Into the rank log: what the op said (its check's text, the EZ9999 detail line of a tiling refusal)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    print(f"{kind}: refused: {' | '.join(lines[:2])[:400]}")


def invalid_kind(i: int) -> str:
    """Case i's kind: a seeded permutation, so N cases cover N different kinds."""
    order = random.Random(f"{SEED}-invalid-order").sample(INVALID, len(INVALID))
    return order[i % len(order)]


@pytest.fixture(autouse=True)
def _healthy_after(cam, request):
    yield
    cam.check_healthy(request.node.name)


@pytest.mark.parametrize("i", range(N), ids=lambda i: f"valid{i}")
def test_prefill_fuzz_valid(cam, i):
    case, quant, dtype = prefill_config(i)
    seed = SEED + i
    got = run_prefill(cam, seed, case, quant, dtype)
    what = f"case {case} quant={quant} dtype={dtype} seed={SEED}"
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
    if case.experts % cam.world:
        pytest.skip(f"drawn case not valid for world {cam.world}: {case}")
    out, share, counts = run_fused(cam, SEED + i, case)
    ref = fused_reference(SEED + i, cam.rank, cam.world, case)
    check_fused(cam, ref, out, share, counts, f"case {case} seed={SEED}")


def _prefill_invalid(cam, r: random.Random, kind: str, i: int) -> None:
    # rank_mismatch: E = R, which R + 1 never divides (the one check crossed)
    experts = cam.world * (1 if kind == "rank_mismatch" else r.randint(1, 3))
    case = PrefillCase(tokens=r.randint(1, 16), hidden=H_MIN, experts=experts, top_k=min(4, experts))
    if kind == "hidden_below":
        case = PrefillCase(case.tokens, H_MIN - 128 * r.randint(1, 4), experts, case.top_k)
    elif kind == "hidden_above":
        case = PrefillCase(case.tokens, H_MAX + 128 * r.randint(1, 4), experts, case.top_k)
    x, topk, w = prefill_inputs(SEED + i, cam.rank, case)
    rank, world, n_exp, dtype = cam.rank, cam.world, experts, torch.bfloat16
    if kind == "experts_not_divisible":
        n_exp = experts + 1
    elif kind == "top_k_over_limit":
        topk = np.tile(topk[:, :1], (1, TOP_K_MAX + 1))
        w = np.tile(w[:, :1], (1, TOP_K_MAX + 1))
    elif kind == "empty_batch":
        x, topk, w = x[:0], topk[:0], w[:0]
    elif kind == "too_many_tokens":  # past BS_UPPER_BOUND = 8000, some past 8192 too (an old stand-in's bound)
        reps = -(-(TOKENS_MAX + 1 + r.randint(0, 300)) // case.tokens)
        x, topk, w = (np.tile(a, (reps, 1)) for a in (x, topk, w))
    elif kind == "rank_mismatch":
        world = world + 1
    elif kind == "x_3d":
        x = x.reshape(x.shape[0], 2, -1)
    elif kind == "x_fp32":
        dtype = torch.float32
    ntpe, sti = (torch.from_numpy(a) for a in dispatch_layout(topk, experts))
    if kind == "top_k_over_limit":
        sti = torch.zeros(topk.shape, dtype=torch.int32)
    elif kind == "int64_counts":
        ntpe = ntpe.to(torch.int64)
    dev = cam.to_device
    with refused_for(INVALID_ENTRY[kind]) as refused:
        if kind == "experts_not_divisible":
            cam.ops.get_dispatch_layout(dev(torch.from_numpy(topk)), n_exp, cam.world)
        else:
            cam.ops.moe_dispatch_prefill(dev(torch.from_numpy(np.ascontiguousarray(x)).to(dtype)),
                                         dev(torch.from_numpy(np.ascontiguousarray(topk))),
                                         dev(torch.from_numpy(np.ascontiguousarray(w))),
                                         dev(ntpe), dev(sti), cam.group_ep, rank, world, False)
        cam.sync()
    refusal(kind, refused.value)


def _combine_invalid(cam, r: random.Random, kind: str) -> None:
    """moe_combine_prefill refused by its tiling (moe_combine_normal_tiling.cpp), before any communication."""
    tokens, top_k, rows, hidden, dtype = r.randint(1, 16), 2, 8, H_MIN, torch.bfloat16
    if kind == "combine_hidden_below":
        hidden = H_MIN - 128 * r.randint(1, 4)
    elif kind == "combine_hidden_above":
        hidden = H_MAX + 128 * r.randint(1, 4)
    elif kind == "combine_x_fp32":
        dtype = torch.float32
    elif kind == "combine_too_many_tokens":
        tokens = TOKENS_MAX + 1 + r.randint(0, 300)
    dev = cam.to_device
    x = torch.zeros((rows, hidden), dtype=dtype)
    topk = torch.zeros((tokens, top_k), dtype=torch.int64)
    w = torch.ones((tokens, top_k), dtype=torch.float32)
    src_idx = torch.zeros(3 * rows, dtype=torch.int32)
    send_head = torch.zeros(2 * cam.world, dtype=torch.int32)   # E = 2R >= top_k: the K check passes
    with refused_for(INVALID_ENTRY[kind]) as refused:
        cam.ops.moe_combine_prefill(dev(x), dev(topk), dev(w), dev(src_idx), dev(send_head), cam.group_ep,
                                    cam.rank, cam.world)
        cam.sync()
    refusal(kind, refused.value)


def _fused_invalid(cam, r: random.Random, kind: str) -> None:
    """fused_deep_moe refused by its tiling (fused_deep_moe_tiling.cpp): arguments consistent in every other way,
    zero-filled (the op refuses before reading them), so the one limit is what it refuses."""
    bs, hidden, gmm1, top_k, experts = r.randint(1, 8), F_H_MIN, F_GMM1_MIN, 2, 2 * cam.world
    if kind == "fused_batch_over":
        bs = F_BS_MAX + r.randint(1, 40)
    elif kind == "fused_hidden_below":
        hidden = F_H_REFUSED_BELOW - 128 * r.randint(1, 2)
    elif kind == "fused_hidden_above":
        hidden = F_H_MAX + 256 * r.randint(1, 2)
    elif kind == "fused_gmm1_below":
        gmm1 = F_GMM1_MIN // 2
    elif kind == "fused_gmm1_above":
        gmm1 = F_GMM1_MAX + F_GMM1_ALIGN
    elif kind == "fused_gmm1_unaligned":
        gmm1 = F_GMM1_MIN + F_GMM1_ALIGN // 2
    elif kind == "fused_top_k_over":
        top_k = F_TOP_K_MAX + 1
        experts = cam.world * -(-(top_k + 1) // cam.world)
    elif kind == "fused_experts_over":
        experts = F_E_MAX + cam.world
    local, inter, dev = experts // cam.world, gmm1 // 2, cam.to_device
    ids = torch.stack([(torch.arange(bs) + k) % experts for k in range(top_k)], dim=1).to(torch.int32)
    args = (dev(torch.zeros((bs, hidden), dtype=torch.bfloat16)), dev(ids),
            [cam.nz(torch.zeros((local, hidden, gmm1), dtype=torch.int8))], [dev(torch.ones((local, gmm1)))],
            [cam.nz(torch.zeros((local, inter, hidden), dtype=torch.int8))],
            [dev(torch.ones((local, hidden), dtype=torch.bfloat16))], dev(torch.ones((bs, top_k))),
            None, None, None, None, None, None, None, cam.group_ep, cam.world, cam.rank, experts, 0, 0)
    with refused_for(INVALID_ENTRY[kind]) as refused:
        cam.ops.fused_deep_moe(*args)
        cam.sync()
    refusal(kind, refused.value)


@pytest.mark.parametrize("i", range(N), ids=lambda i: f"invalid{i}")
def test_prefill_fuzz_invalid(cam, i):
    r = random.Random(f"{SEED}-invalid-{i}")
    kind = invalid_kind(i)
    print(f"invalid{i}: {kind} (seed {SEED})")
    if kind in COMBINE_INVALID:
        _combine_invalid(cam, r, kind)
    elif kind in FUSED_INVALID:
        _fused_invalid(cam, r, kind)
    else:
        _prefill_invalid(cam, r, kind, i)
