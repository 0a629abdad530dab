"""framework.report: run folder (model), cluster.xml and validation (junit), manifest, finalize, terminal summary.

Run folders are built by ``tests/data/reports/sample_run.py`` from static host files, real
pytest ``--junitxml`` output and launch records written through ``LaunchResult.to_json()``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import framework
from framework import report
from framework.config.effective import load
from framework.launch import LaunchResult, NodeResult, RankResult
from framework.report import html as report_html
from framework.report import junit as report_junit
from framework.report import manifest as report_manifest
from framework.report import model as report_read
from tests.support.builders import sample_run
from tests.support.plugin_run import TWO_NODE_ENV
from tests.support.xmltree import attr, one, text

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"
SCHEMA = DATA / "schemas" / "xunit-plugin-junit-10.xsd"
SUREFIRE_TIME = re.compile(r"^\d+(\.\d{1,3})?$")


sr = sample_run()


@pytest.fixture(scope="module")
def junits(tmp_path_factory):
    base = tmp_path_factory.mktemp("junit")
    return (sr.pytest_junit(base / "pass", fail=False, name="rank"),
            sr.pytest_junit(base / "fail", fail=True, name="rank"))


@pytest.fixture
def run(tmp_path, junits) -> Path:
    path: Path = sr.build(tmp_path / "reports", *junits, controller_junit=junits[1])
    return path


def suites(path: Path) -> dict[str, ET.Element]:
    return {attr(s, "name"): s for s in ET.parse(path).getroot().findall("testsuite")}


def props(suite: ET.Element) -> dict[str, str]:
    return {attr(p, "name"): attr(p, "value") for p in suite.iter("property")}


def schema_errors(path: Path) -> list[str]:
    """Validation with the tests' own copy of the schema, independent of the product's."""
    from lxml import etree

    schema = etree.XMLSchema(etree.parse(str(SCHEMA)))
    return [] if schema.validate(etree.parse(str(path))) else [str(e) for e in schema.error_log]


# -- cluster.xml ---------------------------------------------------------------------
def test_one_suite_per_rank_with_host_and_rank_in_every_classname(run):
    path = report_junit.write_cluster_junit(run, [sr.core_for(run)])
    assert path == run / "cluster.xml"
    top = ET.parse(path).getroot()
    by_name = suites(path)
    assert list(by_name) == ["rank0@node1", "rank1@node1", "rank2@node2", "rank3@node2", "cluster"]
    for n, host in enumerate(["node1", "node1", "node2", "node2"]):
        s = by_name[f"rank{n}@{host}"]
        assert s.get("hostname") == host
        assert props(s)["rank"] == str(n) and props(s)["world_size"] == "4" and props(s)["launch_id"] == sr.LAUNCH_ID
        assert all(attr(c, "classname").startswith(f"{host}.rank{n}") for c in s.iter("testcase"))
    r0 = by_name["rank0@node1"]
    assert [c.get("classname") for c in r0.iter("testcase")] == ["node1.rank0.sample_rank_tests"] * 5
    assert (r0.get("tests"), r0.get("failures"), r0.get("errors"), r0.get("skipped")) == ("5", "0", "0", "1")
    assert r0.get("time") == "5.800"  # the rank's wall time from its status file
    assert r0.get("timestamp") == "2026-08-01T10:00:45+00:00"
    r1 = by_name["rank1@node1"]
    assert (r1.get("tests"), r1.get("failures")) == ("5", "1")
    failure = one(r1, "testcase[@name='test_dispatch_combine[Graph]']/failure")
    assert attr(failure, "message").startswith("AssertionError: diff 1.2e-03 not below 5e-05")
    # totals: sums of the suites, never `skipped` on <testsuites>, times with at most three decimals
    assert top.get("name") == sr.RUN_ID and "skipped" not in top.attrib
    for key in ("tests", "failures", "errors"):
        assert int(attr(top, key)) == sum(int(attr(s, key)) for s in by_name.values())
    # rank 3 was only torn down after rank 2 crashed: skipped, not a second error
    assert (top.get("tests"), top.get("failures"), top.get("errors")) == ("15", "2", "1")
    assert all(SUREFIRE_TIME.match(attr(s, "time")) for s in [top, *by_name.values()])


def test_rank_without_junit_is_an_error_with_how_it_ended_and_its_log_tail(run):
    by_name = suites(report_junit.write_cluster_junit(run))
    (crash,) = by_name["rank2@node2"].iter("testcase")
    assert (crash.get("classname"), crash.get("name")) == ("node2.rank2", "rank_report")
    err = one(crash, "error")
    assert err.get("type") == "RankCrashed" and err.get("message") == "rank 2 on node2 died of SIGSEGV"
    assert "--- tail of node2/rank2.log ---" in text(err) and "Fatal Python error: Segmentation fault" in text(err)
    (killed,) = by_name["rank3@node2"].iter("testcase")
    # rank 3 died of SIGTERM only because rank 2 failed first: skipped with why, not an error
    assert killed.find("error") is None and by_name["rank3@node2"].get("skipped") == "1"
    assert one(killed, "skipped").get("type") == "RankTornDown"
    assert one(killed, "skipped").get("message") == "torn down after rank 2 on node2 failed"
    assert "rank 3 on node2 died of SIGTERM; the launch failed: rank 2 on node2 died of SIGSEGV" in \
        text(one(killed, "skipped"))
    assert props(by_name["rank2@node2"])["outcome"] == "crash" and props(by_name["rank3@node2"])["signal"] == "SIGTERM"
    raw = (run / "cluster.xml").read_bytes()
    assert b"\x1b" not in raw and b"\x07" not in raw  # log colours and control bytes are not XML 1.0
    assert schema_errors(run / "cluster.xml") == []


def test_core_dumps_are_failures_and_are_remembered_for_later_rebuilds(run):
    core = sr.core_for(run)
    report_junit.write_cluster_junit(run, [core])
    recorded = json.loads((run / "cores.json").read_text())  # the entry shape framework.cores.watch writes
    assert recorded == [{"host": "node2", "pid": 4242, "executable": "/var/tmp/camit/venv/bin/python3",
                         "signal": "SIGSEGV", "rank": 2, "describe": core.describe(), "backtrace": core.backtrace,
                         "local_path": "node2/cores/core.python3.4242", "backtrace_path": None}]
    report_junit.write_cluster_junit(run)  # e.g. finalize after a crash: cores come from cores.json
    report_junit.write_cluster_junit(run, [core])  # the same core again is not counted twice
    cluster = suites(run / "cluster.xml")["cluster"]
    cores = [c for c in cluster.iter("testcase") if attr(c, "classname").endswith(".cores")]
    assert len(cores) == 1
    assert (cores[0].get("classname"), cores[0].get("name")) == ("node2.rank2.cores", "core_dump[python3:4242]")
    failure = one(cores[0], "failure")
    assert failure.get("type") == "CoreDump" and failure.get("message") == core.describe()
    assert "#0  0x00007f3a2c0b1d2e in cam::dispatch_prefill" in text(failure)
    assert "file: node2/cores/core.python3.4242" in text(failure)
    deploy = {c.get("classname"): c for c in cluster.iter("testcase") if c.get("name") == "deploy"}
    assert set(deploy) == {"node1.deploy", "node2.deploy"} and all(len(c) == 0 for c in deploy.values())


def test_cores_json_written_by_framework_coredump_is_read(run):
    coredump = pytest.importorskip("framework.cores.watch")
    bt = run / "node2" / "cores" / "core.python3.4242.bt.txt"
    bt.write_text("@@threads\n#0  0x1 in poll ()\n@@crashing\n#0  0x00007f3a2c0b1d2e in cam::dispatch_prefill () "
                  "at dispatch.cpp:211\n#1  0x2 in moe_dispatch_prefill ()\n")
    core = coredump.Core(host="node2", source="file", location="/var/crash/core.python3.4242", time=sr.T0 + 52,
                         pid=4242, executable="/var/tmp/camit/venv/bin/python3", signal="SIGSEGV", rank=2,
                         relation="rank", local_path=run / "node2" / "cores" / "core.python3.4242", backtrace_path=bt)
    (run / "cores.json").write_text(json.dumps([core.to_json()]))  # what CoreWatch.collect() leaves
    (view,) = report_read.read_run(run).cores
    assert (view.host, view.rank, view.pid, view.exe, view.signal) == ("node2", 2, 4242, core.executable, "SIGSEGV")
    assert view.description == core.describe() and view.local_path == "node2/cores/core.python3.4242"
    assert view.backtrace_path == "node2/cores/core.python3.4242.bt.txt"
    assert view.top_frame == "cam::dispatch_prefill () at dispatch.cpp:211"  # the crashing thread, not poll()
    cluster = suites(report_junit.write_cluster_junit(run))["cluster"]
    failure = one(cluster, "testcase[@name='core_dump[python3:4242]']/failure")
    assert failure.get("message") == core.describe() and "cam::dispatch_prefill" in text(failure)
    report_junit.write_cluster_junit(run, [core])  # the same core handed over again: merged, not doubled
    assert len(json.loads((run / "cores.json").read_text())) == 1


def test_ranks_of_a_lost_host_are_synthetic_errors(tmp_path, junits):
    run = sr.build(tmp_path, *junits, lost_node2=True)
    by_name = suites(report_junit.write_cluster_junit(run))
    for n in (2, 3):
        (case,) = by_name[f"rank{n}@node2"].iter("testcase")
        err = one(case, "error")
        assert err.get("type") == "RankLost"
        assert err.get("message") == f"rank {n} on node2 never reported (lost node2: no heartbeat for 13s)"
        assert "(no log was fetched for this rank)" in text(err)
    assert schema_errors(run / "cluster.xml") == []


def test_ranks_stopped_by_a_timeout_say_so(tmp_path, junits):
    run = sr.build(tmp_path, *junits, timed_out=True)
    err = one(suites(report_junit.write_cluster_junit(run))["rank3@node2"], "testcase/error")
    assert err.get("message") == "rank 3 on node2 died of SIGTERM; the launch timed out: job timeout after 600s"


def test_a_rank_that_exited_0_without_junit_fails_when_its_peers_wrote_junit(run):
    (run / "node1" / "rank0.xml").unlink()
    err = one(suites(report_junit.write_cluster_junit(run))["rank0@node1"], "testcase/error")
    assert err.get("message") == "exited 0 but wrote no JUnit report"


def test_non_pytest_targets_pass_with_one_synthetic_case_per_rank(tmp_path):
    run = tmp_path / "r1"
    ranks = {r: RankResult(r, "node1", 0, None) for r in range(2)}
    result = LaunchResult("r1-alltoall1-beef", {"node1": NodeResult("node1", 0, exit_code=0, done=True)}, ranks, 2)
    run.mkdir()
    (run / "launch-r1-alltoall1-beef.json").write_text(json.dumps(result.to_json()))
    (run / "node1").mkdir()
    (run / "node1" / "rank0.log").write_text("alltoall ok: 8 MiB in 0.2s\n")
    by_name = suites(report_junit.write_cluster_junit(run))
    assert list(by_name) == ["rank0@node1", "rank1@node1"]
    case = one(by_name["rank0@node1"], "testcase")
    assert case.get("name") == "rank_report" and len(case.findall("error")) == 0
    assert "alltoall ok" in text(one(case, "system-out"))
    assert by_name["rank1@node1"].get("errors") == "0"


def _second_launch(run: Path, name: str = "moe2", mtime_offset: float = 90.0) -> str:
    lid = f"{sr.RUN_ID}-{name}-cd34"
    result = LaunchResult(lid, {"node1": NodeResult("node1", 0, exit_code=0, done=True),
                                "node2": NodeResult("node2", 1, exit_code=0, done=True)},
                          {r: RankResult(r, "node1" if r < 2 else "node2", 0, None) for r in range(4)}, 4)
    path = run / f"launch-{lid}.json"
    path.write_text(json.dumps(result.to_json()))
    os.utime(path, (sr.T0 + mtime_offset, sr.T0 + mtime_offset))
    return lid


def test_several_launches_get_launch_qualified_suite_names(run):
    lid2 = _second_launch(run)
    # the second launch fetched into the same <host>/rank<N>.* paths: its status files name it
    for f in [*run.glob("node*/rank*.json")]:
        st = json.loads(f.read_text())
        st["log"] = st["log"].replace(sr.LAUNCH_ID, lid2)
        f.write_text(json.dumps(st))
    by_name = suites(report_junit.write_cluster_junit(run))
    names = [n for n in by_name if n != "cluster"]
    assert names == [f"{launch}.rank{n}@{h}" for launch in ("moe1", "moe2")
                     for n, h in ((0, "node1"), (1, "node1"), (2, "node2"), (3, "node2"))]
    assert len(set(names)) == len(names)
    moe2 = by_name["moe2.rank0@node1"]
    assert {c.get("classname") for c in moe2.iter("testcase")} == {"node1.rank0.moe2.sample_rank_tests"}
    # the first launch's files were overwritten: only its exit status is known
    moe1_r0 = one(by_name["moe1.rank0@node1"], "testcase")
    assert moe1_r0.get("classname") == "node1.rank0.moe1" and moe1_r0.find("error") is None
    assert "overwritten by launch" in text(one(moe1_r0, "system-out"))
    assert one(by_name["moe1.rank2@node2"], "testcase/error").get("message") == "rank 2 on node2 died of SIGSEGV"
    assert schema_errors(run / "cluster.xml") == []


def test_a_port_retry_supersedes_its_first_attempt(run):
    first = run / f"launch-{sr.LAUNCH_ID}.json"
    retry = run / f"launch-{sr.LAUNCH_ID}-r2.json"
    data = json.loads(first.read_text())
    data.update(launch_id=f"{sr.LAUNCH_ID}-r2", retry_of=sr.LAUNCH_ID, port_try=2)
    retry.write_text(json.dumps(data))
    os.utime(first, (sr.T0 + 30, sr.T0 + 30))
    os.utime(retry, (sr.T0 + 58, sr.T0 + 58))
    view = report_read.read_run(run)
    assert [(lv.launch_id, lv.name, lv.superseded) for lv in view.launches] == [
        (f"{sr.LAUNCH_ID}-r2", "moe1", [sr.LAUNCH_ID])]
    assert "rank0@node1" in suites(report_junit.write_cluster_junit(run))


def test_the_record_not_the_id_says_a_launch_retried_a_taken_port(run):
    """A record that names no first try is a launch of its own, whatever its id looks like."""
    first = run / f"launch-{sr.LAUNCH_ID}.json"
    data = json.loads(first.read_text())
    (run / f"launch-{sr.LAUNCH_ID}-r2.json").write_text(json.dumps({**data, "launch_id": f"{sr.LAUNCH_ID}-r2"}))
    view = report_read.read_run(run)
    assert sorted(lv.launch_id for lv in view.launches) == [sr.LAUNCH_ID, f"{sr.LAUNCH_ID}-r2"]
    assert all(lv.superseded == [] for lv in view.launches)


def test_reruns_are_folded_and_invalid_testcase_content_cleaned(run):
    shutil.copy(DATA / "reports" / "rank-messy.xml", run / "node1" / "rank0.xml")
    suite = suites(report_junit.write_cluster_junit(run))["rank0@node1"]
    attach = "[[ATTACHMENT|" + str(run / "node1" / "rank0.log") + "]]"
    # every case that did not simply pass has the rank's log attached (first line of its system-out)
    assert [c.get("name") for c in suite.iter("testcase") if c.findtext("system-out", "").startswith(attach)] == [
        "test_flaky", "test_always_fails", "test_teardown", "test_teardown", "test_no_message"]
    cases = [(c.get("name"), [ch.tag for ch in c if ch.tag != "system-out" or not text(ch).startswith(attach)])
             for c in suite.iter("testcase")]
    assert cases == [
        ("test_flaky", ["flakyFailure"]),  # failed once, then passed: a pass with its flake
        ("test_always_fails", ["failure", "rerunFailure", "rerunFailure"]),
        ("test_teardown", ["failure"]), ("test_teardown", ["error"]),  # not reruns: a teardown error
        ("test_xunit1_attrs", ["system-out"]),
        ("test_no_message", ["failure"]),
    ]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("6", "3", "1")
    assert all(attr(c, "classname").startswith("node1.rank0.ut.test_") for c in suite.iter("testcase"))
    xunit1 = one(suite, "testcase[@name='test_xunit1_attrs']")
    assert set(xunit1.attrib) == {"classname", "name", "time"} and xunit1.find("properties") is None
    assert one(xunit1, "system-out").text == "property npu = 3"
    assert one(suite, "testcase[@name='test_no_message']/failure").get("message") == "Traceback: something went wrong"
    assert all(e.get("type") == "rerun" for e in suite.iter("rerunFailure"))
    assert props(suite)["cann"] == "8.5.0"  # the rank's suite properties are kept
    assert schema_errors(run / "cluster.xml") == []


def test_corrupt_files_are_reported_not_fatal(run):
    (run / "node1" / "rank1.xml").write_text("<testsuites><testsuite name='x'")
    (run / "launch-broken.json").write_text("{not json")
    by_name = suites(report_junit.write_cluster_junit(run))
    err = one(by_name["rank1@node1"], "testcase/error")
    assert "rank1.xml is not valid XML" in attr(err, "message")
    problems = [attr(one(c, "error"), "message") for c in by_name["cluster"].iter("testcase")
                if c.get("name") == "read_run_folder"]
    assert problems and problems[0].startswith("launch-broken.json: unreadable")
    assert schema_errors(run / "cluster.xml") == []


# -- validation ------------------------------------------------------------------------
def test_pytest_junit_and_cluster_xml_both_validate(run):
    cluster = report_junit.write_cluster_junit(run, [sr.core_for(run)])
    assert report_junit.validate_junit(run / "junit.xml") == []
    assert report_junit.validate_junit(cluster) == []
    assert schema_errors(run / "junit.xml") == [] and schema_errors(cluster) == []


def test_product_and_test_copies_of_the_schema_are_the_same_file():
    product = Path(framework.__file__).parent / "data" / "xunit-plugin-junit-10.xsd"
    assert product.read_bytes() == SCHEMA.read_bytes()
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == \
        "677ee2bee8d55bf2e69997c66884084f66c5eb54ca6bac1a67440b039333db91"


def test_validate_junit_names_what_junit_10_rejects(tmp_path):
    bad = tmp_path / "junit-xml-1.9.xml"
    bad.write_text('<?xml version="1.0"?>\n<testsuites disabled="0" skipped="0" time="0.30000000000000004">\n'
                   '<testsuite name="s" tests="1" failures="0" errors="0" time="0.1234">\n'
                   '<testcase name="t" file="a.py" line="3"><properties/></testcase>\n</testsuite>\n</testsuites>\n')
    problems = report_junit.validate_junit(bad)
    text = "\n".join(problems)
    for what in ("'disabled'", "'skipped'", "'file'", "'line'", "properties", "0.1234"):
        assert what in text, what
    assert all(p.startswith(f"{bad}:") for p in problems)
    broken = tmp_path / "broken.xml"
    broken.write_text("<testsuites>")
    assert report_junit.validate_junit(broken)[0].startswith(f"{broken}:1: not well-formed XML")
    assert report_junit.validate_junit(tmp_path / "missing.xml") == [f"{tmp_path / 'missing.xml'}: no such file"]


def test_finalize_folds_testcase_properties_of_pytests_junit_into_system_out(tmp_path):
    """pytest writes record_property / user_properties (camit's ``placement``) as testcase properties, which
    junit-10 rejects: finalize moves them into the case's system-out, keeping what was there."""
    junit = tmp_path / "junit.xml"
    junit.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
                     'failures="0" skipped="0" tests="2" time="1.0"><testcase classname="t" name="a" time="0.5">'
                     '<properties><property name="placement" value="4 ranks on 2 node(s) x 2 (host1, host2)"/>'
                     '</properties><system-out>captured</system-out></testcase>'
                     '<testcase classname="t" name="b" time="0.5"><properties><property name="k" value="v"/>'
                     '</properties></testcase></testsuite></testsuites>\n')
    assert report_junit.validate_junit(junit) != []
    report.finalize(tmp_path, status="passed")
    assert report_junit.validate_junit(junit) == []
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["a"].findtext("system-out") == "property placement = 4 ranks on 2 node(s) x 2 (host1, host2)\ncaptured"
    assert cases["b"].findtext("system-out") == "property k = v"
    assert report_junit.fold_case_properties(junit) is False  # nothing left to fold
    assert report_junit.fold_case_properties(tmp_path / "none.xml") is False


