"""Seeded fuzz of shapes and configurations, valid and invalid (rank/test_fuzz_rank.py).

The cases derive from --random-seed; the header prints the line that reproduces them.
"""

import pytest
from camsuite import PREFILL_ENV

FUZZ_ENV = {"CAMIT_FUZZ_N": "6", **PREFILL_ENV}


@pytest.mark.multi_process_test
@pytest.mark.rank_module("test_fuzz_rank.py", env=FUZZ_ENV)
def test_fuzz(run_ranks, world, camit):
    result = run_ranks("test_fuzz_rank.py", world, extra_env=FUZZ_ENV)
    assert result.ok, f"seed {camit.seed}: {result.message()}"
