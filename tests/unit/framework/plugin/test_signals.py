"""framework.plugin.signals.name_cut_cases and the session's ending (framework.plugin.hooks):
pure logic, no session run."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from types import SimpleNamespace

from framework.plugin import hooks
from framework.plugin.signals import name_cut_cases

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"
 tests="1"><testcase classname="t" name="ok" time="1"/><testcase time="2.5"/><testcase time="0.1"/>
</testsuite></testsuites>"""


def test_nameless_cases_get_the_running_tests_names_an_error_and_are_counted(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    fixed = name_cut_cases(path, ["tests/cam/test_a.py::TestK::test_b[2]"], "stopped by SIGTERM")
    assert fixed == 2
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None and (suite.get("errors"), suite.get("tests")) == ("2", "3")
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("t", "ok"), ("tests.cam.test_a.TestK", "test_b[2]"), ("unknown", "interrupted")]
    errors = [c.find("error") for c in cases[1:]]
    assert [e.get("message") if e is not None else None for e in errors] == ["stopped by SIGTERM"] * 2


def test_an_unreadable_junit_file_is_left_alone(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text("<testsuites><testcase")
    assert name_cut_cases(path, ["a.py::t"], "x") == 0
    assert path.read_text() == "<testsuites><testcase"


def test_the_ending_is_the_infrastructure_failure_else_the_signal_else_none():
    signals = SimpleNamespace(received=15, received_name="SIGTERM")
    ended = SimpleNamespace(ended=(7, "host h1 lost"))
    ran = SimpleNamespace(ended=None)
    assert hooks._ending(ended, signals, 1) == (7, "host h1 lost")  # type: ignore[arg-type]
    assert hooks._ending(ran, signals, 1) == (1, "stopped by SIGTERM")  # type: ignore[arg-type]
    assert hooks._ending(ran, None, 0) == (0, None)  # type: ignore[arg-type]


def test_end_session_keeps_the_first_ending_and_none_while_finishing() -> None:
    from framework.plugin.signals import Signals

    signals = Signals()  # not installed: only the pending ending is noted, no signal is sent
    signals.end_session("host h1 lost", 7)
    signals.end_session("lease lost", 7)
    assert signals.pending == ("host h1 lost", 7)
    finishing = Signals()
    finishing.finishing()
    finishing.end_session("lease lost", 7)
    assert finishing.pending is None


def test_end_session_in_a_thread_wakes_the_main_thread_through_our_handler() -> None:
    import threading

    import pytest

    from framework.plugin.signals import Signals

    signals = Signals()
    signals.install()
    try:
        with pytest.raises(pytest.exit.Exception) as ended:
            worker = threading.Thread(target=signals.end_session, args=("lease lost", 7))
            worker.start()
            worker.join()
            threading.Event().wait(5)  # the handler raises in the main thread, ending the wait
        assert (str(ended.value.msg), ended.value.returncode) == ("lease lost", 7)
    finally:
        signals.restore()
