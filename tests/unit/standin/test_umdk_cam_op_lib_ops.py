"""The CPU stand-in of umdk_cam_op_lib in one process: schemas, layout, quantisation, argument checks,
the libcust_opapi requirement, group_ep resolution, and fused_deep_moe on a one-rank gloo group."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

STANDIN = str(Path(__file__).resolve().parents[3] / "standin")
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


def test_no_module_version_and_only_the_four_ops():
    # the real wheel is a bare extension module: no __version__ (its version is the distribution metadata)
    assert not hasattr(cam, "__version__")
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
    (32, 8, 16, 16, torch.int64), (37, 5, 24, 4, torch.int32), (1, 1, 2, 2, torch.int64),
    (8000, 16, 512, 256, torch.int64),
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


# pybind get_dispatch_layout.cpp: dim, contiguity, num_experts > 0 (TORCH_BIND_ASSERT)
@pytest.mark.parametrize("idx,experts,ranks,cond", [
    (torch.tensor([0, 1]), 4, 2, "topkIdxInt64.dim() == DIM_TWO"),
    (torch.tensor([[0, 1], [1, 2]]).t(), 4, 2, "topkIdxInt64.is_contiguous()"),
    (torch.tensor([[0, 1]]), 0, 1, "numExperts > 0"),
])
def test_layout_argument_checks(no_opapi_check, idx, experts, ranks, cond):
    with pytest.raises(RuntimeError, match=ASSERT_RE) as info:
        OPS.get_dispatch_layout(idx, experts, ranks)
    assert f"'{cond}'" in str(info.value)


TILING_RE = r"^call {} failed, detail:EZ9999: Inner Error!\nEZ9999: \[PID: \d+\] \S+ {}: "


# dispatch_layout_tiling.cpp: ranks (0, 384], experts (0, 512], E % R, top_k (0, 16], tokens (0, 8000]
@pytest.mark.parametrize("tokens,top_k,experts,ranks,message", [
    (1, 1, 4, 385, "rankSize is invalid, only support (0, 384], but got rankSize=385."),
    (1, 1, 4, 0, "rankSize is invalid, only support (0, 384], but got rankSize=0."),
    (1, 1, 513, 1, "numExperts is invalid, only support (0, 512], but got numExperts=513."),
    (1, 1, 4, 3, "numExperts (4) not divisible by numRanks (3)."),
    (1, 17, 32, 2, "numTopkPtr is invalid, only support (0, 16], but got numTopk=17."),
    (1, 0, 4, 2, "numTopkPtr is invalid, only support (0, 16], but got numTopk=0."),
    (8001, 1, 4, 2, "tokenNum is invalid, only support (0, 8000], but got tokenNum=8001."),
    (0, 4, 8, 2, "tokenNum is invalid, only support (0, 8000], but got tokenNum=0."),
])
def test_layout_tiling_limits(no_opapi_check, tokens, top_k, experts, ranks, message):
    idx = torch.zeros((tokens, top_k), dtype=torch.int64)
    with pytest.raises(RuntimeError, match=TILING_RE.format("aclnnDispatchLayout", "DispatchLayout")) as info:
        OPS.get_dispatch_layout(idx, experts, ranks)
    assert message in str(info.value) and "[FILE:dispatch_layout_tiling.cpp]" in str(info.value)


def test_layout_makes_no_value_check_and_an_out_of_range_id_silently_corrupts(no_opapi_check):
    """An id outside [0, E) (or -1) raises nothing: the kernel indexes its UB buffers with it (dispatch_layout.h),
    a stray write. The stand-in drops the copy and overwrites one output value with garbage, reproducibly."""
    good = OPS.get_dispatch_layout(torch.tensor([[0, 2], [3, 1], [1, 0]]), 4, 2)
    for bad_id in (-1, 4):
        idx = torch.tensor([[0, bad_id], [3, 1], [1, 0]])
        first = OPS.get_dispatch_layout(idx, 4, 2)
        again = OPS.get_dispatch_layout(idx, 4, 2)
        assert all(torch.equal(a, b) for a, b in zip(first, again))          # seeded: reproducible
        clean_counts = [2, 2, 0, 1]                                           # the good ids' counts
        assert first[0].tolist() != clean_counts or not torch.equal(first[1], good[1])


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
_OPAPI_CALLS = {
    "get_dispatch_layout": "ops.get_dispatch_layout(torch.zeros(1, 1, dtype=torch.int64), 2, 2)",
    "moe_dispatch_prefill": "ops.moe_dispatch_prefill(torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.int64), "
                            "torch.zeros(1, 1), torch.zeros(2, dtype=torch.int32), "
                            "torch.zeros(1, 1, dtype=torch.int32), '0', 0, 2, False)",
    "moe_combine_prefill": "ops.moe_combine_prefill(torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.int64), "
                           "torch.zeros(1, 1), torch.zeros(3, dtype=torch.int32), torch.zeros(2, dtype=torch.int32), "
                           "'0', 0, 2)",
    "fused_deep_moe": "ops.fused_deep_moe(torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.int32), [], [], [], [], "
                      "torch.zeros(1, 1), None, None, None, None, None, None, None, '0', 1, 0, 1, 0, 0)",
}


def _call_in_fresh_process(op: str, ld_library_path: str | None, tmp_path: Path) -> subprocess.CompletedProcess:
    """The op call in a new interpreter: the loader reads LD_LIBRARY_PATH once, at process start."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "CAMIT_STANDIN_NO_OPAPI_CHECK")}
    env["PYTHONPATH"] = STANDIN
    if ld_library_path is not None:
        env["LD_LIBRARY_PATH"] = ld_library_path
    code = ("import torch, umdk_cam_op_lib\nops = torch.ops.umdk_cam_op_lib\n"
            f"try:\n    {_OPAPI_CALLS[op]}\n"
            "except RuntimeError as exc:\n    print('ERR', exc)\nelse:\n    print('OK')\n")
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def opapi_dir(tmp_path_factory) -> Path:
    """A real libcust_opapi.so (the .run's), compiled into a tmp dir."""
    from framework.lab import artifacts

    return artifacts.build_opapi_library(tmp_path_factory.mktemp("opapi") / "op_api" / "lib").parent


