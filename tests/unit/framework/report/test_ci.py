"""summary.txt (the Jenkins build description) and perf.csv (the Jenkins Plot plugin's CSV series), written by
:func:`framework.report.finalize` into every run folder (perf.csv only when the run measured performance)."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from framework import report
from framework.report import ci
from framework.report.model import read_run
from tests.support.builders import sample_run

sr = sample_run()


@pytest.fixture(scope="module")
def junits(tmp_path_factory):
    base = tmp_path_factory.mktemp("junit")
    return (sr.pytest_junit(base / "pass", fail=False, name="rank"),
            sr.pytest_junit(base / "fail", fail=True, name="rank"))


def test_summary_names_verdict_counts_hosts_failures_and_the_repro_line(tmp_path, junits):
    run = sr.build(tmp_path / "reports", *junits, controller_junit=junits[1])
    report.finalize(run, cores=[sr.core_for(run)], seed=1234, started=sr.T0, ended=sr.T0 + 61, status="failed",
                    argv=["pytest", "tests/cluster", "--env-file", "env/lab.yaml"])
    text = (run / "summary.txt").read_text()
    lines = text.splitlines()
    assert lines[0] == f"camit FAILED · run {sr.RUN_ID} · 1m01s"
    assert "hosts (2): node1, node2" in lines
    # rank 3 on node2 was only torn down after rank 2 crashed: skipped (RankTornDown), not an error
    assert ("cluster.xml 15 tests, 2 failed, 1 errors, 3 skipped · "
            "junit.xml 5 tests, 1 failed, 0 errors, 1 skipped") in lines
    assert "ranks: 1 pass, 1 fail, 1 crash, 1 killed, 1 core dump" in lines
    failed = lines[lines.index("failed (4):") + 1:-1]  # 4: the torn-down rank 3 is no failure
    assert failed[0] == ("  node1.rank1.sample_rank_tests::test_dispatch_combine[Graph] — AssertionError: diff 1.2e-03 "
                         "not below 5e-05")
    assert any(line.startswith("  node2.rank2::rank_report — rank 2 on node2 died of SIGSEGV") for line in failed)
    assert lines[-1] == "reproduce: python -m pytest tests/cluster --env-file env/lab.yaml --random-seed 1234"
    # the same command the manifest records; short enough for a build description
    assert json.loads((run / "manifest.json").read_text())["command"]["repro"] in lines[-1]
    assert len(lines) <= 6 + ci.MAX_NAMED + 2 and max(len(line) for line in lines) <= 200


def test_summary_of_an_interrupted_run_without_anything(tmp_path):
    report.finalize(tmp_path, status="interrupted", error="KeyboardInterrupt")
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    # cluster.xml's error entry for the run (its name is junit.py's) is the one failure named
    assert lines[:4] == [f"camit INTERRUPTED · run {tmp_path.name}", "error: KeyboardInterrupt",
                         "cluster.xml 1 tests, 0 failed, 1 errors", "failed (1):"]
    assert len(lines) == 6 and lines[4].startswith("  camit.") and lines[4].endswith("KeyboardInterrupt")
    assert lines[5] == "reproduce: (no command line recorded)"


def test_summary_names_at_most_max_named_failures_and_counts_the_rest(tmp_path):
    suite = ET.Element("testsuite", name="x")
    for i in range(ci.MAX_NAMED + 5):
        case = ET.SubElement(suite, "testcase", classname="cam.dispatch", name=f"test_{i:02d}")
        ET.SubElement(case, "failure", message=f"wrong {i}\nsecond line")
    top = ET.Element("testsuites")
    top.append(suite)
    ET.ElementTree(top).write(tmp_path / "cluster.xml")
    (tmp_path / "manifest.json").write_text(json.dumps({"status": "failed", "command": {"repro": "camit run x"}}))
    lines = ci.summary_text(read_run(tmp_path)).splitlines()
    assert f"failed ({ci.MAX_NAMED + 5}):" in lines
    assert [line for line in lines if line.startswith("  cam.")] == [
        f"  cam.dispatch::test_{i:02d} — wrong {i}" for i in range(ci.MAX_NAMED)]
    assert "  … 5 more: see index.html" in lines and lines[-1] == "reproduce: camit run x"


def test_summary_falls_back_to_a_minimal_block_when_it_cannot_be_built(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(ci, "read_run", broken)
    report.finalize(tmp_path, status="failed", error="rank 2 died")
    assert (tmp_path / "summary.txt").read_text().splitlines() == [
        f"camit FAILED · run {tmp_path.name}", "error: rank 2 died",
        "summary.txt could not be built: summary.txt: RuntimeError: disk on fire"]


def _perf(root: Path, key: str, numbers: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"perf-{key}.json").write_text(json.dumps({"cluster": "lab", "numbers": numbers, "ranks": []}))


def test_perf_csv_is_one_row_of_labels_and_one_of_values_for_the_plot_plugin(tmp_path):
    _perf(tmp_path, "prefill.world8", {"dispatch_us": 812.5, "combine_us": 640.25, "dispatch_bytes_per_s": 1.25e10,
                                       "combine_bytes_per_s": 9.5e9})
    _perf(tmp_path, "prefill.world4", {"dispatch_us": 410.0, "note": "not a number", "combine_us": float("nan")})
    (tmp_path / "perf-broken.json").write_text("{not json")
    report.finalize(tmp_path, status="ok")
    rows = list(csv.reader((tmp_path / "perf.csv").read_text().splitlines()))
    assert rows == [
        ["prefill.world4.dispatch_us", "prefill.world8.combine_bytes_per_s", "prefill.world8.combine_us",
         "prefill.world8.dispatch_bytes_per_s", "prefill.world8.dispatch_us"],
        ["410", "9.5e+09", "640.25", "1.25e+10", "812.5"]]
    # written before the manifest, so the manifest lists it with its hash
    files = {f["path"]: f for f in json.loads((tmp_path / "manifest.json").read_text())["files"]}
    assert files["perf.csv"]["sha256"]


def test_no_perf_results_no_perf_csv(tmp_path, junits):
    run = sr.build(tmp_path / "reports", *junits, controller_junit=junits[1])
    report.finalize(run, status="failed")
    assert not (run / "perf.csv").exists() and (run / "summary.txt").exists()


def test_perf_csv_from_what_the_perf_test_records(tmp_path):
    """The file the suite's perf test writes (suites/cam/test_perf.py: ``perf-<key>.json`` with the cluster
    numbers of :func:`framework.ranksuite.perfbase.cluster_numbers`) is what perf.csv is built from."""
    from framework.ranksuite import perfbase

    samples = [{"dispatch_us": 10.0 + r, "combine_us": 20.0 + r, "dispatch_bytes_per_s": 1e9 - r,
                "combine_bytes_per_s": 2e9 - r} for r in range(4)]
    numbers = perfbase.cluster_numbers(samples)
    report.RunDir(tmp_path, tmp_path.name).write_json("perf-prefill.world4.json",
                                                      {"cluster": "lab", "numbers": numbers, "ranks": samples})
    assert ci.perf_table(tmp_path) == {f"prefill.world4.{k}": v for k, v in sorted(numbers.items())}


def test_summary_says_why_right_under_the_headline(tmp_path, junits):
    run = sr.build(tmp_path / "reports", *junits, controller_junit=junits[1])
    launch = next(run.glob("launch-*.json"))
    data = json.loads(launch.read_text())
    launch.write_text(json.dumps({**data, "cause": "rank 3 on node2: device fault: RUNTIME: retCode=507035"}))
    report.finalize(run, started=sr.T0, ended=sr.T0 + 61, status="failed")
    lines = (run / "summary.txt").read_text().splitlines()
    assert lines[1].startswith("CAUSE ")
    assert lines[1].endswith(": rank 3 on node2: device fault: RUNTIME: retCode=507035")
