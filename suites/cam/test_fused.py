"""fused_deep_moe: base, with_share, with_smooth, with_mc2_mask, dynamicBS, dynamicEPLB, all
(rank/test_fused_rank.py)."""

import pytest
from camsuite import fused_env


@pytest.mark.a3_test
@pytest.mark.multi_process_test
@pytest.mark.rank_module("test_fused_rank.py")
def test_fused_deep_moe(run_ranks, world, camit):
    # HCCL_BUFFSIZE when the cases' window needs more than the default (full shapes from world 58)
    run_ranks("test_fused_rank.py", world, extra_env=fused_env(world, camit.options.full_shapes)).check()
