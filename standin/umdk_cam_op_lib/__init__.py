"""CPU stand-in for UMDK CAM's `umdk_cam_op_lib` (MoE dispatch/combine operators), for the camit lab.

Importing registers the four ops with the upstream schemas (umdk `00cc16f1`) and CPU kernels over
torch.distributed (gloo). Design: docs/internals/standin.md.
"""

from __future__ import annotations

try:
    import torch
except ImportError as exc:  # torch is deliberately not a declared dependency (see pyproject.toml)
    raise ImportError(
        "umdk_cam_op_lib (camit CPU stand-in) needs torch; install the CPU build first, e.g. "
        "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    ) from exc

from ._comm import group_name, resolve_group
from ._register import register as _register
from ._schemas import SCHEMAS

_register()

__all__ = [
    "SCHEMAS", "group_name", "resolve_group",
    "fused_deep_moe", "get_dispatch_layout", "moe_dispatch_prefill", "moe_combine_prefill",
]

_ops = torch.ops.umdk_cam_op_lib


def get_dispatch_layout(topk_idx: torch.Tensor, num_experts: int,
                        num_ranks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """→ (num_tokens_per_expert (E,) int32, send_token_idx_small (T, K) int32)."""
    return _ops.get_dispatch_layout(topk_idx, num_experts, num_ranks)


def moe_dispatch_prefill(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                         num_tokens_per_expert: torch.Tensor, send_token_idx_small: torch.Tensor,
                         group_ep: str, rank: int, num_ranks: int, use_quant: bool
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """→ (recv_x, dynamic_scales_out, expand_idx_out, recv_count, recv_tokens_per_expert)."""
    return _ops.moe_dispatch_prefill(x, topk_idx, topk_weights, num_tokens_per_expert,
                                     send_token_idx_small, group_ep, rank, num_ranks, use_quant)


def moe_combine_prefill(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                        src_idx: torch.Tensor, send_head: torch.Tensor, group_ep: str, rank: int,
                        num_ranks: int) -> torch.Tensor:
    """→ combined_x (topk_weights.size(0), H), dtype of x."""
    return _ops.moe_combine_prefill(x, topk_idx, topk_weights, src_idx, send_head, group_ep, rank,
                                    num_ranks)


def fused_deep_moe(x: torch.Tensor, expert_ids: torch.Tensor, gmm1_weight: list[torch.Tensor],
                   gmm1_weight_scale: list[torch.Tensor], gmm2_weight: list[torch.Tensor],
                   gmm2_weight_scale: list[torch.Tensor], expert_scales: torch.Tensor,
                   share_gmm1_weight: torch.Tensor | None, share_gmm1_weight_scale: torch.Tensor | None,
                   share_gmm2_weight: torch.Tensor | None, share_gmm2_weight_scale: torch.Tensor | None,
                   expert_smooth_scales: torch.Tensor | None, share_smooth_scales: torch.Tensor | None,
                   x_active_mask: torch.Tensor | None, group_ep: str, ep_rank_size: int,
                   ep_rank_id: int, moe_expert_num: int, quant_mode: int, global_bs: int
                   ) -> list[torch.Tensor]:
    """→ [output (bs, H), share_output (bs, H), expert_token_nums (L,) int64]."""
    return _ops.fused_deep_moe(x, expert_ids, gmm1_weight, gmm1_weight_scale, gmm2_weight,
                               gmm2_weight_scale, expert_scales, share_gmm1_weight,
                               share_gmm1_weight_scale, share_gmm2_weight, share_gmm2_weight_scale,
                               expert_smooth_scales, share_smooth_scales, x_active_mask, group_ep,
                               ep_rank_size, ep_rank_id, moe_expert_num, quant_mode, global_bs)
