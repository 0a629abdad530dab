"""The perf sweep: ``pytest suites/cam -m perf [--perf-matrix quick|nightly|FILE]``.

Design: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from camsuite import sweep_env, worlds_of

from framework import SOC_MARKERS
from framework.ranksuite import Row, append_text, history, matrix, sweep, update_json

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.perf


def _matrix(config: pytest.Config) -> matrix.Matrix | None:
    choice = config.getoption("camit_perf_matrix")
    if choice is None and "perf" not in (config.option.markexpr or ""):
        return None
    try:
        return matrix.load(choice or "quick")
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _say(config: pytest.Config, line: str) -> None:
    """A line on the terminal now, past the output capture (the estimate is for before the wait)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:  # an xdist worker: its output goes with the test's report
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


def _series(h: history.History, key: history.RunKey, verdicts: dict) -> list[dict[str, Any]]:
    return [{"config": c, "metric": m, "values": v.series, "change_points": v.change_points,
             "regression": v.regression} for (c, m), v in sorted(verdicts.items())]


def _judge(camit: Any, rows: list[Row], run_id: str, cluster: str) -> tuple[list[str], list[dict[str, Any]]]:
    opt = camit.config.getoption
    base_dir = Path(opt("camit_baseline_dir") or REPO / "env" / "baselines")
    env = rows[0].environment
    key = history.RunKey(run_id=run_id, cluster=cluster, soc=env.soc, cann=env.cann,
                         op_lib_version=env.op_lib_version)
    values = {(r.key(), m): v for r in rows for m, v in (("p50_us", r.time_us.p50), ("busbw", r.bandwidth.busbw))}
    with history.History(history.path_for(base_dir, cluster)) as h:
        h.record(key, values, accepted=bool(opt("camit_update_baseline")))
        verdicts = {k: v for k, v in h.assess_run(key, higher_is_better={"busbw"},
                                                  margin=opt("camit_baseline_margin")).items() if k in values}
        series = _series(h, key, verdicts)
    problems = [v.describe(f"{c} {m}") for (c, m), v in sorted(verdicts.items()) if v.regression]
    return ([] if opt("camit_update_baseline") else problems), series


@pytest.mark.multi_process_test
def test_sweep(run_ranks, world, camit, request):
    m = _matrix(request.config)
    if m is None:
        pytest.skip("the perf sweep runs with -m perf or --perf-matrix quick|nightly|FILE")
    configs = matrix.configs(m, world)
    if {h.npu.soc for h in camit.env.hosts.values()} & {SOC_MARKERS["a2_test"]}:
        configs = [c for c in configs if c.op != sweep.FUSED]  # an a3_test op, skipped alike (test_fused.py)
    if not configs:
        pytest.skip(f"no configuration of the matrix fits the ops' contract at {world} ranks")
    chosen = camit.options.worlds  # --world-sizes: the other default worlds are skipped, not measured
    worlds = [w for w in worlds_of(request.config) if chosen is None or w in chosen]
    _say(request.config, f"perf sweep at {world} ranks: {len(configs)} configuration(s), "
                         f"{m.warmup} warm-up + {m.iterations} timed iterations each; the whole sweep "
                         f"({len(worlds)} world size(s)) about {matrix.estimate_s(m, worlds):.0f} s")
    extra = {**sweep_env(configs), **sweep.standin_env(os.environ),
             "CAMIT_SWEEP": sweep.spec(configs, m.warmup, m.iterations, m.fused_inter)}
    result = run_ranks("test_sweep_rank.py", world, extra_env=extra).check()
    ranks = [result.launch.ranks[r] for r in range(world)]
    docs = [json.loads((Path(r.log).parent / f"perf-sweep-rank{r.rank}.json").read_text()) for r in ranks]
    cluster = camit.config.getoption("camit_cluster") or Path(camit.env.source).stem
    soc = "+".join(sorted({h.npu.soc for h in camit.env.hosts.values()}))
    rundir = camit.ensure_rundir()
    rows = sweep.rows(configs, docs, [r.host for r in ranks], run_id=rundir.run_id, cluster=cluster, soc=soc)
    append_text(rundir.file("perf-rows.jsonl"), "".join(r.to_json() + "\n" for r in rows))
    problems, series = _judge(camit, rows, rundir.run_id, cluster)
    mine = {(s["config"], s["metric"]) for s in series}
    update_json(rundir.file("perf-history.json"), lambda old: {"series": [
        *(s for s in (old or {"series": []})["series"] if (s["config"], s["metric"]) not in mine), *series]})
    for r in rows:
        if r.straggler:
            _say(request.config, f"{r.key()}: {r.straggler}")
    assert not problems, f"performance regression at {world} ranks:\n" + "\n".join(problems)
