"""Abnormal inputs fail cleanly on every rank: no crash, no hang past the case timeout (rank/test_abnormal_rank.py);
out-of-range expert ids fault the device, each in a launch of its own (rank/test_bad_ids_rank.py)."""

import pytest
from camsuite import PREFILL_ENV

#: the bad-id cases of rank/test_bad_ids_rank.py (BAD_IDS there); one launch each: a fault poisons the process
BAD_IDS = ["id_num_experts", "id_minus_one"]
#: the one world the bad-id cases run at
BAD_IDS_WORLD = 4


@pytest.mark.multi_process_test
@pytest.mark.rank_module("test_abnormal_rank.py", env=PREFILL_ENV)
def test_abnormal_inputs(run_ranks, world):
    result = run_ranks("test_abnormal_rank.py", world, extra_env=PREFILL_ENV).check()
    # 8 cases per rank, each an input the op checks (ids outside [0, E) are not: test_bad_ids_rank.py)
    assert result.counts["passed"] == world * 8, result.counts


@pytest.mark.multi_process_test
@pytest.mark.parametrize("kind", BAD_IDS)
@pytest.mark.ranks(BAD_IDS_WORLD)
@pytest.mark.a3_test
def test_out_of_range_expert_ids_fault_the_device(run_ranks, kind, camit):
    """Passes when every rank's next synchronize reports the kernel fault, fails when none comes; one world
    is enough (the layout kernel is rank-local) and keeps the launches few. Not ``world``-parametrized:
    it runs at that one size only, an A3 case like every CAM case."""
    world = BAD_IDS_WORLD
    if camit.require_env().launch.backend != "hccl":
        pytest.skip("the device fault of an out-of-range id needs the NPU (hccl) path; on gloo the id is lost "
                    "silently")
    result = run_ranks("test_bad_ids_rank.py", world, select=kind, name=f"test_bad_ids_rank-{kind}").check()
    assert result.counts["passed"] == world, result.counts
