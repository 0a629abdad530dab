"""Single-process checks: interface, validation (pybind asserts and tiling
failures), shapes and local numerics. No communication is needed for any of
these: every check here fires before the op touches its communicator."""
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _cam_harness as H  # noqa: E402

H.install_fake_torch_npu()
import umdk_cam_op_lib  # noqa: E402
from umdk_cam_op_lib import _common, _prefill  # noqa: E402

OPS = torch.ops.umdk_cam_op_lib
BIND = "Failed: Assertion error src/cam/comm_operator/pybind/"


@pytest.fixture(autouse=True)
def _host_ok(monkeypatch):
    monkeypatch.setattr(_common, "ALLOW_HOST_TENSORS", True)
    monkeypatch.setenv("HCCL_BUFFSIZE", "4096")


def test_import_without_torch_npu():
    code = "import sys; sys.modules['torch_npu'] = None; sys.path.insert(0, %r); import umdk_cam_op_lib, torch; " \
           "print(sorted(n for n in dir(umdk_cam_op_lib) if not n.startswith('_')))" % HERE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "get_dispatch_layout" in out.stdout and "fused_deep_moe" in out.stdout


def test_schemas():
    s = str(OPS.get_dispatch_layout.default._schema)
    assert s == "umdk_cam_op_lib::get_dispatch_layout(Tensor topk_idx, int num_experts, int num_ranks) -> (Tensor, Tensor)"
    s = str(OPS.moe_dispatch_prefill.default._schema)
    assert "Tensor send_token_idx_small, str group_ep, int rank, int num_ranks, bool use_quant" in s
    s = str(OPS.moe_combine_prefill.default._schema)
    assert s.endswith("Tensor src_idx, Tensor send_head, str group_ep, int rank, int num_ranks) -> Tensor")
    s = str(OPS.fused_deep_moe.default._schema)
    assert "Tensor[] gmm1_weight" in s and "Tensor? x_active_mask, str group_ep" in s and s.endswith("-> Tensor[]")


def test_host_tensor_refused(monkeypatch):
    monkeypatch.setattr(_common, "ALLOW_HOST_TENSORS", False)
    with pytest.raises(RuntimeError, match="topk_idx"):
        OPS.get_dispatch_layout(torch.zeros(2, 2, dtype=torch.long), 4, 2)


def test_module_attributes_positional_only():
    t = torch.tensor([[0, 3], [1, 3], [3, 2]])
    n, sti = umdk_cam_op_lib.get_dispatch_layout(t, 4, 2)
    assert n.tolist() == [1, 1, 1, 3] and sti.tolist() == [[0, 0], [0, 1], [2, 0]]
    with pytest.raises(TypeError):
        umdk_cam_op_lib.get_dispatch_layout(topk_idx=t, num_experts=4, num_ranks=2)


def test_layout_values_and_dtypes():
    g = torch.Generator().manual_seed(0)
    topk = torch.stack([torch.randperm(16, generator=g)[:4] for _ in range(37)])
    n, sti = OPS.get_dispatch_layout(topk_idx=topk.to(torch.int32), num_experts=16, num_ranks=4)
    assert n.dtype == torch.int32 and sti.dtype == torch.int32 and sti.shape == (37, 4)
    assert n.tolist() == torch.bincount(topk.view(-1), minlength=16).tolist()
    seen = [0] * 16
    for t in range(37):
        for j in range(4):
            e = int(topk[t, j])
            assert int(sti[t, j]) == seen[e]
            seen[e] += 1


@pytest.mark.parametrize("args,msg", [
    ((torch.zeros(4, dtype=torch.long), 4, 2), BIND + "get_dispatch_layout.cpp:39 error message or error code is "
                                              "'topkIdxInt64.dim() == DIM_TWO'"),
    ((torch.zeros(2, 2, dtype=torch.long), 0, 2), BIND + "get_dispatch_layout.cpp:41 error message or error code "
                                                 "is 'numExperts > 0'"),
])
def test_layout_bind_asserts(args, msg):
    with pytest.raises(RuntimeError) as ei:
        OPS.get_dispatch_layout(*args)
    assert str(ei.value) == msg


@pytest.mark.parametrize("shape,E,R,inner", [
    ((2, 2), 4, 0, "rankSize is invalid, only support (0, 384], but got rankSize=0."),
    ((2, 2), 768, 384, "numExperts is invalid, only support (0, 512], but got numExperts=768."),
    ((2, 2), 6, 4, "numExperts (6) not divisible by numRanks (4)."),
    ((2, 17), 32, 2, "numTopkPtr is invalid, only support (0, 16], but got numTopk=17."),
    ((0, 2), 4, 2, "tokenNum is invalid, only support (0, 8000], but got tokenNum=0."),
    ((8001, 1), 4, 2, "tokenNum is invalid, only support (0, 8000], but got tokenNum=8001."),
])
def test_layout_tiling_errors(shape, E, R, inner):
    with pytest.raises(RuntimeError) as ei:
        OPS.get_dispatch_layout(torch.zeros(shape, dtype=torch.long), E, R)
    msg = str(ei.value)
    assert msg.startswith("call aclnnDispatchLayout failed, detail:")
    assert inner in msg and "Get attr and set tiling data failed." in msg


