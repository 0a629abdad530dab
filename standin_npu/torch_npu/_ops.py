"""The torch_npu ops UMDK's CAM UTs use as their golden path, on CPU (over torch.distributed).

Each op's semantics and what is not supported: docs/internals/standin-npu.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from ._fault import stuck
from ._tensor import device_kernel
from .distributed import resolve_hccl_comm_name

ASSIST_STRIDE = 128  # assist_info_for_combine: A * 128 int32, as the v2 API documents its shape
QMAX = 127.0


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise RuntimeError(message)


def _quant_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic int8 per row: (int8 rows, float32 dequant scale = max|row| / 127)."""
    xf = x.to(torch.float32)
    amax = xf.abs().amax(dim=-1) if xf.shape[-1] else torch.zeros(xf.shape[:-1])
    scale = amax / QMAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(xf / safe.unsqueeze(-1)).clamp_(-128, 127).to(torch.int8)
    return q, scale.to(torch.float32)


def _group(group_ep: str, ep_world_size: int, ep_rank_id: int) -> dist.ProcessGroup:
    group = resolve_hccl_comm_name(group_ep)
    _check(group.size() == ep_world_size,
           f"ep_world_size={ep_world_size} but group {group_ep} has {group.size()} ranks")
    _check(group.rank() == ep_rank_id, f"ep_rank_id={ep_rank_id} but this process is rank {group.rank()} of {group_ep}")
    return group


def _a2a(send: torch.Tensor, send_counts: list[int], recv_counts: list[int], group: dist.ProcessGroup) -> torch.Tensor:
    """all_to_all of rows as raw bytes, so any dtype travels bit-exactly over gloo."""
    n = send.shape[0]
    width = int(torch.Size(send.shape[1:]).numel()) * send.element_size()
    raw = (send.contiguous().reshape(n, -1).view(torch.uint8) if n and width
           else torch.empty((n, width), dtype=torch.uint8))
    out = torch.empty((sum(recv_counts), width), dtype=torch.uint8)
    if width:
        dist.all_to_all_single(out, raw.contiguous(), output_split_sizes=recv_counts, input_split_sizes=send_counts,
                               group=group)
    shaped = torch.empty((out.shape[0], width), dtype=torch.uint8).copy_(out)
    return shaped.view(send.dtype).reshape((out.shape[0], *send.shape[1:]))


def _exchange_counts(send_counts: torch.Tensor, group: dist.ProcessGroup) -> list[int]:
    """Each rank's row count for every peer, exchanged. A kernel whose peers never came spins until the
    op-execute timeout and its outputs are undefined, but on the device they keep the op's fixed maximal
    shapes: the counts are never read from the unwritten buffer (its bytes could ask for petabytes)."""
    recv_counts = torch.zeros_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    return [0] * len(send_counts) if stuck() else recv_counts.tolist()


def _active_count(x_active_mask: torch.Tensor | None, bs: int) -> int:
    if x_active_mask is None:
        return bs
    _check(x_active_mask.dim() == 1 and x_active_mask.numel() == bs, "x_active_mask must be (bs,)")
    return int(x_active_mask.to(torch.int64).sum())


def _unsupported(tp_world_size: int, expert_shard_type: int, shared_expert_rank_num: int) -> None:
    _check(tp_world_size in (0, 1), "the stand-in supports tp_world_size 0 or 1 only")
    _check(expert_shard_type == 0, "the stand-in supports expert_shard_type 0 only")
    _check(shared_expert_rank_num == 0, "the stand-in supports shared_expert_rank_num 0 only")


