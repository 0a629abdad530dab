"""fused_deep_moe: CASE_4RANK/CASE_8RANK and the matrix upstream never ran, against a float reference model.

Tolerance as upstream: allclose_nparray(reference, output, rtol=0.02, atol=2.0) on the active rows;
expert_token_nums exact. GE (graph) mode needs torch_npu's graph capture and is skipped elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from camcheck import expect_close, expect_equal
from camref import FusedCase, fused_inputs, fused_reference, fused_weights
from cases import fused_case

pytestmark = [pytest.mark.multi_process_test, pytest.mark.a3_test]

MATRIX = {
    "base": {},
    "with_share": {"with_share": True},
    "with_smooth": {"with_smooth": True},
    "with_mc2_mask": {"with_mask": True},
    "dynamicBS": {"dynamic_bs": True},
    "dynamicEPLB": {"separated": True},
    "all": {"with_share": True, "with_smooth": True, "with_mask": True, "dynamic_bs": True, "separated": True},
}


def run_fused(cam, seed: int, case: FusedCase):
    w = fused_weights(seed, case)
    inp = fused_inputs(seed, cam.rank, case)
    local = case.experts // cam.world
    lo, hi = cam.rank * local, (cam.rank + 1) * local
    dev = cam.to_device

    def t(a, dtype=None):
        tensor = torch.from_numpy(np.ascontiguousarray(a))
        return dev(tensor.to(dtype) if dtype is not None else tensor)

    if case.separated:
        w1 = [t(w["w1"][e]) for e in range(lo, hi)]
        s1 = [t(w["s1"][e]) for e in range(lo, hi)]
        w2 = [t(w["w2"][e]) for e in range(lo, hi)]
        s2 = [t(w["s2"][e], torch.bfloat16) for e in range(lo, hi)]
    else:
        w1, s1 = [t(w["w1"][lo:hi])], [t(w["s1"][lo:hi])]
        w2, s2 = [t(w["w2"][lo:hi])], [t(w["s2"][lo:hi], torch.bfloat16)]
    share = [None] * 4
    if case.with_share:
        share = [t(w["sw1"]), t(w["ss1"]), t(w["sw2"]), t(w["ss2"], torch.bfloat16)]
    smooth = t(w["smooth"]) if case.with_smooth else None
    ssmooth = t(w["ssmooth"]) if case.with_share and case.with_smooth else None
    mask = t(inp["mask"]) if case.with_mask else None
    bs = inp["x"].shape[0]
    max_bs = max(fused_inputs(seed, r, case)["x"].shape[0] for r in range(cam.world))
    global_bs = max_bs * cam.world if case.dynamic_bs else bs * cam.world
    out, share_out, counts = cam.ops.fused_deep_moe(
        t(inp["x"], torch.bfloat16), t(inp["ids"]), w1, s1, w2, s2, t(inp["scales"]),
        share[0], share[1], share[2], share[3], smooth, ssmooth, mask,
        cam.group_ep, cam.world, cam.rank, case.experts, 0, global_bs)
    return out, share_out, counts


@pytest.mark.author("camit")
@pytest.mark.parametrize("variant", list(MATRIX))
def test_fused_deep_moe(cam, seed, variant):
    case = fused_case(cam.world, **MATRIX[variant])
    out, share_out, counts = run_fused(cam, seed, case)
    ref = fused_reference(seed, cam.rank, cam.world, case)
    op = "fused_deep_moe"
    expect_equal(op, "expert_token_nums", counts.cpu().numpy(), ref.expert_token_nums, cam.rank)
    active = ref.active
    expect_close(op, "output (active rows)", out.float().cpu().numpy()[active], ref.output[active], cam.rank,
                 rtol=0.02, atol=2.0)
    if ref.share is not None:
        expect_close(op, "share_output", share_out.float().cpu().numpy(), ref.share, cam.rank, rtol=0.02, atol=2.0)


@pytest.mark.parametrize("mode", ["GE"])
def test_fused_deep_moe_graph_mode(cam, mode):
    if cam.backend != "hccl":
        pytest.skip("GE mode needs graph capture through torch_npu/torchair (NPU only); eager covered above")
    torchair = pytest.importorskip("torchair", reason="GE mode needs torchair")
    case = fused_case(cam.world)
    compiled = torch.compile(lambda *a: run_fused(*a), backend=torchair.get_npu_backend())
    out, _, counts = compiled(cam, 1, case)
    ref = fused_reference(1, cam.rank, cam.world, case)
    expect_equal("fused_deep_moe[GE]", "expert_token_nums", counts.cpu().numpy(), ref.expert_token_nums, cam.rank)
