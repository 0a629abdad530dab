"""The CPU stand-in of umdk_cam_op_lib in one process: schemas, layout, quantisation, argument checks,
the libcust_opapi requirement, group_ep resolution, and fused_deep_moe on a one-rank gloo group."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

STANDIN = str(Path(__file__).resolve().parents[2] / "standin")
if STANDIN not in sys.path:
    sys.path.insert(0, STANDIN)

import umdk_cam_op_lib as cam  # noqa: E402
from umdk_cam_op_lib import quant  # noqa: E402

OPS = torch.ops.umdk_cam_op_lib
ASSERT_RE = r"^Failed: Assertion error \S+\.py:\d+ error message or error code is '"

# cam-ops.md §1, copied from umdk 00cc16f1 src/cam/comm_operator/pybind/pybind.cpp
UPSTREAM_SCHEMAS = """
fused_deep_moe(Tensor x, Tensor expert_ids, Tensor[] gmm1_weight, Tensor[] gmm1_weight_scale,
               Tensor[] gmm2_weight, Tensor[] gmm2_weight_scale, Tensor expert_scales,
               Tensor? share_gmm1_weight, Tensor? share_gmm1_weight_scale,
               Tensor? share_gmm2_weight, Tensor? share_gmm2_weight_scale,
               Tensor? expert_smooth_scales, Tensor? share_smooth_scales, Tensor? x_active_mask,
               str group_ep, int ep_rank_size, int ep_rank_id, int moe_expert_num,
               int quant_mode, int global_bs) -> Tensor[]
get_dispatch_layout(Tensor topk_idx, int num_experts, int num_ranks) -> (Tensor, Tensor)
moe_dispatch_prefill(Tensor x, Tensor topk_idx, Tensor topk_weights, Tensor num_tokens_per_expert,
                     Tensor send_token_idx_small, str group_ep, int rank, int num_ranks, bool use_quant)
                     -> (Tensor, Tensor, Tensor, Tensor, Tensor)
moe_combine_prefill(Tensor x, Tensor topk_idx, Tensor topk_weights, Tensor src_idx, Tensor send_head,
                    str group_ep, int rank, int num_ranks) -> Tensor
"""


def _upstream() -> dict[str, str]:
    text = " ".join(UPSTREAM_SCHEMAS.split())
    names = ("fused_deep_moe", "get_dispatch_layout", "moe_dispatch_prefill", "moe_combine_prefill")
    starts = sorted(text.index(n + "(") for n in names) + [len(text)]
    chunks = [text[a:b].strip() for a, b in zip(starts, starts[1:])]
    return {c[: c.index("(")]: c for c in chunks}


@pytest.fixture
def no_opapi_check(monkeypatch):
    monkeypatch.setenv("CAMIT_STANDIN_NO_OPAPI_CHECK", "1")


@pytest.fixture
def world1(no_opapi_check):
    """A one-rank gloo group in this process (HashStore: no sockets)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- schemas and exports
@pytest.mark.parametrize("name", sorted(_upstream()))
def test_schema_is_upstream_verbatim(name):
    assert str(getattr(OPS, name).default._schema) == f"umdk_cam_op_lib::{_upstream()[name]}"
    assert callable(getattr(cam, name))


def test_version_and_only_the_four_ops():
    assert cam.__version__ == "209.0.0b1"
    assert set(cam.SCHEMAS) == set(_upstream())


# ----------------------------------------------------------------------------- get_dispatch_layout
def _np_layout(idx: np.ndarray, num_experts: int) -> tuple[np.ndarray, np.ndarray]:
    counts, seen = np.zeros(num_experts, dtype=np.int32), Counter[int]()
    slots = np.zeros(idx.shape, dtype=np.int32)
    for t in range(idx.shape[0]):
        for k in range(idx.shape[1]):
            e = int(idx[t, k])
            slots[t, k] = seen[e]
            seen[e] += 1
            counts[e] += 1
    return counts, slots