# -- manifest.json, secrets ----------------------------------------------------------------
SECRET = "hunter2-Zq8!camit"


def test_manifest_records_the_run_and_no_file_holds_a_secret(run):
    env = load(REPO / "env" / "test_env.example.yaml",
               environ={"CAMIT_HOST1_PASSWD": SECRET, "CAMIT_HOST2_PASSWD": SECRET + "-2", "HOME": "/root"})
    report.finalize(run, cores=[sr.core_for(run)], env=env, seed=4242, started=sr.T0, ended=sr.T0 + 61,
                    argv=["pytest", "tests/cluster", "--env-file", "env/test_env.example.yaml"], status="failed",
                    error=RuntimeError(f"ssh to host1 failed with password {SECRET}"), extra={"jenkins_build": "17"})
    m = json.loads((run / "manifest.json").read_text())
    assert m["run_id"] == sr.RUN_ID and m["status"] == "failed"
    assert m["error"] == "RuntimeError: ssh to host1 failed with password ***"
    assert m["env"]["file"].endswith("env/test_env.example.yaml")
    assert m["env"]["document"]["host_info"]["host1"]["passwd"] == "***"
    assert m["seed"] == 4242
    assert m["command"]["argv"][:2] == ["pytest", "tests/cluster"]
    assert m["command"]["repro"] == ("python -m pytest tests/cluster --env-file env/test_env.example.yaml "
                                     "--random-seed 4242")
    assert m["framework"]["version"] == framework.__version__ and m["framework"]["name"] == "camit"
    assert m["started"] == {"epoch": sr.T0, "iso": "2026-08-01T10:00:00+00:00"}
    assert m["ended"]["iso"] == "2026-08-01T10:01:01+00:00" and m["duration"] == 61.0
    assert set(m["hosts"]) == {"host1", "host2", "node1", "node2"}
    assert m["hosts"]["host1"]["address"] == "192.0.2.11:22"
    assert m["hosts"]["node2"]["deploy"]["installed_version"] == "209.0.0b1"
    assert m["hosts"]["node2"]["ranks"] == {"rank2": "crash", "rank3": "killed"}
    assert "node2/cores/core.python3.4242" in m["hosts"]["node2"]["files"]
    wheel = next(a for a in m["artifacts"] if a["kind"] == "wheel")
    assert wheel["sha256"].startswith("a1b2c3d4") and wheel["hosts"] == {"node1": "direct", "node2": "relay"}
    assert m["versions"]["node1"]["installed_version"] == "209.0.0b1"
    assert m["launches"][0]["launch_id"] == sr.LAUNCH_ID and m["launches"][0]["failure_kind"] == "rank"
    assert m["results"]["ranks"] == {"pass": 1, "fail": 1, "crash": 1, "killed": 1, "lost": 0}
    assert m["results"]["cores"] == 1 and m["results"]["controller"]["failures"] == 1
    assert m["extra"] == {"jenkins_build": "17"}
    files = {f["path"]: f for f in m["files"]}
    assert files["cluster.xml"]["sha256"] == hashlib.sha256((run / "cluster.xml").read_bytes()).hexdigest()
    assert "manifest.json" not in files and "index.html" not in files
    for f in run.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert SECRET.encode() not in data, f


