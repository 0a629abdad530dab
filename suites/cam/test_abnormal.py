"""Abnormal inputs fail cleanly on every rank: no crash, no hang past the case timeout (rank/test_abnormal_rank.py);
out-of-range expert ids (undefined behaviour) are observed and recorded, each in a launch of its own
(rank/test_bad_ids_rank.py): never a pass/fail contract."""

from pathlib import Path

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


#: the line each rank of test_bad_ids_rank.py prints for what it saw
OBSERVATION = "camit-observation: "


def observations(result) -> list[str]:
    """The ranks' ``camit-observation:`` lines, from their logs (fetched into the report folder), as text."""
    seen = []
    for rank in sorted(result.launch.ranks.values(), key=lambda r: r.rank):
        log = Path(rank.log) if rank.log else None
        if log is not None and log.is_file():
            text = log.read_text(encoding="utf-8", errors="replace")
            seen += [ln.split(OBSERVATION, 1)[1].strip()[:400] for ln in text.splitlines() if OBSERVATION in ln]
    return seen


@pytest.mark.multi_process_test
@pytest.mark.parametrize("kind", BAD_IDS)
@pytest.mark.ranks(BAD_IDS_WORLD)
@pytest.mark.a3_test
def test_out_of_range_expert_ids_are_observed(run_ranks, kind, request):
    """What an id outside [0, E) did (refused, a device fault, or silently different outputs), recorded per
    rank as the test's ``observation`` properties (report and JUnit) and printed: the kernels leave it
    undefined (CAM API Guide.md:27), so the test fails only when the launch itself does (a crash, a hang).
    One world: the layout kernel is rank-local."""
    world = BAD_IDS_WORLD
    result = run_ranks("test_bad_ids_rank.py", world, select=kind, name=f"test_bad_ids_rank-{kind}").check()
    assert result.counts["passed"] == world, result.counts
    seen = observations(result) or ["no observation line in the rank logs"]
    for line in seen:
        request.node.user_properties.append(("observation", line))
        print(f"observed: {line}")
