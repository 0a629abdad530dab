"""Performance baseline: dispatch and combine latency and bytes/s per rank, against env/baselines/<cluster>.json.

A regression beyond --baseline-margin fails with the numbers; --update-baseline records the run
as the new baseline; with no baseline yet the numbers are reported and the test passes.
"""

import json
from pathlib import Path

import pytest
from camsuite import PREFILL_ENV

from framework import perfbase

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.multi_process_test
@pytest.mark.rank_module("test_perf_rank.py", env=PREFILL_ENV)
def test_dispatch_combine_perf(run_ranks, world, camit):
    result = run_ranks("test_perf_rank.py", world, extra_env=PREFILL_ENV).check()
    samples = []
    for rank in range(world):
        log = result.launch.ranks[rank].log
        samples.append(json.loads((Path(log).parent / f"perf-rank{rank}.json").read_text()))
    numbers = perfbase.cluster_numbers(samples)
    opt = camit.config.getoption
    cluster = opt("camit_cluster") or Path(camit.env.source).stem
    path = Path(opt("camit_baseline_dir") or REPO / "env" / "baselines") / f"{cluster}.json"
    key = f"prefill.world{world}"
    camit.ensure_rundir().write_json(f"perf-{key}.json", {"cluster": cluster, "numbers": numbers, "ranks": samples})
    if opt("camit_update_baseline"):
        perfbase.update(path, key, numbers, note=f"seed {camit.seed}")
        return
    baseline = perfbase.load(path).get(key)
    if baseline is None:
        print(f"no baseline {key} in {path}: measured {numbers} (record it with --update-baseline)")
        return
    problems = perfbase.regressions(numbers, baseline, opt("camit_baseline_margin"))
    assert not problems, f"performance regression on {cluster} ({key}): " + "; ".join(problems)