def test_manifest_keeps_what_an_earlier_call_recorded(tmp_path):
    run = tmp_path / "run"
    report.write_manifest(run, status="running", seed=7, argv=["pytest", "-k", "moe"], started=sr.T0,
                          env={"host_info": {"h1": {"passwd": "pw-in-clear", "user": "root"}}})
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "running" and m["ended"] is None
    assert m["env"]["document"]["host_info"]["h1"] == {"passwd": "***", "user": "root"}
    report.write_manifest(run, status="ok", ended=sr.T0 + 5)
    m = json.loads((run / "manifest.json").read_text())
    assert (m["status"], m["seed"], m["command"]["argv"], m["duration"]) == ("ok", 7, ["pytest", "-k", "moe"], 5.0)
    assert m["env"]["document"]["host_info"]["h1"]["passwd"] == "***"
    assert "pw-in-clear" not in (run / "manifest.json").read_text()


# -- finalize ----------------------------------------------------------------------------------
def test_finalize_after_an_interruption_leaves_a_consistent_folder(tmp_path):
    run = tmp_path / "20260801-100000-dead00"
    (run / "node1").mkdir(parents=True)
    (run / "node1" / "rank0.log").write_text("step 1/3\nstep 2/3\n")
    report.record_phase(run, "node1", "connect", sr.T0, sr.T0 + 1)
    report.finalize(run, status="interrupted", error=KeyboardInterrupt(), argv=["pytest", "tests"], seed=3)
    assert sorted(p.name for p in run.iterdir() if p.is_file()) == [
        ".phases.json.lock", "cluster.xml", "index.html", "manifest.json", "phases.json", "report.css", "report.js",
        "summary.txt"]
    m = json.loads((run / "manifest.json").read_text())
    assert (m["status"], m["error"]) == ("interrupted", "KeyboardInterrupt: ")
    assert m["started"]["epoch"] == sr.T0  # from the first recorded phase
    by_name = suites(run / "cluster.xml")
    assert one(by_name["rank0@node1"], "testcase/error").get("type") == "RankLost"
    run_case = one(by_name["cluster"], "testcase[@name='run']")
    assert run_case.get("classname") == "camit.run"
    assert one(run_case, "error").get("message") == "run interrupted: KeyboardInterrupt: "
    assert report_junit.validate_junit(run / "cluster.xml") == []
    assert "interrupted" in (run / "index.html").read_text()