@pytest.mark.parametrize("op,api", [
    ("get_dispatch_layout", "aclnnDispatchLayout"), ("moe_dispatch_prefill", "aclnnNotifyDispatch"),
    ("moe_combine_prefill", "aclnnMoeCombineNormal"), ("fused_deep_moe", "aclnnFusedDeepMoe"),
])
def test_opapi_missing_gives_upstream_message(tmp_path, opapi_dir, op, api):
    # the library exists on disk, but dlopen by bare name only looks at LD_LIBRARY_PATH (and the ld cache)
    assert (opapi_dir / "libcust_opapi.so").is_file()
    res = _call_in_fresh_process(op, f"{tmp_path}:/nonexistent", tmp_path)
    # EXEC_NPU_CMD's TORCH_CHECK text, with upstream's missing space (pytorch_npu_helper.hpp)
    assert res.stdout.strip() == f"ERR {api} or {api}GetWorkspaceSize not in libopapi.so, or libopapi.sonot found.", \
        res.stderr


@pytest.mark.parametrize("op", sorted(_OPAPI_CALLS))
def test_opapi_dlopened_by_bare_name_through_ld_library_path(tmp_path, opapi_dir, op):
    res = _call_in_fresh_process(op, f"::/nonexistent:{opapi_dir}", tmp_path)
    # found: the call goes on to the op's own checks (here: argument, tiling or group errors), never the opapi one
    assert res.returncode == 0 and "not in libopapi.so" not in res.stdout, res.stdout + res.stderr
    if op == "get_dispatch_layout":
        assert res.stdout.strip() == "OK"


