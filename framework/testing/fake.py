"""FakeTransport: scripted results for unit tests of pure logic, loud on surprises.

Usage: docs/internals/core.md.
"""

from __future__ import annotations

import hashlib
import io
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Union

from framework import fetchcaps
from framework.errors import HostError
from framework.fetchcaps import FetchCaps
from framework.result import Result
from framework.transport.base import DEFAULT_MAX_OUTPUT, LineQueue

if TYPE_CHECKING:  # pragma: no cover
    from framework.transport.base import Process, Transport

Pattern = Union[str, "re.Pattern[str]"]
Handler = Callable[[str], Result]


@dataclass
class _Rule:
    pattern: Pattern
    rc: int | None = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    raises: BaseException | None = None
    handler: Handler | None = None
    times: int | None = None  # None: unlimited

    def matches(self, text: str) -> bool:
        if isinstance(self.pattern, str):
            return self.pattern == text
        return bool(self.pattern.search(text))


class FakeProcess:
    """A running command, scripted: what it prints, how it answers its stdin, when it ends.

    ``lines`` are printed at once; each ``replies`` entry prints its lines when data containing
    its key is written (once per key); ``on_close`` lines come when stdin is closed. The process
    ends (EOF, then ``wait`` returns) after ``lines`` when ``ends`` is true, after a reply or
    ``on_close`` that fired otherwise, and on ``kill()``. ``lost`` is what the transport reports
    as the broken connection. Everything written is kept in ``written``.
    """

    def __init__(self, host: str, display: str, *, lines: Sequence[str] = (), rc: int = 0, ends: bool = True,
                 replies: Mapping[str, Sequence[str]] | None = None, on_close: Sequence[str] | None = None,
                 lost: str | None = None, stderr: str = "") -> None:
        self.host = host
        self.display = display
        self.rc = rc
        self.stderr = stderr
        self.written = b""
        self.killed = False
        self.stdin_closed = False
        self._lost = lost
        self._replies = {k: list(v) for k, v in (replies or {}).items()}
        self._on_close = list(on_close) if on_close is not None else None
        self._out: list[str] = []
        self._lines = LineQueue()
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._print(lines, end=ends)

    def _print(self, lines: Sequence[str], *, end: bool) -> None:
        for line in lines:
            self._out.append(line + "\n")
            self._lines.feed((line + "\n").encode())
        if end:
            self._end()

    def _end(self) -> None:
        if not self._ended.is_set():
            self._lines.finish()
            self._ended.set()

    @property
    def pgid(self) -> int | None:
        return 4242

    @property
    def lost(self) -> str | None:
        return self._lost

    def write(self, data: bytes) -> None:
        with self._lock:
            if self.stdin_closed or self._ended.is_set():
                raise HostError(self.host, "write to a process whose stdin is closed")
            self.written += data
            fired = [k for k in self._replies if k.encode() in self.written]
            for key in fired:
                self._print(self._replies.pop(key), end=True)

    def close_stdin(self) -> None:
        with self._lock:
            if self.stdin_closed:
                return
            self.stdin_closed = True
            if self._on_close is not None:
                self._print(self._on_close, end=True)

    def readline(self, timeout: float | None = None) -> str | None:
        return self._lines.readline(timeout)

    def poll(self) -> bool:
        return self._ended.is_set()

    def wait(self, timeout: float | None = None) -> Result | None:
        if not self._ended.wait(timeout):
            return None
        return Result(self.host, self.display, None if self.killed else self.rc, "".join(self._out), self.stderr,
                      time.monotonic() - self._start, timed_out=self.killed, display=self.display)

    def kill(self) -> None:
        if not self._ended.is_set():
            self.killed = True
            self._end()

    def close(self) -> None:
        self.close_stdin()


@dataclass
class _SpawnRule:
    pattern: Pattern
    lines: Sequence[str] = ()
    rc: int = 0
    ends: bool = True
    replies: Mapping[str, Sequence[str]] = field(default_factory=dict)
    on_close: Sequence[str] | None = None
    lost: str | None = None
    raises: BaseException | None = None
    times: int | None = None

    def matches(self, text: str) -> bool:
        return self.pattern == text if isinstance(self.pattern, str) else bool(self.pattern.search(text))