def test_finalize_on_a_missing_folder_writes_the_report_files(tmp_path):
    run = tmp_path / "never-started"
    report.finalize(run, status="error", error="could not load env")
    assert {p.name for p in run.iterdir()} == {"cluster.xml", "manifest.json", "index.html", "report.css", "report.js",
                                               "summary.txt"}
    assert report_junit.validate_junit(run / "cluster.xml") == []
    assert json.loads((run / "manifest.json").read_text())["error"] == "could not load env"


def test_finalize_never_raises_and_falls_back_to_minimal_files(run, monkeypatch, caplog):
    def boom(_path):
        raise OSError("disk on fire")

    for module in (report_junit, report_manifest, report_html):  # every module that reads the run folder for finalize
        monkeypatch.setattr(module, "read_run", boom)
    report.finalize(run, status="interrupted", error="SIGTERM")
    assert report_junit.validate_junit(run / "cluster.xml") == []
    err = one(ET.parse(run / "cluster.xml").getroot(), "testsuite/testcase/error")
    assert err.get("message") == "could not merge rank results: cluster.xml: OSError: disk on fire"
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["error"] == "SIGTERM"
    assert "could not be built" in (run / "index.html").read_text()
    assert "disk on fire" in caplog.text
    report.finalize(run, no_such_option=1)  # a wrong keyword is logged, not raised


