#!/usr/bin/env python3
"""camit supervisor: runs one node's torchrun and guarantees it ends, leaving nothing behind.

Shipped to the hosts by ``framework.launch``; standard library only.
``supervisor.py --run-id ID --status-dir DIR [options] [--env-stdin] -- <command...>``;
its lines and how it ends a run: docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import select
import signal
import subprocess
import sys
import time

# the protocol's words (framework.remote.protocol; this file ships alone,
# a unit test keeps them equal)
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
#: seconds the native py-spy dumps get (all at once), then the Python-only ones of those not
#: done; the controller's teardown wait includes both (protocol.PYSPY_TIMEOUT, PLAIN_TIMEOUT)
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


#: process states of a process that is gone (zombie, dead)
GONE_STATES = ("Z", "X")


def say(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass  # the controller is gone; we carry on cleaning up


def stat_fields(path: str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); [] if gone."""
    try:
        with open(path) as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def is_live(fields: list[str]) -> bool:
    """Whether a process's stat fields were read and its state is neither zombie nor dead."""
    return bool(fields) and fields[0] not in GONE_STATES


def carries(proc_dir: str, want: bytes) -> bool:
    """Whether the process's environment holds the entry ``want`` (False when it cannot be read)."""
    try:
        with open(f"{proc_dir}/environ", "rb") as fh:
            return want in fh.read().split(b"\0")
    except OSError:
        return False


def tagged(run_id: str) -> list[int]:
    """Live pids (not ours) whose environment carries ``CAMIT_RUN_ID=<run_id>``."""
    want = f"{TAG}={run_id}".encode()
    others = [d for d in glob.glob("/proc/[0-9]*") if int(d[6:]) != os.getpid()]
    return [int(d[6:]) for d in others if carries(d, want) and is_live(stat_fields(f"{d}/stat"))]


def group_alive(pgid: int) -> bool:
    """Whether a live process of the process group ``pgid`` is left."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        fields = stat_fields(stat)
        if len(fields) > 2 and fields[2] == str(pgid) and is_live(fields):
            return True
    return False


def proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (ppid, state, start time in ticks) of every process now listed in /proc."""
    table = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        fields = stat_fields(stat)
        try:
            table[int(stat.split("/")[2])] = (int(fields[1]), fields[0], int(fields[19]))
        except (IndexError, ValueError):
            continue
    return table


def follow_tree(root: int, tree: dict[int, int]) -> None:
    """Add to ``tree`` (pid -> start ticks) every live descendant of ``root`` or of a pid in it."""
    table = proc_table()
    known = {root} | {p for p, ticks in tree.items() if _started_at(table, p, ticks)}
    while True:
        children = _new_children(table, known)
        if not children:
            break
        known.update(children)
        for pid in children:
            tree.setdefault(pid, table[pid][2])
    if root in table:
        tree.setdefault(root, table[root][2])


def _new_children(table: dict[int, tuple[int, str, int]], known: set[int]) -> list[int]:
    """Live pids not in ``known`` whose parent is."""
    return [pid for pid, (ppid, state, _ticks) in table.items()
            if ppid in known and pid not in known and state not in GONE_STATES]


def survivors(run_id: str, tree: dict[int, int]) -> list[int]:
    """The run's processes still alive: tagged ones, and tree pids with their own start time."""
    table = proc_table()
    alive = {p for p, ticks in tree.items() if _same_live_process(table, p, ticks)}
    return sorted(alive | set(tagged(run_id)))


def _same_live_process(table: dict[int, tuple[int, str, int]], pid: int, ticks: int) -> bool:
    """Whether ``pid`` is listed, started at ``ticks`` (not a reused pid) and not a zombie."""
    return _started_at(table, pid, ticks) and table[pid][1] not in GONE_STATES


def _started_at(table: dict[int, tuple[int, str, int]], pid: int, ticks: int) -> bool:
    """Whether ``pid`` is listed with the start time ``ticks`` (not a reused pid)."""
    return pid in table and table[pid][2] == ticks


def find_pyspy() -> str | None:
    """py-spy beside this Python or on PATH; None: not installed (faulthandler's dump only)."""
    for folder in (os.path.dirname(sys.executable), *os.environ.get("PATH", "").split(os.pathsep)):
        path = os.path.join(folder or ".", "py-spy")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def native_stacks(spy: str | None, ranks: dict[int, int], status_dir: str, timeout: float) -> None:
    """``py-spy dump --native`` of every rank at once into ``rank<r>.pyspy``.

    A dump not done in ``timeout`` (native symbols of a big library take long on a loaded host) is
    stopped and replaced by a Python-only dump (``PLAIN_TIMEOUT``). A rank is only paused while it
    is read, never ended. Without py-spy each file says so.
    """
    paths = {r: os.path.join(status_dir, f"{RANK_STEM}{r}.{PYSPY_SUFFIX}") for r in ranks}
    if spy is None:
        for path in paths.values():
            _write_new(path, NO_PYSPY)
        return
    late = _dump_all(spy, ranks, paths, ["--native"], timeout)
    _dump_all(spy, {r: ranks[r] for r in late}, paths, [], PLAIN_TIMEOUT)


