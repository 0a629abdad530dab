"""The perf sweep's own overhead per configuration, on the emulated A3 lab, against the modelled op time.

Runs the quick matrix (``pytest suites/cam/test_sweep.py -m perf --perf-matrix quick --world-sizes 4``) on a
2-host emulated A3 lab (``--env``: its env file, e.g. ``python -m framework.lab up --hosts 2 --npu a3 ...``),
with the op stand-in's time model on (``standin/umdk_cam_op_lib/_timing.py``: every op lasts
``S / bandwidth + latency``), and prints per configuration, side by side:
- the modelled op time and the measured p50;
- the timed section: the op(s) and the reference all_to_all of every iteration, warm-up included (the ranks'
  ``section_us``; a prefill shape times dispatch and combine together, so its figures are split over the two);
- rank-side bookkeeping: the timed loop's wall time beyond its critical path (each iteration's op(s) and
  its reference, each segment as long as its slowest rank: the others wait for that one at the next
  barrier): the barriers' own latency, output hashes and records the harness adds while it measures;
- the configuration's set-up, shown apart: its inputs (and fused_deep_moe's weights) built once before the
  timed loop, never inside it (the launch's first calls are warmed up once per launch, shown beside the
  matrix's time);
- controller bookkeeping: rows built, the history recorded and judged, per configuration (the performance
  page, drawn once per run, is shown beside the matrix's time);
- the goal: overhead <= max(5 % of the timed section, 20 ms).
Also the quick matrix's wall time (goal < 180 s) and a 1,000-run history judged and compared (goal < 1 s,
``perf_history.py``). ``--save`` writes ``bench/results/perf-overhead.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from common import RESULTS, ROOT, machine  # also puts the checkout on sys.path
from perf_history import build_history, rows_file

from framework.perf import compare, history, matrix, sweep
from framework.perf.history import History, RunKey
from framework.perf.page import write_perf_page
from framework.perf.row import read_rows

sys.path.insert(0, str(ROOT / "standin"))
from umdk_cam_op_lib import _timing  # noqa: E402

BW_GBPS, LATENCY_US = 0.005, 100000.0  # 16 tokens: 113 ms, 64 tokens: 152 ms a call
SHAPE = ("tokens", "hidden", "top_k", "experts")
GOAL_SHARE, GOAL_FLOOR_MS, GOAL_MATRIX_S, GOAL_HISTORY_S = 0.05, 20.0, 180.0, 1.0


def suite_env(lab_env: Path, tmp: Path) -> Path:
    """The lab env with artifacts built from this checkout and 2 visible dies a host (world 4 on 2 hosts)."""
    built = tmp / "suite.yaml"
    subprocess.run([sys.executable, "-m", "framework.artifacts", "build", "--out", str(tmp / "art"), "--env-in",
                    str(lab_env), "--env-out", str(built)], cwd=ROOT, check=True, capture_output=True)
    doc = yaml.safe_load(built.read_text())
    doc["defaults"]["npu"]["visible"] = [0, 1]
    doc["defaults"]["workdir"] = "/var/tmp/camit/perf-overhead"
    out = tmp / "overhead.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def run_matrix(env: Path, tmp: Path) -> tuple[float, Path]:
    """The quick matrix at world 4: its wall time and its run folder."""
    knobs = {"CAMIT_STANDIN_OP_BW_GBPS": str(BW_GBPS), "CAMIT_STANDIN_OP_LATENCY_US": str(LATENCY_US)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/cam/test_sweep.py", "-m", "perf", "--perf-matrix",
                           "quick", "--world-sizes", "4", "--env", str(env), "--baseline-dir", str(tmp / "b"),
                           "--report-dir", str(tmp / "r"), "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, env={**os.environ, **knobs}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the quick matrix failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return wall, (tmp / "r" / "latest").resolve()


def controller_s(run: Path, tmp: Path) -> tuple[float, float]:
    """The controller's work after the launch, as test_sweep does it, in seconds: the rows built and the
    history recorded and judged (per run; the second of two passes: the first pays the imports' first calls),
    and the performance page drawn (once per run folder, at its end)."""
    docs = {}
    for f in run.rglob("perf-sweep-rank*.json"):
        doc = json.loads(f.read_text())
        docs[int(doc["rank"])] = doc
    rows_text = (run / "perf-rows.jsonl").read_text()
    first = read_rows(rows_text, "perf-rows.jsonl")
    configs = [r.config for r in first]
    hosts = [r.host for r in first[0].ranks]
    took = 0.0
    for n in range(2):
        t0 = time.perf_counter()
        rows = sweep.rows(configs, [docs[r] for r in sorted(docs)], hosts, run_id=f"bench{n}", cluster="bench",
                          soc="ascend910_93")
        key = RunKey(run_id=f"bench{n}", cluster="bench", soc="ascend910_93", cann="x", op_lib_version="x")
        with History(history.path_for(tmp / "hist", "bench")) as h:
            h.record(key, {(r.key(), m): v for r in rows
                           for m, v in (("p50_us", r.time_us.p50), ("busbw", r.bandwidth.busbw))}, accepted=True)
            h.assess_run(key, higher_is_better={"busbw"})
        took = time.perf_counter() - t0
    page = tmp / "page"
    page.mkdir(exist_ok=True)
    (page / "perf-rows.jsonl").write_text(rows_text)
    t0 = time.perf_counter()
    write_perf_page(page)
    return took, time.perf_counter() - t0


def critical_path_us(per_rank: list[list[list[float]]]) -> float:
    """The timed loop's critical path: per_rank[r][i] is rank r's iteration i as its segments between barriers
    ([op(s), reference]); each segment lasts as long as its slowest rank (the others wait for it at the next
    barrier), so the path is the sum over iterations and segments of the per-segment maximum. What the loop
    took beyond it is what the harness added."""
    return sum(max(seg) for iteration in zip(*per_rank) for seg in zip(*iteration))


def per_config(run: Path, controller: float) -> list[dict[str, Any]]:
    docs = [json.loads(f.read_text()) for f in run.rglob("perf-sweep-rank*.json")]
    rows = read_rows((run / "perf-rows.jsonl").read_text(), "perf-rows.jsonl")
    model = _timing.Model(bw_gbps=BW_GBPS, latency_us=LATENCY_US)
    out = []
    for r in rows:
        c = r.config
        section = "fused" if c.op == sweep.FUSED else "shapes"
        share = 1 if c.op == sweep.FUSED else 2  # a prefill shape's figures cover dispatch and combine
        want = (c.tokens, c.hidden, c.top_k, c.experts)
        shapes = [next(s for s in d[section] if tuple(s["shape"][k] for k in SHAPE) == want) for d in docs]
        timed_ms = max(s["section_us"] for s in shapes) / 1e3 / share
        critical = critical_path_us([s["segments_each_us"] for s in shapes])
        rank_ms = (max(s["loop_us"] for s in shapes) - critical) / 1e3 / share
        barrier_ms = min(s["barrier_us"] for s in shapes) / 1e3 / share  # the rank that waited least
        setup_ms = max(s["wall_us"] - s["loop_us"] for s in shapes) / 1e3 / share
        ctrl_ms = controller * 1e3 / len(rows)
        goal_ms = max(GOAL_SHARE * timed_ms, GOAL_FLOOR_MS)
        out.append({"config": r.key(), "modelled_ms": model.duration_s(
            _timing.row_bytes(c.tokens, c.top_k, c.hidden, 2), 0) * 1e3, "p50_ms": r.time_us.p50 / 1e3,
            "timed_ms": timed_ms, "rank_ms": rank_ms, "barrier_ms": barrier_ms, "setup_ms": setup_ms,
            "controller_ms": ctrl_ms,
            "overhead_ms": rank_ms + ctrl_ms, "goal_ms": goal_ms, "ok": rank_ms + ctrl_ms <= goal_ms})
    return out


def launch_ms(run: Path) -> float:
    """The ranks' once-per-launch warm-up (first calls, first collectives): the slowest rank's, in ms."""
    return max(json.loads(f.read_text())["launch_us"] for f in run.rglob("perf-sweep-rank*.json")) / 1e3


def history_s(tmp: Path) -> tuple[float, float]:
    """A 1,000-run history's newest run judged, and two runs of 24 rows compared (seconds)."""
    db = tmp / "h1000.perf.sqlite"
    build_history(db, 1000, 24)
    with History(db) as h:
        t0 = time.perf_counter()
        h.assess_run(RunKey(run_id="run00999", cluster="bench", soc="910_93", cann="8.2", op_lib_version="1.0"),
                     higher_is_better={"busbw"})
        judged = time.perf_counter() - t0
    a, b = rows_file(tmp / "a.jsonl", 24, 1), rows_file(tmp / "b.jsonl", 24, 2)
    t0 = time.perf_counter()
    compare.compare(compare.load_run(a), compare.load_run(b))
    return judged, time.perf_counter() - t0


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| configuration | modelled op | measured p50 | timed section | rank bookkeeping | controller | "
             "overhead | goal | within | of it in barriers | set-up (outside) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in doc["configs"]:
        lines.append(f"| `{c['config']}` | {c['modelled_ms']:.1f} ms | {c['p50_ms']:.1f} ms | {c['timed_ms']:.0f} ms "
                     f"| {c['rank_ms']:.1f} ms | {c['controller_ms']:.1f} ms | {c['overhead_ms']:.1f} ms | "
                     f"{c['goal_ms']:.1f} ms | {'yes' if c['ok'] else 'NO'} | {c['barrier_ms']:.1f} ms | "
                     f"{c['setup_ms']:.0f} ms |")
    lines += ["", f"Each figure is the median of {doc.get('repeat', 1)} runs of the quick matrix "
                  f"({len(doc['configs'])} configurations, world 4 on 2 emulated A3 hosts, "
                  f"{doc['matrix_iterations']}): {doc['matrix_s']:.0f} s end to end (goal < {GOAL_MATRIX_S:.0f} s); "
                  f"its performance page drawn in {doc['page_s']:.1f} s (once per run); the ranks' warm-up "
                  f"of a launch (first calls, first collectives) {doc['launch_ms']:.0f} ms (once per world). "
                  f"A 1,000-run history: newest run judged in {doc['judge_s']:.3f} s, two runs compared in "
                  f"{doc['compare_s']:.3f} s (goal < {GOAL_HISTORY_S:.0f} s). Op time model: "
                  f"{BW_GBPS} GB/s + {LATENCY_US / 1e3:.0f} ms. Machine: {doc['machine']}."]
    return "\n".join(lines) + "\n"


def median_config(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's figures over the runs: the median of each, judged against the goal again."""
    out = {k: (statistics.median(r[k] for r in runs) if isinstance(v, float) else v) for k, v in runs[0].items()}
    out["ok"] = out["overhead_ms"] <= out["goal_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", type=Path, required=True, help="a 2-host emulated A3 lab's env file")
    ap.add_argument("--save", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the matrix; each figure is their median")
    args = ap.parse_args()
    runs = []
    for n in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            wall, run = run_matrix(suite_env(args.env, tmp), tmp)
            controller, page_s = controller_s(run, tmp)
            runs.append({"configs": per_config(run, controller), "matrix_s": wall, "page_s": page_s,
                         "launch_ms": launch_ms(run)})
            if n == 0:
                judged, compared = history_s(tmp)
    q = matrix.load("quick")
    configs = [median_config([r["configs"][i] for r in runs]) for i in range(len(runs[0]["configs"]))]
    wall, page_s, launch = (statistics.median(r[k] for r in runs) for k in ("matrix_s", "page_s", "launch_ms"))
    doc = {"repeat": args.repeat, "matrix_s": wall, "page_s": page_s, "launch_ms": launch,
           "matrix_iterations": f"{q.warmup} warm-up + {q.iterations} timed iterations",
           "judge_s": judged, "compare_s": compared, "configs": configs, "machine": machine(),
           "model": {"bw_gbps": BW_GBPS, "latency_us": LATENCY_US}}
    text = markdown(doc)
    print(text)
    if args.save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "perf-overhead.json").write_text(json.dumps(doc, indent=2) + "\n")
        (RESULTS / "perf-overhead.md").write_text(text)


if __name__ == "__main__":
    main()
