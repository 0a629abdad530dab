"""`moe_dispatch_prefill` and `moe_combine_prefill` (cam-ops.md §4, §5) over torch.distributed.

Notation: R ranks, T tokens, K = top_k, H hidden, E experts, L = E / R local experts; expert e lives on
rank e // L as local expert e % L.

Dispatch:
1. NotifyDispatch, an all-to-all of counts: `cnt[d][l][s] = ntpe_s[d*L + l]`. On destination d the groups
   are ordered by `i = l*R + s`; `recv_count_d` is the inclusive prefix sum of `cnt[d]` over i,
   `R_d = Σ cnt[d]`, `recv_tokens_per_expert_d[l] = Σ_s cnt[d][l][s]` (int64).
2. MoeDispatchNormal: copy (s, t, k) of local expert l lands on d at row
   `recv_count_d[l*R+s] − cnt[d][l][s] + send_token_idx_small_s[t, k]`, with triple (s, t, k) (k is the
   top-k slot, as the kernel computes it) and, with `use_quant`, quantised per row (see `quant`).
   max(R_d, 1) rows are allocated; a spare row is zero-filled (undefined upstream).

Combine: each received row goes back to slot t·K + k of its source, which computes
`out[t] = Σ_k topk_weights[t, k] · row(t, k)` accumulating in float32, cast to x's dtype.
"""

from __future__ import annotations

import torch

from ._assert import bind_assert
from ._comm import all_to_all_counts, check_rank, exchange_rows, resolve_group
from ._opapi import require_opapi
from ._schemas import ACLNN_API
from .layout import MAX_RANKS, check_expert_ids
from .quant import quantize_per_row

FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


MAX_TOKENS = 8192
MAX_TOP_K = 16


def _check_2d(t: torch.Tensor, name: str) -> None:
    bind_assert(t.dim() == 2, f"{name}.dim() == 2", f"{name} has shape {tuple(t.shape)}")
    bind_assert(t.is_contiguous(), f"{name}.is_contiguous()")


def _check_ranks(num_ranks: int) -> None:
    bind_assert(2 <= num_ranks <= MAX_RANKS, f"2 <= num_ranks <= {MAX_RANKS}", f"num_ranks={num_ranks}")


