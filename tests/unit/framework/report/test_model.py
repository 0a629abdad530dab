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
    (tmp_path / "launch-newer.json").write_text(json.dumps({"schema": 2, "world_size": 1}))
    older = {"launch_id": "old", "world_size": 4, "failure": None,
             "nodes": {"node1": {"node_rank": 0}, "node2": {"node_rank": 1}},
             "ranks": {str(r): {"exit_code": 0} for r in range(4)}}
    (tmp_path / "launch-old.json").write_text(json.dumps(older))
    run = read_run(tmp_path)
    assert "launch-bad.json: not a launch record" in run.problems
    assert any(p.startswith("launch-broken.json: unreadable") for p in run.problems)
    assert "launch-newer.json: launch record schema 2: this camit reads schema 1 and older" in run.problems
    assert [lv.launch_id for lv in run.launches] == ["old"]
    assert [(r.rank, r.host) for r in run.launches[0].ranks] == [
        (0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")]


def test_ranks_stopped_after_another_hosts_loss_are_torn_down_and_the_lost_hosts_own_are_not(tmp_path):
    """The monitor records the host of the first failure; the report reads it, never the sentence:
    host1's ranks, killed by the teardown, were torn down after host2's loss; host2's ranks were lost."""
    doc = {"launch_id": "L", "world_size": 4, "failure": "lost host2: its SSH channel closed",
           "failure_kind": "lost", "failure_host": "host2",
           "nodes": {"host1": {"node_rank": 0}, "host2": {"node_rank": 1, "lost": "its SSH channel closed"}},
           "ranks": {"0": {"host": "host1", "signal": "SIGTERM"}, "1": {"host": "host1", "signal": "SIGTERM"},
                     "2": {"host": "host2"}, "3": {"host": "host2"}}}
    (tmp_path / "launch-L.json").write_text(json.dumps(doc))
    ranks = {r.rank: r for r in read_run(tmp_path).launches[0].ranks}
    assert ranks[0].torn_down == "torn down after lost host2: its SSH channel closed", ranks[0]
    assert ranks[0].outcome == ranks[1].outcome == "killed"
    assert ranks[2].torn_down is None and ranks[2].outcome == "lost", ranks[2]
    # a record of another host's name in the sentence but no failure_host attributes nothing
    doc["failure_host"] = None
    (tmp_path / "launch-L.json").write_text(json.dumps(doc))
    assert all(r.torn_down is None for r in read_run(tmp_path).launches[0].ranks)
