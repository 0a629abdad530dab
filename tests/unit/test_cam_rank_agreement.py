"""The rank-side harness's meeting after each test (suites/cam/rank/conftest.py ``Agreement``), on a real
c10d HashStore shared by threads as ranks: bounded only once a rank reported a failure, naming the ranks
that failed and those that never came; the fuzz draws (test_fuzz_rank.py) against the stand-in's limits; and
the out-of-range-id case (test_bad_ids_rank.py) on one real torchrun rank with the torch_npu stand-in: it
passes on the device fault and skips what follows it, and fails against a kernel that never faults."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import rankside
import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[2]
RANK = REPO / "suites" / "cam" / "rank"
STANDIN = str(REPO / "standin")


@pytest.fixture(scope="module")
def harness():
    with rankside.rank_conftest("cam_rank_conftest") as module:
        yield module


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


def _bad_ids_run(tmp_path: Path, standin: Path) -> subprocess.CompletedProcess[str]:
    """test_bad_ids_rank.py on one hccl rank (torch_npu stand-in), the op library from ``standin``."""
    scrub = ("CAMIT_", "ASCEND_", "HCCL_", "TORCH_HCCL_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "PYTEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(scrub) and k != "PYTHONPATH"}
    env.update(PYTHONPATH=f"{REPO / 'standin_npu'}{os.pathsep}{standin}", CAMIT_BACKEND="hccl",
               CAMIT_EMU_NPU_COUNT="2", CAMIT_EMU_NPU_DIR=str(tmp_path / "occ"),
               ASCEND_PROCESS_LOG_PATH=str(tmp_path / "log"), CAMIT_STANDIN_NO_OPAPI_CHECK="1",
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    with socket.socket() as sock:  # a free port (torchrun's --master-port 0 does not rendezvous)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
                           "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "pytest", "test_bad_ids_rank.py", "-p", "no:cacheprovider",
                           "-q", "-rs"], cwd=RANK, env=env, capture_output=True, text=True, timeout=120)


def test_an_out_of_range_id_passes_on_the_fault_then_the_process_runs_nothing_more(tmp_path):
    proc = _bad_ids_run(tmp_path, REPO / "standin")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed, 1 skipped" in proc.stdout, proc.stdout[-3000:]
    assert "poisoned on purpose by test_bad_ids_rank.py::test_out_of_range_expert_id_faults_the_device[" \
        "id_num_experts]" in proc.stdout, proc.stdout[-3000:]


def test_an_out_of_range_id_without_a_device_fault_fails(tmp_path):
    """An op library whose kernel never faults (the ids silently dropped): the case fails, DID NOT RAISE (the
    next is skipped all the same: a case marked poisons_device ends what its process runs)."""
    lax = tmp_path / "lax"
    shutil.copytree(REPO / "standin", lax, ignore=shutil.ignore_patterns("__pycache__"))
    tiling = lax / "umdk_cam_op_lib" / "_tiling.py"
    text = tiling.read_text()
    assert "def device_fault(code: int = VECTOR_CORE_FAULT) -> None:\n" in text
    tiling.write_text(text.replace("def device_fault(code: int = VECTOR_CORE_FAULT) -> None:\n",
                                   "def device_fault(code: int = VECTOR_CORE_FAULT) -> None:\n    return\n"))
    proc = _bad_ids_run(tmp_path, lax)
    assert proc.returncode == 1 and "1 failed, 1 skipped" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "DID NOT RAISE" in proc.stdout, proc.stdout[-3000:]