class FakeTransport:
    """A transport whose behaviour is scripted; unexpected commands raise AssertionError."""

    def __init__(self, name: str = "fake", *, files: dict[str, bytes] | None = None) -> None:
        self.name = name
        self.rules: list[_Rule] = []
        self.spawn_rules: list[_SpawnRule] = []
        self.calls: list[str] = []
        #: every process ``spawn`` started, in order
        self.processes: list[FakeProcess] = []
        self.files: dict[str, bytes] = dict(files or {})
        self.connected = False
        self.connect_error: BaseException | None = None
        self.corrupt_next_put = False

    def on(
        self, pattern: Pattern, *, rc: int | None = 0, stdout: str = "", stderr: str = "",
        timed_out: bool = False, raises: BaseException | None = None,
        handler: Handler | None = None, times: int | None = None,
    ) -> FakeTransport:
        self.rules.append(_Rule(pattern, rc, stdout, stderr, timed_out, raises, handler, times))
        return self

    def on_spawn(
        self, pattern: Pattern, *, lines: Sequence[str] = (), rc: int = 0, ends: bool = True,
        replies: Mapping[str, Sequence[str]] | None = None, on_close: Sequence[str] | None = None,
        lost: str | None = None, raises: BaseException | None = None, times: int | None = None,
    ) -> FakeTransport:
        """Answer a ``spawn`` whose display matches ``pattern`` with a :class:`FakeProcess` scripted so."""
        self.spawn_rules.append(_SpawnRule(pattern, lines, rc, ends, dict(replies or {}), on_close, lost, raises,
                                           times))
        return self

    def spawn(self, line: str, *, display: str, max_output: int = DEFAULT_MAX_OUTPUT) -> FakeProcess:
        self.connect()
        self.calls.append(display)
        for rule in self.spawn_rules:
            if not rule.matches(display):
                continue
            if rule.times is not None:
                if rule.times <= 0:
                    continue
                rule.times -= 1
            if rule.raises is not None:
                raise rule.raises
            proc = FakeProcess(self.name, display, lines=rule.lines, rc=rule.rc, ends=rule.ends,
                               replies=rule.replies, on_close=rule.on_close, lost=rule.lost)
            self.processes.append(proc)
            return proc
        raise AssertionError(f"FakeTransport({self.name}): unexpected spawn {display!r}")

    def connect(self) -> None:
        if self.connect_error is not None:
            raise self.connect_error
        self.connected = True

    def close(self) -> None:
        self.connected = False

    def run(self, line: str, *, timeout: float | None, display: str, max_output: int = DEFAULT_MAX_OUTPUT,
            cancel: threading.Event | None = None) -> Result:
        self.connect()
        self.calls.append(display)
        for rule in self.rules:
            if rule.matches(display):
                if rule.times is not None:
                    if rule.times <= 0:
                        continue
                    rule.times -= 1
                if rule.raises is not None:
                    raise rule.raises
                if rule.handler is not None:
                    return rule.handler(display)
                return Result(self.name, line, None if rule.timed_out else rule.rc, rule.stdout,
                              rule.stderr, 0.0, timed_out=rule.timed_out, display=display)
        builtin = self._builtin(line, display)
        if builtin is not None:
            return builtin
        raise AssertionError(f"FakeTransport({self.name}): unexpected command {display!r}")

    # -- in-memory files ------------------------------------------------------
    def _builtin(self, line: str, display: str) -> Result | None:
        try:
            argv = shlex.split(line)
        except ValueError:
            return None
        if argv[:1] == ["mkdir"]:
            return self._ok(line, display)
        if argv[:2] == ["sha256sum", "--"] and len(argv) == 3:
            data = self.files.get(argv[2])
            if data is None:
                return Result(self.name, line, 1, "", f"sha256sum: {argv[2]}: No such file\n", display=display)
            return self._ok(line, display, f"{hashlib.sha256(data).hexdigest()}  {argv[2]}\n")
        if argv[:3] == ["mv", "-f", "--"] and len(argv) == 5:
            self.files[argv[4]] = self.files.pop(argv[3])
            return self._ok(line, display)
        if argv[:3] == ["rm", "-f", "--"]:
            for p in argv[3:]:
                self.files.pop(p, None)
            return self._ok(line, display)
        return None

    def _ok(self, line: str, display: str, stdout: str = "") -> Result:
        return Result(self.name, line, 0, stdout, "", 0.0, display=display)

    def put(self, local: Path, remote: str, progress: Callable[[int, int], None] | None = None) -> None:
        self.connect()
        data = Path(local).read_bytes()
        if self.corrupt_next_put:
            self.corrupt_next_put = False
            data = data[:-1] + bytes([data[-1] ^ 0xFF]) if data else b"x"
        self.files[remote] = data
        if progress is not None:
            progress(len(data), len(data))

    def get(self, remote: str, local: Path, *, cap: FetchCaps | None = None) -> None:
        self.connect()
        if remote not in self.files:
            raise HostError(self.name, f"no such file {remote}")
        with fetchcaps.open_private(Path(local)) as out:
            fetchcaps.copy_bounded(io.BytesIO(self.files[remote]).read, out, host=self.name, remote=remote,
                                   cap=cap or fetchcaps.caps())


if TYPE_CHECKING:  # the fakes satisfy the protocols they stand in for (checked by mypy)
    _transport: Transport = FakeTransport()
    _process: Process = FakeProcess("fake", "")
