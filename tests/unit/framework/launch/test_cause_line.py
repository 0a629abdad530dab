"""A finished launch's cause line (framework.launch.runner.Launcher._find_cause, without a run folder):
none for a launch that passed, a failed rank's own error, else a hang's stacks."""

from __future__ import annotations

from pathlib import Path

from framework.hosts import Cluster
from framework.launch import Launcher
from framework.launch.result import LaunchResult, RankResult
from framework.launch.stacks import Frame, StackGroup
from tests.support.builders import local_env, local_transports


def _launcher(tmp_path: Path) -> Launcher:
    env = local_env(tmp_path)
    return Launcher(env, Cluster.from_env(env, None, transport_factory=local_transports()))


def test_a_launch_that_passed_has_no_cause(tmp_path: Path) -> None:
    result = LaunchResult("L1", {}, {0: RankResult(0, "node1", exit_code=0)}, 1)
    _launcher(tmp_path)._find_cause(result)
    assert result.cause is None


def test_a_failed_rank_names_its_own_error(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
                   "ValueError: the counts differ\n")
    rank = RankResult(0, "node1", exit_code=1, log=str(log))
    result = LaunchResult("L2", {}, {0: rank}, 1, failure=rank.describe(), failure_kind="rank",
                          failure_rank=0)
    _launcher(tmp_path)._find_cause(result)
    assert result.cause == "rank 0 on node1: ValueError: the counts differ"


def test_a_hang_without_an_error_is_told_by_where_the_ranks_stood(tmp_path: Path) -> None:
    stuck = StackGroup((Frame("spin.py", 3, "spin"),), [0, 1], {0: "node1", 1: "node1"})
    ranks = {r: RankResult(r, "node1", signal="SIGKILL") for r in (0, 1)}
    result = LaunchResult("L3", {}, ranks, 2, failure="job timeout after 5s", failure_kind="timeout",
                          timed_out=True, stacks=[stuck])
    _launcher(tmp_path)._find_cause(result)
    assert result.cause == "hang: all 2 ranks in spin (spin.py:3)"
