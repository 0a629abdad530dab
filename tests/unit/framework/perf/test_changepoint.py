"""Change points on synthetic series: a 10 % step in 3 % noise is found where it happened, noise is not."""

import random

import pytest

from framework.perf.changepoint import assess, change_points, noise

SEEDS = range(8)


def _series(seed, n, step_at=None, step=0.10, sd=0.03, base=100.0):
    rng = random.Random(seed)
    return [base * (1 + (step if step_at is not None and i >= step_at else 0)) * (1 + rng.gauss(0, sd))
            for i in range(n)]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_10_percent_step_in_3_percent_noise_is_found_within_one_point(seed):
    at = 25 + 3 * seed
    values = _series(seed, 60, step_at=at)
    cps = change_points(values)
    assert cps and min(abs(c - at) for c in cps) <= 1, (cps, at)
    v = assess(values)  # latency: 10 % more is worse
    assert v.regression and v.at is not None and abs(v.at - at) <= 1
    assert v.step == pytest.approx(0.10, abs=0.03)
    text = v.describe("dispatch_us")
    assert "regression by change point at point" in text and "+" in text and "series" in text


@pytest.mark.parametrize("seed", SEEDS)
def test_200_noise_only_points_raise_no_alarm(seed):
    values = _series(seed + 100, 200)
    assert change_points(values) == []
    # and judged run by run, as the history grows: no newest point is ever a regression
    alarms = [n for n in range(2, 201) if assess(values[:n]).regression]
    assert alarms == []


def test_an_improvement_is_no_regression_and_bandwidth_points_the_other_way():
    faster = _series(1, 50, step_at=30, step=-0.10)
    v = assess(faster)
    assert not v.regression and v.change_points
    assert assess(faster, higher_is_better=True).regression  # a bandwidth that falls by 10 %


def test_a_single_far_newest_point_is_a_regression_a_near_one_is_not():
    values = _series(3, 40)
    assert assess([*values, 100 * 1.5]).regression
    v = assess([*values, 100 * 1.5])
    assert v.how.startswith("the newest point") and v.at == 40
    assert not assess([*values, 100 * 1.03]).regression


def test_a_step_accepted_as_the_baseline_no_longer_fails():
    values = _series(4, 60, step_at=30)
    assert assess(values).regression
    assert not assess(values, since=40).regression


def test_the_margin_override_replaces_the_change_points():
    values = _series(5, 40)
    assert not assess([*values, 100 * 1.4], margin=0.5).regression
    v = assess([*values, 100 * 1.6], margin=0.5)
    assert v.regression and v.how == "margin 0.5"


def test_noise_is_robust_to_a_step():
    flat = _series(6, 100)
    stepped = _series(6, 100, step_at=50, step=0.5)
    assert noise(flat) == pytest.approx(3.0, rel=0.3)
    assert noise(stepped) == pytest.approx(noise(flat), rel=0.3)
    assert noise([1.0, 2.0]) == 0.0 and change_points([5.0] * 20) == []
