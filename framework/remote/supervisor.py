#!/usr/bin/env python3
"""camit supervisor: runs one node's torchrun and guarantees it ends, leaving nothing behind.

Shipped to the hosts by ``framework.launch``; standard library only.

    supervisor.py --run-id ID --status-dir DIR [--deadline S] [--grace S]
                  [--heartbeat S] [--silence S] [--stack-wait S] [--env-stdin] -- <command...>

With ``--env-stdin`` the first line on stdin is ``ENV <base64 of a JSON object>``: variables added to the
command's environment (the run's secrets, which must never appear in a command line any local user can
read in ``/proc/<pid>/cmdline``); without it within a minute the supervisor ends (``EXIT 2``).

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
    STACKS <n>                 n ranks were asked for their Python stacks (SIGUSR1) before the kill
    LEFT <pid> ...             processes of the run still alive after our KILL (not killable, or escaped)
    TREE <pid> ...             every pid the run's process tree had (for the controller's device check)
    DONE                       we are finished (the last line)

It ends the run — TERM to the command's group and to every process carrying the
tag, KILL after --grace — when stdin reaches EOF (the controller's SSH channel
closed), when a line ``KILL`` arrives, when no line at all (``HB`` from the
controller) arrived for --silence seconds (a link that went down), at its own
--deadline, or on TERM/INT/HUP. Processes are found by the tag in
``/proc/<pid>/environ`` and by the group we created: never by name or command line.

Before a kill for ``--deadline`` or on the controller's ``STACKS`` line (its job timeout), every
rank program (the pids in the rank wrapper's ``rank<r>.pid`` that still carry the tag) gets SIGUSR1
— the rank wrapper registered ``faulthandler`` on it, so each prints its Python stacks into its
rank log — and we wait ``--stack-wait`` seconds before the TERM.

While the run lasts we follow its process tree (``/proc/<pid>/stat`` parent links, with each
process's start time so a reused pid is never mistaken for ours). A process that left both the
session and the tag (``setsid`` with a clean environment) is not killed — it is no longer the run's
by the two rules above — but it is still ours by descent: ``LEFT`` names it, with any tagged process
the KILL did not end (uninterruptible sleep), so the controller can check what it still holds.
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
STACKS = "STACKS"
#: ``rank<r>.pyspy``: py-spy's dump of a rank asked for its stacks (protocol.PYSPY_SUFFIX)
PYSPY_SUFFIX = "pyspy"
#: seconds the native py-spy dumps get (all at once), then the Python-only ones of those not done; the
#: controller's teardown wait includes both (protocol.PYSPY_TIMEOUT, PLAIN_TIMEOUT)
PYSPY_TIMEOUT = 6.0
PLAIN_TIMEOUT = 2.0
LEFT = "LEFT"
TREE = "TREE"
DONE = "DONE"
KILL = "KILL"
ENV = "ENV"
ENV_STDIN_FLAG = "--env-stdin"
#: how long a supervisor started with --env-stdin waits for its ENV line
ENV_WAIT = 60.0
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


def proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (ppid, state, start time in ticks) of every process now listed in /proc."""
    table = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            table[int(stat.split("/")[2])] = (int(fields[1]), fields[0], int(fields[19]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def follow_tree(root: int, tree: dict[int, int]) -> None:
    """Add to ``tree`` (pid -> start ticks) every live descendant of ``root`` or of a pid already in it."""
    table = proc_table()
    known = {root} | {p for p, ticks in tree.items() if p in table and table[p][2] == ticks}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, state, ticks) in table.items():
            if pid not in known and ppid in known and state not in ("Z", "X"):
                known.add(pid)
                tree.setdefault(pid, ticks)
                grew = True
    if root in table:
        tree.setdefault(root, table[root][2])


def survivors(run_id: str, tree: dict[int, int]) -> list[int]:
    """The run's processes still alive: tagged ones, and tree pids with their own start time (not zombies)."""
    table = proc_table()
    alive = {p for p, ticks in tree.items() if p in table and table[p][2] == ticks and table[p][1] not in ("Z", "X")}
    return sorted(alive | set(tagged(run_id)))


def find_pyspy() -> str | None:
    """py-spy beside this Python or on PATH (None: not installed; faulthandler's dump alone then)."""
    for folder in (os.path.dirname(sys.executable), *os.environ.get("PATH", "").split(os.pathsep)):
        path = os.path.join(folder or ".", "py-spy")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def native_stacks(spy: str | None, ranks: dict[int, int], status_dir: str, timeout: float) -> None:
    """``py-spy dump --native`` of every rank at once into ``rank<r>.pyspy``; a dump not done in ``timeout``
    (native symbols of a big library take long on a loaded host) is stopped and replaced by a Python-only
    dump (``PLAIN_TIMEOUT``). A rank is only paused while it is read, never ended. Without py-spy each file
    says so."""
    paths = {r: os.path.join(status_dir, f"{RANK_STEM}{r}.{PYSPY_SUFFIX}") for r in ranks}
    if spy is None:
        for path in paths.values():
            _write_new(path, b"py-spy is not installed on this host: the stacks are faulthandler's, in the rank log\n")
        return
    late = _dump_all(spy, ranks, paths, ["--native"], timeout)
    _dump_all(spy, {r: ranks[r] for r in late}, paths, [], PLAIN_TIMEOUT)


def _write_new(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _dump_all(spy: str, ranks: dict[int, int], paths: dict[int, str], extra: list[str], timeout: float) -> list[int]:
    """One py-spy dump per rank, all at once, each into its file; the ranks whose dump did not end in time."""
    running = {}
    for rank, pid in ranks.items():
        fd = os.open(paths[rank], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            running[rank] = subprocess.Popen([spy, "dump", "--pid", str(pid), *extra], stdout=out,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    end = time.monotonic() + timeout
    late = []
    for rank, proc in running.items():
        try:
            proc.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            late.append(rank)
    return late


def ask_stacks(run_id: str, status_dir: str, wait: float) -> int:
    """The stacks of every rank program of this run (rankwrap's ``rank*.pid`` files, still tagged): py-spy's
    native dump where it runs, then SIGUSR1 (faulthandler into the rank log); then wait."""
    ours = set(tagged(run_id))
    ranks = {}
    for path in glob.glob(os.path.join(status_dir, f"{RANK_STEM}*.pid")):
        stem = os.path.basename(path)[len(RANK_STEM):-len(".pid")]
        try:
            with open(path) as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if stem.isdigit() and pid in ours:  # else ended, or the pid is someone else's now
            ranks[int(stem)] = pid
    native_stacks(find_pyspy(), ranks, status_dir, PYSPY_TIMEOUT)
    asked = 0
    for pid in ranks.values():
        try:
            os.kill(pid, signal.SIGUSR1)
            asked += 1
        except (ProcessLookupError, PermissionError):
            pass
    if asked:
        time.sleep(wait)
    return asked


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


def read_env_line(fd: int, wait: float) -> dict[str, str] | None:
    """The variables of the controller's first stdin line ``ENV <base64 JSON>``; None when it does not come
    within ``wait`` seconds or is not one. Read a byte at a time: what follows it (``HB``, ``KILL``) stays
    for the main loop."""
    import base64

    end = time.monotonic() + wait
    buf = b""
    while not buf.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0 or len(buf) > 1 << 20:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        byte = os.read(fd, 1)
        if not byte:
            return None
        buf += byte
    word, _, payload = buf.decode("ascii", "replace").strip().partition(" ")
    if word != ENV:
        return None
    try:
        env = json.loads(base64.b64decode(payload, validate=True))
    except ValueError:
        return None
    if not isinstance(env, dict):
        return None
    return {str(k): str(v) for k, v in env.items()}


def end_run(args: argparse.Namespace, child: subprocess.Popen[bytes], why: str, stacks: bool,
            tree: dict[int, int]) -> int | None:
    """We end the run (``why``): stacks first when asked, then TERM/KILL; the command's rc."""
    say(f"{KILLED} {why}")
    if stacks:
        say(f"{STACKS} {ask_stacks(args.run_id, args.status_dir, args.stack_wait)}")
        follow_tree(child.pid, tree)
    terminate(args.run_id, child.pid, args.grace)
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    return child.poll()


def controller_input(stdin_fd: int) -> tuple[bool, str | None, bool]:
    """One 0.1 s look at the controller's stdin: (input arrived, why to stop or None, stacks wanted)."""
    ready, _, _ = select.select([stdin_fd], [], [], 0.1)
    if not ready:
        return False, None, False
    data = os.read(stdin_fd, 4096)
    if not data:
        return True, "stdin-eof", False
    if STACKS.encode() in data or KILL.encode() in data:
        return True, "stdin-kill", STACKS.encode() in data
    return True, None, False


def watch(args: argparse.Namespace, child: subprocess.Popen[bytes], stop: list[str], seen: set[str],
          tree: dict[int, int]) -> tuple[int | None, str | None, bool]:
    """Run until the child exits (its status) or a reason to stop it arrives: (status, why, stacks wanted)."""
    start = time.monotonic()
    last_hb = last_input = start
    last_tree = 0.0
    stdin_fd = sys.stdin.fileno()
    while True:
        rc = child.poll()
        report_ranks(args.status_dir, seen)
        if rc is not None:
            return rc, None, False
        if stop:
            return None, stop[0], False
        now = time.monotonic()
        if now - last_tree >= 0.25:
            follow_tree(child.pid, tree)
            last_tree = now
        if now - start > args.deadline:
            return None, "deadline", True
        if args.silence and now - last_input > args.silence:
            return None, "silence", False
        if now - last_hb >= args.heartbeat:
            say(HEARTBEAT)
            last_hb = now
        arrived, why, stacks = controller_input(stdin_fd)
        if arrived:
            last_input = time.monotonic()
        if why is not None:
            return None, why, stacks


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--status-dir", required=True)
    ap.add_argument("--deadline", type=float, default=3600.0)
    ap.add_argument("--grace", type=float, default=2.0)
    ap.add_argument("--heartbeat", type=float, default=2.0)
    ap.add_argument("--silence", type=float, default=0.0, help="0: do not expect controller heartbeats")
    ap.add_argument("--stack-wait", type=float, default=3.0, help="seconds between asking for stacks and the kill")
    ap.add_argument(ENV_STDIN_FLAG, dest="env_stdin", action="store_true",
                    help="read the command's secret variables from the first stdin line (ENV <base64 JSON>)")
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

    # the secret variables: on stdin, never in our command line
    secret = read_env_line(sys.stdin.fileno(), ENV_WAIT) if args.env_stdin else {}
    if secret is None:
        sys.stderr.write("camit supervisor: no ENV line on stdin (--env-stdin)\n")
        say(f"{EXIT} 2")
        say(DONE)
        return 2
    os.makedirs(args.status_dir, exist_ok=True)
    env = dict(os.environ, **secret, **{TAG: args.run_id})
    # handed to the child as its stdout for the whole run, closed at the end: no with-block fits
    log = open(os.path.join(args.status_dir, TORCHRUN_LOG), "ab", buffering=0)  # noqa: SIM115
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    say(f"{STARTED} {child.pid}")
    seen: set[str] = set()
    tree: dict[int, int] = {}
    rc, why, stacks = watch(args, child, stop, seen, tree)
    follow_tree(child.pid, tree)
    rc = end_run(args, child, why, stacks, tree) if why is not None else rc
    if why is None:
        say(f"{EXIT} {rc}")
        # workers (own sessions) or their children may outlive torchrun: sweep the tag
        swept = terminate(args.run_id, None, args.grace) if tagged(args.run_id) else 0
        if swept:
            say(f"{SWEPT} {swept}")
    report_ranks(args.status_dir, seen)
    log.close()
    left = [p for p in survivors(args.run_id, tree) if p != os.getpid()]
    if left:
        say(f"{LEFT} " + " ".join(map(str, left)))
    if tree:
        say(f"{TREE} " + " ".join(map(str, sorted(tree))))
    say(DONE)
    return 0 if why is None and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