def test_no_temporary_files_are_left_behind(run):
    report.finalize(run, cores=[sr.core_for(run)], status="failed")
    leftovers = [p.name for p in run.rglob(".*") if p.name != ".phases.json.lock"]
    assert leftovers == []


# -- phases ------------------------------------------------------------------------------------------
def test_record_phase_is_safe_from_many_threads(tmp_path):
    def worker(i: int) -> None:
        for j in range(25):
            report.record_phase(tmp_path, f"node{i}", "run", sr.T0 + j, sr.T0 + j + 0.5)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    phases = json.loads((tmp_path / "phases.json").read_text())
    assert len(phases) == 200
    assert sorted({p["host"] for p in phases}) == [f"node{i}" for i in range(8)]
    report.record_phase(tmp_path, "node0", "teardown", sr.T0 + 10, sr.T0 + 9)  # clock trouble: zero length
    assert json.loads((tmp_path / "phases.json").read_text())[-1] == {
        "host": "node0", "phase": "teardown", "start": sr.T0 + 10, "end": sr.T0 + 10}


def test_phases_recorded_and_derived(run):
    phases = {(p.host, p.phase): p for p in report_read.read_run(run).phases}
    connect = phases[("node1", "connect")]
    assert (connect.start, connect.end, connect.derived) == (sr.T0 + 0.1, sr.T0 + 1.2, False)
    deploy = phases[("node1", "deploy")]  # deploy-manifest.json written at +41.8 after 40.5 s
    assert deploy.derived and deploy.start == pytest.approx(sr.T0 + 1.3) and deploy.duration == pytest.approx(39.8)
    assert deploy.detail == "probe 0.4s, upload 12.3s, install 25.1s, verify 2.0s"
    ran = phases[("node1", "run")]  # from the ranks' status files
    assert (ran.start, ran.end) == (sr.T0 + 45.0, sr.T0 + 51.5) and ran.detail == "ranks 0-1"
    collect = phases[("node2", "collect")]  # last rank end until the launch record
    assert (collect.start, collect.end) == (sr.T0 + 53.1, sr.T0 + 58.0)


