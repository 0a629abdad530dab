"""``camit check``'s terminal output and exit status (framework.cli.check)."""

from __future__ import annotations

import pytest

from framework.cli.check import _heal_code, print_check
from framework.errors import EXIT_FAILED, EXIT_OK
from framework.preflight.checks import FAIL, OK, SKIP, WARN, CheckResult, ClockSkew, Report


def _report() -> Report:
    results = {
        ("a", "ssh"): CheckResult("a", "ssh", OK, "fine"),
        ("b", "ssh"): CheckResult("b", "ssh", OK, "fine"),
        ("a", "npu"): CheckResult("a", "npu", FAIL, "no \x1b[31mdevice"),
        ("b", "npu"): CheckResult("b", "npu", WARN, "slow"),
        ("b", "hccn"): CheckResult("b", "hccn", SKIP, "no NPU"),
        ("a", "hccn"): CheckResult("a", "hccn", SKIP, "no NPU"),
        ("a", "tls"): CheckResult("a", "tls", SKIP, "no NPU"),
    }
    clock = ClockSkew(offsets={"a": 0.0, "b": 0.5}, uncertainty={}, max_pairwise=0.5,
                      pair=("a", "b"))
    return Report(["a", "b"], results, clock=clock, duration=1.25,
                  checks=("ssh", "npu", "hccn", "tls"))


def test_the_problems_the_clock_and_the_skipped_checks_each_get_a_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    print_check(_report())
    lines = capsys.readouterr().out.splitlines()
    assert "a npu: FAIL: no \\x1b[31mdevice" in lines  # a host's words, escaped
    assert "b npu: warning: slow" in lines
    assert "clock: max pairwise skew 0.500s (a vs b)" in lines
    assert "skipped hccn, tls on a, b: no NPU" in lines
    assert lines[-1] == "some checks FAILED (3 skipped) in 1.25s"


def test_no_clock_line_without_a_pair(capsys: pytest.CaptureFixture[str]) -> None:
    report = _report()
    report.clock = None
    print_check(report)
    assert "clock:" not in capsys.readouterr().out


@pytest.mark.parametrize(("verdicts", "heal", "code"), [
    ({"a": "re-admitted: clean"}, True, EXIT_OK),
    ({"a": "re-admitted: clean", "b": "still suspect: npu"}, True, EXIT_FAILED),
    ({"b": "npu: fail (camit check --heal re-admits it)"}, False, EXIT_OK),
])
def test_heal_fails_only_when_a_host_stays_suspect(verdicts: dict[str, str], heal: bool,
                                                   code: int) -> None:
    assert _heal_code(verdicts, heal) == code
