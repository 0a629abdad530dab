"""Abnormal inputs fail cleanly on every rank: no crash, no hang past the case timeout (rank/test_abnormal_rank.py)."""

import pytest


@pytest.mark.multi_process_test
def test_abnormal_inputs(run_ranks, world):
    result = run_ranks("test_abnormal_rank.py", world).check()
    # 8 cases per rank, each an input the op checks (ids outside [0, E) are not: see the rank file)
    assert result.counts["passed"] == world * 8, result.counts
