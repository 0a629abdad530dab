"""Performance: dispatch and combine latency and bytes/s per rank, judged against the cluster's
history.

Design: docs/internals/cam-suite.md.
"""

import json
from pathlib import Path

import pytest
from camsuite import PREFILL_ENV

from framework.ranksuite import history, perfbase

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.perf


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
    base_dir = Path(opt("camit_baseline_dir") or REPO / "env" / "baselines")
    key = f"prefill.world{world}"
    rundir = camit.ensure_rundir()
    rundir.write_json(f"perf-{key}.json", {"cluster": cluster, "numbers": numbers, "ranks": samples})
    accept = bool(opt("camit_update_baseline"))
    if accept:
        perfbase.update(base_dir / f"{cluster}.json", key, numbers, note=f"seed {camit.seed}")
    socs = sorted({h.npu.soc for h in camit.env.hosts.values()})
    run = history.RunKey(run_id=rundir.run_id, cluster=cluster, soc="+".join(socs), cann="unknown",
                         op_lib_version="unknown")
    problems = history.record_and_judge(history.path_for(base_dir, cluster), run, key, numbers,
                                        higher_is_better=perfbase.THROUGHPUT, margin=opt("camit_baseline_margin"),
                                        accepted=accept)
    assert accept or not problems, f"performance regression on {cluster} ({key}):\n" + "\n".join(problems)
