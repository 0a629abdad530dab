"""Seeded fuzz of shapes and configurations, valid and invalid (rank/test_fuzz_rank.py).

The cases derive from --random-seed; the header prints the line that reproduces them.
"""

import pytest
from camsuite import PREFILL_ENV


@pytest.mark.multi_process_test
def test_fuzz(run_ranks, world, camit):
    result = run_ranks("test_fuzz_rank.py", world, extra_env={"CAMIT_FUZZ_N": "6", **PREFILL_ENV})
    assert result.ok, f"seed {camit.seed}: {result.message()}"
