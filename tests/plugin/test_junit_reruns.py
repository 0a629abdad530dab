"""pytest's own junit.xml under pytest-rerunfailures, and the run's properties in it (pytester, no host)."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET

import pytest

from framework.report.junit import validate_junit
from tests.support.plugin_run import TWO_NODE_ENV
from tests.support.xmltree import attr, one

TESTS = textwrap.dedent("""
    import json
    from pathlib import Path

    from framework.plugin.context import CONTEXT_KEY

    def _attempt(request, name):
        seen = Path(name)
        seen.write_text(seen.read_text() + "x" if seen.exists() else "x")
        with open("owners.jsonl", "a") as fh:
            fh.write(json.dumps(getattr(request.config.stash[CONTEXT_KEY], "test", None)) + "\\n")
        return len(seen.read_text())

    def test_flaky(env, request):
        assert _attempt(request, "flaky.count") > 1, "first attempt fails"

    def test_broken(env, request):
        assert _attempt(request, "broken.count") < 0, "always fails"

    def test_fine(env):
        pass
""")


@pytest.fixture
def env_file(pytester: pytest.Pytester):
    return pytester.makefile(".yaml", test_env=TWO_NODE_ENV)


def _junit(pytester: pytest.Pytester, *args: str) -> ET.Element:
    pytester.makepyfile(test_r=TESTS)
    result = pytester.runpytest("-p", "rerunfailures", "--reruns", "1", "--env", "test_env.yaml",
                                "--report-dir", "out", "--random-seed", "4242", *args)
    outcomes = result.parseoutcomes()
    assert {k: outcomes.get(k) for k in ("passed", "failed", "rerun")} == {"passed": 2, "failed": 1, "rerun": 2}
    path = pytester.path / "out" / "latest" / "junit.xml"
    assert validate_junit(path) == []
    return ET.parse(path).getroot()


def test_a_rerun_keeps_only_the_final_attempt_with_the_failed_one_folded_in(pytester, env_file):
    top = _junit(pytester)
    cases = {attr(c, "name"): c for c in top.iter("testcase")}
    assert sorted(cases) == ["test_broken", "test_fine", "test_flaky"]
    flaky, broken = cases["test_flaky"], cases["test_broken"]
    assert flaky.find("failure") is None and [e.tag for e in flaky if e.tag.endswith("Failure")] == ["flakyFailure"]
    assert "attempt 1 (call)" in attr(one(flaky, "flakyFailure"), "message") and \
        "first attempt fails" in attr(one(flaky, "flakyFailure"), "message")
    assert [e.tag for e in broken if e.tag.endswith(("failure", "Failure"))] == ["failure", "rerunFailure"]
    suite = top if top.tag == "testsuite" else one(top, "testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("3", "1")


def test_the_launcher_is_told_the_test_and_its_attempt(pytester, env_file):
    """What names a test's launches in cluster.xml (framework.report.model.launch_name): nodeid and attempt."""
    _junit(pytester)
    owners = (pytester.path / "owners.jsonl").read_text().splitlines()
    assert owners == ['["test_r.py::test_flaky", 1]', '["test_r.py::test_flaky", 2]',
                      '["test_r.py::test_broken", 1]', '["test_r.py::test_broken", 2]']


def test_the_controller_junit_carries_the_run_properties(pytester, env_file):
    top = _junit(pytester)
    suite = top if top.tag == "testsuite" else one(top, "testsuite")
    props = {attr(p, "name"): attr(p, "value") for p in suite.findall("properties/property")}
    run_id = (pytester.path / "out" / "latest").resolve().name
    assert props["run_id"] == run_id and props["seed"] == "4242"
    assert props["env"] == "test_env.yaml" and props["env_file"].endswith("test_env.yaml")
    assert props["hosts"] == "node1,node2"
