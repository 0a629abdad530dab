"""The transport protocol and the bounded output buffer every transport shares."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from framework.commands import shell_name
from framework.fetchcaps import FetchCaps
from framework.remote.protocol import PGID_MARKER
from framework.result import Result

#: default bytes kept per stream (the tail); the rest is counted and dropped
DEFAULT_MAX_OUTPUT = 4 * 1024 * 1024
#: how much of a command's first stderr is searched for the process-group marker (the login shell's
#: noise before it — profile scripts, setlocale warnings — is kept as the command's stderr)
HEAD_LIMIT = 64 * 1024


def _find_marker(head: bytes | bytearray) -> tuple[int, int, int, str | None] | None:
    """(start, end, pgid, shell) of the first complete marker line in ``head``, wherever it is."""
    marker = PGID_MARKER.encode()
    at = 0
    while True:
        i = head.find(marker, at)
        if i < 0:
            return None
        nl = head.find(b"\n", i)
        if nl < 0:
            return None  # not complete yet
        at = nl
        if i and head[i - 1:i] != b"\n":
            continue  # only at the start of a line
        pid, _, arg0 = bytes(head[i + len(marker):nl]).partition(b" ")
        if pid.isdigit():
            shell = shell_name(arg0.decode(errors="replace")) if arg0 else None
            return i, nl + 1, int(pid), shell


@runtime_checkable
class Transport(Protocol):
    """What a ``Host`` needs from the way it reaches its machine.

    ``run`` executes one complete shell line (already built and quoted by
    ``framework.commands``) and returns a ``Result``; when ``timeout`` passes it
    kills the command's whole process group on the machine and returns a result
    with ``timed_out=True``; when ``cancel`` is set meanwhile it kills the group the
    same way at once and raises ``Cancelled``. ``put``/``get`` copy one file as-is (verification
    is the ``Host``'s job).
    """

    name: str

    def connect(self) -> None: ...

    def run(self, line: str, *, timeout: float | None, display: str, max_output: int,
            cancel: threading.Event | None = None) -> Result: ...

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
    ``limit`` bytes). With ``strip_pgid`` the line carrying our process-group marker,
    wherever it is in the first :data:`HEAD_LIMIT` bytes (login-shell noise may come
    first), is parsed into ``pgid`` (and the login shell's name into ``shell``) and not kept.
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
            found = _find_marker(self._head)
            if found is None and len(self._head) < HEAD_LIMIT:
                return  # the marker may still come: login-shell noise (a setlocale warning) can precede it
            head, self._head = bytes(self._head), None
            if found is not None:
                begin, end, self.pgid, self.shell = found
                data = head[:begin] + head[end:]  # the noise is the command's stderr; the marker line is ours
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


#: the longest stdout line a spawned process's :class:`LineQueue` keeps (the supervisor's records are short)
MAX_LINE = 64 * 1024
#: the most lines a :class:`LineQueue` holds unread
MAX_QUEUED = 100_000


class LineQueue:
    """Thread-safe stdout line splitter shared by the ``Process`` implementations, bounded: a line longer
    than :data:`MAX_LINE` bytes keeps its first :data:`MAX_LINE` (the rest is dropped up to its newline,
    and the line ends in a ``[camit: N bytes dropped]`` note), and at most :data:`MAX_QUEUED` lines wait
    to be read (later ones are dropped and counted in ``dropped``). Each byte is looked at once: what a
    host prints without a newline costs linear time, never quadratic."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._lines: collections.deque[str] = collections.deque()
        self._partial = bytearray()
        self._cut = 0  # bytes of the current line dropped past MAX_LINE
        self._eof = False
        #: lines dropped because MAX_QUEUED were waiting
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        with self._cond:
            added = False
            start = 0
            while start < len(data):
                end = data.find(b"\n", start)
                stop = len(data) if end < 0 else end
                room = max(0, MAX_LINE - len(self._partial))
                self._partial += data[start:min(stop, start + room)]
                self._cut += max(0, stop - start - room)
                if end < 0:
                    break
                added |= self._push("\n")
                start = end + 1
            if added:
                self._cond.notify_all()

    def _push(self, ending: str) -> bool:
        text = self._partial.decode("utf-8", errors="replace")
        if self._cut:
            text += f" [camit: {self._cut} bytes dropped]"
        self._partial, self._cut = bytearray(), 0
        if len(self._lines) >= MAX_QUEUED:
            self.dropped += 1
            return False
        self._lines.append(text + ending)
        return True

    def finish(self) -> None:
        with self._cond:
            if self._partial or self._cut:
                self._push("")
            self._eof = True
            self._cond.notify_all()

    def readline(self, timeout: float | None = None) -> str | None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._lines or self._eof, timeout):
                return None
            return self._lines.popleft() if self._lines else ""
