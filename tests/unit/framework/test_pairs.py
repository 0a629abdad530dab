"""``camit check --pairs`` logic (framework.pairs): the round-robin schedule, and the slow-node
score over synthetic pair timings with the noise the lab shows (a whole round up to 2x slower on the
shared cores, each pair 0.6-1.6x, up to 2.7x between two pairs of a round; 4000 such runs named
nobody once): 20 healthy runs name nobody, one slow node is named among 8 within 4 rounds.
"""

from __future__ import annotations

import random

import pytest

from framework import pairs

HOSTS8 = [f"host{i}" for i in range(1, 9)]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9])
def test_every_round_pairs_every_node_with_a_new_partner(n):
    rounds = pairs.schedule(n, None)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen: set[tuple[int, int]] = set()
    for r in rounds:
        nodes = [x for p in r for x in p]
        assert (
            len(nodes) == len(set(nodes)) == n - n % 2
        )  # a matching: one node sits out when n is odd
        assert not seen & set(r)
        seen |= set(r)
    assert len(seen) == n * (n - 1) // 2  # all rounds: every pair once
    assert pairs.schedule(n, 2) == rounds[:2]


def timings(
    n: int, rounds: int, rng: random.Random, slow: dict[int, float]
) -> dict[tuple[int, int], float]:
    out = {}
    for r in pairs.schedule(n, rounds):
        round_factor = rng.uniform(1.0, 2.0)
        for a, b in r:
            base = 0.018 * round_factor * rng.uniform(0.6, 1.6)
            out[(a, b)] = base * max(slow.get(a, 1.0), slow.get(b, 1.0))
    return out


def test_twenty_healthy_runs_name_nobody():
    rng = random.Random(34)
    for n in (4, 8):
        for _ in range(20):
            assert pairs.find(timings(n, 4, rng, {}), HOSTS8[:n]) == []


@pytest.mark.parametrize("slow_node", range(8))
def test_a_slow_node_is_named_among_eight_within_four_rounds(slow_node):
    rng = random.Random(slow_node)
    found = pairs.find(timings(8, 4, rng, {slow_node: 4.0}), HOSTS8)
    assert [s.host for s in found] == [HOSTS8[slow_node]] and found[0].pairs == 4
    assert found[0].factor >= pairs.THRESHOLD
    assert found[0].describe().startswith(f"slow node: {HOSTS8[slow_node]} x")


def test_its_partners_are_not_named_and_two_nodes_name_nobody():
    times = {(0, 1): 0.7, (2, 3): 0.02, (0, 2): 0.02, (1, 3): 0.7, (0, 3): 0.02, (1, 2): 0.7}
    assert [s.host for s in pairs.find(times, HOSTS8[:4])] == ["host2"]
    assert pairs.find({(0, 1): 5.0}, HOSTS8[:2]) == []


def test_the_rank_lines_parse_and_the_schedule_round_trips():
    text = "noise\nPAIRTIME 0 0 3 0.705800\nPAIRTIME 1 1 2 0.020000\nPAIRTIME x\n"
    assert pairs.parse_times(text) == {(0, 3): 0.7058, (1, 2): 0.02}
    assert pairs.schedule_text(pairs.schedule(4, None)) == "0-3,1-2;0-2,1-3;0-1,2-3"
    report = pairs.PairsReport(HOSTS8[:4], pairs.schedule(4, None), {(0, 3): 0.7058, (1, 2): 0.02})
    assert report.lines()[1] == "round 1: host1-host4 705.8ms, host2-host3 20.0ms"


def test_the_report_ends_with_the_failure_and_the_slow_nodes_else_says_none_was_found():
    rounds = pairs.schedule(4, 1)
    slow = pairs.SlowNode(1, "host2", 3.0, 3)
    assert pairs.PairsReport(HOSTS8[:4], rounds).lines() == [
        "pairs: 4 nodes, 1 rounds", "round 1: host1-host4 -, host2-host3 -", "no slow node"]
    assert pairs.PairsReport(HOSTS8[:2], pairs.schedule(2, 1)).lines()[-1] == (
        "no slow node (two nodes cannot be told apart)")
    failed = pairs.PairsReport(HOSTS8[:4], rounds, slow=[slow], failure="rank 1 exited 1")
    assert failed.lines()[2:] == ["FAILED: rank 1 exited 1", slow.describe()]
    assert pairs.PairsReport(HOSTS8[:4], rounds, slow=[slow]).lines()[2:] == [slow.describe()]
