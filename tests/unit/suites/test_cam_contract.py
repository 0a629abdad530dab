"""The CAM ops' contract (suites/cam/rank/camcontract.py): one file, read by the op stand-in and by the suite.

Every entry cites an upstream file and line; the stand-in ships the same bytes and enforces the same entries
(its limits, dtypes and HCCL windows come from it); the suite's case generators draw from the same entries."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[3]
RANK = REPO / "suites" / "cam" / "rank"
STANDIN = REPO / "standin"
for path in (str(STANDIN), str(RANK)):
    if path not in sys.path:
        sys.path.insert(0, path)

import camcontract  # noqa: E402
import umdk_cam_op_lib as cam  # noqa: E402
from umdk_cam_op_lib import _contract, fused, layout, prefill  # noqa: E402

#: the upstream files an entry may cite (umdk 00cc16f1)
CITABLE = re.compile(r"^src/cam/comm_operator/(pybind/\w+\.cpp|ascend_kernels/\w+/op_host/\w+\.(cpp|h)):\d+$")


def test_the_stand_in_ships_the_suites_contract_byte_for_byte():
    assert (STANDIN / "umdk_cam_op_lib" / "_contract.py").read_bytes() == (RANK / "camcontract.py").read_bytes()


@pytest.mark.parametrize("key", sorted(camcontract.LIMITS))
def test_every_entry_cites_an_upstream_file_and_line(key):
    lim = camcontract.LIMITS[key]
    assert CITABLE.match(lim.source), lim.source
    assert lim.check in ("pybind", "tiling", "opdef", "none")
    assert lim.check == "none" or lim.names, key          # a refusal names the quantity
    assert lim.guide == "" or re.match(r"^doc/en/cam/CAM API Guide\.md:\d+$", lim.guide), lim.guide


def test_the_stand_in_enforces_the_contracts_entries():
    lim = _contract.LIMITS
    layout_his = (lim["layout.ranks"].hi, lim["layout.experts"].hi, lim["layout.tokens"].hi, lim["layout.top_k"].hi)
    assert layout_his == (layout.MAX_RANKS, layout.MAX_EXPERTS, layout.MAX_TOKENS, layout.MAX_TOP_K)
    prefill_bounds = (2, 384, lim["dispatch.tokens"].hi, lim["dispatch.hidden"].lo, lim["dispatch.hidden"].hi)
    assert prefill_bounds == (prefill.MIN_RANKS, prefill.MAX_RANKS, prefill.MAX_TOKENS, prefill.H_MIN, prefill.H_MAX)
    # fused: the tiling refuses outside [512, 7168]; the contract's valid range is the guide's [1024, 7168]
    assert (fused.H_MIN, fused.H_MAX) == (lim["fused.hidden"].refused_lo, lim["fused.hidden"].hi) == (512, 7168)
    assert lim["fused.hidden"].valid(1024) and not lim["fused.hidden"].valid(768)
    assert not lim["fused.hidden"].refused(768) and lim["fused.hidden"].refused(256)


def test_the_prefill_windows_follow_the_tilings():
    # H 7168: a dispatch row 14848 B + a combine row 14336 B (moe_dispatch_normal_tiling.cpp:575-590)
    assert camcontract.dispatch_window(1, 1, 7168) == (29184 + 208 * camcontract.MB) * 2
    # HCCL_BUFFSIZE 4096: T·K = 66110 fits at H 7168, one more does not
    assert camcontract.fits(camcontract.dispatch_window(66110, 1, 7168), 4096)
    assert not camcontract.fits(camcontract.dispatch_window(66111, 1, 7168), 4096)
    # the default 200 MB never holds a prefill op (the 208 MB of state, doubled)
    assert not camcontract.fits(camcontract.combine_window(1, 1, 1024), 200)
    assert camcontract.fused_window(2, 0, 7168) == 0


@pytest.fixture
def world1(monkeypatch):
    monkeypatch.setenv("CAMIT_STANDIN_NO_OPAPI_CHECK", "1")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _dispatch(tokens: int, hidden: int, top_k: int) -> None:
    idx = torch.zeros(tokens, top_k, dtype=torch.int64)
    ntpe = torch.zeros(16, dtype=torch.int32)
    cam.moe_dispatch_prefill(torch.zeros(tokens, hidden, dtype=torch.bfloat16), idx, torch.ones(tokens, top_k),
                             ntpe, torch.zeros(tokens, top_k, dtype=torch.int32), cam.group_name(), 0, 2, False)


def test_the_stand_in_refuses_a_prefill_window_too_small(world1, monkeypatch):
    lim = camcontract.LIMITS["dispatch.window"]
    with pytest.raises(RuntimeError, match=lim.pattern()):      # no HCCL_BUFFSIZE: 200 MB
        _dispatch(16, 1024, 4)
    monkeypatch.setenv("HCCL_BUFFSIZE", "4096")
    with pytest.raises(RuntimeError, match=lim.pattern()):      # T·K past 66110 at H 7168
        _dispatch(8000, 7168, 9)
    with pytest.raises(RuntimeError, match="stand-in cannot emulate"):   # fits: on to the group checks
        _dispatch(8000, 7168, 8)
    monkeypatch.setenv("HCCL_BUFFSIZE", "lots")   # unparsable: GetMaxWindowSize keeps its 200 MB default
    with pytest.raises(RuntimeError, match=lim.pattern()):
        _dispatch(16, 1024, 4)
    monkeypatch.setenv("HCCL_BUFFSIZE", "300")
    with pytest.raises(RuntimeError, match=camcontract.LIMITS["combine.window"].pattern()):
        cam.moe_combine_prefill(torch.zeros(1, 1024, dtype=torch.bfloat16), torch.zeros(8, 1, dtype=torch.int64),
                                torch.ones(8, 1), torch.zeros(3, dtype=torch.int32), torch.zeros(2, dtype=torch.int32),
                                cam.group_name(), 0, 2)


def _fused(x_dtype: torch.dtype = torch.bfloat16, ids_dtype: torch.dtype = torch.int32,
           scales_dtype: torch.dtype = torch.float32, s2_dtype: torch.dtype = torch.bfloat16) -> None:
    local, hidden, two_i, bs = 2, 1024, 1024, 2
    cam.fused_deep_moe(torch.zeros(bs, hidden, dtype=x_dtype), torch.zeros(bs, 1, dtype=ids_dtype),
                       [torch.zeros(local, hidden, two_i, dtype=torch.int8)], [torch.ones(local, two_i)],
                       [torch.zeros(local, two_i // 2, hidden, dtype=torch.int8)],
                       [torch.ones(local, hidden, dtype=s2_dtype)], torch.ones(bs, 1, dtype=scales_dtype),
                       None, None, None, None, None, None, None, "no-such-group", 1, 0, local, 0, 0)


@pytest.mark.parametrize("kw,key", [
    ({"x_dtype": torch.float32}, "fused.x_dtype"),
    ({"ids_dtype": torch.int64}, "fused.expert_ids_dtype"),
    ({"scales_dtype": torch.float64}, "fused.expert_scales_dtype"),
    ({"x_dtype": torch.float16}, "fused.weight_scale_dtype"),        # bf16 gmm2 scale with fp16 x: no binary
])
def test_the_stand_in_takes_the_fused_dtypes_of_the_op_definition_only(world1, kw, key):
    with pytest.raises(RuntimeError, match=camcontract.LIMITS[key].pattern()):
        _fused(**kw)
    with pytest.raises(RuntimeError, match="group_ep names a process group"):   # the valid one gets past
        _fused()


def test_worlds_past_the_ops_rank_limit_are_skipped_with_the_reason():
    sys.path.insert(0, str(REPO / "suites" / "cam"))
    try:
        import camsuite
    finally:
        sys.path.remove(str(REPO / "suites" / "cam"))
    assert camsuite.MAX_RANKS == camcontract.MAX_RANKS == 384
    assert camsuite._too_big(384) == []
    (mark,) = camsuite._too_big(400)
    assert mark.name == "skip" and "at most 384 ranks" in mark.kwargs["reason"]


def test_the_out_of_range_id_observations_are_read_from_the_rank_logs(tmp_path):
    from types import SimpleNamespace

    sys.path.insert(0, str(REPO / "suites" / "cam"))
    try:
        import test_abnormal
    finally:
        sys.path.remove(str(REPO / "suites" / "cam"))
    logs = []
    for rank in range(2):
        log = tmp_path / f"rank{rank}.log"
        log.write_text(f"../test_bad_ids_rank.py \ncamit-observation: rank {rank} id_minus_one: returned, no fault\n"
                       "1 passed\n")
        logs.append(SimpleNamespace(rank=rank, log=str(log)))
    missing = SimpleNamespace(rank=2, log=str(tmp_path / "none.log"))
    result = SimpleNamespace(launch=SimpleNamespace(ranks={1: logs[1], 0: logs[0], 2: missing}))
    assert test_abnormal.observations(result) == ["rank 0 id_minus_one: returned, no fault",
                                                  "rank 1 id_minus_one: returned, no fault"]


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("world", [2, 4, 8, 64, 384])
def test_fused_launches_get_the_hccl_window_their_cases_need(world, full, monkeypatch):
    """camsuite.fused_demand mirrors rank/cases.py: the largest fused case's window, and fused_env sets
    HCCL_BUFFSIZE exactly when the default 200 MB does not hold it (--full-shapes from world 58)."""
    sys.path.insert(0, str(REPO / "suites" / "cam"))
    try:
        import camsuite
    finally:
        sys.path.remove(str(REPO / "suites" / "cam"))
    import cases
    from camref import fused_inputs

    monkeypatch.setattr(cases, "FULL", full)
    shapes = [cases.fused_case(world)] + ([cases.PRODUCTION] if world == cases.PRODUCTION_WORLD and not full else [])
    need = max(camcontract.fused_window(c.experts // world, max(fused_inputs(1, r, c)["x"].shape[0]
                                                                for r in range(min(world, 3))) * world, c.hidden)
               for c in shapes)
    assert camsuite.fused_demand(world, full) == need
    env = camsuite.fused_env(world, full)
    assert camcontract.fits(need, camcontract.hccl_buffsize_mb(env))
    assert ("HCCL_BUFFSIZE" in env) == (not camcontract.fits(need, 200))
    assert ("HCCL_BUFFSIZE" in env) == (full and world >= 58)


@pytest.mark.parametrize("world", [2, 4, 8, 200, 257, 300, 384])
def test_the_case_shapes_stay_inside_the_contract_at_every_world_the_ops_take(world, monkeypatch):
    import cases

    lim = camcontract.LIMITS
    for full in (False, True):
        monkeypatch.setattr(cases, "FULL", full)
        pre, fus = cases.prefill_case(world), cases.fused_case(world)
        assert lim["dispatch.experts"].valid(pre.experts) and pre.experts % world == 0, pre
        assert lim["dispatch.top_k"].valid(pre.top_k) and pre.top_k <= pre.experts, pre
        assert lim["fused.experts"].valid(fus.experts) and fus.experts % world == 0, fus
        assert lim["fused.hidden"].valid(fus.hidden) and 1 <= fus.top_k < fus.experts, fus
