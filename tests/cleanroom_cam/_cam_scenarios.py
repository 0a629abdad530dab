"""Per-rank scenarios run by the multi-process tests (float64 references)."""
import os

import torch
import torch.distributed as dist
import umdk_cam_op_lib


def _gather(t):
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous())
    return out


def _rand_topk(g, bs, E, k):
    return torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(bs)])


# ---------------------------------------------------------------------------
def dispatch_combine(rank, world, group, E, k, h, use_quant, bs_list):
    os.environ["HCCL_BUFFSIZE"] = "4096"
    L = E // world
    bs = bs_list[rank]
    g = torch.Generator().manual_seed(100 + rank)
    topk = _rand_topk(g, bs, E, k)
    x = (torch.randn(bs, h, generator=g) * 3).to(torch.bfloat16)
    w = torch.rand(bs, k, generator=g)
    n_per_e, sti = torch.ops.umdk_cam_op_lib.get_dispatch_layout(topk_idx=topk, num_experts=E, num_ranks=world)
    # layout reference
    ref_cnt = torch.bincount(topk.view(-1), minlength=E).to(torch.int32)
    assert torch.equal(n_per_e, ref_cnt)
    seen = [0] * E
    for t in range(bs):
        for j in range(k):
            e = int(topk[t, j])
            assert int(sti[t, j]) == seen[e]
            seen[e] += 1

    recv_x, scales, eidx, recv_count, rtpe = torch.ops.umdk_cam_op_lib.moe_dispatch_prefill(
        x=x, topk_idx=topk, topk_weights=w, num_tokens_per_expert=n_per_e, send_token_idx_small=sti,
        group_ep=group.encode("utf-8"), rank=rank, num_ranks=world, use_quant=use_quant)

    # reference from every rank's inputs
    maxbs = max(bs_list)
    pad_topk = torch.full((maxbs, k), -1, dtype=torch.int64)
    pad_topk[:bs] = topk
    pad_x = torch.zeros(maxbs, h, dtype=torch.float64)
    pad_x[:bs] = x.double()
    all_topk = _gather(pad_topk)
    all_x = _gather(pad_x)
    rows, trips, counts = [], [], []
    for l in range(L):
        e = rank * L + l
        for s in range(world):
            c = 0
            for t in range(bs_list[s]):
                for j in range(k):
                    if int(all_topk[s][t, j]) == e:
                        rows.append(all_x[s][t])
                        trips.append((s, t, j))
                        c += 1
            counts.append(c)
    total = len(rows)
    assert recv_count.dtype == torch.int32 and recv_count.shape == (E,)
    assert recv_count.tolist() == torch.cumsum(torch.tensor(counts), 0).tolist()
    assert rtpe.dtype == torch.int64 and rtpe.tolist() == [sum(counts[l * world:(l + 1) * world]) for l in range(L)]
    assert eidx.dtype == torch.int32 and eidx.shape == (max(total, 1) * 3,)
    assert recv_x.shape == (max(total, 1), h) and scales.shape == (max(total, 1),)
    assert eidx.view(-1, 3)[:total].tolist() == [list(tr) for tr in trips]
    ref = torch.stack(rows) if rows else torch.zeros(0, h, dtype=torch.float64)
    if use_quant:
        assert recv_x.dtype == torch.int8 and scales.dtype == torch.float32
        amax = ref.abs().amax(dim=1)
        q_ref = torch.round(ref * (127.0 / amax).unsqueeze(1))
        assert (recv_x[:total].double() - q_ref).abs().max().item() <= 1
        assert torch.allclose(scales[:total].double(), amax / 127.0, rtol=1e-6)
        deq = (recv_x[:total].float() * scales[:total].unsqueeze(1)).to(torch.bfloat16)
    else:
        assert recv_x.dtype == torch.bfloat16
        assert torch.equal(recv_x[:total].double(), ref)
        assert bool(torch.isnan(scales).all())  # never written without quantisation
        deq = recv_x
    combined = torch.ops.umdk_cam_op_lib.moe_combine_prefill(
        x=deq if total else recv_x.to(torch.bfloat16) if not use_quant else deq, topk_idx=topk, topk_weights=w,
        src_idx=eidx, send_head=recv_count, group_ep=group, rank=rank, num_ranks=world)
    assert combined.dtype == torch.bfloat16 and combined.shape == (bs, h)
    ref_c = x.double() * w.double().sum(dim=1, keepdim=True)
    err = (combined.double() - ref_c).abs().mean() / ref_c.abs().mean().clamp_min(1e-12)
    assert err.item() < (1e-2 if use_quant else 5e-3), err.item()


