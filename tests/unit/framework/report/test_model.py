"""The run folder as data: the helpers the report's files share, the typed launch record it
holds."""

from __future__ import annotations

import json

from framework.launch.result import LaunchResult
from framework.report.model import LaunchView, RankView, by_host, outcome_tally, read_run


def rank(n: int, host: str, outcome: str = "pass") -> RankView:
    return RankView(n, host, outcome=outcome)


def test_ranks_by_host_keep_the_hosts_first_order_and_sort_each_hosts_ranks():
    ranks = [rank(3, "node2"), rank(1, "node1"), rank(2, "node2"), rank(0, "node1")]
    grouped = by_host(ranks)
    assert list(grouped) == ["node2", "node1"]
    assert [[r.rank for r in mine] for mine in grouped.values()] == [[2, 3], [0, 1]]


def test_the_tally_names_each_outcome_some_rank_had_in_outcome_order():
    ranks = [rank(0, "a", "crash"), rank(1, "a"), rank(2, "a", "lost"), rank(3, "a")]
    assert outcome_tally(ranks) == ["2 pass", "1 crash", "1 lost"]
    assert outcome_tally([]) == []


def test_a_launch_view_reads_its_typed_record():
    """A record of no test: no test name, attempt 1; a test's record names both."""
    record = LaunchResult.from_json({"launch_id": "run-w2", "world_size": 2, "test": ""})
    plain = LaunchView("x", record, 0.0)
    assert (plain.launch_id, plain.world_size, plain.test, plain.attempt) == ("run-w2", 2, None, 1)
    record = LaunchResult.from_json({"world_size": 4, "test": "t.py::x", "attempt": 2}, "f")
    rerun = LaunchView("x", record, 0.0)
    assert (rerun.launch_id, rerun.test, rerun.attempt) == ("f", "t.py::x", 2)


def test_a_launch_file_that_is_no_record_is_a_problem_and_an_older_record_still_reads(tmp_path):
    """A record without an integer world_size, a file that is not JSON: one problem line each; an
    older record whose ranks name no host gets each rank's host from its node plan."""
    (tmp_path / "launch-bad.json").write_text(json.dumps({"launch_id": "bad"}))
    (tmp_path / "launch-broken.json").write_text("{not json")
    older = {"launch_id": "old", "world_size": 4, "failure": None,
             "nodes": {"node1": {"node_rank": 0}, "node2": {"node_rank": 1}},
             "ranks": {str(r): {"exit_code": 0} for r in range(4)}}
    (tmp_path / "launch-old.json").write_text(json.dumps(older))
    run = read_run(tmp_path)
    assert "launch-bad.json: not a launch record" in run.problems
    assert any(p.startswith("launch-broken.json: unreadable") for p in run.problems)
    assert [lv.launch_id for lv in run.launches] == ["old"]
    assert [(r.rank, r.host) for r in run.launches[0].ranks] == [
        (0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")]
