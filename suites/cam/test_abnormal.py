"""Abnormal inputs fail cleanly on every rank: no crash, no hang past the case timeout (rank/test_abnormal_rank.py)."""

import pytest
from camsuite import WORLDS


@pytest.mark.multi_process_test
@pytest.mark.parametrize("world", WORLDS)
def test_abnormal_inputs(run_ranks, world):
    result = run_ranks("test_abnormal_rank.py", world).check()
    assert result.counts["passed"] == world * 9, result.counts
