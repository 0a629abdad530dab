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
import torch
import torch.distributed as dist

from tests.support import rankside

REPO = Path(__file__).resolve().parents[3]
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
        entry = plan[r]
        assert entry is not None, f"rank {r} never comes: it is not started"
        delay, failed = entry
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
                           "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "pytest",
                           "test_bad_ids_rank.py", "-p", "no:cacheprovider", "-q", "-rs"],
                          cwd=RANK, env=env, capture_output=True, text=True, timeout=120)


def test_an_out_of_range_id_is_recorded_as_an_observation_and_the_process_runs_nothing_more(tmp_path):
    """The stand-in corrupts silently (no fault): the case passes, saying what happened, and the next case of the
    process is skipped all the same (a case marked poisons_device ends what its process runs)."""
    proc = _bad_ids_run(tmp_path, REPO / "standin")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed, 1 skipped" in proc.stdout, proc.stdout[-3000:]
    assert "camit-observation: rank 0 id_num_experts (id 2, E=2): returned, no fault; num_tokens_per_expert " \
        "differs from the in-range ids' counts" in proc.stdout, proc.stdout[-3000:]


def test_a_refused_or_faulting_id_is_recorded_too_never_failed(tmp_path):
    """An op library that refuses the id at the call (a check upstream does not have): still an observation."""
    strict = tmp_path / "strict"
    shutil.copytree(REPO / "standin", strict, ignore=shutil.ignore_patterns("__pycache__"))
    layout = strict / "umdk_cam_op_lib" / "layout.py"
    text = layout.read_text()
    anchor = "    ok = valid_ids(flat, num_experts)\n"
    assert anchor in text
    layout.write_text(text.replace(anchor, anchor + "    if not bool(ok.all()):\n"
                                   "        raise RuntimeError('call aclnnDispatchLayout failed: bad id')\n"))
    proc = _bad_ids_run(tmp_path, strict)
    assert proc.returncode == 0 and "1 passed, 1 skipped" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "refused at the call: call aclnnDispatchLayout failed: bad id" in proc.stdout, proc.stdout[-3000:]


def test_the_fuzz_draws_valid_cases_inside_the_contract_and_names_one_entry_per_invalid_kind(fuzz, monkeypatch):
    """Fused valid cases inside the API guide's contract (H in [1024, 7168] % 256, top_k < E), prefill within the
    launch's window; each invalid kind crosses one contract entry, the same data the op stand-in enforces."""
    lim = fuzz.LIMITS
    assert lim is sys.modules["camcontract"].LIMITS
    monkeypatch.setattr(fuzz, "WINDOW_MB", 4096)   # the fuzz launch's HCCL_BUFFSIZE (FUZZ_ENV)
    monkeypatch.setattr(fuzz, "MAX_TOKENS", 8000)  # as on a cluster: the window caps the tokens
    for i in range(200):
        case = fuzz.fused_config(i)
        assert lim["fused.hidden"].valid(case.hidden), case
        assert 1 <= case.top_k < case.experts and lim["fused.gmm1"].valid(2 * case.inter), case
        pre, _, _ = fuzz.prefill_config(i)
        assert fuzz.fits(fuzz.dispatch_window(pre.tokens, pre.top_k, pre.hidden), fuzz.WINDOW_MB), pre
    assert set(fuzz.INVALID_ENTRY) == set(fuzz.INVALID)
    assert all(key in lim and lim[key].check != "none" for key in fuzz.INVALID_ENTRY.values())


def test_a_refusal_for_another_entry_does_not_pass_the_case(fuzz):
    """refused_for(key) needs that entry's quantity: the old OP_ERROR took any refusal."""
    import camcheck

    text = ("call aclnnMoeDispatchNormal failed, detail:EZ9999: Inner Error!\nEZ9999: [PID: 1] t MoeDispatchNormal: "
            "xShape dims1(H) should be in [1024, 7168], but got 1023.[FUNC:TilingFunc]")
    def refused(key: str) -> None:
        with camcheck.refused_for(key):
            raise RuntimeError(text)

    refused("dispatch.hidden")
    with pytest.raises((RuntimeError, AssertionError)):
        refused("dispatch.tokens")
