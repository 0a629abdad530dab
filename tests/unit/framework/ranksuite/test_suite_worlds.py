"""The suite's world sizes, their placement (``--spread`` / ``nodes(n)``) and the rank-side JUnit verdicts."""

from __future__ import annotations

from typing import cast

import pytest

from framework.launch import LaunchResult
from framework.launch.runner import Launcher
from framework.ranksuite.suite import (
    SMALL_WORLDS,
    RankSuiteFailed,
    SuiteResult,
    default_worlds,
    describe_placement,
    placement,
    read_rank_junit,
)


@pytest.mark.parametrize(("hosts", "per_node", "worlds"), [
    (4, 2, [4, 8, 16]),          # the CPU lab: 2x2 and 4x2 are small sizes already
    (2, 16, [4, 8, 16, 32]),     # two A3 nodes of 16: 32 crosses the nodes (16 alone fits one)
    (4, 16, [4, 8, 16, 32, 64]),  # 2 x 16 and 4 x 16
    (2, 8, [4, 8, 16]),          # two A2 nodes of 8: 16 = 2 x 8 = nodes x 8, once
    (1, 16, [4, 8, 16, 32]),     # one node: 32 stays in, and skips with its reason
    (3, 0, list(SMALL_WORLDS)),  # no ranks per node known: the small sizes
])
def test_default_worlds_cross_nodes_deduplicated(hosts, per_node, worlds):
    assert default_worlds(hosts, per_node) == worlds


def test_selected_worlds_join_the_defaults():
    assert default_worlds(2, 16, frozenset({12, 32})) == [4, 8, 12, 16, 32]


def test_default_worlds_place_across_nodes():
    """2 x ranks per node needs two nodes on every cluster that has them."""
    for hosts, per_node in ((2, 16), (4, 16), (2, 8), (8, 8)):
        assert placement(2 * per_node, hosts, per_node) == (2, per_node)
        assert placement(hosts * per_node, hosts, per_node) == (hosts, per_node)


def test_spread_places_a_world_on_more_nodes_than_it_needs():
    assert placement(4, 2, 16) == (1, 4)
    assert placement(4, 2, 16, min_nodes=2) == (2, 2)
    assert placement(8, 4, 16, min_nodes=3) == (4, 2)  # 8 does not split over 3: the next that divides it
    assert placement(4, 2, 16, min_nodes=3) == "needs 4 ranks on >= 3 nodes; the env has 2 host(s)"
    assert placement(3, 4, 16, min_nodes=2) == (3, 1)
    assert placement(5, 4, 16, min_nodes=2) == "cannot split 5 ranks evenly on >= 2 nodes over <= 4 hosts of 16 slots"
    assert placement(64, 2, 16, min_nodes=2) == "needs 64 ranks; the env has 2 host(s) x 16 rank(s) per node = 32"


def test_describe_placement():
    assert describe_placement(4, ["a", "b"], 2) == "4 ranks on 2 node(s) x 2 (a, b)"


JUNIT = """<?xml version="1.0"?><testsuites><testsuite name="pytest">
<testcase classname="t" name="test_a[GE]"><skipped message="RankSize is not equal to 4" type="pytest.skip"/></testcase>
<testcase classname="t" name="test_a[Eager]"><skipped message="RankSize is not equal to 4" type="pytest.skip"/></testcase>
{extra}</testsuite></testsuites>"""


def _result(tmp_path, extra=""):
    path = tmp_path / "rank0.xml"
    path.write_text(JUNIT.format(extra=extra))
    counts, failures, skips = read_rank_junit(path)
    launch = LaunchResult(launch_id="x", nodes={}, ranks={}, world_size=0)
    return SuiteResult("ut/test_x.py", 16, launch, counts=counts, skips=skips), failures


def test_a_file_that_ran_nothing_fails_with_the_skip_reasons(tmp_path):
    result, failures = _result(tmp_path)
    assert failures == [] and result.counts == {"passed": 0, "failed": 0, "skipped": 2}
    assert result.ok
    with pytest.raises(RankSuiteFailed) as exc:
        result.require_ran()
    assert str(exc.value).splitlines() == [
        "ut/test_x.py (world 16) ran nothing: 2 skipped, 0 passed over 16 ranks",
        "  skipped t::test_a[GE]: RankSize is not equal to 4",
        "  skipped t::test_a[Eager]: RankSize is not equal to 4",
    ]


def test_a_file_with_one_pass_ran(tmp_path):
    result, _ = _result(tmp_path, '<testcase classname="t" name="test_b"/>')
    assert result.require_ran() is result


class _Launcher:
    """Records what RankSuite.run asks of the launch (no host is contacted)."""

    rundir = None

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def run(self, target, **kw):
        self.calls.append(dict(kw, target=target))
        return LaunchResult(launch_id="x", nodes={}, ranks={}, world_size=0)


class _Coverage:
    def prepare(self, target, hosts, remote_dir, tree):
        return target

    def collect_gcov(self, hosts):
        pass


def _suite(coverage, spread=1):
    from framework.hosts import Cluster, Host
    from framework.ranksuite.suite import RankSuite
    from framework.testing.fake import FakeTransport
    from tests.support.builders import make_env

    env = make_env({"h1": {"workdir": "/w"}, "h2": {"workdir": "/w"}})
    launcher = _Launcher()
    suite = RankSuite(env, Cluster([Host(n, FakeTransport(n)) for n in ("h1", "h2")]), cast(Launcher, launcher),
                      slots=4, coverage=coverage, spread=spread)
    suite._shipped = {"h1": "/w/suites/abc", "h2": "/w/suites/abc"}
    return suite, launcher


def test_enable_cov_reaches_the_ranks_in_coverage_mode_only():
    """upstream test/cam/ut/util/tool.py is_run_for_cov() reads ENABLE_COV on the rank."""
    for cov, expect in ((_Coverage(), "1"), (None, None)):
        suite, launcher = _suite(cov)
        suite.run("test_x.py", 4)
        assert launcher.calls[0]["env"].get("ENABLE_COV") == expect


def test_the_launch_takes_the_spread_placement():
    suite, launcher = _suite(None)
    assert suite.run("test_x.py", 4).placed == "4 ranks on 1 node(s) x 4 (h1)"
    assert suite.run("test_x.py", 4, min_nodes=2).placed == "4 ranks on 2 node(s) x 2 (h1, h2)"
    assert [(c["hosts"], c["nproc_per_node"]) for c in launcher.calls] == [(["h1"], 4), (["h1", "h2"], 2)]
    suite, launcher = _suite(None, spread=2)
    suite.run("test_x.py", 4)
    assert (launcher.calls[0]["hosts"], launcher.calls[0]["nproc_per_node"]) == (["h1", "h2"], 2)
