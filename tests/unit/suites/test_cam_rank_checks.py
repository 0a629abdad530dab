"""The CAM suite's rank-side checks, without ranks: the comparisons catch a systematic 1 % error at the
shapes the suite runs (where upstream's atol=2.0 alone does not), and inputs follow the kernels
(x_active_mask ones then zeros; lab shapes inside the tiling limits)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

RANK = Path(__file__).resolve().parents[3] / "suites" / "cam" / "rank"


@pytest.fixture(scope="module")
def rank_modules():
    sys.path.insert(0, str(RANK))
    try:
        import camcheck
        import camref
        import cases
        import test_fused_rank
        import test_prefill_rank
        yield camcheck, camref, cases, test_fused_rank, test_prefill_rank
    finally:
        sys.path.remove(str(RANK))
        for name in ("camcheck", "camref", "cases", "test_fused_rank", "test_prefill_rank"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("world", [4, 8])
def test_lab_shapes_are_inside_the_kernel_limits(rank_modules, world):
    _, _, cases, _, _ = rank_modules
    p = cases.prefill_case(world)
    assert 1024 <= p.hidden <= 7168 and 1 <= p.tokens <= 8000 and 0 < p.top_k <= 16 and p.experts % world == 0
    f = cases.fused_case(world)
    assert f.batch <= 256 and f.top_k <= 12 and f.top_k < f.experts and f.experts <= 512
    assert 1024 <= f.hidden <= 7168 and f.hidden % 256 == 0
    assert 1024 <= 2 * f.inter <= 6144 and (2 * f.inter) % 1024 == 0


def test_the_mask_is_a_count_and_the_reference_takes_the_first_tokens(rank_modules):
    _, camref, cases, _, _ = rank_modules
    case = cases.fused_case(4, with_mask=True)
    for rank in range(4):
        inp = camref.fused_inputs(7, rank, case)
        valid = inp["valid"]
        assert 1 <= valid < case.batch
        assert inp["mask"].tolist() == [True] * valid + [False] * (case.batch - valid)
        ref = camref.fused_reference(7, rank, 4, case)
        assert ref.valid == valid and ref.output.shape == (valid, case.hidden)


def test_a_one_percent_error_in_a_fused_output_fails_where_upstreams_tolerance_passes(rank_modules):
    camcheck, camref, cases, fused, _ = rank_modules
    ref = camref.fused_reference(3, 0, 4, cases.fused_case(4, with_share=True))
    for want in (ref.output, ref.share):
        off = want * 1.01
        camcheck.expect_close("op", "out", off, want, 0, rtol=0.02, atol=2.0)  # upstream alone: passes
        with pytest.raises(camcheck.Mismatch, match="norm-relative error 0.01"):
            camcheck.expect_rel("op", "out", off, want, 0, fused.FUSED_REL)
        camcheck.expect_rel("op", "out", camref.bf16_round(want.astype(np.float32)), want, 0, fused.FUSED_REL)


@pytest.mark.parametrize("use_quant", [False, True])
def test_a_one_percent_error_in_combine_fails_where_calc_diff_passes(rank_modules, use_quant):
    camcheck, camref, cases, _, prefill = rank_modules
    x, _, w = camref.prefill_inputs(5, 1, cases.prefill_case(4))
    want = prefill.combine_expected(x, w, use_quant)
    off = camref.bf16_round(want * 1.01)
    camcheck.expect_diff("op", "out", off, want, 0, 1e-4 if use_quant else 5e-5)  # upstream alone: passes
    with pytest.raises(camcheck.Mismatch, match="norm-relative"):
        camcheck.expect_rel("op", "out", off, want, 0, prefill.COMBINE_REL)
    camcheck.expect_rel("op", "out", want, want, 0, prefill.COMBINE_REL)


def test_a_one_percent_error_in_int8_recv_x_fails_where_plus_minus_one_passes(rank_modules):
    camcheck, camref, cases, _, prefill = rank_modules
    x, _, _ = camref.prefill_inputs(5, 2, cases.prefill_case(4))
    q, _ = camref.quantize_rows(x)
    off = np.clip(np.rint(q.astype(np.float64) * 1.01), -128, 127)
    assert np.abs(off - q).max() <= 1  # the ±1 level check alone passes it
    with pytest.raises(camcheck.Mismatch, match="norm-relative"):
        camcheck.expect_rel("op", "recv_x", off, q, 0, prefill.RECV_X_REL)


def test_the_op_error_pattern_matches_both_kinds_of_op_failure(rank_modules):
    import re

    camcheck = rank_modules[0]
    assert re.search(camcheck.OP_ERROR, "Failed: Assertion error moe_dispatch_prefill.cpp:60 error message or "
                                        "error code is 'numTokensPerExpert.scalar_type() == at::kInt'")
    assert re.search(camcheck.OP_ERROR, "call aclnnMoeDispatchNormal failed, detail:EZ9999: Inner Error!")
    assert not re.search(camcheck.OP_ERROR, "NPU function error: AclrtSynchronizeDeviceWithTimeout, error code "
                                            "is 507035")
