"""Abnormal inputs fail cleanly on every rank: no crash, no hang past the case timeout (rank/test_abnormal_rank.py)."""

import pytest
from camsuite import PREFILL_ENV, WORLDS


@pytest.mark.multi_process_test
@pytest.mark.parametrize("world", WORLDS)
def test_abnormal_inputs(run_ranks, world):
    result = run_ranks("test_abnormal_rank.py", world, extra_env=PREFILL_ENV).check()
    # 8 cases per rank, each an input the op checks (ids outside [0, E) are not: see the rank file)
    assert result.counts["passed"] == world * 8, result.counts
