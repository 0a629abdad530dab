"""Run a program with a pseudo-terminal as its stdin, stdout and stderr, and read everything it wrote."""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_on_pty(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, columns: int, rows: int,
               timeout: float = 120) -> tuple[int | None, bytes]:
    """(exit status, output) of ``argv`` on a ``columns`` x ``rows`` pty; status None: killed at ``timeout``."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(list(argv), cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=dict(env),
                            close_fds=True, start_new_session=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1.0)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError as exc:  # EIO: every writer of the pty is gone
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            out += chunk
        try:
            rc: int | None = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
    finally:
        os.close(master)
    return rc, bytes(out)
