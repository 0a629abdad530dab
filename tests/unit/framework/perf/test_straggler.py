"""The straggler score on synthetic timings: a 10 % slow rank is named with its host, healthy runs name nobody."""

import random
import sys
from pathlib import Path

import pytest

from framework.perf import straggler
from framework.perf.row import build_row
from tests.unit.framework.perf.test_row import CFG, ENV, SENT

HOSTS8 = [f"host{h}" for h in range(2) for _ in range(4)]


def _times(seed, slow=None, factor=1.10, iters=20, ranks=8, sd=0.03, spikes=True):
    rng = random.Random(seed)
    out = []
    for _ in range(iters):
        it = [100 * (1 + rng.gauss(0, sd)) * (factor if r == slow else 1) for r in range(ranks)]
        if spikes:  # one healthy rank has a bad moment in some iteration: not a straggler
            it[rng.randrange(ranks)] *= 1.5 if rng.random() < 0.3 else 1
        out.append(it)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_a_10_percent_slow_rank_is_named_with_its_host_and_factor(seed):
    slow = seed % 8
    found = straggler.find(_times(seed, slow=slow), HOSTS8)
    assert [s.rank for s in found] == [slow]
    assert found[0].host == HOSTS8[slow] and found[0].factor == pytest.approx(1.10, abs=0.03)
    assert found[0].describe().startswith(f"straggler: rank {slow} on {HOSTS8[slow]} x1.")


def test_twenty_healthy_runs_name_nobody():
    assert [straggler.find(_times(100 + seed), HOSTS8) for seed in range(20)] == [[]] * 20


def test_one_very_slow_iteration_is_not_a_straggler():
    times = _times(7, spikes=False)
    times[3][2] *= 20
    assert straggler.find(times, HOSTS8) == []


def test_a_slow_host_is_named_as_a_whole():
    rng = random.Random(3)
    times = [[100 * (1 + rng.gauss(0, 0.02)) * (1.2 if r >= 6 else 1) for r in range(8)] for _ in range(10)]
    hosts = ["a"] * 3 + ["b"] * 3 + ["c"] * 2
    found = straggler.find(times, hosts)
    assert {s.rank for s in found} == {6, 7} and "host c as a whole x1.1" in found[0].describe()
    assert found[0].host_factor == pytest.approx(1.2, abs=0.03)


def test_too_few_iterations_or_ranks_name_nobody_and_a_bad_shape_is_named():
    assert straggler.find(_times(1, slow=0, iters=4), HOSTS8) == []
    assert straggler.find(_times(1, slow=0, ranks=2), ["a", "b"]) == []
    with pytest.raises(ValueError, match="one time per rank"):
        straggler.find(_times(1, ranks=7), HOSTS8)


def test_the_row_carries_the_straggler():
    hosts = ["h1", "h1", "h2", "h2"]
    times = _times(4, slow=3, ranks=4)
    row = build_row(run_id="r", seed=1, config=CFG, warmup=1, times_us=times, hosts=hosts, sent=SENT,
                    environment=ENV, output_hashes=[])
    assert row.straggler is not None and row.straggler.startswith("straggler: rank 3 on h2 x1.")
    healthy = build_row(run_id="r", seed=1, config=CFG, warmup=1, times_us=_times(5, ranks=4, spikes=False),
                        hosts=hosts, sent=SENT, environment=ENV, output_hashes=[])
    assert healthy.straggler is None


def test_one_slow_rank_does_not_make_its_host_slow():
    found = straggler.find(_times(8, slow=3, ranks=4, spikes=False), ["h1", "h1", "h2", "h2"])
    assert [s.rank for s in found] == [3] and "as a whole" not in found[0].describe()


def test_a_rank_slow_in_only_some_iterations_is_not_named():
    # slower than the median by 8 % in 3 of 5 iterations (a busy core now and then), faster in the others
    times = [[100.0, 100.0, 100.0, 108.0], [100.0, 100.0, 100.0, 108.0], [100.0, 100.0, 100.0, 108.0],
             [100.0, 101.0, 100.0, 99.0], [100.0, 101.0, 100.0, 99.0]]
    assert straggler.scores(times)[3] >= 1.05
    assert straggler.find(times, ["a", "a", "b", "b"]) == []
    times[3][3] = times[4][3] = 106.0
    assert [s.rank for s in straggler.find(times, ["a", "a", "b", "b"])] == [3]


# --- a whole slow host on two hosts (the median rank sits between them): the op stand-in's time model
# (standin/umdk_cam_op_lib/_timing.py) gives each rank its modelled time, seeded noise is the lab's jitter
STANDIN = str(Path(__file__).resolve().parents[4] / "standin")
if STANDIN not in sys.path:
    sys.path.insert(0, STANDIN)

from umdk_cam_op_lib import _timing  # noqa: E402

HOSTS4 = ["h1", "h1", "h2", "h2"]


def _modelled(seed, slow=None, iters=10, ranks=4, sd=0.02):
    model = _timing.Model(bw_gbps=0.5, latency_us=50.0, slow=slow or {})
    rng = random.Random(seed)
    return [[model.duration_s(16 * 2 * 1024 * 2, r) * 1e6 * (1 + rng.gauss(0, sd)) for r in range(ranks)]
            for _ in range(iters)]


@pytest.mark.parametrize("seed", range(5))
def test_a_host_10_percent_slow_is_named_on_two_hosts(seed):
    times = _modelled(seed, slow={2: 1.1, 3: 1.1})
    assert all(s.host_factor < 1.06 for s in straggler.find(times, HOSTS4))  # the rank score barely sees it
    found = straggler.find_hosts(times, HOSTS4)
    assert [(h.host, h.ranks) for h in found] == [("h2", (2, 3))]
    assert found[0].factor == pytest.approx(1.10, abs=0.02)
    line = straggler.describe(times, HOSTS4)
    assert line is not None and f"slow host: h2 (ranks 2,3) x{found[0].factor:.2f} the other hosts" in line


def test_twenty_healthy_modelled_runs_name_no_host_and_no_rank():
    assert [straggler.describe(_modelled(200 + seed), HOSTS4) for seed in range(20)] == [None] * 20
    assert [straggler.describe(_times(300 + seed, ranks=4), HOSTS4) for seed in range(20)] == [None] * 20


@pytest.mark.parametrize("seed", range(5))
def test_one_slow_rank_of_two_is_named_as_a_rank_not_its_host(seed):
    times = _modelled(seed, slow={3: 1.1})
    assert straggler.find_hosts(times, HOSTS4) == []
    assert [s.rank for s in straggler.find(times, HOSTS4)] == [3]


def test_a_slow_host_of_one_rank_each_and_too_few_iterations():
    times = _modelled(1, slow={1: 1.2}, ranks=2)
    assert [h.host for h in straggler.find_hosts(times, ["a", "b"])] == ["b"]
    assert straggler.find_hosts(times[:4], ["a", "b"]) == []
    assert straggler.find_hosts(times, ["a", "a"]) == []  # one host: nobody to be slower than


def test_the_row_names_the_slow_host():
    row = build_row(run_id="r", seed=1, config=CFG, warmup=1, times_us=_modelled(4, slow={2: 1.15, 3: 1.15}),
                    hosts=HOSTS4, sent=SENT, environment=ENV, output_hashes=[])
    assert row.straggler is not None and row.straggler.startswith("slow host: h2 (ranks 2,3) x1.1")
