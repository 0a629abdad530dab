"""Local transport: the same contract as SSH, run as a subprocess on this machine.

Useful for checks on the controller itself and as the reference behaviour for
timeouts and bounded output in unit tests: the command runs in a new session,
a timeout kills that whole process group (TERM, then KILL).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from framework import fetchcaps
from framework.errors import Cancelled
from framework.fetchcaps import FetchCaps
from framework.result import Result
from framework.transport.base import DEFAULT_MAX_OUTPUT, LineQueue, OutputTail

KILL_GRACE = 1.0


class LocalTransport:
    """Runs shell lines with ``/bin/sh -c`` on the controller."""

    def __init__(self, name: str = "localhost") -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<LocalTransport {self.name}>"

    def connect(self) -> None:
        return None

    def close(self) -> None:
        return None

    def run(self, line: str, *, timeout: float | None, display: str, max_output: int = DEFAULT_MAX_OUTPUT,
            cancel: threading.Event | None = None) -> Result:
        start = time.monotonic()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", line], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
        out, err = OutputTail(max_output), OutputTail(max_output)
        readers = [
            threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True),
            threading.Thread(target=_pump, args=(proc.stderr, err), daemon=True),
        ]
        for t in readers:
            t.start()
        timed_out = False
        try:
            _wait(proc, timeout, cancel, self.name)
        except Cancelled:  # as on a timeout: the whole group killed, the process reaped (bounded)
            kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_GRACE + 10)
            raise
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid)
            try:  # bounded: a process stuck in the kernel (D state) survives even KILL for a while
                proc.wait(timeout=KILL_GRACE + 10)
            except subprocess.TimeoutExpired:
                pass
        except KeyboardInterrupt:
            kill_group(proc.pid)
            raise
        for t in readers:
            t.join(timeout=KILL_GRACE + 1)
        rc = None if timed_out else proc.returncode
        sig = None
        if rc is not None and rc < 0:
            sig, rc = signal.Signals(-rc).name, 128 - rc
        return Result(
            host=self.name, command=line, rc=rc, stdout=out.text(), stderr=err.text(),
            duration=time.monotonic() - start, timed_out=timed_out, signal=sig,
            truncated=out.truncated or err.truncated, display=display,
        )

    def spawn(self, line: str, *, display: str, max_output: int = DEFAULT_MAX_OUTPUT) -> LocalProcess:
        return LocalProcess(self.name, line, display, max_output)

    def put(self, local: Path, remote: str, progress: Callable[[int, int], None] | None = None) -> None:
        # a new private file, never through a symlink (as SshTransport.put: O_CREAT|O_EXCL)
        fd = os.open(remote, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(local, "rb") as src, os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst)

    def get(self, remote: str, local: Path, *, cap: FetchCaps | None = None) -> None:
        with open(remote, "rb") as src, fetchcaps.open_private(local) as out:
            fetchcaps.copy_bounded(src.read, out, host=self.name, remote=remote, cap=cap or fetchcaps.caps())


def _wait(proc: subprocess.Popen[bytes], timeout: float | None, cancel: threading.Event | None,
          name: str) -> None:
    """``proc.wait(timeout)``, looking at ``cancel`` every 50 ms (``Cancelled`` when it is set)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
        try:
            proc.wait(timeout=step)
            return
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                raise
        if cancel is not None and cancel.is_set():
            raise Cancelled(name, "interrupted: killed the command")


def _pump(stream: io.BufferedReader, tail: OutputTail, lines: LineQueue | None = None) -> None:
    for chunk in iter(lambda: stream.read1(65536), b""):
        tail.feed(chunk)
        if lines is not None:
            lines.feed(chunk)
    stream.close()
    if lines is not None:
        lines.finish()


class LocalProcess:
    """A running local command in its own session (``LocalTransport.spawn``)."""

    def __init__(self, host: str, line: str, display: str, max_output: int) -> None:
        self.host = host
        self.display = display
        self._line = line
        self._start = time.monotonic()
        self._proc = subprocess.Popen(["/bin/sh", "-c", line], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, start_new_session=True)
        self._out, self._err, self._lines = OutputTail(max_output), OutputTail(max_output), LineQueue()
        self._killed = False
        self._readers = [
            threading.Thread(target=_pump, args=(self._proc.stdout, self._out, self._lines), daemon=True),
            threading.Thread(target=_pump, args=(self._proc.stderr, self._err), daemon=True),
        ]
        for t in self._readers:
            t.start()

    @property
    def pgid(self) -> int | None:
        return self._proc.pid

    @property
    def lost(self) -> str | None:
        return None  # no connection to lose

    def write(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def close_stdin(self) -> None:
        if self._proc.stdin and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:
                pass

    def readline(self, timeout: float | None = None) -> str | None:
        return self._lines.readline(timeout)

    def poll(self) -> bool:
        return self._proc.poll() is not None

    def wait(self, timeout: float | None = None) -> Result | None:
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.close_stdin()
        for t in self._readers:
            t.join(KILL_GRACE + 1)
        rc = self._proc.returncode
        sig = None
        if rc < 0:
            sig, rc = signal.Signals(-rc).name, 128 - rc
        return Result(self.host, self._line, None if self._killed else rc, self._out.text(), self._err.text(),
                      time.monotonic() - self._start, timed_out=self._killed, signal=sig,
                      truncated=self._out.truncated or self._err.truncated, display=self.display)

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._killed = True
            kill_group(self._proc.pid)

    def close(self) -> None:
        self.close_stdin()


def group_alive(pgid: int) -> bool:
    """Does process group ``pgid`` have a member that is not a zombie?"""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def kill_group(pgid: int, grace: float = KILL_GRACE) -> None:
    """TERM the process group we started, then KILL it after ``grace`` seconds."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.02)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