@pytest.mark.parametrize("tokens,top_k,experts,ranks,dtype", [
    (32, 8, 16, 16, torch.int64), (37, 5, 24, 4, torch.int32), (1, 1, 2, 2, torch.int64), (0, 4, 8, 2, torch.int64),
])
def test_layout_matches_numpy(no_opapi_check, tokens, top_k, experts, ranks, dtype):
    rng = np.random.default_rng(tokens * 31 + experts)
    weights = rng.dirichlet(np.full(experts, 0.3))          # very non-uniform expert popularity
    rows = [rng.choice(experts, size=top_k, replace=False, p=weights) for _ in range(tokens)]
    idx = np.array(rows, dtype=np.int64).reshape(tokens, top_k)
    ntpe, slot = OPS.get_dispatch_layout(torch.from_numpy(idx).to(dtype), experts, ranks)
    want_counts, want_slots = _np_layout(idx, experts)
    assert ntpe.dtype == torch.int32 and slot.dtype == torch.int32
    assert ntpe.shape == (experts,) and slot.shape == (tokens, top_k)
    np.testing.assert_array_equal(ntpe.numpy(), want_counts)
    np.testing.assert_array_equal(slot.numpy(), want_slots)
    again = cam.get_dispatch_layout(torch.from_numpy(idx), experts, ranks)
    assert torch.equal(again[0], ntpe) and torch.equal(again[1], slot)


@pytest.mark.parametrize("idx,experts,ranks,cond", [
    (torch.tensor([[0, -1]]), 4, 2, "0 <= topk_idx < num_experts"),
    (torch.tensor([[0, 4]]), 4, 2, "0 <= topk_idx < num_experts"),
    (torch.tensor([0, 1]), 4, 2, "topk_idx.dim() == 2"),
    (torch.tensor([[0, 1], [1, 2]]).t(), 4, 2, "topk_idx.is_contiguous()"),
    (torch.tensor([[0, 1]]), 0, 1, "num_experts > 0"),
    (torch.tensor([[0, 1]]), 4, 3, "num_experts % num_ranks == 0"),
    (torch.tensor([[0, 1]]), 4, 385, "1 <= num_ranks <= 384"),
])
def test_layout_argument_checks(no_opapi_check, idx, experts, ranks, cond):
    with pytest.raises(RuntimeError, match=ASSERT_RE) as info:
        OPS.get_dispatch_layout(idx, experts, ranks)
    assert f"'{cond}'" in str(info.value)


# ----------------------------------------------------------------------------- quantisation
def test_quant_round_trip_within_half_a_step():
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(64, 512, generator=g) * torch.logspace(-3, 2, 64).unsqueeze(1)).to(torch.bfloat16)
    q, scale = quant.quantize_per_row(x)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (64,)
    assert int(q.abs().max(dim=1).values.min()) == 127                  # every row uses the full range
    back = quant.dequantize_per_row(q, scale)
    err = (back - x.float()).abs().max(dim=1).values
    assert bool((err <= scale * 0.5 * (1 + 1e-5)).all())
    amax = x.float().abs().amax(dim=1)
    assert torch.equal(scale, (1 / (127 / (amax + 1e-12))).float())
    assert quant.dequantize_per_row(q, scale, torch.bfloat16).dtype == torch.bfloat16


def test_quant_rounds_half_to_even_and_handles_zero_rows():
    row = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.4]])   # scale == 1 exactly
    q, scale = quant.quantize_per_row(row)
    assert q.tolist() == [[127, 0, 2, 2, 0, -2, -2, 3]]
    assert float(scale) == 1.0
    q0, s0 = quant.quantize_per_row(torch.zeros(2, 8))
    assert int(q0.abs().sum()) == 0 and bool(torch.isfinite(s0).all())


# ----------------------------------------------------------------------------- libcust_opapi requirement
@pytest.mark.parametrize("op,api", [
    ("get_dispatch_layout", "aclnnDispatchLayout"), ("moe_dispatch_prefill", "aclnnMoeDispatchNormal"),
    ("moe_combine_prefill", "aclnnMoeCombineNormal"), ("fused_deep_moe", "aclnnFusedDeepMoe"),
])
def test_opapi_missing_gives_upstream_message(monkeypatch, tmp_path, op, api):
    monkeypatch.delenv("CAMIT_STANDIN_NO_OPAPI_CHECK", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{tmp_path}:/nonexistent")
    # the check comes first, before any argument is looked at (as the dlopen does upstream)
    args = {"get_dispatch_layout": (torch.zeros(1, 1, dtype=torch.int64), 2, 2),
            "moe_dispatch_prefill": (torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.int64), torch.zeros(1, 1),
                                     torch.zeros(2, dtype=torch.int32), torch.zeros(1, 1, dtype=torch.int32),
                                     "0", 0, 2, False),
            "moe_combine_prefill": (torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.int64), torch.zeros(1, 1),
                                    torch.zeros(3, dtype=torch.int32), torch.zeros(2, dtype=torch.int32),
                                    "0", 0, 2),
            "fused_deep_moe": (torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.int32), [], [], [], [],
                               torch.zeros(1, 1), None, None, None, None, None, None, None, "0", 1, 0, 1, 0, 0)}
    with pytest.raises(RuntimeError) as info:
        getattr(OPS, op)(*args[op])
    assert str(info.value) == f"{api} or {api}GetWorkspaceSize not in libopapi.so, or libopapi.so not found."


