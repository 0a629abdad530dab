"""`fused_deep_moe` (cam-ops.md §6): dispatch + int8 grouped FFN (SwiGLU) + combine in one op.

The arithmetic and what is strict and lax as upstream (with its files): docs/internals/standin.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import torch

from . import _contract as contract
from . import _timing
from ._assert import bind_assert, standin_limit
from ._comm import check_rank, exchange_rows, resolve_group
from ._device import require_npu
from ._hostile import fill_undefined, garbage
from ._opapi import require_opapi
from ._schemas import ACLNN_API
from ._tiling import tiling_check, tiling_fail
from .layout import valid_ids
from .quant import quantize_per_row

_LIM = contract.LIMITS
# fused_deep_moe_tiling.cpp, through the contract the suite reads too
MAX_BATCH = _LIM["fused.batch"].hi or 0
MAX_EXPERTS = _LIM["fused.experts"].hi or 0
MAX_TOP_K = _LIM["fused.top_k"].hi or 0
H_MIN, H_MAX = _LIM["fused.hidden"].refused_lo or 0, _LIM["fused.hidden"].hi or 0  # the tiling's [512, 7168]
GMM1_MIN, GMM1_MAX = _LIM["fused.gmm1"].lo or 0, _LIM["fused.gmm1"].hi or 0
GMM1_ALIGN = _LIM["fused.gmm1"].step
DEFAULT_HCCL_BUFFSIZE_MB = contract.DEFAULT_HCCL_BUFFSIZE_MB
FRACTAL_NZ = 29                   # torch_npu.Format.FRACTAL_NZ
_TILING = "fused_deep_moe_tiling.cpp"
_API, _NODE = "aclnnFusedDeepMoe", "FusedDeepMoe"


def _stack(tensors: Sequence[torch.Tensor], local: int, dim: int, name: str) -> torch.Tensor:
    """Coupled [(L, …)] or separated L × [(…)] → one (L, …) tensor."""
    standin_limit(len(tensors) in (1, local), f"{name} has {len(tensors)} tensors, L={local}")
    if len(tensors) == 1 and tensors[0].dim() == dim + 1:
        full = tensors[0]
    else:
        standin_limit(len(tensors) == local and all(t.dim() == dim for t in tensors),
                      f"separated {name}: {[tuple(t.shape) for t in tensors]}, L={local}")
        full = torch.stack(list(tensors))
    standin_limit(full.size(0) == local, f"{name} shape {tuple(full.shape)}, L={local}")
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
        return contract.hccl_buffsize_mb(dict(os.environ))
    except ValueError:  # GetMaxWindowSize logs the parse error and keeps its default
        return DEFAULT_HCCL_BUFFSIZE_MB


def _dtype_name(t: torch.Tensor | None) -> str | None:
    return None if t is None else str(t.dtype).removeprefix("torch.")


def _refuse_dtype(name: str, got: str, allowed: str) -> None:
    tiling_fail(_API, _NODE, "fused_deep_moe.cpp",
                f"the dtype of input {name} is {got}, but the op supports only {allowed}.")


def check_dtypes(x: torch.Tensor, expert_ids: torch.Tensor, expert_scales: torch.Tensor,
                 scales: tuple[torch.Tensor | None, torch.Tensor | None], smooth: list[torch.Tensor | None],
                 mask: torch.Tensor | None) -> None:
    """The op definition's DataType lists (fused_deep_moe.cpp:16-211): no binary for anything else."""
    fixed = [("x", _dtype_name(x), contract.FUSED_X_DTYPES),
             ("expert_ids", _dtype_name(expert_ids), (contract.FUSED_IDS_DTYPE,)),
             ("expert_scales", _dtype_name(expert_scales), (contract.FUSED_SCALES_DTYPE,)),
             *((name, _dtype_name(t), (contract.FUSED_SCALES_DTYPE,))
               for name, t in zip(("expert_smooth_scales", "share_smooth_scales"), smooth) if t is not None),
             *((("x_active_mask", _dtype_name(mask), (contract.FUSED_MASK_DTYPE,)),) if mask is not None else ())]
    for name, got, allowed in fixed:
        if got not in allowed:
            _refuse_dtype(name, str(got), ", ".join(allowed))
    combo = (_dtype_name(x), _dtype_name(scales[0]), _dtype_name(scales[1]))
    if None not in combo and combo not in contract.FUSED_SCALE_COMBOS:
        _refuse_dtype("gmm1_weight_scale/gmm2_weight_scale", f"{combo[1]}/{combo[2]} with x {combo[0]}",
                      "the op definition's (x, gmm1 scale, gmm2 scale) combinations")


