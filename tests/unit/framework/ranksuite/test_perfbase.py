"""Baseline comparison: cluster numbers from rank samples, regressions both ways, the file round trip."""

import multiprocessing
from pathlib import Path

import pytest

from framework.ranksuite import perfbase

SAMPLES = [
    {"dispatch_us": 100.0, "combine_us": 50.0, "dispatch_bytes_per_s": 1e9, "combine_bytes_per_s": 2e9},
    {"dispatch_us": 140.0, "combine_us": 40.0, "dispatch_bytes_per_s": 8e8, "combine_bytes_per_s": 3e9},
]


def test_cluster_numbers_take_the_slowest_rank():
    n = perfbase.cluster_numbers(SAMPLES)
    assert n == {"dispatch_us": 140.0, "combine_us": 50.0, "dispatch_bytes_per_s": 8e8, "combine_bytes_per_s": 2e9}


def test_regressions_beyond_the_margin_only():
    base = perfbase.cluster_numbers(SAMPLES)
    same = dict(base)
    assert perfbase.regressions(same, base, 0.5) == []
    slower = dict(base, dispatch_us=base["dispatch_us"] * 1.6, combine_bytes_per_s=base["combine_bytes_per_s"] / 1.7)
    problems = perfbase.regressions(slower, base, 0.5)
    assert len(problems) == 2
    assert problems[0].startswith("dispatch_us 224.0 > baseline 140.0 x 1.50 (+60%)")
    assert problems[1].startswith("combine_bytes_per_s")
    within = dict(base, dispatch_us=base["dispatch_us"] * 1.4)
    assert perfbase.regressions(within, base, 0.5) == []


def test_baseline_file_round_trip(tmp_path):
    path = tmp_path / "b" / "lab.json"
    assert perfbase.load(path) == {}
    perfbase.update(path, "prefill.world4", perfbase.cluster_numbers(SAMPLES), note="seed 1")
    perfbase.update(path, "prefill.world8", {"dispatch_us": 1.0, "combine_us": 1.0,
                                             "dispatch_bytes_per_s": 1.0, "combine_bytes_per_s": 1.0})
    data = perfbase.load(path)
    assert set(data) == {"prefill.world4", "prefill.world8"}
    assert data["prefill.world4"]["dispatch_us"] == 140.0 and data["prefill.world4"]["note"] == "seed 1"


def _record(args):  # a process of its own, like an xdist worker of an --update-baseline run
    path, worker = args
    for case in range(15):
        perfbase.update(Path(path), f"case{case}.w{worker}", {"dispatch_us": float(worker)})


def test_workers_updating_one_baseline_file_at_once_lose_nothing(tmp_path):
    path = tmp_path / "lab.json"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pool.map(_record, [(str(path), w) for w in range(4)])
    assert set(perfbase.load(path)) == {f"case{c}.w{w}" for c in range(15) for w in range(4)}


def test_a_baseline_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object of cases, got list"):
        perfbase.load(path)
