#!/usr/bin/env python3
"""camit supervisor: runs one node's torchrun and guarantees it ends, leaving nothing behind.

Shipped to the hosts by ``framework.launch``; standard library only.

    supervisor.py --run-id ID --status-dir DIR [--deadline S] [--grace S]
                  [--heartbeat S] [--silence S] -- <command...>

It starts the command in a new session with ``CAMIT_RUN_ID=<ID>`` in its
environment (torchrun puts every worker in a session of its own, so a group kill
alone would miss them; the tag is inherited by workers and their children), then
reports on stdout, one line each:

    STARTED <pid>              the command is running (its pgid is its pid)
    HB                         every --heartbeat seconds while running
    RANK <r> <exit|SIG> <...>  as soon as a rank's status file appears (from rankwrap)
    EXIT <rc>                  the command ended by itself (rc, or -signal)
    KILLED <why>               we ended it: stdin-eof | stdin-kill | silence | deadline | signal
    SWEPT <n>                  tagged processes we had to kill after the command ended
    DONE                       nothing of the run is left (the last line)

It ends the run — TERM to the command's group and to every process carrying the
tag, KILL after --grace — when stdin reaches EOF (the controller's SSH channel
closed), when a line ``KILL`` arrives, when no line at all (``HB`` from the
controller) arrived for --silence seconds (a link that went down), at its own
--deadline, or on TERM/INT/HUP. Processes are found by the tag in
``/proc/<pid>/environ`` and by the group we created: never by name or command line.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import select
import signal
import subprocess
import sys
import time

# the protocol's words (framework.remote.protocol; this file ships alone, a unit test keeps them equal)
TAG = "CAMIT_RUN_ID"
STARTED = "STARTED"
HEARTBEAT = "HB"
RANK = "RANK"
RANK_EXIT = "exit"
RANK_SIGNAL = "SIG"
EXIT = "EXIT"
KILLED = "KILLED"
SWEPT = "SWEPT"
DONE = "DONE"
KILL = "KILL"
KILLED_REASONS = ("stdin-eof", "stdin-kill", "silence", "deadline", "signal")
RANK_STEM = "rank"
TORCHRUN_LOG = "torchrun.log"


def say(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass  # the controller is gone; we carry on cleaning up


def tagged(run_id: str) -> list[int]:
    """Pids (not ours) whose environment carries ``CAMIT_RUN_ID=<run_id>``."""
    want = f"{TAG}={run_id}".encode()
    me = os.getpid()
    found = []
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(d[6:])
        if pid == me:
            continue
        try:
            with open(f"{d}/environ", "rb") as fh:
                if want in fh.read().split(b"\0"):
                    with open(f"{d}/stat") as st:
                        if st.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                            found.append(pid)
        except OSError:
            continue
    return found


def group_alive(pgid: int) -> bool:
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def terminate(run_id: str, pgid: int | None, grace: float) -> int:
    """TERM the group and the tagged processes, KILL what is left after ``grace``; return how many."""
    victims = set(tagged(run_id))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if pgid is not None:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in tagged(run_id):
            victims.add(pid)
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if sig == signal.SIGKILL:
            break
        end = time.monotonic() + grace
        while time.monotonic() < end:
            if not tagged(run_id) and (pgid is None or not group_alive(pgid)):
                return len(victims)
            time.sleep(0.05)
    end = time.monotonic() + 2
    while time.monotonic() < end and tagged(run_id):
        time.sleep(0.05)
    return len(victims)


def report_ranks(status_dir: str, seen: set[str]) -> None:
    """Print a RANK line for each new status file, in the order the ranks ended."""
    new = []
    for path in glob.glob(os.path.join(status_dir, f"{RANK_STEM}*.json")):
        if path in seen:
            continue
        try:
            with open(path) as fh:
                new.append((json.load(fh), path))
        except (OSError, ValueError):
            continue  # being written: next round
    for st, path in sorted(new, key=lambda item: item[0].get("end", 0)):
        seen.add(path)
        outcome = f"{RANK_SIGNAL} {st['signal']}" if st.get("signal") else f"{RANK_EXIT} {st.get('exit_code')}"
        say(f"{RANK} {st.get('rank')} {outcome} pid {st.get('pid')}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--status-dir", required=True)
    ap.add_argument("--deadline", type=float, default=3600.0)
    ap.add_argument("--grace", type=float, default=2.0)
    ap.add_argument("--heartbeat", type=float, default=2.0)
    ap.add_argument("--silence", type=float, default=0.0, help="0: do not expect controller heartbeats")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        say(f"{EXIT} 2")
        say(DONE)
        return 2
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    stop: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop.append("signal")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    os.makedirs(args.status_dir, exist_ok=True)
    env = dict(os.environ, **{TAG: args.run_id})
    # handed to the child as its stdout for the whole run, closed at the end: no with-block fits
    log = open(os.path.join(args.status_dir, TORCHRUN_LOG), "ab", buffering=0)  # noqa: SIM115
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    say(f"{STARTED} {child.pid}")
    start = time.monotonic()
    last_hb = last_input = start
    seen: set[str] = set()
    stdin_fd = sys.stdin.fileno()
    stdin_open = True
    rc = None
    why = None
    while True:
        rc = child.poll()
        report_ranks(args.status_dir, seen)
        if rc is not None:
            break
        if stop:
            why = stop[0]
            break
        now = time.monotonic()
        if now - start > args.deadline:
            why = "deadline"
            break
        if args.silence and now - last_input > args.silence:
            why = "silence"
            break
        if now - last_hb >= args.heartbeat:
            say(HEARTBEAT)
            last_hb = now
        if stdin_open:
            ready, _, _ = select.select([stdin_fd], [], [], 0.1)
            if ready:
                data = os.read(stdin_fd, 4096)
                last_input = time.monotonic()
                if not data:
                    why = "stdin-eof"
                    break
                if KILL.encode() in data:
                    why = "stdin-kill"
                    break
        else:
            time.sleep(0.1)
    if why is not None:
        say(f"{KILLED} {why}")
        terminate(args.run_id, child.pid, args.grace)
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        rc = child.poll()
    else:
        say(f"{EXIT} {rc}")
        # workers (own sessions) or their children may outlive torchrun: sweep the tag
        swept = terminate(args.run_id, None, args.grace) if tagged(args.run_id) else 0
        if swept:
            say(f"{SWEPT} {swept}")
    report_ranks(args.status_dir, seen)
    log.close()
    say(DONE)
    return 0 if why is None and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
