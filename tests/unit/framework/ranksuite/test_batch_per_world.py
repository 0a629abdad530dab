"""``--launch-per world``: the ranks' module records (rank conftest → framework.ranksuite.batch), the split of one
shared launch back per module (RankSuite.split / run_batch: a crash keeps what finished, fails the module it
hit and reruns the rest once), and which controller tests share a launch (framework.ranksuite.batches)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from framework.hosts import Cluster
from framework.launch import LaunchResult
from framework.launch.result import NodeResult, RankResult
from framework.launch.runner import Launcher
from framework.ranksuite import batch, batches
from framework.ranksuite.suite import RankSuite
from tests.support import rankside
from tests.support.builders import make_env

#: what these suites never reach: they plan, or their launches are scripted
NO_CLUSTER, NO_LAUNCHER = cast(Cluster, None), cast(Launcher, None)

MODULES = ["test_a_rank.py", "test_b_rank.py", "test_c_rank.py"]
WORLD = 2


@pytest.fixture(scope="module")
def rank_conftest():
    with rankside.rank_conftest("cam_rank_conftest_rec") as module:
        yield module


def _item(nodeid: str) -> Any:
    return SimpleNamespace(nodeid=nodeid)


def _report(nodeid: str, outcome: str, longrepr: Any = None) -> Any:
    return SimpleNamespace(nodeid=nodeid, failed=outcome == "failed", skipped=outcome == "skipped",
                           longrepr=longrepr)


def test_the_rank_record_is_what_the_controller_reads(rank_conftest, tmp_path):
    """The rank conftest's writer and framework.ranksuite.batch's reader agree: start, each test's outcome, done."""
    path = tmp_path / "rec.jsonl"
    rec = rank_conftest.ModuleRecord(str(path))
    a1, a2, b1 = _item("test_a_rank.py::test_one"), _item("test_a_rank.py::test_two"), _item("test_b_rank.py::t")
    rec.begin(a1)
    rec.note(_report(a1.nodeid, "passed"))
    rec.end(a1, a2)
    rec.begin(a2)
    crash = SimpleNamespace(reprcrash=SimpleNamespace(message="AssertionError: 3 != 4"))
    rec.note(_report(a2.nodeid, "failed", crash))
    rec.end(a2, b1)
    rec.begin(b1)
    rec.note(_report(b1.nodeid, "skipped", ("f.py", 1, "Skipped: needs world 8")))
    # the rank dies here: no end for b, and a last line cut short
    with open(path, "a") as fh:
        fh.write('{"event": "test", "modu')
    got = batch.read_record(path)
    assert set(got) == {"test_a_rank.py", "test_b_rank.py"}
    a, b = got["test_a_rank.py"], got["test_b_rank.py"]
    assert a.started is not None and a.done is not None and a.started <= a.done
    assert a.tests == [("test_a_rank.py::test_one", "passed", ""),
                       ("test_a_rank.py::test_two", "failed", "AssertionError: 3 != 4")]
    assert b.started is not None and b.done is None and b.tests == []
    counts, failures, skips = batch.counts_of(a)
    assert counts == {"passed": 1, "failed": 1, "skipped": 0}
    assert failures == [("test_a_rank.py::test_two", "AssertionError: 3 != 4")] and skips == []


def test_no_record_without_the_variable(rank_conftest, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rec = rank_conftest.ModuleRecord(None)
    rec.begin(_item("test_a_rank.py::t"))
    rec.end(_item("test_a_rank.py::t"), None)
    assert list(tmp_path.iterdir()) == []


def test_module_states_over_the_ranks():
    done = batch.ModuleProgress(started=1.0, done=2.0)
    began = batch.ModuleProgress(started=3.0)
    records = {0: {"m1": done, "m2": began}, 1: {"m1": done}}
    assert batch.module_states(["m1", "m2", "m3"], records, 2) == {"m1": "done", "m2": "crashed", "m3": "not run"}
    # a rank with no record at all finished nothing
    assert batch.module_states(["m1"], {0: {"m1": done}}, 2) == {"m1": "crashed"}


@pytest.mark.parametrize(("classname", "module", "inside"), [
    ("test_a_rank", "test_a_rank.py", True),
    ("test_a_rank.TestX", "test_a_rank.py", True),
    ("test_a_rank2", "test_a_rank.py", False),
    ("fused_deep_moe.test_fused_deep_moe", "fused_deep_moe/test_fused_deep_moe.py", True),
    ("fused_deep_moe.test_fused_deep_moe", "test_fused_deep_moe.py", False),
])
def test_junit_cases_by_module(classname, module, inside):
    assert batch.in_module(classname, module) is inside


# -- the split of one shared launch ---------------------------------------------------------------------------
def _junit(path: Path, cases: list[tuple[str, str, str | None]]) -> None:
    """cases: (classname, name, None | 'failure' | 'skipped')."""
    body = ""
    for cls, name, kind in cases:
        inner = f'<{kind} message="{kind} of {name}"/>' if kind else ""
        body += f'<testcase classname="{cls}" name="{name}">{inner}</testcase>'
    path.write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')


def _record(path: Path, events: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps({"ts": 1.0 + i, **e}) + "\n" for i, e in enumerate(events)))


