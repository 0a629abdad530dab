"""The rank program of ``camit calibrate``'s fused-vs-golden fact (torchrun, world 4, hccl).

The case, the golden composition (from umdk's fused_deep_moe UT) and the output line:
docs/internals/calibration.md.
"""

import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist

MARK = "@@camit-golden@@"
CASE = {"experts": 16, "top_k": 8, "batch": 16, "hidden": 7168, "inter": 2048}


def _uniform(gen: Any, shape: Any, lo: float, hi: float) -> Any:
    return torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo


def case_data(rank: int, world: int, seed: int, dtype: Any) -> dict[str, Any]:
    """This rank's inputs and local expert weights (host tensors)."""
    c = CASE
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    bs, k, hidden, inter = c["batch"], c["top_k"], c["hidden"], c["inter"]
    local = c["experts"] // world
    first = rank * bs * k
    ids = (torch.arange(first, first + bs * k, dtype=torch.int32) % c["experts"]).reshape(bs, k)
    scale2 = dtype if dtype == torch.bfloat16 else torch.float32
    return {
        "x": _uniform(gen, (bs, hidden), -5.0, 5.0).to(dtype),
        "ids": ids,
        "w1": torch.randint(-16, 16, (local, hidden, 2 * inter), generator=gen, dtype=torch.int8),
        "w2": torch.randint(-16, 16, (local, inter, hidden), generator=gen, dtype=torch.int8),
        "s1": _uniform(gen, (local, 2 * inter), 0.0015, 0.0045),
        "s2": _uniform(gen, (local, hidden), 0.0015, 0.0045).to(scale2),
        "weights": _uniform(gen, (bs, k), 0.0, 1.0),
    }


def golden(tnpu: Any, d: dict[str, Any], group_ep: Any, world: int, rank: int) -> tuple[Any, Any]:
    """The UT's small-op composition -> (output, expert_token_nums)."""
    e = CASE["experts"]
    out = tnpu.npu_moe_distribute_dispatch_v2(
        x=d["x"], expert_ids=d["ids"], expert_scales=d["weights"], scales=None, x_active_mask=None,
        group_ep=group_ep, ep_world_size=world, ep_rank_id=rank, moe_expert_num=e, group_tp="",
        tp_world_size=1, tp_rank_id=0, expert_shard_type=0, shared_expert_num=1,
        shared_expert_rank_num=0, quant_mode=2, global_bs=CASE["batch"] * world,
        expert_token_nums_type=1)
    expand_x, dyn_scales, assist, counts, ep_counts, tp_counts, expand_scales = out
    y1 = tnpu.npu_grouped_matmul(x=[expand_x], weight=[d["w1"]], split_item=3, group_list_type=1,
                                 group_type=0, group_list=counts, output_dtype=torch.int32)[0]
    h, h_scale = tnpu.npu_dequant_swiglu_quant(
        x=y1, weight_scale=d["s1"], activation_scale=dyn_scales, bias=None, quant_scale=None,
        quant_offset=None, group_index=counts, activate_left=True, quant_mode=1)
    y2 = tnpu.npu_grouped_matmul(x=[h], weight=[d["w2"]], scale=[d["s2"]],
                                 per_token_scale=[h_scale], split_item=2, group_list_type=1,
                                 group_type=0, group_list=counts, output_dtype=d["x"].dtype)[0]
    combined = tnpu.npu_moe_distribute_combine_v2(
        expand_x=y2, expert_ids=d["ids"], assist_info_for_combine=assist, ep_send_counts=ep_counts,
        expert_scales=d["weights"], x_active_mask=None, group_ep=group_ep, ep_world_size=world,
        ep_rank_id=rank, moe_expert_num=e, tp_send_counts=tp_counts, expand_scales=expand_scales,
        group_tp="", tp_world_size=1, tp_rank_id=0, expert_shard_type=0, shared_expert_num=1,
        shared_expert_rank_num=0, global_bs=CASE["batch"] * world)
    return combined, counts


def fused(ops: Any, d: dict[str, Any], group_ep: Any, world: int, rank: int) -> tuple[Any, Any]:
    """fused_deep_moe on the same inputs -> (output, expert_token_nums)."""
    out, _share, counts = ops.fused_deep_moe(
        d["x"], d["ids"], [d["w1"]], [d["s1"]], [d["w2"]], [d["s2"]], d["weights"],
        None, None, None, None, None, None, None, group_ep, world, rank, CASE["experts"], 0,
        CASE["batch"] * world)
    return out, counts


def tolerances() -> list[tuple[float, ...]]:
    text = os.environ.get("CAMIT_GOLDEN_TOL", "0.02,2.0")
    return [tuple(float(v) for v in part.split(",")) for part in text.split(";") if part]


def measure(got: Any, want: Any) -> dict[str, Any]:
    g, w = got.cpu().double(), want.cpu().double()
    diff = (g - w).abs()
    big = w.abs() >= 1.0
    norm = float(w.norm())
    outside = [int((diff > atol + rtol * w.abs()).sum()) for rtol, atol in tolerances()]
    return {
        "elements": int(w.numel()),
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
        "max_rel": float((diff[big] / w.abs()[big]).max()) if bool(big.any()) else 0.0,
        "norm_rel": float((g - w).norm()) / norm if norm else float((g - w).norm()),
        "outside": outside,
    }


def on_device(tnpu: Any, d: dict[str, Any]) -> dict[str, Any]:
    nz = tnpu.Format.FRACTAL_NZ
    out = {k: v.npu() for k, v in d.items()}
    for k in ("w1", "w2"):
        out[k] = tnpu.npu_format_cast(out[k], nz)
    return out


def one_dtype(tnpu: Any, ops: Any, groups: Any, name: str, seed: int) -> dict[str, Any]:
    world, rank = dist.get_world_size(), dist.get_rank()
    d = on_device(tnpu, case_data(rank, world, seed, getattr(torch, name)))
    small_out, small_counts = golden(tnpu, d, groups[1], world, rank)
    fused_out, fused_counts = fused(ops, d, groups[0], world, rank)
    tnpu.npu.synchronize()
    row = measure(fused_out, small_out)
    row["counts_equal"] = bool(torch.equal(small_counts.cpu().long(), fused_counts.cpu().long()))
    return row


def main() -> int:
    names, seed = sys.argv[1].split(","), int(sys.argv[2])
    import torch_npu as tnpu  # type: ignore[import-not-found]  # the hosts' (real or stand-in)

    tnpu.npu.config.allow_internal_format = True
    tnpu.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
    rank = dist.get_rank()
    ranks = list(range(dist.get_world_size()))
    npu = torch.device("npu")
    groups = []
    for _ in range(2):  # the fused op's group, the small ops' group (as the UT has them)
        group = dist.new_group(backend="hccl", ranks=ranks)
        groups.append(group._get_backend(npu).get_hccl_comm_name(rank))
    import umdk_cam_op_lib  # noqa: F401  (registers the ops)

    result = {}
    for name in names:
        try:
            result[name] = one_dtype(tnpu, torch.ops.umdk_cam_op_lib, groups, name, seed)
        except Exception as exc:  # the error is the measurement
            result[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    sys.stdout.write(MARK + json.dumps({"rank": rank, "dtypes": result}) + "\n")
    sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
