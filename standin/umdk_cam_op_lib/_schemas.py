"""The upstream op schemas, verbatim from umdk `00cc16f1`
`src/cam/comm_operator/pybind/pybind.cpp` (`TORCH_LIBRARY(umdk_cam_op_lib, m)`).

At that commit these four are the only ops. The texts keep the upstream line breaks; `one_line()` gives
the form `torch.library` parses (and that `str(op._schema)` prints, minus the namespace).
"""

from __future__ import annotations

NAMESPACE = "umdk_cam_op_lib"

SCHEMAS: dict[str, str] = {
    "fused_deep_moe": """\
fused_deep_moe(Tensor x, Tensor expert_ids, Tensor[] gmm1_weight, Tensor[] gmm1_weight_scale,
               Tensor[] gmm2_weight, Tensor[] gmm2_weight_scale, Tensor expert_scales,
               Tensor? share_gmm1_weight, Tensor? share_gmm1_weight_scale,
               Tensor? share_gmm2_weight, Tensor? share_gmm2_weight_scale,
               Tensor? expert_smooth_scales, Tensor? share_smooth_scales, Tensor? x_active_mask,
               str group_ep, int ep_rank_size, int ep_rank_id, int moe_expert_num,
               int quant_mode, int global_bs) -> Tensor[]""",
    "get_dispatch_layout": """\
get_dispatch_layout(Tensor topk_idx, int num_experts, int num_ranks) -> (Tensor, Tensor)""",
    "moe_dispatch_prefill": """\
moe_dispatch_prefill(Tensor x, Tensor topk_idx, Tensor topk_weights, Tensor num_tokens_per_expert,
                     Tensor send_token_idx_small, str group_ep, int rank, int num_ranks, bool use_quant)
                     -> (Tensor, Tensor, Tensor, Tensor, Tensor)""",
    "moe_combine_prefill": """\
moe_combine_prefill(Tensor x, Tensor topk_idx, Tensor topk_weights, Tensor src_idx, Tensor send_head,
                    str group_ep, int rank, int num_ranks) -> Tensor""",
}

#: the aclnn API each op reaches first through EXEC_NPU_CMD (named in the "not in libopapi.so" error)
ACLNN_API: dict[str, str] = {
    "fused_deep_moe": "aclnnFusedDeepMoe",
    "get_dispatch_layout": "aclnnDispatchLayout",
    "moe_dispatch_prefill": "aclnnNotifyDispatch",   # then aclnnMoeDispatchNormal
    "moe_combine_prefill": "aclnnMoeCombineNormal",
}


def one_line(schema: str) -> str:
    """Collapse the upstream multi-line text into the single-line schema torch parses and prints."""
    return " ".join(schema.split()).replace("( ", "(").replace(" )", ")")
