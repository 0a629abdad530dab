"""A failure a person can use: the failed commands' output in the failure text, camit's DEBUG
out of it.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Generator

import pytest
from _pytest._code.code import ExceptionRepr
from _pytest.logging import LogCaptureHandler, caplog_handler_key

#: the logger whose DEBUG records stay out of the report sections
LOGGER = "camit"
#: lines of a failed command's output kept for the failure report (its stderr, else its stdout)
FAILURE_LINES = 30
#: the last failed commands of the running test (:func:`failed_commands`): shown in its failure
_failures: collections.deque[str] = collections.deque(maxlen=5)
log = logging.getLogger("camit.urma")


def note_failure(host: str, command: str, rc: int | None, stdout: str, stderr: str) -> None:
    """Keep a failed command's exit status and output tail for the test's failure text; log it."""
    output, what = (stderr, "stderr") if stderr.strip() else (stdout, "output")
    tail = "\n".join(output.rstrip("\n").splitlines()[-FAILURE_LINES:])
    text = f"{host}: {command}\n  ret={rc}; {what} (last {FAILURE_LINES} lines):\n{tail}"
    _failures.append(text)
    log.info("command failed: %s", text)  # may be expected: shown only when the test fails


def failed_commands(clear: bool = False) -> list[str]:
    """The failed commands noted since the last ``clear`` (at most the last 5), oldest first."""
    out = list(_failures)
    if clear:
        _failures.clear()
    return out


class _NoCamitDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG or not (
            record.name == LOGGER or record.name.startswith(LOGGER + ".")
        )


class FailText:
    """Registered by the plugin's ``pytest_configure``."""

    def __init__(self) -> None:
        self.filter = _NoCamitDebug()

    def _report_handlers(self, item: pytest.Item) -> list[logging.Handler]:
        ours = item.stash.get(caplog_handler_key, None)
        return [
            h
            for h in logging.getLogger().handlers
            if isinstance(h, LogCaptureHandler) and h is not ours
        ]

    def _phase(self, item: pytest.Item) -> Generator[None, None, None]:
        # the phase's report handler is new for each phase and dropped after it: the filter stays
        # on it,
        # so what camit logs after this (innermost) wrapper in the same phase (its core watch) is
        # kept out too
        for handler in self._report_handlers(item):
            handler.addFilter(self.filter)
        yield

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        failed_commands(clear=True)
        return (yield from self._phase(item))

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._phase(item))

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._phase(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        longrepr = report.longrepr
        if report.failed and isinstance(longrepr, ExceptionRepr):
            failed = failed_commands(clear=True)
            if failed:
                longrepr.addsection("failed commands (last first)", "\n\n".join(reversed(failed)))
        return report
