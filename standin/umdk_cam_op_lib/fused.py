"""`fused_deep_moe` (cam-ops.md §6): dispatch + int8 grouped FFN (SwiGLU) + combine in one op.

Per token copy (t, k) with e = expert_ids[t, k]: optional smooth scale `expert_smooth_scales[e]`; dynamic
per-token int8 quantisation (scale sx); dispatch to the rank owning e; GMM1
`h = (q_x @ W1[e]).int32 · w1_scale[e][col] · sx` (width 2I); SwiGLU with the left half activated,
`a = silu(h[:, :I]) · h[:, I:]`, `silu(v) = v / (1 + exp(−v))`; re-quantisation (sa); GMM2
`y = (q_a @ W2[e]) · w2_scale[e][col] · sa` cast to x's dtype; combine
`output[t] = Σ_k expert_scales[t, k] · y(t, k)` (float32 accumulation, cast to x's dtype).

Weights are the ND arrays: coupled (each list holds one (L, …) tensor) or separated (L tensors). The
shared expert (all four `share_*` given) runs the same FFN on the local x into `share_output`, which is
zero-filled otherwise (uninitialised upstream), as are rows masked off by `x_active_mask`.
Outputs: [output (bs, H), share_output (bs, H), expert_token_nums (L,) int64 = copies per local expert].
Integer matmuls run in float64, which is exact for int8 operands at these sizes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._assert import bind_assert
from ._comm import check_rank, exchange_rows, resolve_group
from ._opapi import require_opapi
from ._schemas import ACLNN_API
from .layout import MAX_RANKS, check_expert_ids
from .quant import quantize_per_row

FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _stack(tensors: Sequence[torch.Tensor], local: int, dim: int, name: str) -> torch.Tensor:
    """Coupled [(L, …)] or separated L × [(…)] → one (L, …) tensor."""
    bind_assert(len(tensors) in (1, local), f"{name}.size() in (1, L)",
                f"{name} has {len(tensors)} tensors, L={local}")
    if len(tensors) == 1 and tensors[0].dim() == dim + 1:
        full = tensors[0]
    else:
        bind_assert(len(tensors) == local and all(t.dim() == dim for t in tensors),
                    f"separated {name}: L tensors of dim {dim}", f"{name}: {[tuple(t.shape) for t in tensors]}")
        full = torch.stack(list(tensors))
    bind_assert(full.size(0) == local, f"{name}.size(0) == L", f"{name} shape {tuple(full.shape)}, L={local}")
    return full


def _squeeze_one(t: torch.Tensor, dim: int) -> torch.Tensor:
    return t[0] if t.dim() == dim + 1 and t.size(0) == 1 else t


def ffn(qx: torch.Tensor, sx: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor, w2: torch.Tensor,
        s2: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """One expert on quantised rows: GMM1 → SwiGLU → re-quant → GMM2, cast to `out_dtype`."""
    h = (qx.to(torch.float64) @ w1.to(torch.float64)).to(torch.int32)
    h = h.to(torch.float32) * s1.to(torch.float32) * sx.unsqueeze(-1)
    inter = h.size(-1) // 2
    left = h[:, :inter]
    act = left / (1.0 + torch.exp(-left)) * h[:, inter:]
    qa, sa = quantize_per_row(act)
    y = (qa.to(torch.float64) @ w2.to(torch.float64)).to(torch.float32)
    return (y * s2.to(torch.float32) * sa.unsqueeze(-1)).to(out_dtype)


def fused_deep_moe(
    x: torch.Tensor, expert_ids: torch.Tensor, gmm1_weight: list[torch.Tensor],
    gmm1_weight_scale: list[torch.Tensor], gmm2_weight: list[torch.Tensor],
    gmm2_weight_scale: list[torch.Tensor], expert_scales: torch.Tensor,
    share_gmm1_weight: torch.Tensor | None, share_gmm1_weight_scale: torch.Tensor | None,
    share_gmm2_weight: torch.Tensor | None, share_gmm2_weight_scale: torch.Tensor | None,
    expert_smooth_scales: torch.Tensor | None, share_smooth_scales: torch.Tensor | None,
    x_active_mask: torch.Tensor | None, group_ep: str, ep_rank_size: int, ep_rank_id: int,
    moe_expert_num: int, quant_mode: int, global_bs: int,
) -> list[torch.Tensor]:
    """CPU kernel of `umdk_cam_op_lib::fused_deep_moe` (`quant_mode` is reserved and ignored)."""
    require_opapi(ACLNN_API["fused_deep_moe"])
    world = ep_rank_size
    bind_assert(1 <= world <= MAX_RANKS, f"1 <= ep_rank_size <= {MAX_RANKS}", f"ep_rank_size={world}")
    bind_assert(moe_expert_num > 0 and moe_expert_num % world == 0, "moe_expert_num % ep_rank_size == 0",
                f"moe_expert_num={moe_expert_num}, ep_rank_size={world}")
    local = moe_expert_num // world
    bind_assert(x.dim() == 2 and x.is_contiguous(), "x.dim() == 2 && x.is_contiguous()",
                f"x shape {tuple(x.shape)}")
    bind_assert(x.dtype in FLOAT_DTYPES, "x.dtype in (bf16, fp16, fp32)", f"got {x.dtype}")
    bs, hidden = x.shape
    bind_assert(expert_ids.dim() == 2 and expert_ids.size(0) == bs, "expert_ids.sizes() == (bs, top_k)",
                f"expert_ids shape {tuple(expert_ids.shape)}, bs={bs}")
    top_k = expert_ids.size(1)
    bind_assert(tuple(expert_scales.shape) == (bs, top_k), "expert_scales.sizes() == expert_ids.sizes()",
                f"{tuple(expert_scales.shape)} vs {(bs, top_k)}")
    bind_assert(global_bs >= 0 and global_bs % world == 0 and (global_bs == 0 or global_bs >= bs * world),
                "global_bs in {0, bs*ep_rank_size, max_bs*ep_rank_size}",
                f"global_bs={global_bs}, bs={bs}, ep_rank_size={world}")
    w1 = _stack(gmm1_weight, local, 2, "gmm1_weight")
    s1 = _stack(gmm1_weight_scale, local, 1, "gmm1_weight_scale")
    w2 = _stack(gmm2_weight, local, 2, "gmm2_weight")
    s2 = _stack(gmm2_weight_scale, local, 1, "gmm2_weight_scale")
    bind_assert(w1.size(1) == hidden and w1.size(2) % 2 == 0, "gmm1_weight (L, H, 2I)",
                f"gmm1_weight {tuple(w1.shape)}, H={hidden}")
    inter = w1.size(2) // 2
    bind_assert(tuple(w2.shape[1:]) == (inter, hidden), "gmm2_weight (L, I, H)",
                f"gmm2_weight {tuple(w2.shape)}, I={inter}, H={hidden}")
    bind_assert(tuple(s1.shape) == (local, 2 * inter) and tuple(s2.shape) == (local, hidden),
                "weight scales (L, 2I) and (L, H)", f"{tuple(s1.shape)}, {tuple(s2.shape)}")
    if expert_smooth_scales is not None:
        bind_assert(tuple(expert_smooth_scales.shape) == (moe_expert_num, hidden),
                    "expert_smooth_scales (E, H)", f"shape {tuple(expert_smooth_scales.shape)}")
    shared = [share_gmm1_weight, share_gmm1_weight_scale, share_gmm2_weight, share_gmm2_weight_scale]
    bind_assert(all(t is None for t in shared) or all(t is not None for t in shared),
                "share_* all given or all absent")
    if x_active_mask is not None:
        bind_assert(x_active_mask.dim() == 1 and x_active_mask.numel() == bs, "x_active_mask (bs,)",
                    f"shape {tuple(x_active_mask.shape)}")
    group = resolve_group(group_ep)
    check_rank(group, ep_rank_id, ep_rank_size, "ep_rank_id", "ep_rank_size")
    ids = expert_ids.to(torch.int64)
    check_expert_ids(ids, moe_expert_num, "expert_ids")

    # source side: smooth, quantise each copy, ship it to the owner of its expert
    active = torch.ones(bs, dtype=torch.bool) if x_active_mask is None else x_active_mask.to(torch.bool)
    tok = torch.arange(bs, dtype=torch.int64).repeat_interleave(top_k)
    kk = torch.arange(top_k, dtype=torch.int64).repeat(bs)
    keep = active[tok]
    tok, kk = tok[keep], kk[keep]
    exp = ids[tok, kk]
    rows = x.to(torch.float32)[tok]
    if expert_smooth_scales is not None:
        rows = rows * expert_smooth_scales.to(torch.float32)[exp]
    qx, sx = quantize_per_row(rows)
    meta = torch.stack([tok, kk, exp % local], dim=1)
    (r_meta, r_q, r_sx), r_src = exchange_rows([meta, qx, sx.view(-1, 1)], exp // local, group)

    # owner side: grouped FFN per local expert
    r_local = r_meta[:, 2]
    y = torch.zeros((r_meta.size(0), hidden), dtype=x.dtype)
    for lcl in range(local):
        sel = (r_local == lcl).nonzero().view(-1)
        if sel.numel():
            y[sel] = ffn(r_q[sel], r_sx[sel].view(-1), w1[lcl], s1[lcl], w2[lcl], s2[lcl], x.dtype)
    expert_token_nums = torch.bincount(r_local, minlength=local).to(torch.int64)

    # back to the sources; combine
    (b_meta, b_y), _ = exchange_rows([r_meta[:, :2].contiguous(), y], r_src, group)
    gathered = torch.zeros((bs * top_k, hidden), dtype=torch.float32)
    gathered[b_meta[:, 0] * top_k + b_meta[:, 1]] = b_y.to(torch.float32)
    weights = expert_scales.to(torch.float32).unsqueeze(-1)
    output = (gathered.view(bs, top_k, hidden) * weights).sum(dim=1)
    output[~active] = 0
    output = output.to(x.dtype)

    share_output = torch.zeros((bs, hidden), dtype=x.dtype)
    if (share_gmm1_weight is not None and share_gmm1_weight_scale is not None
            and share_gmm2_weight is not None and share_gmm2_weight_scale is not None):
        sw1 = _squeeze_one(share_gmm1_weight, 2)
        sw2 = _squeeze_one(share_gmm2_weight, 2)
        ss1 = share_gmm1_weight_scale.reshape(-1)
        ss2 = share_gmm2_weight_scale.reshape(-1)
        bind_assert(sw1.dim() == 2 and sw1.size(0) == hidden and sw1.size(1) % 2 == 0
                    and tuple(sw2.shape) == (sw1.size(1) // 2, hidden)
                    and ss1.numel() == sw1.size(1) and ss2.numel() == hidden,
                    "shared weights (H, 2I_s), (2I_s,), (I_s, H), (H,)",
                    f"{tuple(sw1.shape)}, {tuple(ss1.shape)}, {tuple(sw2.shape)}, {tuple(ss2.shape)}")
        srows = x.to(torch.float32)
        if share_smooth_scales is not None:
            srows = srows * share_smooth_scales.to(torch.float32).reshape(1, hidden)
        sq, ssx = quantize_per_row(srows)
        share_output = ffn(sq, ssx, sw1, ss1, sw2, ss2, x.dtype)
    return [output, share_output, expert_token_nums]


def fused_deep_moe_meta(
    x: torch.Tensor, expert_ids: torch.Tensor, gmm1_weight: list[torch.Tensor],
    gmm1_weight_scale: list[torch.Tensor], gmm2_weight: list[torch.Tensor],
    gmm2_weight_scale: list[torch.Tensor], expert_scales: torch.Tensor,
    share_gmm1_weight: torch.Tensor | None, share_gmm1_weight_scale: torch.Tensor | None,
    share_gmm2_weight: torch.Tensor | None, share_gmm2_weight_scale: torch.Tensor | None,
    expert_smooth_scales: torch.Tensor | None, share_smooth_scales: torch.Tensor | None,
    x_active_mask: torch.Tensor | None, group_ep: str, ep_rank_size: int, ep_rank_id: int,
    moe_expert_num: int, quant_mode: int, global_bs: int,
) -> list[torch.Tensor]:
    """Meta kernel (shapes only), as upstream has for fused_deep_moe alone."""
    local = moe_expert_num // max(ep_rank_size, 1)
    return [torch.empty_like(x), torch.empty_like(x),
            torch.empty((local,), dtype=torch.int64, device=x.device)]