def test_opapi_check_can_be_turned_off(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env.update(PYTHONPATH=STANDIN, CAMIT_STANDIN_NO_OPAPI_CHECK="1")
    res = subprocess.run([sys.executable, "-c", "import torch, umdk_cam_op_lib as m; "
                          "print(m.get_dispatch_layout(torch.tensor([[1, 0]]), 2, 1)[0].tolist())"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() == "[1, 1]", res.stderr


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


def test_prefill_needs_two_ranks_and_matching_rank(world1, monkeypatch):
    monkeypatch.setenv("HCCL_BUFFSIZE", "4096")
    x, idx = torch.zeros(2, 1024, dtype=torch.bfloat16), torch.tensor([[0], [1]])
    ntpe, slot = OPS.get_dispatch_layout(idx, 2, 1)
    with pytest.raises(RuntimeError, match=ASSERT_RE + "numRanks >= NUM_RANKS_MIN && numRanks <= NUM_RANKS_MAX'"):
        OPS.moe_dispatch_prefill(x, idx, torch.ones(2, 1), ntpe, slot, cam.group_name(), 0, 1, False)
    with pytest.raises(RuntimeError, match=GROUP_SIZE_ERR):
        OPS.moe_dispatch_prefill(x, idx, torch.ones(2, 1), ntpe, slot, cam.group_name(), 0, 2, False)
    with pytest.raises(RuntimeError, match=ASSERT_RE + "numTokensPerExpert.scalar_type\\(\\) == at::kInt'"):
        OPS.moe_dispatch_prefill(x, idx, torch.ones(2, 1), ntpe.long(), slot, cam.group_name(), 0, 2, False)


#: past every check that precedes the group (one-rank world, num_ranks 2): the stand-in's own limit, not upstream's
GROUP_SIZE_ERR = r"^umdk_cam_op_lib stand-in cannot emulate this input: num_ranks=2 but the group has 1 ranks"


def _dispatch(tokens: int, hidden: int, dtype: torch.dtype = torch.bfloat16, top_k: int = 1, experts: int = 2):
    x = torch.zeros(tokens, hidden, dtype=dtype)
    idx = torch.zeros(tokens, top_k, dtype=torch.int64)
    ntpe = torch.zeros(experts, dtype=torch.int32)
    ntpe[0] = tokens * top_k
    slot = torch.zeros(tokens, top_k, dtype=torch.int32)
    return OPS.moe_dispatch_prefill(x, idx, torch.ones(tokens, top_k), ntpe, slot, cam.group_name(), 0, 2, False)


# moe_dispatch_normal_tiling.cpp: tokens [1, 8000], H [1024, 7168], x bf16/fp16, top_k (0, min(16, E)]
@pytest.mark.parametrize("kw,message", [
    ({"tokens": 8000, "hidden": 1024}, None), ({"tokens": 1, "hidden": 7168, "dtype": torch.float16}, None),
    ({"tokens": 8001, "hidden": 1024}, "xDim0(BS) is invalid. Should be between [1, 8000], but got xDim0=8001."),
    ({"tokens": 2, "hidden": 1023}, "xShape dims1(H) should be in [1024, 7168], but got 1023."),
    ({"tokens": 2, "hidden": 7169}, "xShape dims1(H) should be in [1024, 7168], but got 7169."),
    ({"tokens": 2, "hidden": 1024, "dtype": torch.float32},
     "x dataType is invalid, dataType should be bf16 or float16"),
    ({"tokens": 2, "hidden": 1024, "top_k": 3, "experts": 2}, "expertIdShape's dim1(k) should be in (0, min(16, "
                                                                "moeExpertNum=2)], but got expertIdShape's dim1=3."),
])
def test_dispatch_prefill_tiling_limits(world1, monkeypatch, kw, message):
    monkeypatch.setenv("HCCL_BUFFSIZE", "4096")   # the prefill ops' documented window (API guide)
    if message is None:
        with pytest.raises(RuntimeError, match=GROUP_SIZE_ERR):
            _dispatch(**kw)
        return
    with pytest.raises(RuntimeError, match=TILING_RE.format("aclnnMoeDispatchNormal", "MoeDispatchNormal")) as info:
        _dispatch(**kw)
    assert message in str(info.value)


def test_an_empty_dispatch_is_refused_by_notify_dispatchs_tiling_first(world1, monkeypatch):
    """pybind moe_dispatch_prefill.cpp runs aclnnNotifyDispatch before aclnnMoeDispatchNormal, and
    notify_dispatch_tiling.cpp:132-135 refuses numTokens <= 0: an empty batch never reaches xDim0's check
    (a disagreement the clean-room library found; upstream decides)."""
    monkeypatch.setenv("HCCL_BUFFSIZE", "4096")
    with pytest.raises(RuntimeError, match=TILING_RE.format("aclnnNotifyDispatch", "NotifyDispatch")) as info:
        _dispatch(tokens=0, hidden=1024)
    assert "numTokenPtr is invalid, only support > 0, but got numTokenPtr=0." in str(info.value)
    assert "xDim0" not in str(info.value)


# moe_combine_normal_tiling.cpp: H of x [1024, 7168], x bf16/fp16, tokens of topk_weights [1, 8000]
@pytest.mark.parametrize("hidden,dtype,tokens,message", [
    (1024, torch.bfloat16, 8000, None), (7168, torch.float16, 1, None),
    (1023, torch.bfloat16, 2, "recvX's dim1(H) should be in [1024, 7168], but got 1023."),
    (7169, torch.bfloat16, 2, "recvX's dim1(H) should be in [1024, 7168], but got 7169."),
    (1024, torch.float32, 2, "recvX dataType is invalid, dataType should be bf16 or float16"),
    (1024, torch.bfloat16, 8001, "Invalid topkWeights dims0(BS) 8001. Should be between [1, 8000]."),
])
def test_combine_prefill_tiling_limits(world1, monkeypatch, hidden, dtype, tokens, message):
    monkeypatch.setenv("HCCL_BUFFSIZE", "4096")
    def call() -> None:
        OPS.moe_combine_prefill(torch.zeros(1, hidden, dtype=dtype), torch.zeros(tokens, 1, dtype=torch.int64),
                                torch.ones(tokens, 1), torch.zeros(3, dtype=torch.int32),
                                torch.zeros(2, dtype=torch.int32), cam.group_name(), 0, 2)
    if message is None:
        with pytest.raises(RuntimeError, match=GROUP_SIZE_ERR):
            call()
        return
    with pytest.raises(RuntimeError, match=TILING_RE.format("aclnnMoeCombineNormal", "MoeCombineNormal")) as info:
        call()
    assert message in str(info.value)


def _np_ffn(row: np.ndarray, w1: np.ndarray, s1: np.ndarray, w2: np.ndarray, s2: np.ndarray) -> np.ndarray:
    def q8(v: np.ndarray) -> tuple[np.ndarray, np.float32]:
        scale = np.float32(127) / (np.float32(np.abs(v).max()) + np.float32(1e-12))
        return np.rint(v * scale), np.float32(1) / scale
    qx, sx = q8(row.astype(np.float32))
    h = (qx @ w1.astype(np.float64)).astype(np.float32) * s1 * sx
    inter = h.shape[0] // 2
    a = (h[:inter] / (1 + np.exp(-h[:inter])) * h[inter:]).astype(np.float32)
    qa, sa = q8(a)
    out: np.ndarray = (qa @ w2.astype(np.float64)).astype(np.float32) * s2 * sa
    return out


def test_fused_deep_moe_one_rank_against_numpy(world1):
    g = torch.Generator().manual_seed(11)
    bs, hidden, inter, local, top_k = 6, 512, 512, 4, 2      # the smallest in-limit H and 2I
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
    with pytest.raises(RuntimeError, match="epRankId must < epRankSize"):
        cam.fused_deep_moe(x, ids, [w1], [s1], [w2], [s2], scales, None, None, None, None,
                           None, None, None, cam.group_name(), 1, 1, local, 0, 0)
    # no value check on ids: -1 is the documented placeholder (that copy skipped, the row still defined);
    # any other id outside [-1, E) is undefined: the copy is lost and its token's row is garbage; no fault
    bad = ids.clone()
    bad[0, 0] = -1
    bad[1, 0] = local
    out_bad, _, nums_bad = cam.fused_deep_moe(x, bad, [w1], [s1], [w2], [s2], scales, None, None, None, None,
                                              None, None, None, cam.group_name(), 1, 0, local, 0, 0)
    assert int(nums_bad.sum()) == bs * top_k - 2
    assert torch.equal(out_bad[2:], out[2:])
    e = int(ids[0, 1])
    placeholder = scales[0, 1].item() * torch.from_numpy(
        _np_ffn(x[0].float().numpy(), w1[e].numpy(), s1[e].numpy(), w2[e].numpy(), s2[e].numpy())
    ).to(torch.bfloat16).float().numpy()
    np.testing.assert_allclose(out_bad[0].float().numpy(), placeholder, rtol=1e-2, atol=1e-2)
    assert not np.allclose(out_bad[1].float().numpy(), out[1].float().numpy(), equal_nan=False)

    # x_active_mask is a count (TokenActiveMaskCal): sum = 2 -> tokens 0 and 1, whatever the pattern
    mask = torch.tensor([True, False, False, False, True, False])
    out_m, _, nums_m = cam.fused_deep_moe(x, ids, [w1], [s1], [w2], [s2], scales, None, None, None, None,
                                          None, None, mask, cam.group_name(), 1, 0, local, 0, 0)
    assert torch.equal(out_m[:2], out[:2])
    rest = out_m[2:].float()
    assert bool(torch.isnan(rest).any()) and float(rest.nan_to_num(0).abs().max()) > 1e30  # garbage, not zeros
    assert nums_m.tolist() == np.bincount(ids[:2].reshape(-1).numpy(), minlength=local).tolist()


def _fused(bs: int = 2, hidden: int = 512, two_i: int = 1024, top_k: int = 1, experts: int = 2, world: int = 1,
           rank: int = 0, global_bs: int = 0, mask: torch.Tensor | None = None, group: str = "no-such-group",
           share: int | None = None) -> list[torch.Tensor]:
    """fused_deep_moe with zero data of the given shape; the default group name fails after the tiling."""
    local = experts // world if world > 0 and experts % world == 0 else 1
    w1 = torch.zeros(local, hidden, two_i, dtype=torch.int8)
    w2 = torch.zeros(local, two_i // 2, hidden, dtype=torch.int8)
    Share = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]
    sh: Share = (None, None, None, None)
    if share is not None:
        sh = (torch.zeros(hidden, share, dtype=torch.int8), torch.ones(share),
              torch.zeros(share // 2, hidden, dtype=torch.int8), torch.ones(hidden))
    return cam.fused_deep_moe(torch.zeros(bs, hidden, dtype=torch.bfloat16), torch.zeros(bs, top_k, dtype=torch.int32),
                              [w1], [torch.ones(local, two_i)], [w2], [torch.ones(local, hidden)],
                              torch.ones(bs, top_k), *sh, None, None, mask, group, world, rank, experts, 0, global_bs)


NO_GROUP_ERR = ASSERT_RE + "group_ep names a process group'"    # past every tiling check


# fused_deep_moe_tiling.cpp (umdk 00cc16f1)
@pytest.mark.parametrize("kw,message", [
    ({"bs": 256}, None), ({"hidden": 7168}, None), ({"two_i": 6144}, None), ({"top_k": 2, "experts": 2}, None),
    ({"top_k": 12, "experts": 512}, None), ({"share": 1024}, None), ({"mask": torch.ones(2, dtype=torch.bool)}, None),
    ({"bs": 257}, "batchSize(bs) must <= 256."),
    ({"hidden": 511}, "tokenLength(h) is invalid. Only support [512, 7168]."),
    ({"hidden": 7169}, "tokenLength(h) is invalid. Only support [512, 7168]."),
    ({"two_i": 512}, "gmm1 hidden size is invalid. Only support [1024, 6144]."),
    ({"two_i": 7168}, "gmm1 hidden size is invalid. Only support [1024, 6144]."),
    ({"two_i": 1536}, "gmm1 hidden size must be divisible by 1024, but got 1536."),
    ({"share": 1536}, "shareGmm1 hidden size must be divisible by 1024, but got 1536."),
    ({"top_k": 13, "experts": 16}, "topK(k) must <= 12."),
    ({"top_k": 3, "experts": 2}, "topK(k) must <= moeExpertNum(2)."),
    ({"experts": 513}, "moeExpertNum must <= 512."),
    ({"experts": 3, "world": 2, "rank": 0}, "moeExpertNum must be divisible by epRankSize."),
    ({"rank": 1}, "epRankId must < epRankSize."),
    ({"global_bs": 3, "world": 2, "rank": 0}, "globalBatchSize must be divisible by epRankSize."),
    ({"mask": torch.ones(3, dtype=torch.bool)}, "xActiveMask Dim0 must be batchSize(2), but current dim is 3."),
])
def test_fused_tiling_limits(world1, kw, message):
    if message is None:
        with pytest.raises(RuntimeError, match=NO_GROUP_ERR):
            _fused(**kw)
        return
    with pytest.raises(RuntimeError, match=TILING_RE.format("aclnnFusedDeepMoe", "FusedDeepMoe")) as info:
        _fused(**kw)
    assert message in str(info.value) and "fused_deep_moe_tiling.cpp" in str(info.value)


def test_fused_hccl_buffsize_window(world1, monkeypatch):
    # L * global_bs * H * 2 B * 2 (double buffer) against HCCL_BUFFSIZE (MB, default 200)
    monkeypatch.setenv("HCCL_BUFFSIZE", "1")
    with pytest.raises(RuntimeError, match="HCCL_BUFFSIZE is too SMALL, globalBatchSize = 256, h = 1024, "
                                           "moeExpertNumPerRank = 2,") as info:
        _fused(bs=256, hidden=1024, global_bs=256)      # 2 * 256 * 1024 * 4 B = 2 MB
    assert "B=2MB, HCCL_BUFFSIZE=1MB." in str(info.value)
    # global_bs 0 is checked as 0 (the window check precedes CheckData's bs * ranks, tiling.cpp:753-764)
    with pytest.raises(RuntimeError, match=NO_GROUP_ERR):
        _fused(bs=256, hidden=1024)
    monkeypatch.setenv("HCCL_BUFFSIZE", "2")
    with pytest.raises(RuntimeError, match=NO_GROUP_ERR):
        _fused(bs=256, hidden=1024, global_bs=256)


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
