"""Expert ids outside [0, E): an observation, never a pass/fail contract. Each case runs alone, in
a launch of its own.

Why (the upstream files): docs/internals/cam-suite.md.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from camref import prefill_inputs
from cases import prefill_case

pytestmark = [pytest.mark.multi_process_test, pytest.mark.poisons_device]

#: the bad id each case puts into row 0 of every rank's topk_idx: E (one past the end) or -1
BAD_IDS = {"id_num_experts": lambda experts: experts, "id_minus_one": lambda experts: -1}


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def observe(cam, topk: np.ndarray, experts: int) -> str:
    """What the op did with ``topk``: one line, never raising."""
    try:
        ntpe, sti = cam.ops.get_dispatch_layout(cam.to_device(torch.from_numpy(topk)), experts, cam.world)
    except RuntimeError as exc:
        return f"refused at the call: {_first_line(exc)}"
    try:
        cam.sync()
    except RuntimeError as exc:
        return f"device fault at the next synchronize: {_first_line(exc)}"
    good = topk[(topk >= 0) & (topk < experts)]
    want = np.bincount(good, minlength=experts).astype(np.int32)
    got = ntpe.cpu().numpy()
    same = bool(np.array_equal(got, want))
    return (f"returned, no fault; num_tokens_per_expert {'equals' if same else 'differs from'} the in-range "
            f"ids' counts (got {got.tolist()[:8]}, in-range {want.tolist()[:8]}); send_token_idx_small "
            f"{tuple(sti.shape)}")


@pytest.mark.parametrize("kind", list(BAD_IDS))
def test_out_of_range_expert_id_is_observed(cam, seed, kind, record_property, capsys):
    case = prefill_case(cam.world)
    _, topk, _ = prefill_inputs(seed, cam.rank, case)
    topk = np.ascontiguousarray(topk)
    topk[0, 0] = BAD_IDS[kind](case.experts)
    seen = observe(cam, topk, case.experts)
    with capsys.disabled():  # into the rank log whatever the outcome (a passing test's output is dropped)
        print(f"\ncamit-observation: rank {cam.rank} {kind} (id {int(topk[0, 0])}, E={case.experts}): {seen}",
              flush=True)
    record_property("observation", seen)
