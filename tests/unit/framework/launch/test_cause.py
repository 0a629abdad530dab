"""framework.launch.cause: the error a rank log reports, and a peer's absence set aside for a rank's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from framework.launch import cause
from framework.launch.result import LaunchResult, NodeResult, RankResult
from framework.report.model import read_run


def real_log(tmp_path: Path, name: str, code: str) -> Path:
    """A rank log as Python writes it: stdout and stderr of a script that fails."""
    log = tmp_path / name
    with open(log, "w") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT, check=False)
    return log


def rank(r: int, host: str, log: Path | None, code: int = 1) -> RankResult:
    return RankResult(r, host, exit_code=code, log=str(log) if log else None)


def test_the_last_tracebacks_exception_line_is_the_error(tmp_path):
    log = real_log(tmp_path, "r.log", "print('starting'); import json; json.loads('{')")
    error = cause.first_error(log.read_text())
    assert error is not None and error.startswith("json.decoder.JSONDecodeError: Expecting property name")


def test_pytests_short_summary_wins_over_a_traceback():
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1 in f\nValueError: inner\n"
            "=== short test summary info ===\n"
            "FAILED test_prefill_rank.py::test_dispatch[4] - AssertionError: recv_x mismatch on rank 3\n")
    assert cause.first_error(text) == "AssertionError: recv_x mismatch on rank 3"


def test_a_rank_prefix_is_read_through_and_a_traceback_word_inside_a_line_is_no_traceback():
    text = ("[rank3]:Traceback (most recent call last):\n[rank3]:  File \"x.py\", line 1, in f\n"
            "[rank3]:ValueError: bad expert 7\n")
    assert cause.first_error(text) == "ValueError: bad expert 7"
    assert cause.first_error("printed: Traceback (most recent call last): nothing else\n") is None


def test_a_segfault_is_named_by_cpythons_fatal_error_line(tmp_path):
    log = real_log(tmp_path, "r.log", "import faulthandler, ctypes; faulthandler.enable(); ctypes.string_at(0)")
    assert cause.first_error(log.read_text()) == "Fatal Python error: Segmentation fault"


def test_no_error_control_characters_and_length_are_bounded():
    assert cause.first_error("all fine\n") is None
    text = "Traceback (most recent call last):\nRuntimeError: \x1b[31mred" + "x" * 1000 + "\n"
    got = cause.first_error(text)
    assert got is not None and "\x1b" not in got and len(got) == cause.MAX_CHARS


def test_a_peers_absence_points_away_to_the_rank_that_raised(tmp_path):
    """The first rank to fail only saw its peer go; rank 3's own error is the cause, whatever the order."""
    peer = real_log(tmp_path, "r0.log", "raise RuntimeError('[../third_party/gloo/gloo/transport/tcp/pair.cc:534]"
                                        " Connection closed by peer [10.0.0.2]:1234')")
    own = real_log(tmp_path, "r3.log", "assert 1 == 2, 'combine: rank 3 wrong rows'")
    ranks = [rank(0, "host1", peer), rank(3, "host2", own), rank(1, "host1", None, code=0)]
    found = cause.of_ranks(ranks, first=0)
    assert found is not None and not found.consequence
    assert found.describe() == "rank 3 on host2: AssertionError: combine: rank 3 wrong rows"
    only_peer = cause.of_ranks(ranks[:1], first=0)
    assert only_peer is not None and only_peer.consequence
    assert "reports a peer's absence" in only_peer.describe()


def test_the_cause_reaches_the_record_the_summary_and_the_page(tmp_path):
    from framework.records.folder import RunDir
    from framework.report.html import render
    from framework.report.summary import terminal_summary

    rd = RunDir.create(tmp_path / "reports")
    own = real_log(tmp_path, "r1.log", "raise KeyError('expert 7')")
    result = LaunchResult("t-1", {"host2": NodeResult("host2", 1)}, {1: rank(1, "host2", own)}, 2,
                          failure="rank 1 on host2 exited 1", failure_kind="rank", failure_rank=1)
    found = cause.of_ranks(result.ranks.values(), result.failure_rank)
    assert found is not None
    result.cause = found.describe()
    rd.write_json("launch-t-1.json", result.to_json())
    assert "cause: rank 1 on host2: KeyError: 'expert 7'" in result.message()
    lines = terminal_summary(rd.path).splitlines()
    assert lines[1] == "  CAUSE  t-1: rank 1 on host2: KeyError: 'expert 7'", lines  # right under the headline
    page = render(read_run(rd.path))
    assert "failed:</b> rank 1 on host2: KeyError: &#x27;expert 7&#x27;" in page