def test_opapi_found_on_ld_library_path(monkeypatch, tmp_path):
    monkeypatch.delenv("CAMIT_STANDIN_NO_OPAPI_CHECK", raising=False)
    lib = tmp_path / "vendors" / "CAM" / "op_api" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcust_opapi.so").write_text("placeholder\n")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"::/nonexistent:{lib}")
    ntpe, _ = OPS.get_dispatch_layout(torch.tensor([[1, 0]]), 2, 1)
    assert ntpe.tolist() == [1, 1]
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    monkeypatch.setenv("CAMIT_STANDIN_NO_OPAPI_CHECK", "1")
    assert OPS.get_dispatch_layout(torch.tensor([[1, 0]]), 2, 1)[0].tolist() == [1, 1]


# ----------------------------------------------------------------------------- groups, one-rank world
def test_group_name_resolves_back(world1):
    name = cam.group_name()
    assert isinstance(name, str) and name == cam.group_name(world1)
    assert cam.resolve_group(name) is world1
    with pytest.raises(RuntimeError, match=ASSERT_RE + "group_ep names a process group'"):
        cam.resolve_group("no-such-group")


def test_group_ep_needs_initialised_dist(no_opapi_check):
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="not initialised"):
        cam.group_name()


def test_prefill_needs_two_ranks_and_matching_rank(world1):
    x, idx = torch.zeros(2, 8, dtype=torch.bfloat16), torch.tensor([[0], [1]])
    ntpe, slot = OPS.get_dispatch_layout(idx, 2, 1)
    with pytest.raises(RuntimeError, match=ASSERT_RE + "2 <= num_ranks <= 384'"):
        OPS.moe_dispatch_prefill(x, idx, torch.ones(2, 1), ntpe, slot, cam.group_name(), 0, 1, False)
    with pytest.raises(RuntimeError, match=ASSERT_RE + "num_ranks == group size'"):
        OPS.moe_dispatch_prefill(x, idx, torch.ones(2, 1), ntpe, slot, cam.group_name(), 0, 2, False)
    with pytest.raises(RuntimeError, match=ASSERT_RE + "num_tokens_per_expert.dtype == int32'"):
        OPS.moe_dispatch_prefill(x, idx, torch.ones(2, 1), ntpe.long(), slot, cam.group_name(), 0, 2, False)


def _np_ffn(row: np.ndarray, w1: np.ndarray, s1: np.ndarray, w2: np.ndarray, s2: np.ndarray) -> np.ndarray:
    def q8(v: np.ndarray) -> tuple[np.ndarray, np.float32]:
        scale = np.float32(127) / (np.float32(np.abs(v).max()) + np.float32(1e-12))
        return np.rint(v * scale), np.float32(1) / scale
    qx, sx = q8(row.astype(np.float32))
    h = (qx @ w1.astype(np.float64)).astype(np.float32) * s1 * sx
    inter = h.shape[0] // 2
    a = (h[:inter] / (1 + np.exp(-h[:inter])) * h[inter:]).astype(np.float32)
    qa, sa = q8(a)
    return (qa @ w2.astype(np.float64)).astype(np.float32) * s2 * sa


