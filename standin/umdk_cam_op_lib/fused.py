"""`fused_deep_moe` (cam-ops.md §6): dispatch + int8 grouped FFN (SwiGLU) + combine in one op.

Per token copy (t, k) with e = expert_ids[t, k]: optional smooth scale `expert_smooth_scales[e]`; dynamic
per-token int8 quantisation (scale sx); dispatch to the rank owning e; GMM1
`h = (q_x @ W1[e]).int32 · w1_scale[e][col] · sx` (width 2I); SwiGLU with the left half activated,
`a = silu(h[:, :I]) · h[:, I:]`, `silu(v) = v / (1 + exp(−v))`; re-quantisation (sa); GMM2
`y = (q_a @ W2[e]) · w2_scale[e][col] · sa` cast to x's dtype; combine
`output[t] = Σ_k expert_scales[t, k] · y(t, k)` (float32 accumulation, cast to x's dtype).

Weights are the ND arrays: coupled (each list holds one (L, …) tensor) or separated (L tensors). The
shared expert (all four `share_*` given) runs the same FFN on the local x into `share_output`, which is
zero-filled otherwise (uninitialised upstream); output rows past the active count are NaN (undefined).
Outputs: [output (bs, H), share_output (bs, H), expert_token_nums (L,) int64 = copies per local expert].
Integer matmuls run in float64, which is exact for int8 operands at these sizes.

Strict and lax as upstream (umdk 00cc16f1):
- formats (op definition `ascend_kernels/fused_deep_moe/op_host/fused_deep_moe.cpp`, the `Input(...)` blocks):
  gmm1/gmm2 weights and the shared-expert weights are FRACTAL_NZ. When torch_npu is imported, every such
  tensor must be tagged NZ (`torch_npu.get_npu_format(t) == Format.FRACTAL_NZ`), else the aclnn call fails
  (EZ9999); without torch_npu (CPU host) formats are not known and not checked. The data is read in ND order.
- `x_active_mask` is a count (`TokenActiveMaskCal`: Sum → activeMaskBsCnt, in
  `op_kernel/.../grouped_matmul_slice_m_per_token_dequant_swiglu_quant_multistage_workspace.h`): the first
  sum(mask) tokens are processed, whatever the mask's pattern; the other output rows are undefined (NaN here).
- tiling `op_host/fused_deep_moe_tiling.cpp`: bs <= 256, H in [512, 7168], gmm1 width 2I in [1024, 6144]
  and divisible by 1024 (also the shared expert's), top_k <= 12 and <= E, E in (0, 512], E % ranks == 0,
  ep_rank_id in [0, ranks), global_bs (0 = bs·ranks) divisible by ranks, and the HCCL_BUFFSIZE window
  (default 200 MB) >= L·global_bs·H·2·2 bytes; failures are EZ9999 (`_tiling`).
- no check of the expert ids' values: an id outside [0, E) is a device fault (`layout.valid_ids`), the copy lost.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from ._assert import bind_assert
from ._comm import check_rank, exchange_rows, resolve_group
from ._device import require_npu
from ._opapi import require_opapi
from ._schemas import ACLNN_API
from ._tiling import tiling_check, tiling_fail
from .layout import MAX_RANKS, fault_unless, valid_ids
from .quant import quantize_per_row

FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# fused_deep_moe_tiling.cpp
MAX_BATCH = 256
MAX_EXPERTS = 512
MAX_TOP_K = 12
H_MIN, H_MAX = 512, 7168          # MIN_TOKEN_LENGTH, MAX_TOKEN_LENGTH
GMM1_MIN, GMM1_MAX, GMM1_ALIGN = 1024, 6144, 1024
DEFAULT_HCCL_BUFFSIZE_MB = 200    # Mc2TilingUtils::GetMaxWindowSize (utils/op_host/mc2_tiling_utils.h)
FRACTAL_NZ = 29                   # torch_npu.Format.FRACTAL_NZ
_TILING = "fused_deep_moe_tiling.cpp"
_API, _NODE = "aclnnFusedDeepMoe", "FusedDeepMoe"


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


def check_nz(named: Sequence[tuple[str, torch.Tensor | None]]) -> None:
    """FRACTAL_NZ weights (fused_deep_moe.cpp's op definition), checked when torch_npu can tell formats."""
    import sys

    torch_npu = sys.modules.get("torch_npu")
    get_format = getattr(torch_npu, "get_npu_format", None)
    if get_format is None:
        return
    for name, t in named:
        if t is not None and int(get_format(t)) != FRACTAL_NZ:
            tiling_fail(_API, _NODE, "fused_deep_moe.cpp",
                        f"the format of input {name} is {get_format(t)!s}, but the op supports only FRACTAL_NZ "
                        "(convert it with torch_npu.npu_format_cast(t, torch_npu.Format.FRACTAL_NZ)).")


def _hccl_window_mb() -> int:
    try:
        return int(os.environ.get("HCCL_BUFFSIZE", DEFAULT_HCCL_BUFFSIZE_MB))
    except ValueError:
        return DEFAULT_HCCL_BUFFSIZE_MB


def _tiling(bs: int, hidden: int, top_k: int, gmm1: int, share_gmm1: int | None, world: int, experts: int,
            global_bs: int) -> None:
    """The checks of fused_deep_moe_tiling.cpp, in its order of concern."""
    def check(ok: bool, message: str) -> None:
        tiling_check(ok, _API, _NODE, _TILING, message)

    if share_gmm1 is not None:
        check(GMM1_MIN <= share_gmm1 <= GMM1_MAX,
              f"shareGmm1 hidden size is invalid. Only support [{GMM1_MIN}, {GMM1_MAX}].")
        check(share_gmm1 % GMM1_ALIGN == 0,
              f"shareGmm1 hidden size must be divisible by {GMM1_ALIGN}, but got {share_gmm1}.")
    check(bs <= MAX_BATCH, f"batchSize(bs) must <= {MAX_BATCH}.")
    check(H_MIN <= hidden <= H_MAX, f"tokenLength(h) is invalid. Only support [{H_MIN}, {H_MAX}].")
    check(GMM1_MIN <= gmm1 <= GMM1_MAX, f"gmm1 hidden size is invalid. Only support [{GMM1_MIN}, {GMM1_MAX}].")
    check(gmm1 % GMM1_ALIGN == 0, f"gmm1 hidden size must be divisible by {GMM1_ALIGN}, but got {gmm1}.")
    check(top_k <= MAX_TOP_K, f"topK(k) must <= {MAX_TOP_K}.")
    check(top_k <= experts, f"topK(k) must <= moeExpertNum({experts}).")
    check(global_bs >= 0, "globalBatchSize must >= 0.")
    gbs = world * bs if global_bs == 0 else global_bs
    check(gbs % world == 0, "globalBatchSize must be divisible by epRankSize.")
    local = experts // world
    demand = local * gbs * hidden * 2 * 2
    window = _hccl_window_mb() * 1024 * 1024
    check(demand <= window,
          f"HCCL_BUFFSIZE is too SMALL, globalBatchSize = {gbs}, h = {hidden}, moeExpertNumPerRank = {local}, "
          "NEEDED_HCCL_BUFFSIZE(moeExpertNumPerRank * globalBatchSize * h * TOKEN_DTYPE_BYTE_SIZE * doubleBuffer) "
          f"B={(demand + 1024 * 1024 - 1) // (1024 * 1024)}MB, HCCL_BUFFSIZE={window // (1024 * 1024)}MB.")


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
    require_npu("fused_deep_moe", locals())  # first: the op runs on the NPU only
    # pybind fused_deep_moe.cpp
    bind_assert(x.dim() == 2, "x.dim() == DIM_TWO", f"x shape {tuple(x.shape)}")
    bind_assert(expert_ids.dim() == 2, "expertIds.dim() == DIM_TWO", f"expert_ids shape {tuple(expert_ids.shape)}")
    require_opapi(ACLNN_API["fused_deep_moe"])
    # aclnn: the op definition's formats (fused_deep_moe.cpp)
    check_nz([*((f"gmm1_weight[{i}]", t) for i, t in enumerate(gmm1_weight)),
              *((f"gmm2_weight[{i}]", t) for i, t in enumerate(gmm2_weight)),
              ("share_gmm1_weight", share_gmm1_weight), ("share_gmm2_weight", share_gmm2_weight)])
    # tiling fused_deep_moe_tiling.cpp: the attributes
    world = ep_rank_size
    tiling_check(world > 0, _API, _NODE, _TILING, "epRankSize must > 0.")
    tiling_check(0 <= ep_rank_id < world, _API, _NODE, _TILING,
                 "epRankId must >= 0." if ep_rank_id < 0 else "epRankId must < epRankSize.")
    tiling_check(moe_expert_num <= MAX_EXPERTS, _API, _NODE, _TILING, f"moeExpertNum must <= {MAX_EXPERTS}.")
    tiling_check(moe_expert_num > 0, _API, _NODE, _TILING, "moeExpertNum must > 0.")
    tiling_check(moe_expert_num % world == 0, _API, _NODE, _TILING, "moeExpertNum must be divisible by epRankSize.")
    bind_assert(world <= MAX_RANKS, f"ep_rank_size <= {MAX_RANKS}", f"ep_rank_size={world}")
    local = moe_expert_num // world
    bind_assert(x.is_contiguous(), "x.is_contiguous()")
    bind_assert(x.dtype in FLOAT_DTYPES, "x.dtype in (bf16, fp16, fp32)", f"got {x.dtype}")
    bs, hidden = x.shape
    bind_assert(expert_ids.dim() == 2 and expert_ids.size(0) == bs, "expert_ids.sizes() == (bs, top_k)",
                f"expert_ids shape {tuple(expert_ids.shape)}, bs={bs}")
    top_k = expert_ids.size(1)
    bind_assert(tuple(expert_scales.shape) == (bs, top_k), "expert_scales.sizes() == expert_ids.sizes()",
                f"{tuple(expert_scales.shape)} vs {(bs, top_k)}")
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
        tiling_check(x_active_mask.dim() == 1, _API, _NODE, _TILING,
                     f" xActiveMask scale shape dims must be 1, but current dim num is {x_active_mask.dim()}.")
        tiling_check(x_active_mask.size(0) == bs, _API, _NODE, _TILING,
                     f"xActiveMask Dim0 must be batchSize({bs}), but current dim is {x_active_mask.size(0)}.")
    share_width = None if share_gmm1_weight is None else int(share_gmm1_weight.shape[-1])
    _tiling(bs, hidden, top_k, 2 * inter, share_width, world, moe_expert_num, global_bs)
    group = resolve_group(group_ep)
    check_rank(group, ep_rank_id, ep_rank_size, "ep_rank_id", "ep_rank_size")
    ids = expert_ids.to(torch.int64)

    # the mask is a count: the first sum(mask) tokens are active (TokenActiveMaskCal)
    n_active = bs if x_active_mask is None else min(int(x_active_mask.to(torch.int64).sum()), bs)
    active = torch.arange(bs) < n_active
    # source side: smooth, quantise each copy, ship it to the owner of its expert
    tok = torch.arange(bs, dtype=torch.int64).repeat_interleave(top_k)
    kk = torch.arange(top_k, dtype=torch.int64).repeat(bs)
    ids_ok = valid_ids(ids.reshape(-1), moe_expert_num)
    keep = active[tok] & ids_ok
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
    output[~active] = float("nan")   # undefined upstream (never written by the kernel)
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
    fault_unless(ids_ok[active[torch.arange(bs).repeat_interleave(top_k)]])   # only active tokens are read
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
