"""The CPU stand-in of umdk_cam_op_lib across real processes: gloo on 127.0.0.1, world sizes 2 and 4.

Every rank regenerates every rank's seeded, non-uniform inputs, so each output is checked against an
independent per-rank computation (numpy loops, no communication): dispatch placement, expand_idx triples,
recv_count prefix sums, recv_tokens_per_expert, quantised rows and scales; combine against x·Σw with the
upstream calc_diff; fused_deep_moe against a per-copy reference FFN.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STANDIN = str(Path(__file__).resolve().parents[2] / "standin")
if STANDIN not in sys.path:
    sys.path.insert(0, STANDIN)

import umdk_cam_op_lib as cam  # noqa: E402

HIDDEN = 1024         # the prefill tilings' H_MIN (moe_dispatch_normal_tiling.cpp); % 128 == 0 for per_token_cast_back
INTER = 512           # fused: gmm1 width 2I = 1024, the fused tiling's minimum (fused_deep_moe_tiling.cpp)


# ----------------------------------------------------------------------------- reference helpers
def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """Upstream UT metric: 1 − 2·Σ(x·y)/Σ(x²+y²) in float64 on x+1, y+1."""
    x, y = x.double() + 1, y.double() + 1
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def per_token_cast_back(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Upstream UT dequant: view (n, −1, 128) × scale (n, −1, 1) → bf16."""
    n = q.size(0)
    return (q.float().view(n, -1, 128) * scale.float().view(n, -1, 1)).view(n, -1).to(torch.bfloat16)


