"""Clean-room CPU implementation of UMDK's ``umdk_cam_op_lib`` operators.

Importing the package registers the ``torch.ops.umdk_cam_op_lib`` library with
the schemas of upstream's pybind.cpp (TORCH_LIBRARY block) and exposes the same
four functions as module attributes (upstream's PYBIND11_MODULE m.def entries,
positional arguments only).
"""
import torch

from . import _fused, _prefill

__all__ = ["fused_deep_moe", "get_dispatch_layout", "moe_dispatch_prefill", "moe_combine_prefill"]

_SCHEMAS = {
    "fused_deep_moe": (
        "fused_deep_moe(Tensor x, Tensor expert_ids, Tensor[] gmm1_weight, Tensor[] gmm1_weight_scale, "
        "Tensor[] gmm2_weight, Tensor[] gmm2_weight_scale, Tensor expert_scales, "
        "Tensor? share_gmm1_weight, Tensor? share_gmm1_weight_scale, "
        "Tensor? share_gmm2_weight, Tensor? share_gmm2_weight_scale, "
        "Tensor? expert_smooth_scales, Tensor? share_smooth_scales, Tensor? x_active_mask, "
        "str group_ep, int ep_rank_size, int ep_rank_id, int moe_expert_num, "
        "int quant_mode, int global_bs) -> Tensor[]"),
    "get_dispatch_layout": "get_dispatch_layout(Tensor topk_idx, int num_experts, int num_ranks) -> (Tensor, Tensor)",
    "moe_dispatch_prefill": (
        "moe_dispatch_prefill(Tensor x, Tensor topk_idx, Tensor topk_weights, Tensor num_tokens_per_expert, "
        "Tensor send_token_idx_small, str group_ep, int rank, int num_ranks, bool use_quant) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor)"),
    "moe_combine_prefill": (
        "moe_combine_prefill(Tensor x, Tensor topk_idx, Tensor topk_weights, Tensor src_idx, Tensor send_head, "
        "str group_ep, int rank, int num_ranks) -> Tensor"),
}

_IMPLS = {
    "fused_deep_moe": _fused.fused_deep_moe,
    "get_dispatch_layout": _prefill.get_dispatch_layout,
    "moe_dispatch_prefill": _prefill.moe_dispatch_prefill,
    "moe_combine_prefill": _prefill.moe_combine_prefill,
}


def _fused_meta(x, expert_ids, gmm1_weight, gmm1_weight_scale, gmm2_weight, gmm2_weight_scale, expert_scales,
                share_gmm1_weight, share_gmm1_weight_scale, share_gmm2_weight, share_gmm2_weight_scale,
                expert_smooth_scales, share_smooth_scales, x_active_mask, group_ep, ep_rank_size, ep_rank_id,
                moe_expert_num, quant_mode, global_bs):
    # upstream registers a Meta kernel for fused_deep_moe only (FusedDeepMoeImplMeta)
    bs, h = x.shape[0], x.shape[1]
    local = _fused._c_div(moe_expert_num, ep_rank_size)
    return [torch.empty((bs, h), dtype=x.dtype, device="meta"),
            torch.empty((bs, h), dtype=x.dtype, device="meta"),
            torch.empty((local,), dtype=torch.int64, device="meta")]


def _register():
    ns = getattr(torch.ops, "umdk_cam_op_lib", None)
    try:
        if ns is not None and hasattr(ns, "get_dispatch_layout"):
            return None   # already registered in this process
    except Exception:
        pass
    lib = torch.library.Library("umdk_cam_op_lib", "DEF")
    for name, schema in _SCHEMAS.items():
        lib.define(schema)
    impl_lib = torch.library.Library("umdk_cam_op_lib", "IMPL")
    for name, fn in _IMPLS.items():
        for key in ("CPU", "PrivateUse1"):
            try:
                impl_lib.impl(name, fn, key)
            except Exception:
                pass
    impl_lib.impl("fused_deep_moe", _fused_meta, "Meta")
    return lib, impl_lib


_LIBS = _register()


def fused_deep_moe(x, expert_ids, gmm1_weight, gmm1_weight_scale, gmm2_weight, gmm2_weight_scale, expert_scales,
                   share_gmm1_weight, share_gmm1_weight_scale, share_gmm2_weight, share_gmm2_weight_scale,
                   expert_smooth_scales, share_smooth_scales, x_active_mask, group_ep, ep_rank_size, ep_rank_id,
                   moe_expert_num, quant_mode, global_bs, /):
    return torch.ops.umdk_cam_op_lib.fused_deep_moe(
        x, expert_ids, gmm1_weight, gmm1_weight_scale, gmm2_weight, gmm2_weight_scale, expert_scales,
        share_gmm1_weight, share_gmm1_weight_scale, share_gmm2_weight, share_gmm2_weight_scale,
        expert_smooth_scales, share_smooth_scales, x_active_mask, group_ep, ep_rank_size, ep_rank_id,
        moe_expert_num, quant_mode, global_bs)


def get_dispatch_layout(topk_idx, num_experts, num_ranks, /):
    return tuple(torch.ops.umdk_cam_op_lib.get_dispatch_layout(topk_idx, num_experts, num_ranks))


def moe_dispatch_prefill(x, topk_idx, topk_weights, num_tokens_per_expert, send_token_idx_small, group_ep, rank,
                         num_ranks, use_quant, /):
    return tuple(torch.ops.umdk_cam_op_lib.moe_dispatch_prefill(
        x, topk_idx, topk_weights, num_tokens_per_expert, send_token_idx_small, group_ep, rank, num_ranks,
        use_quant))


def moe_combine_prefill(x, topk_idx, topk_weights, src_idx, send_head, group_ep, rank, num_ranks, /):
    return torch.ops.umdk_cam_op_lib.moe_combine_prefill(x, topk_idx, topk_weights, src_idx, send_head, group_ep,
                                                         rank, num_ranks)
