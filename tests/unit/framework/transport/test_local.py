"""LocalTransport: the transport contract with a real process tree, no network."""

from __future__ import annotations

import os
import time

from framework.commands import ShellScript
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
    res = host().run(ShellScript(f"sleep 97 & echo $! > {pidfile}; sleep 98"), timeout=1)
    elapsed = time.monotonic() - start
    assert res.timed_out and res.rc is None
    assert elapsed < 3
    bg = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while _alive(bg) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(bg)


def test_large_stderr_neither_deadlocks_nor_bloats():
    res = host().run(ShellScript("head -c 50000000 /dev/zero | tr '\\0' e >&2; echo done"), max_output=1 << 20)
    assert res.ok and res.stdout == "done\n"
    assert res.truncated and len(res.stderr) == 1 << 20


def test_signal_is_reported():
    res = host().run(ShellScript("kill -SEGV $$"))
    assert res.signal == "SIGSEGV" and res.rc == 139


def test_spawn_streams_lines_takes_stdin_and_reports_exit():
    proc = host().spawn(ShellScript("echo first; while read l; do echo got:$l; done; echo end; exit 4"))
    assert proc.readline(5) == "first\n"
    proc.write(b"a b\n")
    assert proc.readline(5) == "got:a b\n"
    proc.close_stdin()
    assert proc.readline(5) == "end\n"
    assert proc.readline(5) == ""
    res = proc.wait(5)
    assert res is not None and res.rc == 4


def test_spawn_kill_ends_the_group_quickly(tmp_path):
    pidfile = tmp_path / "pid"
    proc = host().spawn(ShellScript(f"sleep 91 & echo $! > {pidfile}; echo ready; wait"))
    assert proc.readline(5) == "ready\n"
    start = time.monotonic()
    proc.kill()
    assert time.monotonic() - start < 0.8  # no waiting out the grace on zombies
    res = proc.wait(5)
    assert res is not None and res.timed_out
    assert not _alive(int(pidfile.read_text()))


def test_kill_group_script_in_a_real_shell():
    import subprocess

    from framework import commands

    victim = subprocess.Popen(["/bin/sh", "-c", "trap '' TERM; sleep 93 & sleep 94; wait"], start_new_session=True)
    time.sleep(0.2)
    start = time.monotonic()
    subprocess.run(["/bin/sh", "-c", commands.kill_group(victim.pid, grace=0.5)], check=True, timeout=10)
    victim.wait(5)
    assert time.monotonic() - start < 2  # TERM ignored by the shell: KILL after the grace
    from framework.transport.local import group_alive

    assert not group_alive(victim.pid)
