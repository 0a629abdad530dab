"""`get_dispatch_layout` (cam-ops.md §3): per-expert counts and each copy's slot in its expert bucket.

Local computation only (no communication): `num_tokens_per_expert[e]` = number of (t, k) with
`topk_idx[t, k] == e` (int32, (E,)); `send_token_idx_small[t, k]` = number of earlier entries, in row-major
(t, k) order, with the same expert (int32, (T, K)).
"""

from __future__ import annotations

import torch

from ._assert import bind_assert
from ._opapi import require_opapi
from ._schemas import ACLNN_API

MAX_RANKS = 384


def check_expert_ids(ids: torch.Tensor, num_experts: int, name: str = "topk_idx") -> None:
    """Every id must lie in [0, E): the kernel uses it as an offset (no -1 handling)."""
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        bind_assert(lo >= 0 and hi < num_experts, f"0 <= {name} < num_experts",
                    f"{name} holds ids in [{lo}, {hi}], num_experts={num_experts}")


def layout(topk_idx: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two outputs for a checked, int64 (T, K) `topk_idx`."""
    flat = topk_idx.reshape(-1)
    counts = torch.bincount(flat, minlength=num_experts)
    order = torch.argsort(flat, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.empty_like(flat)
    slot[order] = torch.arange(flat.numel(), dtype=torch.int64) - starts[flat[order]]
    return counts.to(torch.int32), slot.view(topk_idx.shape).to(torch.int32)


def get_dispatch_layout(topk_idx: torch.Tensor, num_experts: int,
                        num_ranks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU kernel of `umdk_cam_op_lib::get_dispatch_layout`."""
    require_opapi(ACLNN_API["get_dispatch_layout"])
    idx = topk_idx.to(torch.int64)
    bind_assert(idx.dim() == 2, "topk_idx.dim() == 2", f"topk_idx has shape {tuple(idx.shape)}")
    bind_assert(idx.is_contiguous(), "topk_idx.is_contiguous()")
    bind_assert(num_experts > 0, "num_experts > 0", f"num_experts={num_experts}")
    bind_assert(1 <= num_ranks <= MAX_RANKS, f"1 <= num_ranks <= {MAX_RANKS}", f"num_ranks={num_ranks}")
    bind_assert(num_experts % num_ranks == 0, "num_experts % num_ranks == 0",
                f"num_experts={num_experts}, num_ranks={num_ranks}")
    check_expert_ids(idx, num_experts)
    return layout(idx, num_experts)