@device_kernel
def npu_moe_distribute_dispatch_v2(
    x: torch.Tensor, expert_ids: torch.Tensor, group_ep: str, ep_world_size: int, ep_rank_id: int,
    moe_expert_num: int, *, scales: torch.Tensor | None = None, x_active_mask: torch.Tensor | None = None,
    expert_scales: torch.Tensor | None = None, group_tp: str = "", tp_world_size: int = 0, tp_rank_id: int = 0,
    expert_shard_type: int = 0, shared_expert_num: int = 1, shared_expert_rank_num: int = 0, quant_mode: int = 0,
    global_bs: int = 0, expert_token_nums_type: int = 1, comm_alg: str = "", zero_expert_num: int = 0,
    copy_expert_num: int = 0, const_expert_num: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> (expand_x, dynamic_scales, assist_info_for_combine, expert_token_nums, ep_recv_counts,
    tp_recv_counts, expand_scales)."""
    _unsupported(tp_world_size, expert_shard_type, shared_expert_rank_num)
    _check(quant_mode in (0, 2), f"the stand-in supports quant_mode 0 and 2, got {quant_mode}")
    _check(expert_token_nums_type in (0, 1), "expert_token_nums_type must be 0 or 1")
    _check(x.dim() == 2 and expert_ids.dim() == 2 and expert_ids.size(0) == x.size(0),
           "x must be (bs, H) and expert_ids (bs, K)")
    world = ep_world_size
    _check(moe_expert_num > 0 and moe_expert_num % world == 0, "moe_expert_num must divide by ep_world_size")
    group = _group(group_ep, world, ep_rank_id)
    local = moe_expert_num // world
    bs, top_k = expert_ids.shape
    ids = expert_ids.to(torch.int64)
    _check(bool(((ids >= 0) & (ids < moe_expert_num)).all()), f"expert_ids must lie in [0, {moe_expert_num})")
    active = _active_count(x_active_mask, bs)

    tok = torch.arange(active, dtype=torch.int64).repeat_interleave(top_k)
    kk = torch.arange(top_k, dtype=torch.int64).repeat(active)
    exp = ids[:active].reshape(-1)
    dest = exp // local
    order = torch.argsort(dest * (bs * top_k) + tok * top_k + kk, stable=True)
    tok, kk, exp, dest = tok[order], kk[order], exp[order], dest[order]
    rows = x[tok]
    if quant_mode == 2:
        src = rows.to(torch.float32)
        if scales is not None:
            src = src * scales.to(torch.float32)[exp]
        rows, row_scale = _quant_rows(src)
    else:
        row_scale = torch.zeros(rows.shape[0], dtype=torch.float32)
    weight = (expert_scales.to(torch.float32)[tok, kk] if expert_scales is not None
              else torch.ones(rows.shape[0], dtype=torch.float32))
    meta = torch.stack([torch.full_like(tok, ep_rank_id), tok, kk, exp % local], dim=1)

    send_counts = torch.bincount(dest, minlength=world)
    sc, rc = send_counts.tolist(), _exchange_counts(send_counts, group)
    r_rows = _a2a(rows, sc, rc, group)
    r_meta = _a2a(meta, sc, rc, group)
    r_scale = _a2a(row_scale.view(-1, 1), sc, rc, group).view(-1)
    r_weight = _a2a(weight.view(-1, 1), sc, rc, group).view(-1)

    # owner side: by local expert, then source rank, token, k (the order received is by source already)
    key = (r_meta[:, 3] * (world * bs * top_k + 1) + r_meta[:, 0] * (bs * top_k + 1)
           + r_meta[:, 1] * top_k + r_meta[:, 2])
    perm = torch.argsort(key, stable=True)
    r_rows, r_meta, r_scale, r_weight = r_rows[perm], r_meta[perm], r_scale[perm], r_weight[perm]
    rows_in = r_rows.shape[0]
    assist = torch.zeros((rows_in, ASSIST_STRIDE), dtype=torch.int32)
    assist[:, :3] = r_meta[:, :3].to(torch.int32)
    counts = torch.bincount(r_meta[:, 3], minlength=local).to(torch.int64)
    expert_token_nums = counts if expert_token_nums_type == 1 else torch.cumsum(counts, 0)
    per_src = torch.zeros((local, world), dtype=torch.int32)
    if rows_in:
        per_src.index_put_((r_meta[:, 3], r_meta[:, 0]), torch.ones(rows_in, dtype=torch.int32), accumulate=True)
    ep_recv_counts = torch.cumsum(per_src.reshape(-1), 0).to(torch.int32)
    tp_recv_counts = torch.tensor([rows_in], dtype=torch.int32)
    return (r_rows, r_scale, assist.reshape(-1), expert_token_nums, ep_recv_counts, tp_recv_counts, r_weight)


@device_kernel
def npu_moe_distribute_combine_v2(
    expand_x: torch.Tensor, expert_ids: torch.Tensor, assist_info_for_combine: torch.Tensor,
    ep_send_counts: torch.Tensor, expert_scales: torch.Tensor, group_ep: str, ep_world_size: int, ep_rank_id: int,
    moe_expert_num: int, *, tp_send_counts: torch.Tensor | None = None, x_active_mask: torch.Tensor | None = None,
    expand_scales: torch.Tensor | None = None, shared_expert_x: torch.Tensor | None = None, group_tp: str = "",
    tp_world_size: int = 0, tp_rank_id: int = 0, expert_shard_type: int = 0, shared_expert_num: int = 1,
    shared_expert_rank_num: int = 0, global_bs: int = 0, comm_quant_mode: int = 0, comm_alg: str = "",
    zero_expert_num: int = 0, copy_expert_num: int = 0, const_expert_num: int = 0,
) -> torch.Tensor:
    """-> x (bs, H) in expand_x's dtype: the expert outputs weighted by expert_scales, per token."""
    _unsupported(tp_world_size, expert_shard_type, shared_expert_rank_num)
    world = ep_world_size
    group = _group(group_ep, world, ep_rank_id)
    bs, top_k = expert_ids.shape
    hidden = expand_x.size(1)
    meta = assist_info_for_combine.view(-1, ASSIST_STRIDE)[:, :3].to(torch.int64)
    _check(meta.shape[0] <= expand_x.shape[0], "assist_info_for_combine does not match expand_x")
    rows = expand_x[: meta.shape[0]]
    src = meta[:, 0]
    order = torch.argsort(src, stable=True)
    send_counts = torch.bincount(src, minlength=world)
    sc, rc = send_counts.tolist(), _exchange_counts(send_counts, group)
    back = _a2a(rows[order], sc, rc, group)
    back_meta = _a2a(meta[order][:, 1:].contiguous(), sc, rc, group)
    gathered = torch.zeros((bs * top_k, hidden), dtype=torch.float32)
    if back.shape[0]:
        gathered[back_meta[:, 0] * top_k + back_meta[:, 1]] = back.to(torch.float32)
    out = (gathered.view(bs, top_k, hidden) * expert_scales.to(torch.float32).unsqueeze(-1)).sum(dim=1)
    if shared_expert_x is not None:
        out = out + shared_expert_x.to(torch.float32)
    out[_active_count(x_active_mask, bs):] = 0
    return out.to(expand_x.dtype)


def _groups(group_list: torch.Tensor | Sequence[int] | None, group_list_type: int, groups: int,
            rows: int) -> list[int]:
    if group_list is None:
        return [rows] + [0] * (groups - 1)
    values = [int(v) for v in (group_list.tolist() if isinstance(group_list, torch.Tensor) else group_list)]
    _check(len(values) == groups, f"group_list has {len(values)} entries for {groups} groups")
    if group_list_type == 0:
        values = [b - a for a, b in zip([0, *values[:-1]], values)]
    _check(all(v >= 0 for v in values) and sum(values) <= rows, "group_list exceeds the rows of x")
    return values


def _int_gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.to(torch.float64) @ b.to(torch.float64)).to(torch.int32)


