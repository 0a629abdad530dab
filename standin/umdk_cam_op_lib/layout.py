"""`get_dispatch_layout` (cam-ops.md §3): per-expert counts and each copy's slot in its expert bucket.

Local computation only (no communication): `num_tokens_per_expert[e]` = number of (t, k) with
`topk_idx[t, k] == e` (int32, (E,)); `send_token_idx_small[t, k]` = number of earlier entries, in row-major
(t, k) order, with the same expert (int32, (T, K)).

Checks, as upstream has them (umdk 00cc16f1):
- pybind `src/cam/comm_operator/pybind/get_dispatch_layout.cpp`: `topk_idx.dim() == 2`, contiguous,
  `num_experts > 0` (TORCH_BIND_ASSERT) — and no check of the ids' values;
- tiling `src/cam/comm_operator/ascend_kernels/dispatch_layout/op_host/dispatch_layout_tiling.cpp`:
  ranks in (0, 384], experts in (0, 512], experts % ranks == 0, top_k in (0, 16], tokens in (0, 8000]
  (EZ9999, see `_tiling`).
An id outside [0, E) is an out-of-bounds write of the kernel: no error at the call, a device fault on an
emulated Ascend host, undefined outputs (that copy is not counted, its slot is 0) on a CPU host.
"""

from __future__ import annotations

import torch

from ._assert import bind_assert
from ._device import require_npu
from ._opapi import require_opapi
from ._schemas import ACLNN_API
from ._tiling import device_fault, tiling_check

MAX_RANKS = 384
MAX_EXPERTS = 512
MAX_TOKENS = 8000
MAX_TOP_K = 16
_TILING = "dispatch_layout_tiling.cpp"


def valid_ids(ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Mask of the ids in [0, E); any other id is an out-of-bounds write of the kernel (see `fault_unless`)."""
    return (ids >= 0) & (ids < num_experts)


def fault_unless(ok: torch.Tensor) -> None:
    """After the op's work (the fault is asynchronous: the call itself completes): a device fault if any
    id was out of bounds (`_tiling.device_fault`)."""
    if not bool(ok.all()):
        device_fault()


def layout(topk_idx: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two outputs for an int64 (T, K) `topk_idx`; copies with ids outside [0, E) are left out."""
    flat = topk_idx.reshape(-1)
    ok = valid_ids(flat, num_experts)
    fault_unless(ok)
    good = flat[ok]
    counts = torch.bincount(good, minlength=num_experts)
    order = torch.argsort(good, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    slot_good = torch.empty_like(good)
    slot_good[order] = torch.arange(good.numel(), dtype=torch.int64) - starts[good[order]]
    slot = torch.zeros_like(flat)
    slot[ok] = slot_good
    return counts.to(torch.int32), slot.view(topk_idx.shape).to(torch.int32)


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
