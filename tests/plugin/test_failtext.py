"""framework.plugin.failtext: failed commands in the failure text; camit's DEBUG out of Captured
log."""

from __future__ import annotations

import pytest

CASE = """
import logging
from framework.plugin.failtext import note_failure

def test_fails():
    logging.getLogger("camit.lease").debug("lease %s line", "scriptXYZ")
    logging.getLogger("camit.urma").info("an info line")
    note_failure("host1", "gcc x.c", 1, "", "x.c:1: fatal error: y.h: No such file or directory")
    assert False

def test_caplog_sees_debug(caplog):
    caplog.set_level(logging.DEBUG, logger="camit")
    logging.getLogger("camit.lease").debug("seen by caplog")
    assert "seen by caplog" in caplog.text
"""


CONFTEST = """
import logging
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):  # as camit's core watch: logs after the test body, in the same phase
    try:
        return (yield)
    finally:
        logging.getLogger("camit.cores").debug("core %s line", "scanXYZ")
"""


def test_failed_command_in_failure_text_and_no_camit_debug(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_case=CASE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--log-level=DEBUG")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*failed commands (last first)*",
            "host1: gcc x.c",
            "*ret=1; stderr*",
            "x.c:1: fatal error: y.h: No such file or directory",
            "*Captured log call*",
            "*an info line*",
        ]
    )
    result.stdout.no_fnmatch_line("*lease scriptXYZ line*")
    result.stdout.no_fnmatch_line("*core scanXYZ line*")