@device_kernel
def npu_grouped_matmul(
    x: list[torch.Tensor], weight: list[torch.Tensor], *, bias: list[torch.Tensor] | None = None,
    scale: list[torch.Tensor] | None = None, offset: list[torch.Tensor] | None = None,
    antiquant_scale: list[torch.Tensor] | None = None, antiquant_offset: list[torch.Tensor] | None = None,
    per_token_scale: list[torch.Tensor] | None = None, group_list: torch.Tensor | Sequence[int] | None = None,
    activation_input: list[torch.Tensor] | None = None, activation_quant_scale: list[torch.Tensor] | None = None,
    activation_quant_offset: list[torch.Tensor] | None = None, split_item: int = 0, group_type: int | None = None,
    group_list_type: int = 0, act_type: int = 0, output_dtype: torch.dtype | None = None,
    tuning_config: list[int] | None = None,
) -> list[torch.Tensor]:
    """Grouped GEMM over the M axis (see the module docstring) -> [y]."""
    _check(split_item in (2, 3), f"the stand-in supports split_item 2 and 3, got {split_item}")
    _check(group_type in (0, None), f"the stand-in supports group_type 0 only, got {group_type}")
    _check(len(x) == 1 and len(weight) == 1, "the stand-in supports one x and one (E, K, N) weight")
    xs, w = x[0], weight[0]
    if w.dim() == 2:
        w = w.unsqueeze(0)
    groups, _, n = w.shape
    counts = _groups(group_list, group_list_type, groups, xs.size(0))
    integer = xs.dtype == torch.int8
    dtype = output_dtype or (torch.int32 if integer and scale is None else xs.dtype)
    out = torch.zeros((xs.size(0), n), dtype=dtype)
    start = 0
    for g, count in enumerate(counts):
        if not count:
            continue
        part = xs[start:start + count]
        if integer:
            acc = _int_gemm(part, w[g])
            if scale is None:
                y = acc
            else:
                y = acc.to(torch.float32) * scale[0][g].to(torch.float32)
                if per_token_scale is not None:
                    y = y * per_token_scale[0][start:start + count].to(torch.float32).unsqueeze(-1)
        else:
            y = part.to(torch.float32) @ w[g].to(torch.float32)
        if bias is not None:
            y = y + bias[0][g].to(y.dtype)
        out[start:start + count] = y.to(dtype)
        start += count
    return [out]