def _launch(tmp: Path, ok: bool, *, junit: dict[int, list[tuple[str, str, str | None]]] | None = None,
            records: dict[int, list[dict[str, Any]]] | None = None, lid: str = "L1") -> LaunchResult:
    ranks = {}
    for r in range(WORLD):
        d = tmp / lid / f"r{r}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"rank{r}.log").write_text("")
        jpath = d / f"rank{r}.xml"
        if junit and r in junit:
            _junit(jpath, junit[r])
        if records and r in records:
            _record(d / batch.RECORD_FILE.format(rank=r), records[r])
        ranks[r] = RankResult(r, f"host{r + 1}", exit_code=0 if ok else (-11 if r == 1 else None),
                              signal=None if ok or r != 1 else "SIGSEGV", log=str(d / f"rank{r}.log"),
                              junit=str(jpath) if junit and r in junit else None)
    nodes = {f"host{r + 1}": NodeResult(f"host{r + 1}", r) for r in range(WORLD)}
    return LaunchResult(lid, nodes, ranks, WORLD, failure=None if ok else "rank 1 on host2 died of SIGSEGV",
                        failure_kind=None if ok else "rank")


def _suite() -> RankSuite:
    return RankSuite(make_env(["host1", "host2"]), NO_CLUSTER, NO_LAUNCHER, slots=1)


def _done(module: str, *tests: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"event": "start", "module": module},
            *({"event": "test", "module": module, "test": f"{module}::{t}", "outcome": o, "message": ""}
              for t, o in tests),
            {"event": "done", "module": module}]


def test_an_ok_launch_is_split_by_module_from_junit(tmp_path):
    cases = [("test_a_rank", "t1", None), ("test_a_rank", "t2", None), ("test_b_rank", "t1", "failure"),
             ("test_c_rank.TestC", "t1", "skipped"), ("test_c_rank.TestC", "t2", None)]
    launch = _launch(tmp_path, True, junit={0: cases, 1: cases})
    out = _suite().split(MODULES, WORLD, launch, {})
    a, b, c = (out[m] for m in MODULES)
    assert a.ok and a.counts == {"passed": 4, "failed": 0, "skipped": 0}
    assert not b.ok and [f.test for f in b.failures] == ["test_b_rank::t1", "test_b_rank::t1"]
    assert c.ok and c.counts == {"passed": 2, "failed": 0, "skipped": 2}
    assert all(r.shared_with == tuple(MODULES) for r in out.values())


def test_a_crash_keeps_what_finished_fails_where_it_hit_and_leaves_the_rest_not_run(tmp_path):
    recs = {0: [*_done("test_a_rank.py", ("t1", "passed")), {"event": "start", "module": "test_b_rank.py"}],
            1: [*_done("test_a_rank.py", ("t1", "passed")), {"event": "start", "module": "test_b_rank.py"}]}
    launch = _launch(tmp_path, False, records=recs)  # no JUnit: torchrun ended every rank
    out = _suite().split(MODULES, WORLD, launch, batch.records_of(launch))
    a, b, c = (out[m] for m in MODULES)
    assert a.ok and a.counts["passed"] == 2 and not a.missing_junit, a.message()
    assert not b.ok and b.not_run is None
    assert "test_b_rank.py was running when the launch it shared with test_a_rank.py, test_c_rank.py failed" \
        in b.message() and "SIGSEGV" in b.message()
    assert not c.ok and c.not_run is not None and "failed in test_b_rank.py first" in c.message()
    assert "did not run" in c.message()


