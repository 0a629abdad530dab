"""``camit exec``'s per-host row, JSON record and exit status (framework.cli.execute)."""

from __future__ import annotations

from framework.cli.execute import exec_row
from framework.errors import EXIT_FAILED, EXIT_INFRA, EXIT_OK, HostUnreachable
from framework.result import Result


def test_a_command_that_ran_shows_its_last_lines_and_its_status() -> None:
    ok = Result("h1", "uname", 0, stdout="a\nb\nc\n", duration=0.25)
    row, record, code = exec_row("h1", ok, 2)
    assert (row, code) == (["h1", "0", "0.25s", "b\nc"], EXIT_OK)
    assert record == {"host": "h1", "rc": 0, "timed_out": False, "duration": 0.25,
                      "stdout": "a\nb\nc\n", "stderr": ""}
    failed = Result("h1", "false", 3, stderr="boom\n")
    assert exec_row("h1", failed, 3)[0][1:] == ["3", "0.00s", "boom"]
    assert exec_row("h1", failed, 3)[2] == EXIT_FAILED
    slow = Result("h1", "sleep", None, timed_out=True)
    assert exec_row("h1", slow, 3)[0][1] == "TIMEOUT"


def test_a_host_it_could_not_run_on_is_unreachable_or_an_error() -> None:
    row, record, code = exec_row("h2", HostUnreachable("h2", "connection refused"), 3)
    assert (row[1], row[2], code) == ("UNREACHABLE", "-", EXIT_INFRA)
    assert record["status"] == "unreachable" and "connection refused" in record["error"]
    row, record, code = exec_row("h2", ValueError("odd"), 3)
    assert (row[1], record["status"], code) == ("UNREACHABLE", "unreachable", EXIT_INFRA)

    class Refused(Exception):
        exit_code = EXIT_FAILED

    row, record, code = exec_row("h2", Refused("no"), 3)
    assert (row[1], record["status"], code) == ("ERROR", "error", EXIT_FAILED)
