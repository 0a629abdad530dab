"""cluster.xml names that do not depend on order or counters, and a test's rerun replacing its failed attempt.

Pure merge logic: launch records as the launcher writes them (``LaunchResult.to_json``) with the test that
made each launch (nodeid, attempt, place in the attempt), no host.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from framework.launch import LaunchResult, NodeResult, RankResult
from framework.report import junit as report_junit
from tests.support.xmltree import one

TEST_A = "suites/cam/test_cam.py::test_dispatch[2]"
TEST_B = "suites/cam/test_cam.py::test_combine"


def _launch(run: Path, launch_id: str, test: str, *, attempt: int = 1, seq: int = 1, exits: tuple[int, ...] = (0, 0),
            failure: str | None = None, mtime: float | None = None) -> None:
    ranks = {r: RankResult(r, "node1", code, None) for r, code in enumerate(exits)}
    result = LaunchResult(launch_id, {"node1": NodeResult("node1", 0, exit_code=max(exits), done=True)}, ranks,
                          len(exits), failure=failure, failure_kind="rank" if failure else None,
                          failure_rank=next((r for r, c in enumerate(exits) if c), None))
    result.test, result.attempt, result.seq = test, attempt, seq
    path = run / f"launch-{launch_id}.json"
    path.write_text(json.dumps(result.to_json()))
    if mtime is not None:
        import os

        os.utime(path, (mtime, mtime))


def _names(path: Path) -> list[tuple[str, str, str]]:
    top = ET.parse(path).getroot()
    return sorted((s.get("name", ""), c.get("classname", ""), c.get("name", ""))
                  for s in top.iter("testsuite") for c in s.iter("testcase"))


def test_case_names_are_the_same_whatever_the_order_and_launch_counters(tmp_path):
    one, two = tmp_path / "20260801-100000-aaaaaa", tmp_path / "20260802-100000-bbbbbb"
    one.mkdir()
    two.mkdir()
    # build 1 ran A first, then B twice (its 2nd launch of world 2); build 2 ran B first: other counters, ids
    _launch(one, f"{one.name}-alltoall1-1a2b", TEST_A, mtime=1000)
    _launch(one, f"{one.name}-alltoall2-3c4d", TEST_B, mtime=1001)
    _launch(one, f"{one.name}-alltoall3-5e6f", TEST_B, seq=2, mtime=1002)
    _launch(two, f"{two.name}-alltoall1-9999", TEST_B, mtime=1000)
    _launch(two, f"{two.name}-alltoall2-8888", TEST_B, seq=2, mtime=1001)
    _launch(two, f"{two.name}-alltoall3-7777", TEST_A, mtime=1002)
    first, second = _names(report_junit.write_cluster_junit(one)), _names(report_junit.write_cluster_junit(two))
    assert first == second
    assert ("suites_cam_test_cam_test_dispatch[2]-w2.rank1@node1",
            "node1.rank1.suites_cam_test_cam_test_dispatch[2]-w2", "rank_report") in first
    assert {s for s, _, _ in first} >= {"suites_cam_test_cam_test_combine-w2.rank0@node1",
                                         "suites_cam_test_cam_test_combine-w2-2.rank0@node1"}
    assert not any("alltoall" in s or "alltoall" in c for s, c, _ in first)
    assert report_junit.validate_junit(one / "cluster.xml") == []


def _cases(path: Path) -> dict[tuple[str, str], ET.Element]:
    return {(c.get("classname", ""), c.get("name", "")): c for c in ET.parse(path).getroot().iter("testcase")}


def test_a_rerun_that_passed_replaces_the_failed_attempt_kept_as_flaky(tmp_path):
    run = tmp_path / "20260801-100000-cccccc"
    run.mkdir()
    _launch(run, f"{run.name}-alltoall1-1111", TEST_A, exits=(0, 3), failure="rank 1 on node1 exited 3", mtime=1000)
    _launch(run, f"{run.name}-alltoall2-2222", TEST_A, attempt=2, mtime=1001)
    path = report_junit.write_cluster_junit(run)
    top = ET.parse(path).getroot()
    assert (top.get("tests"), top.get("failures"), top.get("errors")) == ("2", "0", "0")  # one case per rank
    case = _cases(path)[("node1.rank1.suites_cam_test_cam_test_dispatch[2]-w2", "rank_report")]
    assert case.find("error") is None and case.find("failure") is None
    (flaky,) = case.findall("flakyError")
    assert flaky.get("type") == "RankFailed"
    assert flaky.get("message", "").startswith("attempt 1: rank 1 on node1 exited 3")
    assert report_junit.validate_junit(path) == []


def test_a_rerun_that_failed_again_is_one_error_with_its_earlier_attempt(tmp_path):
    run = tmp_path / "20260801-100000-dddddd"
    run.mkdir()
    _launch(run, f"{run.name}-alltoall1-1111", TEST_A, exits=(0, 3), failure="rank 1 on node1 exited 3", mtime=1000)
    _launch(run, f"{run.name}-alltoall2-2222", TEST_A, attempt=2, exits=(0, 4), failure="rank 1 on node1 exited 4",
            mtime=1001)
    path = report_junit.write_cluster_junit(run)
    case = _cases(path)[("node1.rank1.suites_cam_test_cam_test_dispatch[2]-w2", "rank_report")]
    assert [el.tag for el in case if el.tag != "system-out"] == ["error", "rerunError"]
    assert "exited 4" in one(case, "error").get("message", "")
    assert "attempt 1" in one(case, "rerunError").get("message", "")
    top = ET.parse(path).getroot()
    assert (top.get("tests"), top.get("errors")) == ("2", "1")
    assert report_junit.validate_junit(path) == []


def test_the_run_properties_name_the_deployed_artifacts_by_sha256(tmp_path):
    from framework import report

    run = tmp_path / "20260801-100000-eeeeee"
    run.mkdir()
    art = {"kind": "wheel", "name": "cam-1.0-py3-none-any.whl", "sha256": "ab" * 32, "size": 10, "via": "sftp"}
    (run / "deploy-manifest.json").write_text(json.dumps({"duration": 1.0, "hosts": {
        h: {"status": "ok", "artifacts": [art], "durations": {"upload": 0.5}} for h in ("node1", "node2")}}))
    (run / "junit.xml").write_text('<testsuites><testsuite name="pytest" tests="1" failures="0" errors="0" '
                                   'skipped="0" time="0.1"><testcase classname="t" name="x" time="0.1"/>'
                                   "</testsuite></testsuites>")
    report.finalize(run, seed=7, argv=["pytest"])
    for name in ("junit.xml", "cluster.xml"):
        suites = list(ET.parse(run / name).getroot().iter("testsuite"))
        props = {p.get("name"): p.get("value") for s in suites for p in s.findall("properties/property")}
        assert props["run_id"] == run.name and props["seed"] == "7", name
        assert props["artifact.cam-1.0-py3-none-any.whl"] == "ab" * 32, name
        assert report_junit.validate_junit(run / name) == [], name