def test_a_failure_before_any_module_began_is_every_modules(tmp_path):
    launch = _launch(tmp_path, False, records={})
    out = _suite().split(MODULES, WORLD, launch, batch.records_of(launch))
    for result in out.values():
        assert not result.ok and result.not_run is None and "SIGSEGV" in result.message()


class _Scripted(RankSuite):
    """A RankSuite whose launches are scripted: each returns the next prepared LaunchResult."""

    def __init__(self, launches: list[LaunchResult]) -> None:
        super().__init__(make_env(["host1", "host2"]), NO_CLUSTER, NO_LAUNCHER, slots=1)
        self.launches = launches
        self.calls: list[tuple[list[str], float, bool]] = []

    def _launch(self, modules, world, *, extra_env, name, min_nodes, timeout, select=None, record=False):
        self.calls.append((list(modules), timeout, record))
        return self.launches.pop(0), "placed"


def test_the_modules_not_run_are_rerun_once_in_a_fresh_launch(tmp_path):
    crashed = _launch(tmp_path, False, lid="L1",
                      records={r: [*_done("test_a_rank.py", ("t", "passed")),
                                   {"event": "start", "module": "test_b_rank.py"}] for r in range(WORLD)})
    rerun = _launch(tmp_path, True, lid="L2", junit={r: [("test_c_rank", "t", None)] for r in range(WORLD)})
    suite = _Scripted([crashed, rerun])
    out = suite.run_batch(MODULES, WORLD)
    assert [c[0] for c in suite.calls] == [MODULES, ["test_c_rank.py"]]
    assert suite.calls[0][1] == suite.case_timeout * 3 and suite.calls[0][2] is True
    assert out["test_a_rank.py"].ok and out["test_a_rank.py"].launch.launch_id == "L1"
    assert not out["test_b_rank.py"].ok
    assert out["test_c_rank.py"].ok and out["test_c_rank.py"].launch.launch_id == "L2"


def test_after_a_second_crash_the_rest_is_reported_not_run(tmp_path):
    four = [*MODULES, "test_d_rank.py"]
    first = _launch(tmp_path, False, lid="L1", records={r: [{"event": "start", "module": "test_a_rank.py"}]
                                                         for r in range(WORLD)})
    second = _launch(tmp_path, False, lid="L2", records={r: [{"event": "start", "module": "test_b_rank.py"}]
                                                          for r in range(WORLD)})
    suite = _Scripted([first, second])
    out = suite.run_batch(four, WORLD)
    assert [c[0] for c in suite.calls] == [four, four[1:]]  # one rerun only
    assert out["test_a_rank.py"].not_run is None and not out["test_a_rank.py"].ok
    assert out["test_b_rank.py"].not_run is None and out["test_b_rank.py"].launch.launch_id == "L2"
    for m in ("test_c_rank.py", "test_d_rank.py"):
        assert out[m].not_run is not None and not out[m].ok and out[m].launch.launch_id == "L2"


# -- which controller tests share a launch --------------------------------------------------------------------
def test_launch_envs_merge_unless_a_variable_has_two_values():
    members = [("t1", "a.py", {"HCCL_BUFFSIZE": "4096"}), ("t2", "b.py", {}),
               ("t3", "c.py", {"CAMIT_FUZZ_N": "6", "HCCL_BUFFSIZE": "4096"}), ("t4", "d.py", {"HCCL_BUFFSIZE": "200"})]
    parts = batches._merge_envs(members)
    assert [(env, [m[0] for m in part]) for env, part in parts] == [
        ({"HCCL_BUFFSIZE": "4096", "CAMIT_FUZZ_N": "6"}, ["t1", "t2", "t3"]), ({"HCCL_BUFFSIZE": "200"}, ["t4"])]


