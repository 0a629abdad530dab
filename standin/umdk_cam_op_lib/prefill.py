"""`moe_dispatch_prefill` and `moe_combine_prefill` (cam-ops.md §4, §5) over torch.distributed.

The arithmetic and the checks, as upstream has them: docs/internals/standin.md.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from . import _contract as contract
from . import _timing
from ._assert import bind_assert, standin_limit
from ._comm import all_to_all_counts, check_rank, exchange_rows, resolve_group
from ._device import require_npu
from ._hostile import corrupt, garbage
from ._opapi import require_opapi
from ._tiling import tiling_check
from .layout import valid_ids
from .quant import quantize_per_row

_LIM = contract.LIMITS
X_DTYPES = tuple(getattr(torch, name) for name in contract.PREFILL_X_DTYPES)
MIN_RANKS, MAX_RANKS = _LIM["dispatch.ranks"].lo or 0, _LIM["dispatch.ranks"].hi or 0
MAX_EXPERTS = _LIM["dispatch.experts"].hi or 0
MAX_TOKENS = _LIM["dispatch.tokens"].hi or 0    # BS_UPPER_BOUND
MAX_TOP_K = _LIM["dispatch.top_k"].hi or 0      # K_MAX
H_MIN, H_MAX = _LIM["dispatch.hidden"].lo or 0, _LIM["dispatch.hidden"].hi or 0
_DISPATCH_TILING = "moe_dispatch_normal_tiling.cpp"
_NOTIFY_TILING = "notify_dispatch_tiling.cpp"
_COMBINE_TILING = "moe_combine_normal_tiling.cpp"


def _window_mb() -> int:
    try:
        return contract.hccl_buffsize_mb(dict(os.environ))
    except ValueError:  # GetMaxWindowSize logs the parse error and keeps its default (mc2_tiling_utils.h:30-36)
        return contract.DEFAULT_HCCL_BUFFSIZE_MB


def _window_message(max_bs: int, hidden: int, top_k: int, demand: int, combine: bool) -> str:
    what = "combine" if combine else "dispatch"
    return (f"HCCL_BUFFSIZE is too SMALL, maxBs = {max_bs}, h = {hidden}, k = {top_k} ({what}), "
            f"NEEDED_HCCL_BUFFSIZE = {demand // contract.MB + 1}MB, HCCL_BUFFSIZE={_window_mb()}MB.")


def moe_dispatch_prefill(
    x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
    num_tokens_per_expert: torch.Tensor, send_token_idx_small: torch.Tensor,
    group_ep: str, rank: int, num_ranks: int, use_quant: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """CPU kernel of `umdk_cam_op_lib::moe_dispatch_prefill`; returns
    (recv_x, dynamic_scales_out, expand_idx_out, recv_count, recv_tokens_per_expert)."""
    start = time.perf_counter()  # the modelled time (lab knob, _timing.py) counts from here
    require_npu("moe_dispatch_prefill", locals())  # first: the op runs on the NPU only
    ntpe = num_tokens_per_expert
    # pybind moe_dispatch_prefill.cpp
    bind_assert(ntpe.dtype == torch.int32, "numTokensPerExpert.scalar_type() == at::kInt", f"got {ntpe.dtype}")
    bind_assert(MIN_RANKS <= num_ranks <= MAX_RANKS, "numRanks >= NUM_RANKS_MIN && numRanks <= NUM_RANKS_MAX",
                f"num_ranks={num_ranks}")
    bind_assert(x.dim() == 2 and x.is_contiguous(), "x.dim() == DIM_TWO and x.is_contiguous()",
                f"x shape {tuple(x.shape)}")
    bind_assert(ntpe.dim() == 1 and ntpe.is_contiguous(),
                "numTokensPerExpert.dim() == 1 and numTokensPerExpert.is_contiguous()", f"shape {tuple(ntpe.shape)}")
    bind_assert(ntpe.size(0) % num_ranks == 0, "numTokensPerExpert.size(0) % numRanks == 0",
                f"len(num_tokens_per_expert)={ntpe.numel()}, num_ranks={num_ranks}")
    num_experts = ntpe.numel()
    bind_assert(num_experts > 0, "numExperts > 0")
    bind_assert(topk_idx.dim() == 2 and topk_idx.is_contiguous(),
                "topkIdxInt32.dim() == DIM_TWO and topkIdxInt32.is_contiguous()", f"shape {tuple(topk_idx.shape)}")
    bind_assert(topk_weights.dim() == 2 and topk_weights.is_contiguous(),
                "topkWeights.dim() == DIM_TWO and topkWeights.is_contiguous()")
    tokens, hidden = x.shape
    top_k = topk_idx.size(1)
    bind_assert(tokens == topk_idx.size(0), "numTokens == topkIdxInt32.size(0)", f"{tokens} vs {topk_idx.size(0)}")
    bind_assert(send_token_idx_small.dim() == 2 and tokens == send_token_idx_small.size(0),
                "numTokens == sendTokenIdxSmall.size(0)", f"shape {tuple(send_token_idx_small.shape)}")
    bind_assert(top_k == topk_weights.size(1), "numTopk == topkWeights.size(1)")
    bind_assert(top_k == send_token_idx_small.size(1), "numTopk == sendTokenIdxSmall.size(1)")
    require_opapi("aclnnNotifyDispatch")
    require_opapi("aclnnMoeDispatchNormal")
    # tiling notify_dispatch_tiling.cpp: aclnnNotifyDispatch runs first (pybind moe_dispatch_prefill.cpp:103)
    tiling_check(tokens > 0, "aclnnNotifyDispatch", "NotifyDispatch", _NOTIFY_TILING,
                 f"numTokenPtr is invalid, only support > 0, but got numTokenPtr={tokens}.")
    # tiling moe_dispatch_normal_tiling.cpp
    api, node = "aclnnMoeDispatchNormal", "MoeDispatchNormal"
    tiling_check(num_experts <= MAX_EXPERTS, api, node, _DISPATCH_TILING,
                 f"moeExpertNum is invalid, only support (0, {MAX_EXPERTS}], but got moeExpertNum={num_experts}.")
    tiling_check(1 <= tokens <= MAX_TOKENS, api, node, _DISPATCH_TILING,
                 f"xDim0(BS) is invalid. Should be between [1, {MAX_TOKENS}], but got xDim0={tokens}.")
    tiling_check(H_MIN <= hidden <= H_MAX, api, node, _DISPATCH_TILING,
                 f"xShape dims1(H) should be in [{H_MIN}, {H_MAX}], but got {hidden}.")
    tiling_check(0 < top_k <= min(MAX_TOP_K, num_experts), api, node, _DISPATCH_TILING,
                 f"expertIdShape's dim1(k) should be in (0, min({MAX_TOP_K}, moeExpertNum={num_experts})], "
                 f"but got expertIdShape's dim1={top_k}.")
    tiling_check(x.dtype in X_DTYPES, api, node, _DISPATCH_TILING,
                 "x dataType is invalid, dataType should be bf16 or float16, but is .")
    group = resolve_group(group_ep)
    # NotifyDispatch learns maxBs (the most tokens of any rank); then the window check of the tiling
    max_bs = torch.tensor([tokens], dtype=torch.int64)
    dist.all_reduce(max_bs, op=dist.ReduceOp.MAX, group=group)
    demand = contract.dispatch_window(int(max_bs), top_k, hidden)
    tiling_check(contract.fits(demand, _window_mb()), api, node, _DISPATCH_TILING,
                 _window_message(int(max_bs), hidden, top_k, demand, combine=False))
    check_rank(group, rank, num_ranks)
    idx = topk_idx.to(torch.int64).reshape(-1)
    ok = valid_ids(idx, num_experts)
    actual = torch.bincount(idx[ok], minlength=num_experts)
    standin_limit(bool(torch.equal(actual, ntpe.to(torch.int64))),
                  "num_tokens_per_expert is not the per-expert count of topk_idx (use get_dispatch_layout)")

    world, local = num_ranks, num_experts // num_ranks
    # NotifyDispatch: block d of my counts (ntpe[d*L:(d+1)*L]) goes to rank d; cnt[l][s] after transpose
    cnt = all_to_all_counts(ntpe.view(world, local), group).t().contiguous()   # (L, R): [l][s]
    flat_cnt = cnt.reshape(-1)                                                 # index i = l*R + s
    recv_count = torch.cumsum(flat_cnt, 0)
    total = int(recv_count[-1])
    recv_tokens_per_expert = cnt.sum(dim=1).to(torch.int64)

    # MoeDispatchNormal: ship (l, t, k, slot) + the row, to the owner of each copy's expert
    copy_no = torch.arange(idx.numel(), dtype=torch.int64)[ok]                 # bad-id copies are lost
    meta = torch.stack([idx[ok] % local, copy_no // top_k, copy_no % top_k,
                        send_token_idx_small.to(torch.int64).reshape(-1)[ok]], dim=1)
    token_of_copy = copy_no // top_k
    if use_quant:
        q, dq = quantize_per_row(x)
        columns = [meta, q[token_of_copy], dq[token_of_copy].view(-1, 1)]
    else:
        columns = [meta, x[token_of_copy]]
    recv_from = cnt.sum(dim=0)                                                 # rows from each source
    got, src = exchange_rows(columns, idx[ok] // local, group, recv_counts=recv_from.tolist())

    rows = max(total, 1)
    # torch::empty (moe_dispatch_prefill.cpp:97-101): what the kernel does not write stays garbage
    recv_x = garbage((rows, x.size(1)), torch.int8 if use_quant else x.dtype, "dispatch.recv_x")
    scales = garbage((rows,), torch.float32, "dispatch.dynamic_scales_out")
    expand_idx = garbage((rows, 3), torch.int32, "dispatch.expand_idx_out")
    if total:
        r_meta = got[0]
        lcl, slot = r_meta[:, 0], r_meta[:, 3]
        group_no = lcl * world + src
        standin_limit(bool(((slot >= 0) & (slot < flat_cnt[group_no])).all()),
                      "send_token_idx_small is not the layout of topk_idx (use get_dispatch_layout)")
        pos = recv_count[group_no] - flat_cnt[group_no] + slot
        recv_x[pos] = got[1]
        if use_quant:
            scales[pos] = got[2].view(-1)
        expand_idx[pos] = torch.stack([src, r_meta[:, 1], r_meta[:, 2]], dim=1).to(torch.int32)
    if not bool(ok.all()):  # an id outside [0, E): a stray write, no fault
        corrupt(recv_x, "dispatch.bad_id")
    _timing.pace("moe_dispatch_prefill", start,
                 _timing.row_bytes(tokens, top_k, hidden, 1 if use_quant else x.element_size()), rank)
    return (recv_x, scales, expand_idx.view(-1), recv_count.to(torch.int32), recv_tokens_per_expert)


def moe_combine_prefill(
    x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor, src_idx: torch.Tensor,
    send_head: torch.Tensor, group_ep: str, rank: int, num_ranks: int,
) -> torch.Tensor:
    """CPU kernel of `umdk_cam_op_lib::moe_combine_prefill`; returns combined_x (T, H), dtype of x."""
    start = time.perf_counter()  # the modelled time (lab knob, _timing.py) counts from here
    require_npu("moe_combine_prefill", locals())  # first: the op runs on the NPU only
    # pybind moe_combine_prefill.cpp
    bind_assert(x.dim() == 2 and x.is_contiguous(), "x.dim() == DIM_TWO and x.is_contiguous()",
                f"x shape {tuple(x.shape)}")
    # the tiling's dim checks (moe_combine_normal_tiling.cpp:196-242); their texts are the tiling's
    api, node = "aclnnMoeCombineNormal", "MoeCombineNormal"
    tiling_check(topk_weights.dim() == 2, api, node, _COMBINE_TILING,
                 f"topkWeights must be 2-dimension, but got {topk_weights.dim()} dim")
    tiling_check(src_idx.dim() == 1, api, node, _COMBINE_TILING,
                 f"tokenSrcInfoForCombine must be 1-dimension, but got {src_idx.dim()} dim")
    standin_limit(topk_idx.dim() == 2 and send_head.dim() == 1 and send_head.numel() > 0,
                  "topk_idx 2-D and send_head 1-D, not empty")
    require_opapi("aclnnMoeCombineNormal")
    # tiling moe_combine_normal_tiling.cpp
    tiling_check(MIN_RANKS <= num_ranks <= MAX_RANKS, api, node, _COMBINE_TILING,
                 f"epWorldSize is invalid, only support [{MIN_RANKS}, {MAX_RANKS}], but got epWorldSize={num_ranks}.")
    tiling_check(x.dtype in X_DTYPES, api, node, _COMBINE_TILING,
                 "recvX dataType is invalid, dataType should be bf16 or float16, but is ")
    tiling_check(H_MIN <= x.size(1) <= H_MAX, api, node, _COMBINE_TILING,
                 f"recvX's dim1(H) should be in [{H_MIN}, {H_MAX}], but got {x.size(1)}.")
    tiling_check(1 <= topk_weights.size(0) <= MAX_TOKENS, api, node, _COMBINE_TILING,
                 f"Invalid topkWeights dims0(BS) {topk_weights.size(0)}. Should be between [1, {MAX_TOKENS}].")
    experts = send_head.numel()   # moeExpertNumber = sendHead.size(0) (moe_combine_prefill.cpp:50)
    tiling_check(0 < topk_weights.size(1) <= min(MAX_TOP_K, experts), api, node, _COMBINE_TILING,
                 f"topkWeights's dim1(K) should be in (0, min({MAX_TOP_K}, moeExpertNum {experts})], "
                 f"but got topkWeights's dim1={topk_weights.size(1)}.")
    tokens, top_k = topk_weights.shape
    demand = contract.combine_window(tokens, top_k, x.size(1))
    tiling_check(contract.fits(demand, _window_mb()), api, node, _COMBINE_TILING,
                 _window_message(tokens, x.size(1), top_k, demand, combine=True))
    standin_limit(send_head.numel() % num_ranks == 0, "len(send_head) is not a multiple of num_ranks")
    group = resolve_group(group_ep)
    check_rank(group, rank, num_ranks)
    total = int(send_head[-1])
    standin_limit(x.size(0) >= total and src_idx.numel() >= 3 * total,
                  f"x has {x.size(0)} rows and src_idx {src_idx.numel()} entries, send_head says {total} rows")

    triples = src_idx[:3 * total].to(torch.int64).view(total, 3)
    dest = triples[:, 0]
    standin_limit(bool(((dest >= 0) & (dest < num_ranks)).all()), "src_idx names a rank outside the group")
    got, _ = exchange_rows([triples[:, 1:].contiguous(), x[:total]], dest, group)
    tk, rows = got
    tok, slot = tk[:, 0], tk[:, 1]
    standin_limit(bool(((tok >= 0) & (tok < tokens) & (slot >= 0) & (slot < top_k)).all()),
                  "a returned row names a token slot outside topk_weights")
    gathered = torch.zeros((tokens * top_k, x.size(1)), dtype=torch.float32)
    gathered[tok * top_k + slot] = rows.to(torch.float32)
    weights = topk_weights.to(torch.float32).unsqueeze(-1)
    out = (gathered.view(tokens, top_k, -1) * weights).sum(dim=1)
    _timing.pace("moe_combine_prefill", start, _timing.row_bytes(tokens, top_k, x.size(1), x.element_size()), rank)
    return out.to(x.dtype)