def dispatch_buffsize_too_small(rank, world, group):
    os.environ.pop("HCCL_BUFFSIZE", None)
    E, k, h, bs = 4, 2, 1024, 4
    topk = torch.tensor([[0, 1], [2, 3], [1, 2], [3, 0]])
    x = torch.ones(bs, h, dtype=torch.bfloat16)
    w = torch.ones(bs, k)
    n, sti = umdk_cam_op_lib.get_dispatch_layout(topk, E, world)
    try:
        umdk_cam_op_lib.moe_dispatch_prefill(x, topk, w, n, sti, group, rank, world, False)
    except RuntimeError as e:
        msg = str(e)
        assert msg.startswith("call aclnnMoeDispatchNormal failed, detail:"), msg
        assert "HCCL_BUFFSIZE is too SMALL" in msg and "HCCL_BUFFSIZE=200MB" in msg, msg
    else:
        raise AssertionError("expected the dispatch tiling to fail with the default HCCL_BUFFSIZE")


# ---------------------------------------------------------------------------
def _ref_ffn(x64, w1, w1s, w2, w2s):
    amax = x64.abs().amax(dim=1, keepdim=True)
    q = torch.round(x64 * 127.0 / amax)
    ts = amax / 127.0
    d = (q @ w1.double()) * w1s.double() * ts
    n = d.size(1) // 2
    y = d[:, :n] / (1 + torch.exp(-d[:, :n])) * d[:, n:]
    a2 = y.abs().amax(dim=1, keepdim=True)
    q2 = torch.round(y * 127.0 / a2)
    return (q2 @ w2.double()) * w2s.double() * a2 / 127.0