def test_a_call_other_than_declared_launches_alone():
    shared = batches.Batch(batches.BatchKey(4, (("HCCL_BUFFSIZE", "4096"),), 1), ["a.py", "b.py"],
                           {"t1": {"HCCL_BUFFSIZE": "4096"}, "t2": {}})
    assert shared.covers("t1", "a.py", 4, {"extra_env": {"HCCL_BUFFSIZE": "4096"}, "min_nodes": 1})
    assert shared.covers("t2", "b.py", 4, {"min_nodes": 1})
    assert not shared.covers("t2", "b.py", 4, {"extra_env": {"X": "1"}, "min_nodes": 1})  # not what it declared
    assert not shared.covers("t1", "a.py", 8, {"extra_env": {"HCCL_BUFFSIZE": "4096"}})  # another world
    assert not shared.covers("t2", "b.py", 4, {"select": "case_x", "min_nodes": 1})
    assert not shared.covers("t2", "c.py", 4, {"min_nodes": 1})
    assert not shared.covers("t2", "b.py", 4, {"min_nodes": 2})


@pytest.mark.parametrize(("option", "ini", "expected"), [
    (None, "", "test"), (None, "world", "world"), ("test", "world", "test"), ("world", "", "world"),
    (None, " world ", "world"), (None, "bogus", None)])
def test_the_mode_is_the_option_else_the_ini_key(option, ini, expected):
    from framework.plugin.options import launch_per

    config: Any = SimpleNamespace(getoption=lambda name: option if name == "camit_launch_per" else None,
                                  getini=lambda name: ini if name == "camit_launch_per" else "")
    if expected is None:
        with pytest.raises(pytest.UsageError, match="camit_launch_per = 'bogus'"):
            launch_per(config)
    else:
        assert launch_per(config) == expected


def test_a_core_time_in_whole_seconds_goes_to_the_module_the_rank_began_last_in_that_second():
    """A core pattern's %t is whole seconds, rounded down: the crash lies in [t, t + 1]. The module the rank
    began last in that span is the one it died in, not the first whose window holds t."""
    from framework.ranksuite.batch import ModuleProgress, module_at

    records = {"a.py": ModuleProgress(678.95, 679.03), "b.py": ModuleProgress(679.03, None)}
    assert module_at(records, 679.0, ["a.py", "b.py"], resolution=1.0) == "b.py"
    assert module_at(records, 679.0, ["a.py", "b.py"]) == "a.py"  # an exact time keeps its own window
    only = {"a.py": ModuleProgress(679.59, 679.67), "b.py": ModuleProgress(679.67, None)}
    assert module_at(only, 679.0, ["a.py", "b.py"], resolution=1.0) == "b.py"
    assert module_at(only, 679.0, ["a.py", "b.py"]) is None


def test_judge_reads_each_ranks_junit_names_an_unreadable_one_and_a_missing_one(tmp_path):
    """RankSuite.judge per rank: its JUnit when it wrote one, an unreadable JUnit as that rank's
    failure, no JUnit and no record as missing."""
    launch = _launch(tmp_path, True, junit={0: [("test_a_rank", "t1", "failure")]})
    Path(launch.ranks[1].log or "").with_name("rank1.xml").write_text("<testsuites><testcase")
    launch.ranks[1].junit = str(Path(launch.ranks[1].log or "").with_name("rank1.xml"))
    launch.ranks[2] = RankResult(2, "host3")
    result = _suite().judge("test_a_rank.py", 4, launch)
    assert result.counts == {"passed": 0, "failed": 1, "skipped": 0}
    assert [(f.rank, f.host, f.test) for f in result.failures] == [
        (0, "host1", "test_a_rank::t1"), (1, "host2", "(junit)")]
    assert "unreadable JUnit" in result.failures[1].message
    assert result.missing_junit == [2, 3] and "no JUnit from rank(s) [2, 3]" in result.message()


def test_of_two_modules_begun_at_the_same_time_the_later_in_order_is_the_one_running() -> None:
    from framework.ranksuite.batch import ModuleProgress, module_at

    records = {"a.py": ModuleProgress(started=10.0, done=20.0),
               "b.py": ModuleProgress(started=10.0),
               "c.py": ModuleProgress(started=5.0, done=30.0), "d.py": ModuleProgress(done=15.0)}
    assert module_at(records, 12.0, ["a.py", "b.py", "c.py", "d.py"]) == "b.py"
    assert module_at(records, 12.0, ["b.py", "a.py", "c.py"]) == "a.py"
    assert module_at(records, 25.0, ["a.py", "c.py"]) == "c.py"
    assert module_at(records, 4.0, ["a.py", "c.py", "d.py"]) is None
