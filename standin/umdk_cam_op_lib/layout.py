"""`get_dispatch_layout` (cam-ops.md §3): per-expert counts and each copy's slot in its expert
bucket.

The checks, as upstream has them: docs/internals/standin.md.
"""

from __future__ import annotations

import torch

from ._assert import bind_assert
from ._contract import LIMITS
from ._device import require_npu
from ._hostile import corrupt
from ._opapi import require_opapi
from ._schemas import ACLNN_API
from ._tiling import tiling_check

MAX_RANKS = LIMITS["layout.ranks"].hi or 0
MAX_EXPERTS = LIMITS["layout.experts"].hi or 0
MAX_TOKENS = LIMITS["layout.tokens"].hi or 0
MAX_TOP_K = LIMITS["layout.top_k"].hi or 0
_TILING = "dispatch_layout_tiling.cpp"


def valid_ids(ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Mask of the ids in [0, E); any other id is a stray write of the kernel (see `corrupt_unless`)."""
    return (ids >= 0) & (ids < num_experts)


def corrupt_unless(ok: torch.Tensor, outputs: list[torch.Tensor], tag: str) -> None:
    """Any id out of range: a silent stray write into one of `outputs` (no error, no fault)."""
    if not bool(ok.all()):
        for i, out in enumerate(outputs):
            corrupt(out, f"{tag}:{i}")


def layout(topk_idx: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two outputs for an int64 (T, K) `topk_idx`; copies with ids outside [0, E) are left out."""
    flat = topk_idx.reshape(-1)
    ok = valid_ids(flat, num_experts)
    good = flat[ok]
    counts = torch.bincount(good, minlength=num_experts)
    order = torch.argsort(good, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    slot_good = torch.empty_like(good)
    slot_good[order] = torch.arange(good.numel(), dtype=torch.int64) - starts[good[order]]
    slot = torch.zeros_like(flat)
    slot[ok] = slot_good
    counts32, slots32 = counts.to(torch.int32), slot.view(topk_idx.shape).to(torch.int32)
    corrupt_unless(ok, [counts32, slots32], "get_dispatch_layout")
    return counts32, slots32


def get_dispatch_layout(topk_idx: torch.Tensor, num_experts: int,
                        num_ranks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU kernel of `umdk_cam_op_lib::get_dispatch_layout`."""
    require_npu("get_dispatch_layout", locals())  # first: the op runs on the NPU only
    idx = topk_idx.to(torch.int64)
    # pybind get_dispatch_layout.cpp
    bind_assert(idx.dim() == 2, "topkIdxInt64.dim() == DIM_TWO", f"topk_idx has shape {tuple(idx.shape)}")
    bind_assert(idx.is_contiguous(), "topkIdxInt64.is_contiguous()")
    bind_assert(num_experts > 0, "numExperts > 0", f"num_experts={num_experts}")
    api = ACLNN_API["get_dispatch_layout"]
    require_opapi(api)
    # tiling dispatch_layout_tiling.cpp
    node = "DispatchLayout"
    tiling_check(0 < num_ranks <= MAX_RANKS, api, node, _TILING,
                 f"rankSize is invalid, only support (0, {MAX_RANKS}], but got rankSize={num_ranks}.")
    tiling_check(num_experts <= MAX_EXPERTS, api, node, _TILING,
                 f"numExperts is invalid, only support (0, {MAX_EXPERTS}], but got numExperts={num_experts}.")
    tiling_check(num_experts % num_ranks == 0, api, node, _TILING,
                 f"numExperts ({num_experts}) not divisible by numRanks ({num_ranks}).")
    tokens, top_k = idx.shape
    tiling_check(0 < top_k <= MAX_TOP_K, api, node, _TILING,
                 f"numTopkPtr is invalid, only support (0, {MAX_TOP_K}], but got numTopk={top_k}.")
    tiling_check(0 < tokens <= MAX_TOKENS, api, node, _TILING,
                 f"tokenNum is invalid, only support (0, {MAX_TOKENS}], but got tokenNum={tokens}.")
    return layout(idx, num_experts)
