"""camit's progress under pytest: its events on the terminal, and ``camit.log`` in the run
folder.

Design (verbosity, xdist workers): docs/internals/plugin.md.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from framework.console import LOG_DATEFMT, LOG_FORMAT, printable

if TYPE_CHECKING:
    from framework.plugin.context import RunContext
    from framework.records.folder import RunDir

PROGRESS_KEY = pytest.StashKey["Progress"]()
#: the report section a worker's events of one test phase travel in (``Captured <name> <when>``)
SECTION = "camit"
LOGGER = "camit"
#: a record attribute: for camit.log only, the terminal has it already in another form (``extra={QUIET: True}``)
QUIET = "camit_quiet"


def is_failure(message: str) -> bool:
    """An event ``-q`` still shows: a failure."""
    return "FAILED" in message or "failed" in message


def event_line(record: logging.LogRecord) -> str:
    """``HH:MM:SS host: message`` (escaped, continuation lines indented) of an event or a record."""
    stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
    event = getattr(record, "camit_event", None)
    if isinstance(event, tuple) and len(event) == 2:
        text = f"{printable(str(event[0]))}: {printable(str(event[1]))}"
    else:
        text = f"{record.levelname.lower()}: {printable(record.getMessage())}"
    return f"{stamp} {text}".replace("\n", "\n    ")


class _Tap(logging.Handler):
    """The camit logger's records to the progress (terminal or, in a worker, the phase's section)."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.DEBUG)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.progress.record(record)
        except Exception:  # noqa: BLE001 - progress must never break the run
            self.handleError(record)


class Progress:
    """This process's progress output (``config.stash[PROGRESS_KEY]``), a plugin while registered."""

    def __init__(self, config: pytest.Config, ctx: RunContext) -> None:
        self.config = config
        self.ctx = ctx
        self.verbosity = int(config.getoption("verbose") or 0)
        self.worker_id = str(ctx.worker.get("workerid", "")) if ctx.worker is not None else ""
        self.lock = threading.Lock()
        self.phase: list[str] = []  # a worker: the event lines of the running test phase
        self.file: logging.FileHandler | None = None
        self.tap: _Tap | None = None
        self.old_level = logging.NOTSET

    # ------------------------------------------------------------------ logging
    def attach(self) -> None:
        """Tap the camit logger (level DEBUG while camit is in use) and open camit.log in the run folder."""
        logger = logging.getLogger(LOGGER)
        self.old_level = logger.level
        logger.setLevel(logging.DEBUG)
        self.tap = _Tap(self)
        logger.addHandler(self.tap)
        self.open_file()

    def open_file(self) -> None:
        if self.file is not None:
            return
        rundir = self._rundir()
        if rundir is None or not rundir.path.is_dir():
            return
        name = f"camit-{self.worker_id}.log" if self.worker_id else "camit.log"
        self.file = logging.FileHandler(rundir.path / name, encoding="utf-8", delay=True)
        self.file.setLevel(logging.DEBUG)
        self.file.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATEFMT))
        logging.getLogger(LOGGER).addHandler(self.file)

    def _rundir(self) -> RunDir | None:
        """The run folder; a worker knows the controller's from its workerinput at once."""
        if self.worker_id and self.ctx.rundir is None:
            return self.ctx.plan_rundir()
        return self.ctx.rundir

    def detach(self) -> None:
        logger = logging.getLogger(LOGGER)
        for handler in (self.tap, self.file):
            if handler is not None:
                logger.removeHandler(handler)
                handler.close()
        self.tap = self.file = None
        logger.setLevel(self.old_level)

    # ------------------------------------------------------------------ what is shown
    def shown(self, record: logging.LogRecord) -> bool:
        if getattr(record, QUIET, False):
            return False
        event = getattr(record, "camit_event", None)
        if self.verbosity < 0:
            return record.levelno >= logging.ERROR or (event is not None and is_failure(str(event[1])))
        if event is not None or record.levelno >= logging.WARNING:
            return True
        return self._detail_shown(record.levelno)

    def _detail_shown(self, level: int) -> bool:
        """Whether a record below WARNING (no event) shows: INFO with ``-v``, DEBUG from ``-vv``."""
        if self.verbosity < 1:
            return False
        return level >= (logging.INFO if self.verbosity == 1 else logging.DEBUG)

    def record(self, record: logging.LogRecord) -> None:
        if not self.shown(record):
            return
        line = event_line(record)
        if self.worker_id:
            with self.lock:
                self.phase.append(line)
        else:
            self.write(f"camit: {line}")

    def write(self, line: str) -> None:
        """One line on the terminal, on a line of its own, with pytest's capture suspended meanwhile."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        with self.lock:
            suspended = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
            with suspended:
                reporter.ensure_newline()
                if getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):
                    reporter.write("\n")  # -q: pytest's dots have no path, so write_line would append to them
                reporter.write_line(line)

    # ------------------------------------------------------------------ a worker's phases -> report sections
    def _section(self, item: pytest.Item, when: str) -> None:
        with self.lock:
            lines, self.phase = self.phase, []
        if lines:
            item.add_report_section(when, SECTION, "\n".join(lines) + "\n")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            if self.worker_id:
                self._section(item, "setup")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            if self.worker_id:
                self._section(item, "call")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: Any) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            if self.worker_id:
                self._section(item, "teardown")

    # ------------------------------------------------------------------ the controller: a worker's events
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # xdist: the worker the report came from
        if self.worker_id or node is None:
            return
        wanted = f"Captured {SECTION} {report.when}"
        worker = getattr(getattr(node, "gateway", None), "id", "?")
        for name, text in report.sections:
            if name == wanted:
                self._forward(worker, text)

    def _forward(self, worker: str, text: str) -> None:
        """A worker's captured event lines, tagged with it: into camit.log, on the terminal."""
        self.open_file()
        for line in text.splitlines():
            if line.strip():
                forwarded = f"[{worker}] {line}"
                if self.file is not None:
                    self.file.handle(logging.makeLogRecord({"name": LOGGER, "levelno": logging.INFO,
                                                            "levelname": "INFO", "msg": forwarded}))
                self.write(f"camit: {forwarded}")


def start(config: pytest.Config, ctx: RunContext) -> Progress:
    """Progress for this process (idempotent): registered as a plugin, the camit logger tapped."""
    progress = config.stash.get(PROGRESS_KEY, None)
    if progress is None:
        progress = Progress(config, ctx)
        config.stash[PROGRESS_KEY] = progress
        config.pluginmanager.register(progress, "camit-progress")
    if ctx.active and progress.tap is None:
        progress.attach()
    elif ctx.active:
        progress.open_file()  # the run folder may exist now
    return progress


def stop(config: pytest.Config) -> None:
    """Close camit.log and untap the logger (before the run folder is scrubbed)."""
    progress = config.stash.get(PROGRESS_KEY, None)
    if progress is not None:
        progress.detach()
