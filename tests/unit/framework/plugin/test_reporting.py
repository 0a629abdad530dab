"""framework.plugin.reporting: the header's host lines, the host choice, a rerun attempt's cause."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.support.plugin_run import TWO_NODE_ENV


def _run(pytester: pytest.Pytester, test: str, *args: str) -> pytest.RunResult:
    env = pytester.makefile(".yaml", test_env=TWO_NODE_ENV)
    pytester.makepyfile(test)
    return pytester.runpytest("--env", str(env), "--report-dir", "out", "-p", "no:cacheprovider",
                              *args)


def test_hosts_left_out_by_hosts_are_named_in_the_header_and_the_manifest(
        pytester: pytest.Pytester) -> None:
    result = _run(pytester, "def test_x(env):\n    pass\n", "--hosts", "node2")
    result.assert_outcomes(passed=1)
    assert "camit: left out by --hosts/--exclude-hosts: node1" in result.outlines
    manifest = json.loads((pytester.path / "out" / "latest" / "manifest.json").read_text())
    extra = manifest["extra"]
    assert (extra["hosts_chosen"], extra["hosts_left_out"]) == (["node2"], ["node1"])


def test_all_hosts_chosen_leave_no_line_and_no_record(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "def test_x(env):\n    pass\n")
    result.assert_outcomes(passed=1)
    assert not [line for line in result.outlines if "left out" in line]
    manifest = json.loads((pytester.path / "out" / "latest" / "manifest.json").read_text())
    assert "hosts_chosen" not in manifest["extra"]


def test_a_rerun_attempt_keeps_its_crash_line(pytester: pytest.Pytester) -> None:
    test = ("import itertools\n"
            "turn = itertools.count()\n"
            "def test_flaky(env):\n"
            "    assert next(turn) > 0, 'first attempt'\n")
    result = _run(pytester, test, "--reruns", "1")
    assert result.parseoutcomes() == {"passed": 1, "rerun": 1}
    junit = ET.parse(pytester.path / "out" / "latest" / "junit.xml")
    [flaky] = junit.iter("flakyFailure")  # the attempt that failed, folded into the one that passed
    assert flaky.get("message", "").startswith("attempt 1 (call): AssertionError: first attempt\n")