def moe_dispatch_prefill(
    x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
    num_tokens_per_expert: torch.Tensor, send_token_idx_small: torch.Tensor,
    group_ep: str, rank: int, num_ranks: int, use_quant: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """CPU kernel of `umdk_cam_op_lib::moe_dispatch_prefill`; returns
    (recv_x, dynamic_scales_out, expand_idx_out, recv_count, recv_tokens_per_expert)."""
    require_opapi(ACLNN_API["moe_dispatch_prefill"])
    ntpe = num_tokens_per_expert
    bind_assert(ntpe.dtype == torch.int32, "num_tokens_per_expert.dtype == int32", f"got {ntpe.dtype}")
    bind_assert(ntpe.dim() == 1, "num_tokens_per_expert.dim() == 1", f"shape {tuple(ntpe.shape)}")
    bind_assert(ntpe.is_contiguous(), "num_tokens_per_expert.is_contiguous()")
    _check_ranks(num_ranks)
    num_experts = ntpe.numel()
    bind_assert(num_experts > 0 and num_experts % num_ranks == 0, "num_experts % num_ranks == 0",
                f"len(num_tokens_per_expert)={num_experts}, num_ranks={num_ranks}")
    _check_2d(x, "x")
    bind_assert(x.dtype in FLOAT_DTYPES, "x.dtype in (bf16, fp16, fp32)", f"got {x.dtype}")
    _check_2d(topk_idx, "topk_idx")
    _check_2d(topk_weights, "topk_weights")
    tokens, top_k = topk_idx.shape
    # documented limits (CAM API Guide, cam-ops.md §8): batch [1, 8K], top_k (0, 16]
    bind_assert(1 <= tokens <= MAX_TOKENS, f"1 <= batch size <= {MAX_TOKENS}", f"batch size {tokens}")
    bind_assert(0 < top_k <= MAX_TOP_K, f"0 < top_k <= {MAX_TOP_K}", f"top_k {top_k}")
    bind_assert(x.size(0) == tokens, "x.size(0) == topk_idx.size(0)", f"{x.size(0)} vs {tokens}")
    bind_assert(tuple(topk_weights.shape) == (tokens, top_k), "topk_weights.sizes() == topk_idx.sizes()")
    bind_assert(tuple(send_token_idx_small.shape) == (tokens, top_k),
                "send_token_idx_small.sizes() == topk_idx.sizes()",
                f"{tuple(send_token_idx_small.shape)} vs {(tokens, top_k)}")
    group = resolve_group(group_ep)
    check_rank(group, rank, num_ranks)
    idx = topk_idx.to(torch.int64).reshape(-1)
    check_expert_ids(idx, num_experts)
    actual = torch.bincount(idx, minlength=num_experts)
    bind_assert(bool(torch.equal(actual, ntpe.to(torch.int64))),
                "num_tokens_per_expert matches topk_idx",
                "num_tokens_per_expert is not the per-expert count of topk_idx (use get_dispatch_layout)")

    world, local = num_ranks, num_experts // num_ranks
    # NotifyDispatch: block d of my counts (ntpe[d*L:(d+1)*L]) goes to rank d; cnt[l][s] after transpose
    cnt = all_to_all_counts(ntpe.view(world, local), group).t().contiguous()   # (L, R): [l][s]
    flat_cnt = cnt.reshape(-1)                                                 # index i = l*R + s
    recv_count = torch.cumsum(flat_cnt, 0)
    total = int(recv_count[-1])
    recv_tokens_per_expert = cnt.sum(dim=1).to(torch.int64)

    # MoeDispatchNormal: ship (l, t, k, slot) + the row, to the owner of each copy's expert
    n = idx.numel()
    copy_no = torch.arange(n, dtype=torch.int64)
    meta = torch.stack([idx % local, copy_no // top_k, copy_no % top_k,
                        send_token_idx_small.to(torch.int64).reshape(-1)], dim=1)
    token_of_copy = copy_no // top_k
    if use_quant:
        q, dq = quantize_per_row(x)
        columns = [meta, q[token_of_copy], dq[token_of_copy].view(-1, 1)]
    else:
        columns = [meta, x[token_of_copy]]
    recv_from = cnt.sum(dim=0)                                                 # rows from each source
    got, src = exchange_rows(columns, idx // local, group, recv_counts=recv_from.tolist())

    rows = max(total, 1)
    recv_x = torch.zeros((rows, x.size(1)), dtype=torch.int8 if use_quant else x.dtype)
    scales = torch.zeros(rows, dtype=torch.float32)
    expand_idx = torch.zeros((rows, 3), dtype=torch.int32)
    if total:
        r_meta = got[0]
        lcl, slot = r_meta[:, 0], r_meta[:, 3]
        group_no = lcl * world + src
        bind_assert(bool(((slot >= 0) & (slot < flat_cnt[group_no])).all()),
                    "0 <= send_token_idx_small < num_tokens_per_expert",
                    "send_token_idx_small is not the layout of topk_idx (use get_dispatch_layout)")
        pos = recv_count[group_no] - flat_cnt[group_no] + slot
        recv_x[pos] = got[1]
        if use_quant:
            scales[pos] = got[2].view(-1)
        expand_idx[pos] = torch.stack([src, r_meta[:, 1], r_meta[:, 2]], dim=1).to(torch.int32)
    return (recv_x, scales, expand_idx.view(-1), recv_count.to(torch.int32), recv_tokens_per_expert)


def moe_combine_prefill(
    x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor, src_idx: torch.Tensor,
    send_head: torch.Tensor, group_ep: str, rank: int, num_ranks: int,
) -> torch.Tensor:
    """CPU kernel of `umdk_cam_op_lib::moe_combine_prefill`; returns combined_x (T, H), dtype of x."""
    require_opapi(ACLNN_API["moe_combine_prefill"])
    _check_ranks(num_ranks)
    _check_2d(x, "x")
    bind_assert(x.dtype in FLOAT_DTYPES, "x.dtype in (bf16, fp16, fp32)", f"got {x.dtype}")
    _check_2d(topk_weights, "topk_weights")
    bind_assert(topk_idx.dim() == 2, "topk_idx.dim() == 2", f"shape {tuple(topk_idx.shape)}")
    bind_assert(src_idx.dim() == 1, "src_idx.dim() == 1", f"shape {tuple(src_idx.shape)}")
    bind_assert(send_head.dim() == 1 and send_head.numel() > 0, "send_head.dim() == 1",
                f"shape {tuple(send_head.shape)}")
    bind_assert(send_head.numel() % num_ranks == 0, "send_head.size(0) % num_ranks == 0",
                f"len(send_head)={send_head.numel()}, num_ranks={num_ranks}")
    group = resolve_group(group_ep)
    check_rank(group, rank, num_ranks)
    total = int(send_head[-1])
    bind_assert(x.size(0) >= total, "x.size(0) >= recv rows", f"x has {x.size(0)} rows, send_head says {total}")
    bind_assert(src_idx.numel() >= 3 * total, "src_idx.size(0) >= 3 * recv rows",
                f"src_idx has {src_idx.numel()} entries, {3 * total} needed")
    tokens, top_k = topk_weights.shape

    triples = src_idx[:3 * total].to(torch.int64).view(total, 3)
    dest = triples[:, 0]
    bind_assert(bool(((dest >= 0) & (dest < num_ranks)).all()), "0 <= src_rank < num_ranks",
                "src_idx names a rank outside the group")
    got, _ = exchange_rows([triples[:, 1:].contiguous(), x[:total]], dest, group)
    tk, rows = got
    tok, slot = tk[:, 0], tk[:, 1]
    bind_assert(bool(((tok >= 0) & (tok < tokens) & (slot >= 0) & (slot < top_k)).all()),
                "0 <= token < bs && 0 <= k < top_k", "a returned row names a token slot outside topk_weights")
    gathered = torch.zeros((tokens * top_k, x.size(1)), dtype=torch.float32)
    gathered[tok * top_k + slot] = rows.to(torch.float32)
    weights = topk_weights.to(torch.float32).unsqueeze(-1)
    out = (gathered.view(tokens, top_k, -1) * weights).sum(dim=1)
    return out.to(x.dtype)
