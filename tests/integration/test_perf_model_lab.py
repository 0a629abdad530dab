"""The perf harness's arithmetic end to end on the emulated A3 lab, against a known answer: the op stand-in's
time model (standin/umdk_cam_op_lib/_timing.py) makes every op last ``S / bandwidth + latency``, so the
sweep's algbw must be the model's (prefill dispatch, prefill combine and fused_deep_moe), and a rank slowed by
10 % must be named with its factor and regress."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]
LOCK = Path("/tmp/camit-npulab.lock")
BW_GBPS, LATENCY_US = 0.0002, 200000.0  # 328 + 200 ms: the lab adds 0.5-2.5 ms (0.5 %)
TOKENS, HIDDEN, TOP_K = 16, 1024, 2


def _run(*argv: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          stdin=subprocess.DEVNULL, env=env)


def _suite_env(src: Path, tmp_path: Path) -> Path:
    """The lab env with the artifacts built from this checkout, two visible devices per host (world 4 spans
    both hosts) and a workdir of its own."""
    built = tmp_path / "suite.yaml"
    proc = _run("-m", "framework.artifacts", "build", "--out", str(tmp_path / "art"), "--env-in", str(src),
                "--env-out", str(built))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = yaml.safe_load(built.read_text())
    doc["defaults"]["npu"]["visible"] = [0, 1]
    doc["defaults"]["workdir"] = "/var/tmp/camit/perf-model"
    out = tmp_path / "model.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def _sweep(env: Path, tmp_path: Path, name: str, knobs: dict[str, str], *extra: str
           ) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"tokens: [{TOKENS}]\nhidden: [{HIDDEN}]\ntop_k: [{TOP_K}]\nwarmup: 1\niterations: 5\n")
    proc = _run("-m", "pytest", "suites/cam/test_sweep.py", "-m", "perf", "--perf-matrix", str(matrix),
                "--world-sizes", "4", "--env", str(env), "--baseline-dir", str(tmp_path / "b"), "--cluster-name",
                "model", "--baseline-margin", "0.05", "--report-dir", str(tmp_path / name), "-p",
                "no:cacheprovider", "-q", *extra, env={**os.environ, **knobs})
    rows = (tmp_path / name / "latest" / "perf-rows.jsonl").read_text().splitlines()
    return proc, [json.loads(r) for r in rows]


def test_the_sweep_measures_the_modelled_time_and_names_a_rank_slowed_by_10_percent(npu_lab_env_path, tmp_path):
    import fcntl

    model = {"CAMIT_STANDIN_OP_BW_GBPS": str(BW_GBPS), "CAMIT_STANDIN_OP_LATENCY_US": str(LATENCY_US)}
    s_bytes = TOKENS * TOP_K * HIDDEN * 2  # the row's S: one rank's rows (framework/perf/row.py)
    expected = s_bytes / (s_bytes / (BW_GBPS * 1e9) + LATENCY_US * 1e-6) / 1e9
    env = _suite_env(npu_lab_env_path, tmp_path)
    with open(LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        base, rows = _sweep(env, tmp_path, "base", model, "--update-baseline")
        assert base.returncode == 0, base.stdout[-3000:] + base.stderr[-2000:]
        slow, slow_rows = _sweep(env, tmp_path, "slow", {**model, "CAMIT_STANDIN_SLOW_RANKS": "3:1.1"})
    assert [r["config"]["op"] for r in rows] == ["dispatch", "combine", "fused_deep_moe"]
    # the ranks' own clocks for bench/perf_overhead.py: the timed section holds every modelled call (warm-up
    # included: 6 iterations, dispatch and combine together), the timed loop holds it, the wall time the loop
    modelled_s = s_bytes / (BW_GBPS * 1e9) + LATENCY_US * 1e-6
    docs = [json.loads(p.read_text()) for p in (tmp_path / "base" / "latest").rglob("perf-sweep-rank*.json")]
    assert len(docs) == 4 and all(d["launch_us"] > 0 for d in docs)
    for d in docs:
        for shape, calls in [(x, 12) for x in d["shapes"]] + [(x, 6) for x in d["fused"]]:
            assert calls * modelled_s * 1e6 <= shape["section_us"] <= shape["loop_us"] <= shape["wall_us"], shape
    for r in rows:
        assert r["bytes"]["total"] == 4 * s_bytes, r["bytes"]
        assert abs(r["bandwidth"]["algbw"] / expected - 1) < 0.01, (r["config"]["op"], r["bandwidth"], expected)
        assert r["straggler"] is None, r["straggler"]
    assert slow.returncode != 0 and "performance regression at 4 ranks" in slow.stdout, slow.stdout[-3000:]
    for r in slow_rows:
        key = ".".join([r["config"]["op"], f"t{TOKENS}.h{HIDDEN}.k{TOP_K}.e8.w4.bfloat16.none"])
        step = re.search(rf"{re.escape(key)} p50_us: regression by margin 0.05 at point 1(?: \(.*?\))? of 2: "
                         r"\S+ -> \S+ \(\+(\d+\.\d)%\)", slow.stdout)
        assert step and 9.0 <= float(step.group(1)) <= 11.0, (key, slow.stdout[-3000:])
        host = r["ranks"][3]["host"]
        named = re.fullmatch(rf"straggler: rank 3 on {host} x(\d\.\d\d) the median rank", r["straggler"] or "")
        assert named and abs(float(named.group(1)) - 1.1) <= 0.011, r["straggler"]
        others = sorted(x["p50"] for x in r["ranks"][:3])
        assert abs(r["ranks"][3]["p50"] / others[1] - 1.1) < 0.011, r["ranks"]
        assert abs(r["bandwidth"]["algbw"] * 1.1 / expected - 1) < 0.01, (r["bandwidth"], expected)
    print({r["config"]["op"]: (r["bandwidth"]["algbw"], expected) for r in rows})