def np_quant(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy model of the per-row dynamic int8 quantisation (float32, half-even rounding)."""
    rows = rows.astype(np.float32)
    scale = np.float32(127.0) / (np.abs(rows).max(axis=1) + np.float32(1e-12))
    q = np.rint(rows * scale[:, None]).astype(np.int8)
    return q, (np.float32(1.0) / scale).astype(np.float32)


def prefill_inputs(src: int, world: int, num_experts: int, top_k: int, skip_last_rank: bool
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank src's seeded, non-uniform x (bf16), topk_idx (int64, unique ids per row), topk_weights."""
    g = torch.Generator().manual_seed(1000 + 17 * src + world)
    tokens = 5 + 3 * src
    x = (torch.randn(tokens, HIDDEN, generator=g) * torch.rand(tokens, 1, generator=g) * 4).to(torch.bfloat16)
    pool = num_experts - (num_experts // world if skip_last_rank else 0)
    scores = torch.rand(tokens, pool, generator=g) ** 3      # skewed: a few experts are popular
    scores[:, : max(1, pool // 4)] += 0.5
    idx = torch.argsort(scores, dim=1, descending=True)[:, :top_k].contiguous()
    weights = torch.rand(tokens, top_k, generator=g)
    return x, idx.to(torch.int64), weights


def expected_dispatch(rank: int, world: int, num_experts: int, top_k: int, skip: bool) -> dict:
    local = num_experts // world
    copies = []
    for src in range(world):
        x, idx, _ = prefill_inputs(src, world, num_experts, top_k, skip)
        for t, row in enumerate(idx.tolist()):
            for k, e in enumerate(row):
                if e // local == rank:
                    copies.append((e % local, src, t, k, x[t]))
    copies.sort(key=lambda c: c[:4])          # group (l, s) in order l*R+s; row-major (t, k) inside
    counts = np.zeros((local, world), dtype=np.int64)
    for lcl, src, *_ in copies:
        counts[lcl, src] += 1
    return {
        "rows": [c[4] for c in copies],
        "triples": np.array([c[1:4] for c in copies], dtype=np.int32).reshape(-1, 3),
        "recv_count": np.cumsum(counts.reshape(-1)),
        "recv_tokens_per_expert": counts.sum(axis=1),
    }


def check_prefill(rank: int, world: int, use_quant: bool, skip: bool) -> None:
    num_experts, top_k = 4 * world, 3
    group_ep = cam.group_name()
    x, idx, w = prefill_inputs(rank, world, num_experts, top_k, skip)
    ntpe, slot = cam.get_dispatch_layout(idx, num_experts, world)
    np.testing.assert_array_equal(ntpe.numpy(), np.bincount(idx.numpy().ravel(), minlength=num_experts))

    recv_x, scales, expand, recv_count, rtpe = torch.ops.umdk_cam_op_lib.moe_dispatch_prefill(
        x, idx, w, ntpe, slot, group_ep, rank, world, use_quant)
    exp = expected_dispatch(rank, world, num_experts, top_k, skip)
    total = len(exp["rows"])
    assert recv_count.dtype == torch.int32 and recv_count.shape == (num_experts,)
    np.testing.assert_array_equal(recv_count.numpy(), exp["recv_count"])
    assert rtpe.dtype == torch.int64
    np.testing.assert_array_equal(rtpe.numpy(), exp["recv_tokens_per_expert"])
    rows = max(total, 1)
    assert recv_x.shape == (rows, HIDDEN) and scales.shape == (rows,) and expand.shape == (3 * rows,)
    assert recv_x.dtype == (torch.int8 if use_quant else torch.bfloat16)
    assert expand.dtype == torch.int32 and scales.dtype == torch.float32
    if skip and rank == world - 1:
        assert total == 0
    if total:
        np.testing.assert_array_equal(expand.view(-1, 3).numpy(), exp["triples"])
        want = torch.stack(exp["rows"])
        if use_quant:
            q, s = np_quant(want.float().numpy())
            # at H = 1024 a few x·scale products land within an ulp of .5, where numpy's and torch's float32
            # paths may round apart: allow ±1 on at most 0.1 % of the elements
            off = np.abs(recv_x.numpy().astype(np.int16) - q.astype(np.int16))
            assert off.max() <= 1 and (off > 0).mean() < 1e-3, (off.max(), (off > 0).mean())
            np.testing.assert_allclose(scales.numpy(), s, rtol=1e-6)
        else:
            assert torch.equal(recv_x, want)                       # bf16 rows arrive bit-exact

    # identity experts, then combine: out[t] = x[t]·Σ_k w[t,k]
    expert_out = per_token_cast_back(recv_x, scales) if use_quant else recv_x
    out = cam.moe_combine_prefill(expert_out, idx, w, expand, recv_count, group_ep, rank, world)
    assert out.shape == x.shape and out.dtype == torch.bfloat16
    ref = x.float() * w.sum(dim=1, keepdim=True)
    diff = calc_diff(out, ref)
    assert diff < (1e-4 if use_quant else 5e-5), diff   # upstream: 5e-5; int8 rows: looser
    if not use_quant:
        np.testing.assert_allclose(out.float().numpy(), ref.numpy(), rtol=1.6e-2, atol=1e-2)


# ----------------------------------------------------------------------------- fused_deep_moe
def fused_weights(owner: int, local: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5000 + owner)
    return {
        "w1": torch.randint(-16, 16, (local, HIDDEN, 2 * INTER), generator=g, dtype=torch.int8),
        "s1": torch.rand(local, 2 * INTER, generator=g) * 0.003 + 0.0015,
        "w2": torch.randint(-16, 16, (local, INTER, HIDDEN), generator=g, dtype=torch.int8),
        "s2": (torch.rand(local, HIDDEN, generator=g) * 0.003 + 0.0015).to(torch.bfloat16),
    }


def fused_inputs(src: int, world: int, num_experts: int, top_k: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7000 + src)
    bs = 4 + 2 * src
    scores = torch.rand(bs, num_experts, generator=g)
    return {
        "x": (torch.rand(bs, HIDDEN, generator=g) * 10 - 5).to(torch.bfloat16),
        "ids": torch.argsort(scores, dim=1)[:, :top_k].to(torch.int32).contiguous(),
        "scales": torch.rand(bs, top_k, generator=g),
    }


def ref_ffn(row: torch.Tensor, w1, s1, w2, s2, out_dtype) -> torch.Tensor:
    """One token through one expert, written out step by step (cam-ops.md §6)."""
    q, sx = np_quant(row.float().numpy()[None])
    h = torch.from_numpy(q.astype(np.float64) @ w1.numpy().astype(np.float64)).to(torch.int32)
    h = h.float() * s1.float() * float(sx[0])
    a = h[:, :INTER] / (1 + torch.exp(-h[:, :INTER])) * h[:, INTER:]
    qa, sa = np_quant(a.numpy())
    y = torch.from_numpy(qa.astype(np.float64) @ w2.numpy().astype(np.float64)).float()
    out: torch.Tensor = (y * s2.float() * float(sa[0])).to(out_dtype)[0]
    return out


def check_fused(rank: int, world: int, separated: bool, extras: bool) -> None:
    local, top_k = 2, 3
    num_experts = local * world
    mine = fused_inputs(rank, world, num_experts, top_k)
    wts = fused_weights(rank, local)
    bs = mine["x"].shape[0]
    g = torch.Generator().manual_seed(9000)                 # same on every rank
    smooth = torch.rand(num_experts, HIDDEN, generator=g) + 0.5
    share = {"w1": torch.randint(-16, 16, (HIDDEN, 2 * INTER), generator=g, dtype=torch.int8),
             "s1": torch.rand(2 * INTER, generator=g) * 0.003 + 0.0015,
             "w2": torch.randint(-16, 16, (INTER, HIDDEN), generator=g, dtype=torch.int8),
             "s2": torch.rand(HIDDEN, generator=g) * 0.003 + 0.0015,
             "smooth": torch.rand(HIDDEN, generator=g) + 0.5}
    valid = bs - 1 if extras else bs
    mask = torch.arange(bs) < valid if extras else None

    def lists(key: str) -> list[torch.Tensor]:
        return list(wts[key].unbind(0)) if separated else [wts[key]]

    out, share_out, token_nums = torch.ops.umdk_cam_op_lib.fused_deep_moe(
        mine["x"], mine["ids"], lists("w1"), lists("s1"), lists("w2"), lists("s2"), mine["scales"],
        share["w1"] if extras else None, share["s1"] if extras else None,
        share["w2"] if extras else None, share["s2"] if extras else None,
        smooth if extras else None, share["smooth"] if extras else None, mask,
        cam.group_name(), world, rank, num_experts, 0, 0)

    # expert_token_nums: copies of my local experts sent by every (valid) token of every rank
    want_nums = np.zeros(local, dtype=np.int64)
    for src in range(world):
        inp = fused_inputs(src, world, num_experts, top_k)
        n_valid = inp["x"].shape[0] - 1 if extras else inp["x"].shape[0]
        for e in inp["ids"][:n_valid].reshape(-1).tolist():
            if e // local == rank:
                want_nums[e % local] += 1
    assert token_nums.dtype == torch.int64
    np.testing.assert_array_equal(token_nums.numpy(), want_nums)

    owners = {o: fused_weights(o, local) for o in range(world)}
    ref = torch.zeros(valid, HIDDEN)
    for t in range(valid):
        for k in range(top_k):
            e = int(mine["ids"][t, k])
            ow = owners[e // local]
            row = mine["x"][t].float() * (smooth[e] if extras else 1.0)
            y = ref_ffn(row, ow["w1"][e % local], ow["s1"][e % local], ow["w2"][e % local],
                        ow["s2"][e % local], torch.bfloat16)
            ref[t] += float(mine["scales"][t, k]) * y.float()
    assert out.shape == (bs, HIDDEN) and out.dtype == torch.bfloat16
    got = out[:valid].float()
    assert calc_diff(got, ref) < 1e-5
    np.testing.assert_allclose(got.numpy(), ref.to(torch.bfloat16).float().numpy(), rtol=1e-2, atol=1e-2)
    if extras:
        want_share = torch.stack([ref_ffn(mine["x"][t].float() * share["smooth"], share["w1"], share["s1"],
                                          share["w2"], share["s2"], torch.bfloat16) for t in range(bs)])
        np.testing.assert_allclose(share_out.float().numpy(), want_share.float().numpy(), rtol=1e-2, atol=1e-2)
        assert calc_diff(share_out, want_share) < 1e-5


# ----------------------------------------------------------------------------- subgroups and errors
def check_subgroup_and_errors(rank: int, world: int) -> None:
    # a group that is not WORLD: the even ranks and the odd ranks, each group_ep resolved by name
    groups = [dist.new_group([r for r in range(world) if r % 2 == parity]) for parity in (0, 1)]
    mine = groups[rank % 2]
    sub_rank, sub_size = mine.rank(), mine.size()
    name = cam.group_name(mine)
    assert name != cam.group_name() and cam.resolve_group(name) is mine
    if sub_size >= 2:
        x, idx, w = prefill_inputs(rank, world, 2 * sub_size, 2, False)
        ntpe, slot = cam.get_dispatch_layout(idx, 2 * sub_size, sub_size)
        recv_x, scales, expand, recv_count, _ = cam.moe_dispatch_prefill(
            x, idx, w, ntpe, slot, name, sub_rank, sub_size, False)
        out = cam.moe_combine_prefill(recv_x, idx, w, expand, recv_count, name, sub_rank, sub_size)
        assert calc_diff(out, x.float() * w.sum(dim=1, keepdim=True)) < 5e-5
    # wrong rank / size: every rank raises before any communication, so nobody hangs
    x, idx, w = prefill_inputs(rank, world, 2 * world, 2, False)
    ntpe, slot = cam.get_dispatch_layout(idx, 2 * world, world)
    for bad_rank, bad_size in (((rank + 1) % world, world), (rank, world + 1)):
        # the size: upstream's pybind check (E % (R + 1)); the rank: a check upstream lacks (the stand-in's own)
        with pytest.raises(RuntimeError, match=r"^(Failed: Assertion error \S+:\d+ error message or error code is"
                                               r"|umdk_cam_op_lib stand-in cannot emulate this input)"):
            cam.moe_dispatch_prefill(x, idx, w, ntpe, slot, cam.group_name(), bad_rank, bad_size, False)
    dist.barrier()


def check_bad_ids_are_silent(rank: int, world: int) -> None:
    """No value check on ids (get_dispatch_layout.cpp): an id outside [0, E) raises nothing and faults nothing;
    the layout is undefined (the stand-in corrupts it), and the process group works on."""
    experts = 2 * world
    _, idx, _ = prefill_inputs(rank, world, experts, 2, False)
    good = cam.get_dispatch_layout(idx, experts, world)[0]
    bad = idx.clone()
    bad[0, 0] = experts
    ntpe, _ = cam.get_dispatch_layout(bad, experts, world)
    assert not torch.equal(ntpe, good)
    dist.barrier()


# ----------------------------------------------------------------------------- process plumbing
def _worker(rank: int, world: int, store: str) -> None:
    os.environ["CAMIT_STANDIN_NO_OPAPI_CHECK"] = "1"
    os.environ["HCCL_BUFFSIZE"] = "4096"   # the prefill ops' window (the API guide's setting)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    # a file store: no port to pick and lose to another process between picking and binding
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    try:
        for use_quant in (False, True):
            check_prefill(rank, world, use_quant, skip=False)
        check_prefill(rank, world, use_quant=True, skip=True)     # last rank receives nothing
        check_fused(rank, world, separated=False, extras=False)
        check_fused(rank, world, separated=True, extras=True)
        check_subgroup_and_errors(rank, world)
        check_bad_ids_are_silent(rank, world)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_ops_across_processes(world: int, tmp_path) -> None:
    mp.spawn(_worker, args=(world, str(tmp_path / "store")), nprocs=world, join=True)
