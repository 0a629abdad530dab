"""SIGTERM and SIGHUP under pytest do what Ctrl-C does; an infrastructure failure seen on a
thread ends the session.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

log = logging.getLogger("camit")

#: the signals that end a session as Ctrl-C does
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
SIGNALS_KEY = pytest.StashKey["Signals"]()


class Signals:
    """This process's SIGTERM/SIGHUP handlers (``config.stash[SIGNALS_KEY]``); inert until :meth:`install`."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        #: the first stop signal received (its number), None before
        self.received: int | None = None
        #: (reason, exit status) a thread asked the main thread to end the session with
        self.pending: tuple[str, int] | None = None
        self.workers: list[int] = []
        #: the tests started and not finished (``pytest_runtest_logstart``/``logfinish``), in start order
        self.running: list[str] = []
        self._finishing = False
        self._main = threading.main_thread().ident

    @property
    def installed(self) -> bool:
        return bool(self.previous)

    def install(self) -> None:
        """Handle SIGTERM and SIGHUP (main thread only: elsewhere Python cannot, and nothing is changed)."""
        if self.installed or threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        """Put the handlers found at :meth:`install` back."""
        for sig, old in self.previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self.previous = {}

    def add_worker(self, pid: int | None) -> None:
        """An xdist worker of this controller: it gets every stop signal the controller gets."""
        if pid:
            self.workers.append(pid)

    # pytest hooks (the object is registered as a plugin): the tests started and not finished
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.running.append(nodeid)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if nodeid in self.running:
            self.running.remove(nodeid)

    def end_session(self, reason: str, code: int) -> None:
        """From any thread: end the session in the main thread with ``pytest.exit(reason, returncode=code)``.

        Without the handlers (not installed) only ``pending`` is set: the caller's error is raised
        to the next test instead.
        """
        if self._ending:
            return
        self.pending = (reason, code)
        if self._main is not None and self._handling_sigterm:
            signal.pthread_kill(self._main, signal.SIGTERM)  # wakes a sleep or a wait; our handler runs

    @property
    def _ending(self) -> bool:
        """Whether the session is ending already: an end pending, a signal received, finishing."""
        return self.pending is not None or self.received is not None or self._finishing

    @property
    def _handling_sigterm(self) -> bool:
        """Whether our handler is SIGTERM's (installed, and not replaced since)."""
        return self.installed and signal.getsignal(signal.SIGTERM) == self._handle

    @property
    def received_name(self) -> str:
        return signal.Signals(self.received).name if self.received else ""

    def finishing(self) -> None:
        """The session is finishing (teardown, reports): a signal now is noted, never raised."""
        self._finishing = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._finishing:
            log.warning("camit: %s while finishing the session: the reports are being written",
                        signal.Signals(signum).name)
            return
        if self.received is not None:
            log.warning("camit: %s again: already stopping, every launch is being torn down",
                        signal.Signals(signum).name)
            return
        self.received = signum
        pending = self.pending
        if pending is None:
            self._forward(signum)
            raise KeyboardInterrupt(f"{signal.Signals(signum).name}: stopping as for Ctrl-C")
        raise pytest.exit.Exception(pending[0], returncode=pending[1])

    def _forward(self, signum: int) -> None:
        for pid in self.workers:
            try:
                os.kill(pid, signum)
            except OSError:  # that worker is gone already
                pass


def signals_of(config: pytest.Config) -> Signals | None:
    return config.stash.get(SIGNALS_KEY, None)


def name_cut_cases(junit: Path, running: list[str], why: str) -> int:
    """Give pytest's JUnit file back its schema after an interrupt; returns how many cases were repaired.

    A session stopped during a test (Ctrl-C, SIGTERM, ``pytest.exit``) leaves that test in pytest's own
    ``junit.xml`` as ``<testcase time=".."/>`` with no ``name`` (junit-10.xsd requires one, and
    Jenkins' ``junit`` step then drops the file). Each such case gets the name of a test that had
    started and not finished (``running``, in start order), pytest's classname, and an ``<error>``
    saying why it stopped.
    """
    try:
        tree = ET.parse(junit)
    except (OSError, ET.ParseError):
        return 0
    left = list(running)
    nameless = list(_nameless_cases(tree.getroot()))
    for suite, case in nameless:
        _name_case(suite, case, left.pop(0) if left else "unknown::interrupted", why)
    if nameless:
        tree.write(junit, encoding="utf-8", xml_declaration=True)
    return len(nameless)


def _nameless_cases(root: ET.Element) -> Iterator[tuple[ET.Element, ET.Element]]:
    """Each ``<testcase>`` without a name, with its ``<testsuite>``, in file order."""
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            if not case.get("name"):
                yield suite, case


def _bump(suite: ET.Element, attribute: str) -> None:
    """Add one to ``suite``'s counter ``attribute`` (absent: 0)."""
    suite.set(attribute, str(int(suite.get(attribute) or 0) + 1))


def _name_case(suite: ET.Element, case: ET.Element, nodeid: str, why: str) -> None:
    """Name the nameless ``case`` after test ``nodeid`` and give it an ``<error>`` saying ``why``."""
    path, _, rest = nodeid.partition("::")
    parts = [*path.removesuffix(".py").replace("/", ".").split("."), *rest.split("::")]
    case.set("classname", ".".join(p for p in parts[:-1] if p))
    case.set("name", parts[-1] or nodeid)
    error = ET.SubElement(case, "error", message=why)
    error.text = why
    _bump(suite, "errors")
    _bump(suite, "tests")