def test_layout_negative_ranks_is_torch_error():
    with pytest.raises(RuntimeError, match="negative dimension"):
        OPS.get_dispatch_layout(torch.zeros(2, 2, dtype=torch.long), 4, -2)


def _dispatch_args(bs=4, h=1024, k=2, E=4, R=2, rank=0):
    topk = torch.tensor([[0, 1], [2, 3], [1, 2], [3, 0]])[:bs, :k]
    n, sti = OPS.get_dispatch_layout(topk, E, R)
    return dict(x=torch.ones(bs, h, dtype=torch.bfloat16), topk_idx=topk, topk_weights=torch.ones(bs, k),
                num_tokens_per_expert=n, send_token_idx_small=sti, group_ep="g", rank=rank, num_ranks=R,
                use_quant=False)


@pytest.mark.parametrize("change,line,cond", [
    (dict(num_tokens_per_expert=torch.ones(4, dtype=torch.long)), 60,
     "numTokensPerExpert.scalar_type() == at::kInt"),
    (dict(num_ranks=1), 63, "numRanks >= NUM_RANKS_MIN && numRanks <= NUM_RANKS_MAX"),
    (dict(num_ranks=385), 63, "numRanks >= NUM_RANKS_MIN && numRanks <= NUM_RANKS_MAX"),
    (dict(x=torch.ones(1024, 4, dtype=torch.bfloat16).t()), 66, "x.dim() == DIM_TWO and x.is_contiguous()"),
    (dict(num_tokens_per_expert=torch.ones(5, dtype=torch.int32)), 68,
     "numTokensPerExpert.size(0) % numRanks == 0"),
    (dict(topk_weights=torch.ones(4)), 79, "topkWeights.dim() == DIM_TWO and topkWeights.is_contiguous()"),
    (dict(topk_weights=torch.ones(4, 3)), 82, "numTopk == topkWeights.size(1)"),
    (dict(send_token_idx_small=torch.zeros(3, 2, dtype=torch.int32)), 81,
     "numTokens == sendTokenIdxSmall.size(0)"),
])
def test_dispatch_bind_asserts(change, line, cond):
    args = _dispatch_args()
    args.update(change)
    with pytest.raises(RuntimeError) as ei:
        OPS.moe_dispatch_prefill(**args)
    assert str(ei.value) == BIND + "moe_dispatch_prefill.cpp:%d error message or error code is '%s'" % (line, cond)


@pytest.mark.parametrize("change,inner", [
    (dict(rank=2), "rankId is invalid, only support [0, 2), but got rankId=2."),
    (dict(group_ep=""), "commGroupPtr is null."),
    (dict(group_ep="n" * 128), "commGroupPtr is null."),
])
def test_notify_tiling_errors(change, inner):
    args = _dispatch_args()
    args.update(change)
    with pytest.raises(RuntimeError) as ei:
        OPS.moe_dispatch_prefill(**args)
    assert str(ei.value).startswith("call aclnnNotifyDispatch failed, detail:") and inner in str(ei.value)