def test_fused_deep_moe_one_rank_against_numpy(world1):
    g = torch.Generator().manual_seed(11)
    bs, hidden, inter, local, top_k = 6, 256, 128, 4, 2
    x = (torch.rand(bs, hidden, generator=g) * 10 - 5).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(local, generator=g)[:top_k] for _ in range(bs)]).to(torch.int32)
    scales = torch.rand(bs, top_k, generator=g)
    w1 = torch.randint(-16, 16, (local, hidden, 2 * inter), generator=g, dtype=torch.int8)
    s1 = torch.rand(local, 2 * inter, generator=g) * 0.003 + 0.0015
    w2 = torch.randint(-16, 16, (local, inter, hidden), generator=g, dtype=torch.int8)
    s2 = torch.rand(local, hidden, generator=g) * 0.003 + 0.0015
    out, share_out, nums = cam.fused_deep_moe(x, ids, [w1], [s1], [w2], [s2], scales, None, None, None, None,
                                              None, None, None, cam.group_name(), 1, 0, local, 0, bs)
    assert out.dtype == torch.bfloat16 and share_out.shape == (bs, hidden)
    assert nums.dtype == torch.int64 and nums.tolist() == np.bincount(ids.view(-1).numpy(), minlength=local).tolist()
    ref = np.zeros((bs, hidden), dtype=np.float32)
    for t in range(bs):
        for k in range(top_k):
            e = int(ids[t, k])
            y = _np_ffn(x[t].float().numpy(), w1[e].numpy(), s1[e].numpy(), w2[e].numpy(), s2[e].numpy())
            ref[t] += scales[t, k].item() * torch.from_numpy(y).to(torch.bfloat16).float().numpy()
    np.testing.assert_allclose(out.float().numpy(), ref, rtol=1e-2, atol=1e-2)   # bf16 output rounding
    with pytest.raises(RuntimeError, match=ASSERT_RE + "ep_rank_id == group rank'"):
        cam.fused_deep_moe(x, ids, [w1], [s1], [w2], [s2], scales, None, None, None, None,
                           None, None, None, cam.group_name(), 1, 1, local, 0, 0)
    with pytest.raises(RuntimeError, match=ASSERT_RE + "0 <= expert_ids < num_experts'"):
        cam.fused_deep_moe(x, ids + local, [w1], [s1], [w2], [s2], scales, None, None, None, None,
                           None, None, None, cam.group_name(), 1, 0, local, 0, 0)


def test_fused_deep_moe_meta_kernel_gives_shapes():
    x = torch.empty(16, 1024, dtype=torch.bfloat16, device="meta")
    out = OPS.fused_deep_moe(x, torch.empty(16, 8, dtype=torch.int32, device="meta"), [], [], [], [],
                             torch.empty(16, 8, device="meta"), None, None, None, None, None, None, None,
                             "0", 4, 0, 16, 0, 64)
    assert [tuple(t.shape) for t in out] == [(16, 1024), (16, 1024), (4,)]
    assert out[2].dtype == torch.int64 and out[0].device.type == "meta"


def test_rows_travel_as_bytes_bit_exact(world1, monkeypatch):
    """bf16/fp16 rows never reach gloo as such: every column is packed into one uint8 tensor."""
    from umdk_cam_op_lib._comm import exchange_rows

    seen: list[torch.dtype] = []
    real = dist.all_to_all_single

    def spy(out, inp, *args, **kwargs):
        seen.append(inp.dtype)
        return real(out, inp, *args, **kwargs)

    monkeypatch.setattr(dist, "all_to_all_single", spy)
    g = torch.Generator().manual_seed(5)
    cols = [torch.randn(7, 33, generator=g).to(torch.bfloat16), torch.randn(7, 5, generator=g).half(),
            torch.randint(-128, 127, (7, 9), generator=g, dtype=torch.int8), torch.arange(21).view(7, 3),
            torch.rand(7, 1, generator=g)]
    got, src = exchange_rows(cols, torch.zeros(7, dtype=torch.int64), world1)
    assert src.tolist() == [0] * 7
    for want, have in zip(cols, got):
        assert have.dtype == want.dtype and torch.equal(have.view(torch.uint8), want.view(torch.uint8))
    assert seen and set(seen) <= {torch.uint8, torch.int64}        # payload as bytes, counts as int64
    empty, src = exchange_rows([c[:0] for c in cols], torch.zeros(0, dtype=torch.int64), world1)
    assert [tuple(e.shape) for e in empty] == [(0, 33), (0, 5), (0, 9), (0, 3), (0, 1)] and src.numel() == 0