# -- terminal summary ------------------------------------------------------------------------------
def test_terminal_summary_fits_one_screen(run):
    report.finalize(run, cores=[sr.core_for(run)], seed=1234, started=sr.T0, ended=sr.T0 + 61, status="failed",
                    argv=["/usr/lib/python3/dist-packages/pytest/__main__.py", "tests/cluster",
                          "--env-file", "env/lab.yaml"])
    text = report.terminal_summary(run)
    lines = text.splitlines()
    # every line fits 120 columns but the one naming the report folder, as long as the folder's path
    # (under pytest-xdist the temp dirs are longer)
    assert len(lines) <= 24 and max(len(ln) for ln in lines if not ln.startswith("  report: ")) <= 120
    assert [ln for ln in lines if ln.startswith("  report: ")] == [f"  report: {run / 'index.html'}"]
    assert lines[0] == "camit run 20260801-100000-c0ffee: FAILED in 1m01s"
    # rank 3 on node2, only torn down after rank 2 crashed, is skipped (RankTornDown), not an error
    assert lines[1] == ("  cluster.xml 15 tests, 2 failed, 1 errors, 3 skipped; "
                        "junit.xml 5 tests, 1 failed, 0 errors, 1 skipped")
    assert "    node1  r0-1      .F  1 pass, 1 fail" in lines
    assert "    node2  r2-3      CK  1 crash, 1 killed" in lines
    assert "  CRASH  node2 r2: died of SIGSEGV; core dumped (python3, pid 4242)" in lines
    assert "  KILLED node2 r3: died of SIGTERM; the launch failed: rank 2 on node2 died of SIGSEGV" in lines
    assert "  CORE   node2 r2: python3 pid 4242 SIGSEGV — cam::dispatch_prefill (ctx=0x0) at dispatch.cpp:211" in lines
    # the controller's failing test, its message's first line (pytest's junit.xml, typed once)
    assert ("  TEST   sample_rank_tests::test_dispatch_combine[Graph]: "
            "AssertionError: diff 1.2e-03 not below 5e-05") in lines
    slow = next(ln for ln in lines if ln.startswith("  slowest phases"))
    assert slow.startswith("  slowest phases (~ estimated):  node1 deploy 39.8s~  node2 deploy 39.8s~")
    assert lines[-1] == "  reproduce: python -m pytest tests/cluster --env-file env/lab.yaml --random-seed 1234"
    assert report.terminal_summary(run, repro="make repro SEED=1").endswith("reproduce: make repro SEED=1")