#: what a rank's ``.pyspy`` file says on a host without py-spy
NO_PYSPY = b"py-spy is not installed on this host: the stacks are faulthandler's, in the rank log\n"


def _open_new(path: str) -> int:
    """``path`` opened for writing, truncated, never through a symlink (created 0600)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)


def _write_new(path: str, data: bytes) -> None:
    with os.fdopen(_open_new(path), "wb") as out:
        out.write(data)


def _dump_all(spy: str, ranks: dict[int, int], paths: dict[int, str], extra: list[str],
              timeout: float) -> list[int]:
    """One py-spy dump per rank, all at once, each into its file; the ranks not done in time."""
    running = {}
    for rank, pid in ranks.items():
        with os.fdopen(_open_new(paths[rank]), "wb") as out:
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


def rank_pids(run_id: str, status_dir: str) -> dict[int, int]:
    """rank -> pid of this run's live rank programs (rankwrap's ``rank*.pid``, still tagged)."""
    ours = set(tagged(run_id))
    ranks = {}
    for path in glob.glob(os.path.join(status_dir, f"{RANK_STEM}*.pid")):
        stem = os.path.basename(path)[len(RANK_STEM):-len(".pid")]
        pid = _read_pid(path)
        if stem.isdigit() and pid in ours:  # else ended, or the pid is someone else's now
            ranks[int(stem)] = pid
    return ranks


def _read_pid(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def ask_stacks(run_id: str, status_dir: str, wait: float) -> int:
    """The stacks of every rank program of this run; how many ranks were asked.

    py-spy's native dump where it runs, then SIGUSR1 (faulthandler into the rank log); then wait.
    """
    ranks = rank_pids(run_id, status_dir)
    native_stacks(find_pyspy(), ranks, status_dir, PYSPY_TIMEOUT)
    asked = sum(_send(pid, signal.SIGUSR1) for pid in ranks.values())
    if asked:
        time.sleep(wait)
    return asked


def _send(pid: int, sig: int) -> bool:
    """Send ``sig`` to ``pid``; whether it was delivered."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_run(run_id: str, pgid: int | None, sig: int, victims: set[int]) -> None:
    """``sig`` to the group and to every tagged process (added to ``victims``)."""
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in tagged(run_id):
        victims.add(pid)
        _send(pid, sig)


def _ended_within(run_id: str, pgid: int | None, seconds: float) -> bool:
    """Wait up to ``seconds`` for the tagged processes (and the group, if given) to be gone."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not tagged(run_id) and (pgid is None or not group_alive(pgid)):
            return True
        time.sleep(0.05)
    return False


def terminate(run_id: str, pgid: int | None, grace: float) -> int:
    """TERM the group and the tagged processes, KILL what is left after ``grace``; how many."""
    victims = set(tagged(run_id))
    _signal_run(run_id, pgid, signal.SIGTERM, victims)
    if not _ended_within(run_id, pgid, grace):
        _signal_run(run_id, pgid, signal.SIGKILL, victims)
        _ended_within(run_id, None, 2)
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
        say(rank_line(st))


def rank_line(st: dict) -> str:
    """``RANK <r> SIG <name> pid <p>`` or ``RANK <r> exit <rc> pid <p>`` of a rank's status."""
    outcome = f"{RANK_EXIT} {st.get('exit_code')}"
    if st.get("signal"):
        outcome = f"{RANK_SIGNAL} {st['signal']}"
    return f"{RANK} {st.get('rank')} {outcome} pid {st.get('pid')}"


def read_env_line(fd: int, wait: float) -> dict[str, str] | None:
    """The variables of the controller's first stdin line ``ENV <base64 JSON>``.

    None when it does not come within ``wait`` seconds or is not one.
    """
    line = read_first_line(fd, wait)
    if line is None:
        return None
    word, _, payload = line.decode("ascii", "replace").strip().partition(" ")
    if word != ENV:
        return None
    try:
        env = json.loads(base64.b64decode(payload, validate=True))
    except ValueError:
        return None
    if not isinstance(env, dict):
        return None
    return {str(k): str(v) for k, v in env.items()}


def read_first_line(fd: int, wait: float) -> bytes | None:
    """One line (up to 1 MiB) within ``wait`` seconds, read a byte at a time.

    What follows it (``HB``, ``KILL``) stays for the main loop. None at EOF or when time runs out.
    """
    end = time.monotonic() + wait
    buf = b""
    while not buf.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0 or len(buf) > 1 << 20:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        byte = os.read(fd, 1) if ready else b""
        if not byte:
            return None
        buf += byte
    return buf


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
    """One 0.1 s look at the controller's stdin: (input arrived, why to stop, stacks wanted)."""
    ready, _, _ = select.select([stdin_fd], [], [], 0.1)
    if not ready:
        return False, None, False
    data = os.read(stdin_fd, 4096)
    if not data:
        return True, "stdin-eof", False
    if STACKS.encode() in data or KILL.encode() in data:
        return True, "stdin-kill", STACKS.encode() in data
    return True, None, False


