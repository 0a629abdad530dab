"""dispatch/combine prefill across the cluster, quant off and on (rank side: rank/test_prefill_rank.py)."""

import pytest
from camsuite import PREFILL_ENV


@pytest.mark.a3_test
@pytest.mark.multi_process_test
@pytest.mark.rank_module("test_prefill_rank.py", env=PREFILL_ENV)
def test_prefill_dispatch_combine(run_ranks, world):
    run_ranks("test_prefill_rank.py", world, extra_env=PREFILL_ENV).check()