def test_notify_empty_batch():
    args = _dispatch_args()
    args.update(x=torch.ones(0, 1024, dtype=torch.bfloat16), topk_idx=torch.zeros(0, 2, dtype=torch.long),
                topk_weights=torch.ones(0, 2), send_token_idx_small=torch.zeros(0, 2, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="numTokenPtr is invalid, only support > 0, but got numTokenPtr=0."):
        OPS.moe_dispatch_prefill(**args)


def _combine_args(n=6, h=1024, bs=4, k=2, E=4, R=2):
    return dict(x=torch.ones(n, h, dtype=torch.bfloat16), topk_idx=torch.zeros(bs, k, dtype=torch.long),
                topk_weights=torch.ones(bs, k), src_idx=torch.zeros(n * 3, dtype=torch.int32),
                send_head=torch.full((E,), n, dtype=torch.int32), group_ep="g", rank=0, num_ranks=R)


@pytest.mark.parametrize("change,inner", [
    (dict(x=torch.ones(6, 1024, dtype=torch.int32)), "recvX dataType is invalid, dataType should be bf16 or float16"),
    (dict(x=torch.ones(6, 1024, dtype=torch.float32)), "recvX dataType is invalid"),
    (dict(x=torch.ones(6, 512, dtype=torch.bfloat16)), "recvX's dim1(H) should be in [1024, 7168], but got 512."),
    (dict(src_idx=torch.zeros(17, dtype=torch.int32)), "Invalid srcInfo dims0 17. Should not be smaller than 18."),
    (dict(src_idx=torch.zeros(18, dtype=torch.long)), "tokenSrcInfoForCombine dataType is invalid"),
    (dict(send_head=torch.zeros(5, dtype=torch.int32)), "moeExpertNum should be divisible by epWorldSize"),
    (dict(topk_weights=torch.ones(4, 17)), "topkWeights's dim1(K) should be in (0, min(16, moeExpertNum 4)]"),
    (dict(topk_idx=torch.zeros(2, 2, dtype=torch.long)), "globalBS is invalid"),
    (dict(num_ranks=1), "epWorldSize is invalid, only support [2, 384], but got epWorldSize=1."),
    (dict(rank=3), "epRankId is invalid, only support [0, 2), but got epRankId=3."),
])
def test_combine_tiling_errors(change, inner):
    args = _combine_args()
    args.update(change)
    with pytest.raises(RuntimeError) as ei:
        OPS.moe_combine_prefill(**args)
    assert str(ei.value).startswith("call aclnnMoeCombineNormal failed, detail:EZ9999")
    assert inner in str(ei.value)


def test_combine_default_buffsize(monkeypatch):
    monkeypatch.delenv("HCCL_BUFFSIZE")
    with pytest.raises(RuntimeError, match=r"HCCL_BUFFSIZE is too SMALL.*HCCL_BUFFSIZE=200MB\."):
        OPS.moe_combine_prefill(**_combine_args())


def test_combine_nz_format():
    args = _combine_args()
    H.tag_format(args["x"], 29)
    with pytest.raises(RuntimeError, match="recvXFormat is invalid"):
        OPS.moe_combine_prefill(**args)


def test_combine_bind_assert():
    args = _combine_args()
    args.update(x=torch.ones(6, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError) as ei:
        OPS.moe_combine_prefill(**args)
    assert str(ei.value) == BIND + "moe_combine_prefill.cpp:35 error message or error code is " \
                                   "'x.dim() == DIM_TWO and x.is_contiguous()'"


def test_dispatch_quant_formula():
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(16, 1024, generator=g) * 5).to(torch.bfloat16)
    x[3] = 0
    q, inv = _prefill.dynamic_quant_rows(x)
    x64 = x.double()
    amax = x64.abs().amax(dim=1)
    ref = torch.round(x64 * (127.0 / (amax + 1e-12)).unsqueeze(1))
    assert q.dtype == torch.int8 and (q.double() - ref).abs().max() <= 1
    assert int(q.abs().max()) == 127 and bool((q[3] == 0).all())
    assert torch.allclose(inv.double()[amax > 0], (amax / 127.0)[amax > 0], rtol=1e-6)


# ---------------------------------------------------------------------------
def _fused_args(bs=2, h=512, k=2, E=4, R=2, n1=1024, rank=0):
    L = E // R
    return [torch.ones(bs, h, dtype=torch.bfloat16), torch.zeros(bs, k, dtype=torch.int32),
            [torch.ones(L, h, n1, dtype=torch.int8)], [torch.ones(L, n1)],
            [torch.ones(L, n1 // 2, h, dtype=torch.int8)], [torch.ones(L, h)], torch.ones(bs, k),
            None, None, None, None, None, None, None, "g", R, rank, E, 0, 0]


@pytest.mark.parametrize("idx,val,inner", [
    (0, torch.ones(2, 256, dtype=torch.bfloat16), "gmm1Weight input length does not equals to token hidden size."),
    (1, torch.zeros(3, 2, dtype=torch.int32), "expertIds dim 0 must be batchSize(2), but get 3."),
    (1, torch.zeros(2, 13, dtype=torch.int32), "topK(k) must <= 12."),
    (2, [torch.ones(2, 512, 1536, dtype=torch.int8)], "gmm1Scale length does not equals to gmm1 hidden size."),
    (2, [torch.ones(3, 512, 1024, dtype=torch.int8)], "gmm1Weight does not match local expert number per rank."),
    (16, 3, "epRankId must < epRankSize."),
    (17, 5, "moeExpertNum must be divisible by epRankSize."),
    (19, 3, "globalBatchSize must be divisible by epRankSize."),
])
def test_fused_tiling_errors(idx, val, inner):
    args = _fused_args()
    args[idx] = val
    with pytest.raises(RuntimeError) as ei:
        OPS.fused_deep_moe(*args)
    assert str(ei.value).startswith("call aclnnFusedDeepMoe failed, detail:EZ9999") and inner in str(ei.value)


def test_fused_batch_too_large():
    args = _fused_args()
    args[0] = torch.ones(257, 512, dtype=torch.bfloat16)
    args[1] = torch.zeros(257, 2, dtype=torch.int32)
    with pytest.raises(RuntimeError, match=r"batchSize\(bs\) must <= 256\.\nCheckData failed\."):
        OPS.fused_deep_moe(*args)


def test_fused_bind_assert():
    args = _fused_args()
    args[0] = torch.ones(512, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError) as ei:
        OPS.fused_deep_moe(*args)
    assert str(ei.value) == BIND + "fused_deep_moe.cpp:53 error message or error code is 'x.dim() == DIM_TWO'"


def test_fused_meta_shapes():
    args = _fused_args()
    args[0] = torch.empty(5, 512, dtype=torch.bfloat16, device="meta")
    args[1] = torch.empty(5, 2, dtype=torch.int32, device="meta")
    out = OPS.fused_deep_moe(*args)
    assert [tuple(t.shape) for t in out] == [(5, 512), (5, 512), (2,)]
    assert out[2].dtype == torch.int64