class Clocks:
    """When the watch started, last said HB, last heard the controller, last followed the tree."""

    def __init__(self) -> None:
        self.start = self.heartbeat = self.input = time.monotonic()
        self.tree = 0.0


def time_up(args: argparse.Namespace, clocks: Clocks, now: float) -> str | None:
    """``deadline`` or ``silence`` when that limit has passed, else None."""
    if now - clocks.start > args.deadline:
        return "deadline"
    if args.silence and now - clocks.input > args.silence:
        return "silence"
    return None


def chores(args: argparse.Namespace, child: subprocess.Popen[bytes], tree: dict[int, int],
           clocks: Clocks) -> str | None:
    """Follow the tree (every 0.25 s), and say HB when due; why to stop, if a limit passed."""
    now = time.monotonic()
    if now - clocks.tree >= 0.25:
        follow_tree(child.pid, tree)
        clocks.tree = now
    why = time_up(args, clocks, now)
    if why is None and now - clocks.heartbeat >= args.heartbeat:
        say(HEARTBEAT)
        clocks.heartbeat = now
    return why


def watch(args: argparse.Namespace, child: subprocess.Popen[bytes], stop: list[str], seen: set[str],
          tree: dict[int, int]) -> tuple[int | None, str | None, bool]:
    """Run until the child exits or a reason to stop it arrives: (status, why, stacks wanted)."""
    clocks = Clocks()
    stdin_fd = sys.stdin.fileno()
    while True:
        rc = child.poll()
        report_ranks(args.status_dir, seen)
        if rc is not None:
            return rc, None, False
        if stop:
            return None, stop[0], False
        why = chores(args, child, tree, clocks)
        if why is not None:
            return None, why, why == "deadline"
        arrived, why, stacks = controller_input(stdin_fd)
        if arrived:
            clocks.input = time.monotonic()
        if why is not None:
            return None, why, stacks


def parse_args() -> argparse.Namespace:
    """The options; ``command`` without its leading ``--``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--status-dir", required=True)
    ap.add_argument("--deadline", type=float, default=3600.0)
    ap.add_argument("--grace", type=float, default=2.0)
    ap.add_argument("--heartbeat", type=float, default=2.0)
    ap.add_argument("--silence", type=float, default=0.0,
                    help="0: do not expect controller heartbeats")
    ap.add_argument("--stack-wait", type=float, default=3.0,
                    help="seconds between asking for stacks and the kill")
    ap.add_argument(ENV_STDIN_FLAG, dest="env_stdin", action="store_true",
                    help="read the command's secret variables from the first stdin line "
                         "(ENV <base64 JSON>)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def refuse() -> int:
    """Nothing was started: ``EXIT 2``, ``DONE``."""
    say(f"{EXIT} 2")
    say(DONE)
    return 2


def catch_signals() -> list[str]:
    """TERM, INT and HUP append ``signal`` to the list returned (the watch loop stops on it)."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    stop: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop.append("signal")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    return stop


def secret_env(args: argparse.Namespace) -> dict[str, str] | None:
    """The secret variables: on stdin, never in our command line ({} without ``--env-stdin``)."""
    if not args.env_stdin:
        return {}
    return read_env_line(sys.stdin.fileno(), ENV_WAIT)


def sweep(args: argparse.Namespace) -> None:
    """After the command ended by itself: kill its workers (own sessions) that outlive it."""
    swept = terminate(args.run_id, None, args.grace) if tagged(args.run_id) else 0
    if swept:
        say(f"{SWEPT} {swept}")


def report_leftovers(run_id: str, tree: dict[int, int]) -> None:
    """``LEFT`` the run's processes still alive, ``TREE`` every pid the tree had."""
    left = [p for p in survivors(run_id, tree) if p != os.getpid()]
    if left:
        say(f"{LEFT} " + " ".join(map(str, left)))
    if tree:
        say(f"{TREE} " + " ".join(map(str, sorted(tree))))


def main() -> int:
    args = parse_args()
    if not args.command:
        return refuse()
    stop = catch_signals()
    secret = secret_env(args)
    if secret is None:
        sys.stderr.write("camit supervisor: no ENV line on stdin (--env-stdin)\n")
        return refuse()
    os.makedirs(args.status_dir, exist_ok=True)
    env = dict(os.environ, **secret, **{TAG: args.run_id})
    # handed to the child as its stdout for the whole run, closed at the end: no with-block fits
    log = open(os.path.join(args.status_dir, TORCHRUN_LOG), "ab", buffering=0)  # noqa: SIM115
    child = subprocess.Popen(args.command, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
    say(f"{STARTED} {child.pid}")
    seen: set[str] = set()
    tree: dict[int, int] = {}
    rc, why, stacks = watch(args, child, stop, seen, tree)
    follow_tree(child.pid, tree)
    if why is None:
        say(f"{EXIT} {rc}")
        sweep(args)
    else:
        rc = end_run(args, child, why, stacks, tree)
    report_ranks(args.status_dir, seen)
    log.close()
    report_leftovers(args.run_id, tree)
    say(DONE)
    return 0 if why is None and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
