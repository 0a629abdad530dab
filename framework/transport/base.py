"""The transport protocol and the bounded output buffer every transport shares."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from framework.commands import shell_name
from framework.fetchcaps import FetchCaps
from framework.remote.protocol import PGID_MARKER
from framework.result import Result

#: default bytes kept per stream (the tail); the rest is counted and dropped
DEFAULT_MAX_OUTPUT = 4 * 1024 * 1024


@runtime_checkable
class Transport(Protocol):
    """What a ``Host`` needs from the way it reaches its machine.

    ``run`` executes one complete shell line (already built and quoted by
    ``framework.commands``) and returns a ``Result``; when ``timeout`` passes it
    kills the command's whole process group on the machine and returns a result
    with ``timed_out=True``. ``put``/``get`` copy one file as-is (verification
    is the ``Host``'s job).
    """

    name: str

    def connect(self) -> None: ...

    def run(self, line: str, *, timeout: float | None, display: str, max_output: int) -> Result: ...

    def spawn(self, line: str, *, display: str, max_output: int) -> Process: ...

    def put(self, local: Path, remote: str, progress: Callable[[int, int], None] | None = None) -> None: ...

    def get(self, remote: str, local: Path, *, cap: FetchCaps | None = None) -> None:
        """Copy ``remote`` into the new file ``local`` (mode 0600), counting bytes as they are read:
        raises ``FetchCapError`` past ``cap``'s byte or time cap, with what came so far in ``local``."""
        ...

    def close(self) -> None: ...


class OutputTail:
    """Keeps the last ``limit`` bytes of a stream and counts everything fed.

    Memory stays bounded however much a command prints (a 50 MB stderr costs
    ``limit`` bytes). With ``strip_pgid`` the first line, when it carries our
    process-group marker, is parsed into ``pgid`` (and the login shell's name into
    ``shell``) and not kept.
    """

    def __init__(self, limit: int = DEFAULT_MAX_OUTPUT, *, strip_pgid: bool = False) -> None:
        self.limit = max(1, limit)
        self.total = 0
        self.pgid: int | None = None
        self.shell: str | None = None
        self._buf = bytearray()
        self._head: bytearray | None = bytearray() if strip_pgid else None

    def feed(self, data: bytes) -> None:
        if self._head is not None:
            self._head += data
            nl = self._head.find(b"\n")
            if nl < 0 and len(self._head) < 512:
                return
            head, self._head = bytes(self._head), None
            first, _, rest = head.partition(b"\n") if nl >= 0 else (head, b"", b"")
            marker = PGID_MARKER.encode()
            pid, _, arg0 = first[len(marker):].partition(b" ")
            if nl >= 0 and first.startswith(marker) and pid.isdigit():
                self.pgid = int(pid)
                self.shell = shell_name(arg0.decode(errors="replace")) if arg0 else None
                data = rest
            else:
                data = head
        self.total += len(data)
        self._buf += data
        if len(self._buf) > 2 * self.limit:
            del self._buf[: len(self._buf) - self.limit]

    def close(self) -> None:
        """Flush a pending head that never completed a line."""
        if self._head is not None:
            head, self._head = bytes(self._head), None
            self.feed(head)

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        data = self._buf[-self.limit :]
        return bytes(data).decode("utf-8", errors="replace")


class Process(Protocol):
    """A command started with ``spawn``: still running, with stdin and line-wise stdout.

    ``readline(timeout)`` returns the next stdout line ('' at EOF, ``None`` on
    timeout); ``wait(timeout)`` returns the final ``Result`` (``None`` when still
    running at the timeout); ``kill()`` ends the command's whole process group.
    Closing stdin (``close_stdin``) is how a supervisor learns the controller is gone.
    """

    host: str
    display: str

    @property
    def pgid(self) -> int | None: ...

    @property
    def lost(self) -> str | None:
        """Why the connection under the command broke while it ran (None while it holds)."""
        ...

    def write(self, data: bytes) -> None: ...

    def close_stdin(self) -> None: ...

    def readline(self, timeout: float | None = None) -> str | None: ...

    def poll(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> Result | None: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...


class LineQueue:
    """Thread-safe stdout line splitter shared by the ``Process`` implementations."""

    def __init__(self) -> None:
        import threading

        self._cond = threading.Condition()
        self._lines: list[str] = []
        self._partial = b""
        self._eof = False

    def feed(self, data: bytes) -> None:
        with self._cond:
            self._partial += data
            *complete, self._partial = self._partial.split(b"\n")
            for raw in complete:
                self._lines.append(raw.decode("utf-8", errors="replace") + "\n")
            if complete:
                self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            if self._partial:
                self._lines.append(self._partial.decode("utf-8", errors="replace"))
                self._partial = b""
            self._eof = True
            self._cond.notify_all()

    def readline(self, timeout: float | None = None) -> str | None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._lines or self._eof, timeout):
                return None
            return self._lines.pop(0) if self._lines else ""
