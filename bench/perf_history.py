"""A 1,000-run performance history judged and a 1,000-row run compared: how long each takes (goal: < 1 s).

Builds a throw-away history of ``--runs`` runs x ``--configs`` configurations x 2 metrics (time and bus
bandwidth, 3 % noise, a 10 % step at 80 % of the runs), then times, best of ``--repeat``:
- ``History.assess_run`` of the newest run: every series read from SQLite and put through the change points;
- ``framework.perf.compare`` of two rows files of ``--configs`` rows each (30 iterations per row).
Prints the times; with ``--save`` also writes ``bench/results/perf-history.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from common import RESULTS  # also puts the checkout on sys.path

from framework.perf import compare
from framework.perf.history import History, RunKey
from framework.perf.row import Config, Environment, build_row


def _key(i: int) -> RunKey:
    return RunKey(run_id=f"run{i:05d}", cluster="bench", soc="910_93", cann="8.2", op_lib_version="1.0")


def build_history(path: Path, runs: int, configs: int) -> None:
    rng = random.Random(1)
    with History(path) as h:
        for i in range(runs):
            slow = 1.1 if i >= runs * 0.8 else 1.0
            h.record(_key(i), {(f"cfg{c}", m): v * (1 + rng.gauss(0, 0.03))
                               for c in range(configs) for m, v in (("p50_us", 100 * slow), ("busbw", 10 / slow))})


def rows_file(path: Path, configs: int, seed: int) -> Path:
    rng = random.Random(seed)
    env = Environment(cluster="bench", soc="910_93", cann="8.2", driver="d", op_lib_version="1.0",
                      op_lib_hash="0" * 64, hccl={})
    hosts = ["h0"] * 8 + ["h1"] * 8
    sent = [[1000] * 16 for _ in range(16)]
    lines = []
    for c in range(configs):
        cfg = Config(op="dispatch", tokens=c + 1, hidden=7168, top_k=8, experts=64, world=16, dtype="bfloat16",
                     quant="none")
        times = [[100 * (1 + rng.gauss(0, 0.03)) for _ in hosts] for _ in range(30)]
        lines.append(build_row(run_id=path.stem, seed=1, config=cfg, warmup=2, times_us=times, hosts=hosts,
                               sent=sent, environment=env, output_hashes=["x"] * 30).to_json())
    path.write_text("\n".join(lines) + "\n")
    return path


def best(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--configs", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--save", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.perf.sqlite"
        t0 = time.perf_counter()
        build_history(db, args.runs, args.configs)
        built = time.perf_counter() - t0
        with History(db) as h:
            verdicts: dict = {}
            judged = best(lambda: verdicts.update(h.assess_run(_key(args.runs - 1), higher_is_better={"busbw"})),
                          args.repeat)
        a, b = rows_file(Path(tmp) / "a.jsonl", args.configs, 1), rows_file(Path(tmp) / "b.jsonl", args.configs, 2)
        compared = best(lambda: compare.compare(compare.load_run(a), compare.load_run(b)), args.repeat)
    flagged = sum(v.regression for v in verdicts.values())
    series = len(verdicts)
    print(f"history of {args.runs} runs x {series} series: built in {built:.2f} s; "
          f"newest run judged in {judged:.3f} s ({flagged}/{series} series flag the 10 % step)")
    print(f"compare of two runs of {args.configs} rows x 30 iterations: {compared:.3f} s")
    if args.save:
        doc = {"runs": args.runs, "series": series, "judge_s": judged, "compare_s": compared, "flagged": flagged}
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "perf-history.json").write_text(json.dumps(doc, indent=2) + "\n")
        (RESULTS / "perf-history.md").write_text(
            "| history | series | judge newest run | compare two runs |\n|---|---|---|---|\n"
            f"| {args.runs} runs | {series} | {judged:.3f} s | {compared:.3f} s ({args.configs} rows) |\n")


if __name__ == "__main__":
    main()
