"""Local transport: the same contract as SSH, run as a subprocess on this machine.

Useful for checks on the controller itself and as the reference behaviour for
timeouts and bounded output in unit tests: the command runs in a new session,
a timeout kills that whole process group (TERM, then KILL).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from framework.result import Result
from framework.transport.base import DEFAULT_MAX_OUTPUT, OutputTail

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

    def run(self, line: str, *, timeout: float | None, display: str, max_output: int = DEFAULT_MAX_OUTPUT) -> Result:
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
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid)
            proc.wait()
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

    def put(self, local: Path, remote: str) -> None:
        shutil.copyfile(local, remote)

    def get(self, remote: str, local: Path) -> None:
        shutil.copyfile(remote, local)


def _pump(stream, tail: OutputTail) -> None:  # type: ignore[no-untyped-def]
    for chunk in iter(lambda: stream.read1(65536), b""):
        tail.feed(chunk)
    stream.close()


def kill_group(pgid: int, grace: float = KILL_GRACE) -> None:
    """TERM the process group we started, then KILL it after ``grace`` seconds."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