@device_kernel
def npu_dequant_swiglu_quant(
    x: torch.Tensor, *, weight_scale: torch.Tensor | None = None, activation_scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None, quant_scale: torch.Tensor | None = None,
    quant_offset: torch.Tensor | None = None, group_index: torch.Tensor | None = None, activate_left: bool = False,
    quant_mode: int = 0, swiglu_mode: int = 0, clamp_limit: float = 7.0, glu_alpha: float = 1.702,
    glu_bias: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dequantise int32 GEMM sums, SwiGLU, re-quantise dynamically -> (int8 (M, I), float32 scale (M,))."""
    _check(quant_mode == 1, f"the stand-in supports quant_mode 1 (dynamic) only, got {quant_mode}")
    _check(swiglu_mode == 0, "the stand-in supports swiglu_mode 0 only")
    _check(x.dim() == 2 and x.size(1) % 2 == 0, "x must be (M, 2I)")
    h = x.to(torch.float32)
    rows = x.size(0)
    if weight_scale is not None:
        ws = weight_scale.to(torch.float32)
        if ws.dim() == 1:
            h = h * ws
        else:
            counts = _groups(group_index, 1, ws.size(0), rows)
            per_row = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
            h[: per_row.numel()] = h[: per_row.numel()] * ws[per_row]
    if activation_scale is not None:
        h = h * activation_scale.to(torch.float32).reshape(-1)[:rows].unsqueeze(-1)
    if bias is not None:
        h = h + bias.to(torch.float32)
    inter = h.size(1) // 2
    gate, up = (h[:, :inter], h[:, inter:]) if activate_left else (h[:, inter:], h[:, :inter])
    act = gate / (1.0 + torch.exp(-gate)) * up
    if quant_scale is not None:
        act = act * quant_scale.to(torch.float32).reshape(-1, inter)[0]
    q, s = _quant_rows(act)
    if group_index is not None and weight_scale is not None and weight_scale.dim() > 1:
        used = int(sum(_groups(group_index, 1, weight_scale.size(0), rows)))
        q[used:] = 0
        s[used:] = 0
    return q, s


@device_kernel
def npu_dynamic_quant(x: torch.Tensor, *, smooth_scales: torch.Tensor | None = None,
                      group_index: torch.Tensor | None = None, dst_type: torch.dtype | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic int8 per row of ``x * smooth_scales`` -> (int8 like x, float32 scale x.shape[:-1])."""
    _check(dst_type in (None, torch.int8), "the stand-in supports dst_type int8 only")
    xf = x.to(torch.float32)
    if smooth_scales is not None:
        xf = xf * smooth_scales.to(torch.float32)
    q, s = _quant_rows(xf.reshape(-1, xf.size(-1)))
    return q.reshape(x.shape), s.reshape(x.shape[:-1])


@device_kernel
def npu_quant_matmul(x1: torch.Tensor, x2: torch.Tensor, scale: torch.Tensor, *, offset: torch.Tensor | None = None,
                     pertoken_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                     output_dtype: torch.dtype | None = None, x1_dtype: object = None, x2_dtype: object = None,
                     pertoken_scale_dtype: object = None, scale_dtype: object = None,
                     group_sizes: object = None) -> torch.Tensor:
    """int8 GEMM: int32 output is the raw sum; any other dtype is dequantised by scale and pertoken_scale."""
    _check(x1.dtype == torch.int8 and x2.dtype == torch.int8, "the stand-in supports int8 x int8 only")
    acc = _int_gemm(x1, x2)
    if output_dtype == torch.int32:
        return acc if bias is None else acc + bias.to(torch.int32)
    y = acc.to(torch.float32) * scale.to(torch.float32).reshape(-1)
    if pertoken_scale is not None:
        y = y * pertoken_scale.to(torch.float32).reshape(-1, 1)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(output_dtype or torch.int8)
