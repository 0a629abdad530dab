"""LocalTransport: the transport contract with a real process tree, no network."""

from __future__ import annotations

import os
import time

from framework.hosts import Host
from framework.transport.local import LocalTransport


def host() -> Host:
    return Host("local", LocalTransport("local"), command_timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "pids"
    start = time.monotonic()
    res = host().run(f"sleep 97 & echo $! > {pidfile}; sleep 98", timeout=1)
    elapsed = time.monotonic() - start
    assert res.timed_out and res.rc is None
    assert elapsed < 3
    bg = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while _alive(bg) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(bg)


def test_large_stderr_neither_deadlocks_nor_bloats():
    res = host().run("head -c 50000000 /dev/zero | tr '\\0' e >&2; echo done", max_output=1 << 20)
    assert res.ok and res.stdout == "done\n"
    assert res.truncated and len(res.stderr) == 1 << 20


def test_signal_is_reported():
    res = host().run("kill -SEGV $$")
    assert res.signal == "SIGSEGV" and res.rc == 139