def fused(rank, world, group, E, k, h, n1, bs_list, coupled, shared, use_mask):
    L = E // world
    bs = bs_list[rank]
    g = torch.Generator().manual_seed(7)  # identical weights on every rank (per-rank slices)
    W1 = torch.randint(-8, 8, (E, h, n1), generator=g, dtype=torch.int8)
    W1s = torch.rand(E, n1, generator=g) * 0.01 + 0.005
    W2 = torch.randint(-8, 8, (E, n1 // 2, h), generator=g, dtype=torch.int8)
    W2s = torch.rand(E, h, generator=g) * 0.01 + 0.005
    SW1 = torch.randint(-8, 8, (h, n1), generator=g, dtype=torch.int8)
    SW1s = torch.rand(n1, generator=g) * 0.01 + 0.005
    SW2 = torch.randint(-8, 8, (n1 // 2, h), generator=g, dtype=torch.int8)
    SW2s = torch.rand(h, generator=g) * 0.01 + 0.005
    gr = torch.Generator().manual_seed(50 + rank)
    x = torch.randn(bs, h, generator=gr).to(torch.bfloat16)
    ids = _rand_topk(gr, bs, E, k).to(torch.int32)
    if bs > 1:
        ids[1, 0] = -1  # placeholder
    scales = torch.rand(bs, k, generator=gr)
    mine = slice(rank * L, (rank + 1) * L)
    if coupled:
        g1, g1s, g2, g2s = [W1[mine]], [W1s[mine]], [W2[mine]], [W2s[mine]]
    else:
        g1 = list(W1[mine]); g1s = list(W1s[mine]); g2 = list(W2[mine]); g2s = list(W2s[mine])
    active = bs - 1 if use_mask else bs
    mask = None
    if use_mask:
        mask = torch.zeros(bs, dtype=torch.bool)
        mask[:active] = True
    out, share_out, etn = torch.ops.umdk_cam_op_lib.fused_deep_moe(
        x, ids, g1, g1s, g2, g2s, scales,
        SW1 if shared else None, SW1s if shared else None, SW2 if shared else None, SW2s if shared else None,
        None, None, mask, group, world, rank, E, 0, max(bs_list) * world)
    assert out.shape == (bs, h) and out.dtype == x.dtype
    assert share_out.shape == (bs, h) and etn.shape == (L,) and etn.dtype == torch.int64
    ref = torch.zeros(active, h, dtype=torch.float64)
    for t in range(active):
        for j in range(k):
            e = int(ids[t, j])
            if e < 0:
                continue
            o = _ref_ffn(x[t:t + 1].double(), W1[e], W1s[e], W2[e], W2s[e])
            ref[t] += scales[t, j].double() * o[0]
    err = (out[:active].double() - ref).abs().mean() / ref.abs().mean()
    assert err.item() < 2e-2, err.item()
    if use_mask:
        assert bool(torch.isnan(out[active:].float()).all())  # rows of masked tokens are never written
    if shared:
        sref = _ref_ffn(x.double(), SW1, SW1s, SW2, SW2s)
        serr = (share_out.double() - sref).abs().mean() / sref.abs().mean()
        assert serr.item() < 2e-2, serr.item()
    else:
        assert bool(torch.isnan(share_out.float()).all())
    # expert_token_nums: tokens received by each local expert from all ranks
    maxbs = max(bs_list)
    pad = torch.full((maxbs, k), -1, dtype=torch.int32)
    pad[:active] = ids[:active]
    allids = torch.cat(_gather(pad)).view(-1)
    for l in range(L):
        assert int(etn[l]) == int((allids == rank * L + l).sum())


def suite(rank, world, group, steps):
    """Run several scenarios in one spawned world (spawning is the expensive part)."""
    import sys
    mod = sys.modules[__name__]
    for name, args in steps:
        try:
            getattr(mod, name)(rank, world, group, *args)
        except Exception as e:
            raise AssertionError("scenario %s%r failed on rank %d: %s" % (name, args, rank, e)) from e
        dist.barrier()


def faults(rank, world, group):
    """Out-of-range expert ids fault the device (STANDIN hook); combine with a
    src_idx that never fills a (token, k) slot raises instead of hanging."""
    import torch_npu
    os.environ["HCCL_BUFFSIZE"] = "4096"
    E, k, h, bs = 4, 2, 1024, 3
    topk = torch.tensor([[0, 1], [2, E], [3, 1]])
    x = torch.ones(bs, h, dtype=torch.bfloat16)
    w = torch.ones(bs, k)
    n, sti = umdk_cam_op_lib.get_dispatch_layout(topk, E, world)
    assert n.tolist() == [1, 2, 1, 1] and int(sti[1, 1]) == 0x7FFFFFFF  # invalid id: garbage slot, not counted
    torch_npu.STANDIN = True
    try:
        umdk_cam_op_lib.moe_dispatch_prefill(x, topk, w, n, sti, group, rank, world, False)
    except RuntimeError as e:
        assert "507035" in str(e), str(e)
    else:
        raise AssertionError("expected a device fault")
    finally:
        torch_npu.STANDIN = False
    topk = torch.tensor([[0, 1], [2, 3], [3, 1]])
    n, sti = umdk_cam_op_lib.get_dispatch_layout(topk, E, world)
    rx, _, eidx, rc, _ = umdk_cam_op_lib.moe_dispatch_prefill(x, topk, w, n, sti, group, rank, world, False)
    bad = eidx.clone().view(-1, 3)
    bad[:, 2] = 0   # every row claims top-k slot 0 -> slot 1 of each token never arrives
    try:
        umdk_cam_op_lib.moe_combine_prefill(rx, topk, w, bad.view(-1), rc, group, rank, world)
    except RuntimeError as e:
        assert "waits forever" in str(e), str(e)
    else:
        raise AssertionError("expected the combine to report missing slots")


def dispatch_tiling_after_notify(rank, world, group):
    """Checks of aclnnMoeDispatchNormal run after the notify exchange (symmetric here)."""
    import _cam_harness as H
    os.environ["HCCL_BUFFSIZE"] = "4096"
    E, k, bs = 4, 2, 3
    topk = torch.tensor([[0, 1], [2, 3], [3, 1]])
    w = torch.ones(bs, k)
    n, sti = umdk_cam_op_lib.get_dispatch_layout(topk, E, world)
    cases = []
    cases.append((torch.ones(bs, 512, dtype=torch.bfloat16), "xShape dims1(H) should be in [1024, 7168], but got 512."))
    cases.append((torch.ones(bs, 1024, dtype=torch.float32),
                  "x dataType is invalid, dataType should be bf16 or float16, but is ."))
    nz = torch.ones(bs, 1024, dtype=torch.float16)
    H.tag_format(nz, 29)
    cases.append((nz, "x format is invalid."))
    for x, inner in cases:
        try:
            umdk_cam_op_lib.moe_dispatch_prefill(x, topk, w, n, sti, group, rank, world, False)
        except RuntimeError as e:
            assert str(e).startswith("call aclnnMoeDispatchNormal failed, detail:EZ9999") and inner in str(e), str(e)
        else:
            raise AssertionError("expected dispatch tiling failure: " + inner)
    # fp16 passes
    rx = umdk_cam_op_lib.moe_dispatch_prefill(torch.ones(bs, 1024, dtype=torch.float16), topk, w, n, sti, group,
                                             rank, world, False)[0]
    assert rx.dtype == torch.float16