def test_terminal_summary_of_an_empty_folder(tmp_path):
    text = report.terminal_summary(tmp_path)
    assert text.splitlines()[0] == f"camit run {tmp_path.name}: UNKNOWN"
    assert text.endswith("reproduce: (no command line recorded)")


def test_terminal_summary_wraps_wide_hosts(tmp_path):
    run = tmp_path / "wide"
    ranks = {r: RankResult(r, "a3-node1", 0 if r != 70 else None, None if r != 70 else "SIGABRT") for r in range(128)}
    result = LaunchResult("wide-x1-0000", {"a3-node1": NodeResult("a3-node1", 0)}, ranks, 128)
    run.mkdir()
    (run / "launch-wide-x1-0000.json").write_text(json.dumps(result.to_json()))
    lines = report.terminal_summary(run).splitlines()
    grid = [ln for ln in lines if re.search(r"[.C]{10}", ln)]
    assert len(grid) == 2 and grid[1].strip() == "." * 6 + "C" + "." * 57
    assert grid[0].endswith("127 pass, 1 crash")


# -- one reproduce line ---------------------------------------------------------------------------
def _page_repro(run: Path) -> str:
    """The reproduce line index.html shows."""
    import html

    found = re.search(r"<code id='repro'>(.*?)</code>", (run / "index.html").read_text())
    assert found, "index.html shows no reproduce line"
    return html.unescape(found.group(1))


def _screen_repro(lines: list[str]) -> str:
    """The reproduce line the terminal summary shows."""
    (line,) = [ln for ln in lines if ln.startswith("  reproduce: ")]
    return line.removeprefix("  reproduce: ")


