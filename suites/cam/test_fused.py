"""fused_deep_moe: base, with_share, with_smooth, with_mc2_mask, dynamicBS, dynamicEPLB, all (rank/test_fused_rank.py)."""

import pytest


@pytest.mark.a3_test
@pytest.mark.multi_process_test
@pytest.mark.rank_module("test_fused_rank.py")
def test_fused_deep_moe(run_ranks, world):
    run_ranks("test_fused_rank.py", world).check()
