"""Abnormal inputs: each must raise the op's own error on every rank: no crash, no hang.

Design: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from camcheck import refused_for
from camref import dispatch_layout, prefill_inputs
from cases import prefill_case

pytestmark = pytest.mark.multi_process_test


@pytest.fixture(autouse=True)
def _healthy_after(cam, request):
    yield
    cam.check_healthy(request.node.name)


def inputs(cam, seed, tokens=None, top_k=None, experts=None):
    case = prefill_case(cam.world)
    if tokens is not None or top_k is not None or experts is not None:
        from camref import PrefillCase

        case = PrefillCase(tokens if tokens is not None else case.tokens, case.hidden,
                           experts if experts is not None else case.experts,
                           top_k if top_k is not None else case.top_k)
    x, topk, w = prefill_inputs(seed, cam.rank, case) if case.top_k <= case.experts else (None, None, None)
    return case, x, topk, w


def dispatch(cam, case, x, topk, w, ntpe=None, sti=None, use_quant=False):
    if ntpe is None:
        n, s = dispatch_layout(topk, case.experts)
        ntpe, sti = torch.from_numpy(n), torch.from_numpy(s)
    return cam.ops.moe_dispatch_prefill(cam.to_device(torch.as_tensor(x).to(torch.bfloat16)),
                                        cam.to_device(torch.as_tensor(topk)), cam.to_device(torch.as_tensor(w)),
                                        cam.to_device(ntpe), cam.to_device(sti), cam.group_ep, cam.rank,
                                        cam.world, use_quant)


def test_experts_not_divisible_by_ranks(cam, seed):
    # E = R + 1 <= 385: under the experts limit (512) at every world the ops take
    case, x, topk, w = inputs(cam, seed, experts=cam.world + 1, top_k=1)
    with refused_for("layout.experts_per_rank"):
        cam.ops.get_dispatch_layout(cam.to_device(torch.from_numpy(topk)), case.experts, cam.world)
        cam.sync()


def test_empty_batch(cam, seed):
    case, x, topk, w = inputs(cam, seed)
    with refused_for("dispatch.tokens_notify"):
        dispatch(cam, case, x[:0], topk[:0], w[:0], torch.zeros(case.experts, dtype=torch.int32),
                 torch.zeros((0, case.top_k), dtype=torch.int32))
        cam.sync()


def test_wrong_dtype_num_tokens_per_expert(cam, seed):
    case, x, topk, w = inputs(cam, seed)
    n, s = dispatch_layout(topk, case.experts)
    with refused_for("dispatch.counts_dtype"):
        dispatch(cam, case, x, topk, w, torch.from_numpy(n).to(torch.int64), torch.from_numpy(s))
        cam.sync()


def test_wrong_dtype_x(cam, seed):
    case, x, topk, w = inputs(cam, seed)
    n, s = dispatch_layout(topk, case.experts)
    with refused_for("dispatch.x_dtype"):
        cam.ops.moe_dispatch_prefill(cam.to_device(torch.from_numpy(x).to(torch.int32)),
                                     cam.to_device(torch.from_numpy(topk)), cam.to_device(torch.from_numpy(w)),
                                     cam.to_device(torch.from_numpy(n)), cam.to_device(torch.from_numpy(s)),
                                     cam.group_ep, cam.rank, cam.world, False)
        cam.sync()


def test_wrong_shape_x(cam, seed):
    case, x, topk, w = inputs(cam, seed)
    with refused_for("dispatch.x_dim"):
        dispatch(cam, case, x.reshape(x.shape[0], 2, -1), topk, w)
        cam.sync()


def test_too_many_tokens(cam, seed):
    """Past the tiling's BS_UPPER_BOUND = 8000 (moe_dispatch_normal_tiling.cpp) and past 8192 too."""
    case, x, topk, w = inputs(cam, seed)
    reps = -(-8193 // case.tokens)
    x, topk, w = (np.tile(a, (reps, 1)) for a in (x, topk, w))
    with refused_for("dispatch.tokens"):
        dispatch(cam, case, x, topk, w)
        cam.sync()


def test_top_k_over_limit(cam, seed):
    # E >= 17 and <= 512 at every world the ops take, so top_k = 17 is the one limit crossed
    case, x, topk, w = inputs(cam, seed, experts=cam.world * -(-17 // cam.world), top_k=17)
    with refused_for("dispatch.top_k"):
        dispatch(cam, case, x, topk, w)
        cam.sync()


def test_wrong_rank_argument(cam, seed):
    case, x, topk, w = inputs(cam, seed)
    n, s = dispatch_layout(topk, case.experts)
    # num_ranks R + 1 does not divide E = 2R (R >= 2): the pybind's numTokensPerExpert.size(0) % numRanks
    with refused_for("dispatch.counts_per_rank"):
        cam.ops.moe_dispatch_prefill(cam.to_device(torch.from_numpy(x).to(torch.bfloat16)),
                                     cam.to_device(torch.from_numpy(topk)), cam.to_device(torch.from_numpy(w)),
                                     cam.to_device(torch.from_numpy(n)), cam.to_device(torch.from_numpy(s)),
                                     cam.group_ep, cam.rank, cam.world + 1, False)
        cam.sync()