@pytest.mark.parametrize(("argv", "seed", "program", "line"), [
    (["pytest", "tests/cluster"], 7, None, "python -m pytest tests/cluster --random-seed 7"),
    (["/usr/lib/python3/dist-packages/pytest/__main__.py", "-k", "a and b"], None, None,
     "python -m pytest -k 'a and b'"),
    (["py.test", "--random_seed", "5", "-x", "--random-seed=6"], 9, None, "python -m pytest -x --random-seed 9"),
    (["pytest", "--env", "e.yaml", "--random-seed", "1"], 1, ["pytest"], "pytest --env e.yaml --random-seed 1"),
    (["camit", "run", "--env", "e.yaml"], 3, None, "camit run --env e.yaml --random-seed 3"),
    (["pytest", "--random-seed", "4"], None, None, "python -m pytest --random-seed 4"),  # no seed: argv as it is
    ([], 3, None, None),
])
def test_repro_command(argv, seed, program, line):
    assert report.repro_command(argv, seed, program=program) == line


def test_terminal_summary_and_index_html_show_the_same_reproduce_line(run):
    report.finalize(run, seed=99, argv=["pytest", "tests/cluster", "-k", "a and b", "--random_seed", "5"],
                    started=sr.T0, ended=sr.T0 + 61, status="failed")
    line = "python -m pytest tests/cluster -k 'a and b' --random-seed 99"  # the seed the run had, once
    assert _screen_repro(report.terminal_summary(run).splitlines()) == _page_repro(run) == line
    assert json.loads((run / "manifest.json").read_text())["command"]["repro"] == line


def test_a_reproduce_line_built_by_the_caller_is_the_one_recorded_and_shown(run):
    line = report.repro_command(["pytest", "--env", "e.yaml", "--random-seed", "1"], 7, program=["pytest"])
    report.finalize(run, seed=7, argv=["pytest", "--env", "e.yaml", "--random-seed", "1"], repro=line)
    assert _screen_repro(report.terminal_summary(run).splitlines()) == _page_repro(run) == line
    assert line == "pytest --env e.yaml --random-seed 7"
    report.write_manifest(run, status="ok")  # a later status-only write keeps the recorded line
    assert json.loads((run / "manifest.json").read_text())["command"]["repro"] == line


def test_the_plugin_header_summary_and_index_html_show_one_reproduce_line(pytester):
    env = pytester.makefile(".yaml", test_env=TWO_NODE_ENV)
    pytester.makepyfile("def test_x(env):\n    pass\n")
    result = pytester.runpytest("--env", str(env), "--report-dir", "out", "--random_seed", "11", "-k", "test_x or y",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    page = _page_repro(pytester.path / "out" / "latest")
    assert page.startswith(f"pytest --env {env} --report-dir out -k 'test_x or y' -p no:cacheprovider ")
    assert page.endswith(" --random-seed 11") and "--random_seed" not in page
    assert _screen_repro(result.outlines) == page
    assert [ln for ln in result.outlines if ln.startswith("camit: reproduce with: ")] == [
        f"camit: reproduce with: {page}"]


# -- the package ---------------------------------------------------------------------------------------
def test_report_modules_import_only_public_names_of_each_other():
    import ast

    for path in sorted((REPO / "framework" / "report").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("framework"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                assert not private, f"{path.name} imports {private} from {node.module}"


def test_the_package_exports_resolve_lazily_to_their_modules():
    import importlib

    for name in report.__all__:
        where = report._EXPORTS[name]
        module = importlib.import_module(where if where.startswith("framework.") else f"framework.report.{where}")
        # by module and name, not identity: pytester's in-process runs restore sys.modules afterwards, so a
        # module first imported inside one is imported again later and its objects are new ones
        exported, defined = getattr(report, name), getattr(module, name)
        assert (exported.__module__, exported.__qualname__) == (defined.__module__, defined.__qualname__), name
        assert exported.__module__ == module.__name__, name
        assert name in dir(report)
    assert sorted(report.__all__) == sorted(report._EXPORTS)
    with pytest.raises(AttributeError):
        report.no_such_name  # noqa: B018


@pytest.mark.parametrize(("fn", "arg", "text"), [
    ("dur", 4.25, "4.2s"), ("dur", 61, "1m01s"), ("dur", 7500, "2h05m"),
    ("ranges", [8, 0, 1, 2, 5, 7, 2], "0-2,5,7-8"), ("ranges", [], ""),
    ("iso", sr.T0, "2026-08-01T10:00:00+00:00"), ("iso", None, None),
    ("slug", "a3.node-1:22", "a3_node-1_22"), ("signame", 11, "SIGSEGV"), ("signame", "SIGBUS", "SIGBUS"),
    ("signame", 999, "999"), ("number", "1,234.5", 1234.5), ("number", "x", 0.0),
    ("strip_ansi", "\x1b[31mred\x1b[0m", "red"),
])
def test_fmt_helpers(fn, arg, text):
    from framework.report import fmt

    assert getattr(fmt, fn)(arg) == text


def test_short_folds_and_cuts():
    from framework.report.fmt import short

    assert short("a\n  b\tc", 10) == "a b c" and short("x" * 12, 10) == "x" * 9 + "…"