def _tiling(bs: int, hidden: int, top_k: int, gmm1: int, share_gmm1: int | None, world: int, experts: int,
            global_bs: int) -> None:
    """The checks of fused_deep_moe_tiling.cpp in its order: CheckWeightTensorList (shared widths, :186-190),
    CheckHcclBufferSize (:618-625, before CheckData turns global_bs 0 into bs * ranks), CheckData (:522-560)."""
    def check(ok: bool, message: str) -> None:
        tiling_check(ok, _API, _NODE, _TILING, message)

    if share_gmm1 is not None:
        check(GMM1_MIN <= share_gmm1 <= GMM1_MAX,
              f"shareGmm1 hidden size is invalid. Only support [{GMM1_MIN}, {GMM1_MAX}].")
        check(share_gmm1 % GMM1_ALIGN == 0,
              f"shareGmm1 hidden size must be divisible by {GMM1_ALIGN}, but got {share_gmm1}.")
    local = experts // world
    demand = contract.fused_window(local, global_bs, hidden)
    window = _hccl_window_mb()
    check(contract.fits(demand, window),
          f"HCCL_BUFFSIZE is too SMALL, globalBatchSize = {global_bs}, h = {hidden}, moeExpertNumPerRank = {local}, "
          "NEEDED_HCCL_BUFFSIZE(moeExpertNumPerRank * globalBatchSize * h * TOKEN_DTYPE_BYTE_SIZE * doubleBuffer) "
          f"B={contract.needed_mb(demand)}MB, HCCL_BUFFSIZE={window}MB.")
    check(bs <= MAX_BATCH, f"batchSize(bs) must <= {MAX_BATCH}.")
    check(H_MIN <= hidden <= H_MAX, f"tokenLength(h) is invalid. Only support [{H_MIN}, {H_MAX}].")
    check(GMM1_MIN <= gmm1 <= GMM1_MAX, f"gmm1 hidden size is invalid. Only support [{GMM1_MIN}, {GMM1_MAX}].")
    check(gmm1 % GMM1_ALIGN == 0, f"gmm1 hidden size must be divisible by {GMM1_ALIGN}, but got {gmm1}.")
    check(top_k <= MAX_TOP_K, f"topK(k) must <= {MAX_TOP_K}.")
    check(top_k <= experts, f"topK(k) must <= moeExpertNum({experts}).")
    check(global_bs >= 0, "globalBatchSize must >= 0.")
    gbs = world * bs if global_bs == 0 else global_bs
    check(gbs % world == 0, "globalBatchSize must be divisible by epRankSize.")


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
    start = time.perf_counter()  # the modelled time (lab knob, _timing.py) counts from here
    require_npu("fused_deep_moe", locals())  # first: the op runs on the NPU only
    # pybind fused_deep_moe.cpp
    bind_assert(x.dim() == 2, "x.dim() == DIM_TWO", f"x shape {tuple(x.shape)}")
    bind_assert(expert_ids.dim() == 2, "expertIds.dim() == DIM_TWO", f"expert_ids shape {tuple(expert_ids.shape)}")
    require_opapi(ACLNN_API["fused_deep_moe"])
    # aclnn: the op definition's dtypes and formats (fused_deep_moe.cpp)
    check_dtypes(x, expert_ids, expert_scales, (next(iter(gmm1_weight_scale), None),
                                                next(iter(gmm2_weight_scale), None)),
                 [expert_smooth_scales, share_smooth_scales], x_active_mask)
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
    local = moe_expert_num // world
    bs, hidden = x.shape
    tiling_check(expert_ids.size(0) == bs, _API, _NODE, _TILING,
                 f"expertIds dim 0 must be batchSize({bs}), but get {expert_ids.size(0)}.")
    top_k = expert_ids.size(1)
    standin_limit(x.is_contiguous() and tuple(expert_scales.shape) == (bs, top_k),
                  f"x contiguous, expert_scales {tuple(expert_scales.shape)} == {(bs, top_k)}")
    w1 = _stack(gmm1_weight, local, 2, "gmm1_weight")
    s1 = _stack(gmm1_weight_scale, local, 1, "gmm1_weight_scale")
    w2 = _stack(gmm2_weight, local, 2, "gmm2_weight")
    s2 = _stack(gmm2_weight_scale, local, 1, "gmm2_weight_scale")
    standin_limit(w1.size(1) == hidden and w1.size(2) % 2 == 0, f"gmm1_weight {tuple(w1.shape)}, H={hidden}")
    inter = w1.size(2) // 2
    standin_limit(tuple(w2.shape[1:]) == (inter, hidden) and tuple(s1.shape) == (local, 2 * inter)
                  and tuple(s2.shape) == (local, hidden),
                  f"gmm2_weight {tuple(w2.shape)}, scales {tuple(s1.shape)}, {tuple(s2.shape)}, I={inter}")
    if expert_smooth_scales is not None:
        standin_limit(tuple(expert_smooth_scales.shape) == (moe_expert_num, hidden),
                      f"expert_smooth_scales shape {tuple(expert_smooth_scales.shape)}")
    shared = [share_gmm1_weight, share_gmm1_weight_scale, share_gmm2_weight, share_gmm2_weight_scale]
    standin_limit(all(t is None for t in shared) or all(t is not None for t in shared),
                  "share_* weights partly given")
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
    flat_ids = ids.reshape(-1)
    ids_ok = valid_ids(flat_ids, moe_expert_num)
    # -1 is the documented placeholder (skipped); any other id out of range is undefined (garbage row)
    stray = active[tok] & ~ids_ok & (flat_ids != -1)
    keep = active[tok] & ids_ok
    stray_tokens = torch.unique(tok[stray])
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
    output = output.to(x.dtype)
    fill_undefined(output, ~active, "fused.output.masked")       # at::empty, never written by the kernel
    fill_undefined(output, stray_tokens, "fused.output.bad_id")  # an id outside [-1, E): undefined

    share_output = garbage((bs, hidden), x.dtype, "fused.share_output")   # at::empty (pybind :62)
    if (share_gmm1_weight is not None and share_gmm1_weight_scale is not None
            and share_gmm2_weight is not None and share_gmm2_weight_scale is not None):
        sw1 = _squeeze_one(share_gmm1_weight, 2)
        sw2 = _squeeze_one(share_gmm2_weight, 2)
        ss1 = share_gmm1_weight_scale.reshape(-1)
        ss2 = share_gmm2_weight_scale.reshape(-1)
        standin_limit(sw1.dim() == 2 and sw1.size(0) == hidden and sw1.size(1) % 2 == 0
                      and tuple(sw2.shape) == (sw1.size(1) // 2, hidden)
                      and ss1.numel() == sw1.size(1) and ss2.numel() == hidden,
                      f"shared weights {tuple(sw1.shape)}, {tuple(ss1.shape)}, {tuple(sw2.shape)}, "
                      f"{tuple(ss2.shape)}")
        srows = x.to(torch.float32)
        if share_smooth_scales is not None:
            srows = srows * share_smooth_scales.to(torch.float32).reshape(1, hidden)
        sq, ssx = quantize_per_row(srows)
        share_output = ffn(sq, ssx, sw1, ss1, sw2, ss2, x.dtype)
    # modelled like dispatch: S is the bf16/fp16 rows this rank dispatches (the perf row's bytes)
    _timing.pace("fused_deep_moe", start, _timing.row_bytes(bs, top_k, hidden, x.element_size()), ep_rank_id)
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
