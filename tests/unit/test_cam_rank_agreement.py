"""The rank-side harness's meeting after each test (suites/cam/rank/conftest.py ``Agreement``), on a real
c10d HashStore shared by threads as ranks: bounded only once a rank reported a failure, naming the ranks
that failed and those that never came; and the fuzz draws (test_fuzz_rank.py) against the stand-in's limits."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[2]
RANK = REPO / "suites" / "cam" / "rank"
STANDIN = str(REPO / "standin")


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("cam_rank_conftest", RANK / "conftest.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["cam_rank_conftest"] = module  # (its dataclass looks its module up)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("cam_rank_conftest", None)


def meet_all(harness, world: int, plan: dict[int, tuple[float, bool] | None], timeout: float):
    """Run one meeting: plan[rank] = (delay before arriving, failed), or None for a rank that never comes."""
    store = dist.HashStore()
    results: dict[int, tuple[list[int], list[int], float]] = {}
    t0 = time.monotonic()

    def rank(r: int) -> None:
        delay, failed = plan[r]  # type: ignore[misc]
        time.sleep(delay)
        got = harness.Agreement(timeout).meet("t::x", failed, store=store, rank=r, world=world)
        results[r] = (*got, time.monotonic() - t0)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world) if plan[r] is not None]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_a_slow_rank_is_waited_for_while_nobody_failed(harness):
    # the bound (0.5 s) starts only with a reported failure: a healthy rank 2 s late is no one missing
    got = meet_all(harness, 3, {0: (0, False), 1: (0, False), 2: (2.0, False)}, timeout=0.5)
    assert {r: g[:2] for r, g in got.items()} == {r: ([], []) for r in range(3)}


def test_everyone_learns_who_failed_when_all_arrive(harness):
    got = meet_all(harness, 4, {0: (0, False), 1: (0.2, True), 2: (0, False), 3: (0.4, True)}, timeout=5)
    assert {r: g[:2] for r, g in got.items()} == {r: ([1, 3], []) for r in range(4)}


def test_a_peer_stuck_after_a_failure_is_named_within_the_bound(harness):
    # rank 1 failed before a collective rank 2 is stuck in: ranks 0 and 1 give up 1 s after the failure
    got = meet_all(harness, 3, {0: (0, False), 1: (0.3, True), 2: None}, timeout=1.0)
    assert {r: g[:2] for r, g in got.items()} == {0: ([1], [2]), 1: ([1], [2])}
    assert all(1.2 <= g[2] < 3.0 for g in got.values()), got


def test_rank_zero_missing_does_not_unbound_the_wait(harness):
    # where dist.monitored_barrier waits for the process-group timeout (rank 0 stuck), the store does not
    got = meet_all(harness, 3, {0: None, 1: (0, True), 2: (0, False)}, timeout=1.0)
    assert {r: g[:2] for r, g in got.items()} == {1: ([1], [0]), 2: ([1], [0])}
    assert all(g[2] < 3.0 for g in got.values()), got


@pytest.fixture(scope="module")
def fuzz(harness):
    """test_fuzz_rank with the rank conftest as its ``conftest`` (what pytest gives it on a rank)."""
    saved = {name: sys.modules.get(name) for name in ("conftest",)}
    sys.path.insert(0, str(RANK))
    sys.path.insert(0, STANDIN)
    sys.modules["conftest"] = harness
    try:
        import test_fuzz_rank
        yield test_fuzz_rank
    finally:
        sys.path.remove(str(RANK))
        sys.path.remove(STANDIN)
        for name in ("test_fuzz_rank", "test_fused_rank", "test_prefill_rank", "camcheck", "camref", "cases"):
            sys.modules.pop(name, None)
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


def test_valid_fuzz_draws_lie_inside_the_stand_ins_limits_edges_included(fuzz):
    from umdk_cam_op_lib import fused, prefill

    hiddens, dtypes, tokens = set(), set(), set()
    for i in range(300):
        case, _, dtype = fuzz.prefill_config(i)
        assert prefill.H_MIN <= case.hidden <= prefill.H_MAX and case.hidden % 128 == 0, case
        assert 1 <= case.tokens <= prefill.MAX_TOKENS and 0 < case.top_k <= min(prefill.MAX_TOP_K, case.experts)
        assert dtype in prefill.X_DTYPES, dtype
        hiddens.add(case.hidden)
        dtypes.add(dtype)
        tokens.add(case.tokens)
        f = fuzz.fused_config(i)
        assert 1 <= f.batch <= fused.MAX_BATCH and fused.H_MIN <= f.hidden <= fused.H_MAX, f
        assert fused.GMM1_MIN <= 2 * f.inter <= fused.GMM1_MAX and (2 * f.inter) % fused.GMM1_ALIGN == 0, f
        assert 1 <= f.top_k <= min(fused.MAX_TOP_K, f.experts) and f.experts <= fused.MAX_EXPERTS, f
    assert {prefill.H_MIN, prefill.H_MAX} <= hiddens and len(hiddens) > 20, sorted(hiddens)
    assert dtypes == {torch.bfloat16, torch.float16} and 1 in tokens


def test_every_invalid_kind_is_drawn_within_one_pass(fuzz):
    kinds = [fuzz.invalid_kind(i) for i in range(len(fuzz.INVALID))]
    assert sorted(kinds) == sorted(fuzz.INVALID)
    for needed in ("hidden_below", "hidden_above", "empty_batch", "too_many_tokens", "x_fp32", "fused_batch_over",
                   "fused_hidden_above", "fused_gmm1_unaligned", "fused_top_k_over", "fused_experts_over"):
        assert needed in fuzz.INVALID
