#!/usr/bin/env python3
"""camit rank wrapper: runs one torchrun worker's real program and records how it ended.

torchrun starts this (``--no-python <python> rankwrap.py ...``) once per local
rank. It runs ``<python> <args>`` as a child with stdout and stderr in
``<status-dir>/rank<RANK>.log``, forwards TERM/INT/HUP to it, and writes
``<status-dir>/rank<RANK>.json`` (rank, local rank, pid, exit code or signal,
start and end) when the child ends — including by a signal such as SIGSEGV, which
the parent survives to report. ``{rank}`` and ``{local_rank}`` in the arguments
are replaced (``--junitxml=.../rank{rank}.xml``). The wrapper then exits the way
the child did, so torchrun sees the same outcome.

The child runs through a two-line bootstrap (``python -c``) that registers ``faulthandler`` on
SIGUSR1 for every thread, then runs the script, ``-m`` module or ``-c`` code as ``__main__`` (``runpy``, with
the ``sys.argv`` and ``sys.path[0]`` plain ``python`` would give it): on a job timeout the
supervisor sends SIGUSR1 and each rank's Python stacks land in its log before the kill.

    rankwrap.py --status-dir DIR -- <python args...>
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time

# the protocol's words (framework.remote.protocol; this file ships alone, a unit test keeps them equal)
RANK_STEM = "rank"

#: python -c: faulthandler on SIGUSR1 (stacks of all threads to stderr = the rank log), then the target as
#: python itself would run it (``-m mod args`` or ``script args``)
BOOTSTRAP = (
    "import faulthandler, os, runpy, signal, sys\n"
    "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
    "a = sys.argv[1:]\n"
    "if a[0] == '-m':\n"
    "    sys.argv = a[1:]\n"
    "    runpy.run_module(a[1], run_name='__main__', alter_sys=True)\n"
    "elif a[0] == '-c':\n"
    "    sys.argv = ['-c', *a[2:]]\n"
    "    exec(compile(a[1], '<string>', 'exec'), {'__name__': '__main__', '__builtins__': __builtins__})\n"
    "else:\n"
    "    sys.argv = a\n"
    "    sys.path[0] = os.path.dirname(os.path.abspath(a[0]))\n"
    "    runpy.run_path(a[0], run_name='__main__')\n"
)


def child_argv(python: str, args: list[str]) -> list[str]:
    """The rank program's argv: through :data:`BOOTSTRAP` for a script, ``-m`` or ``-c`` target, else as given."""
    if args and (args[0] in ("-m", "-c") and len(args) > 1 or not args[0].startswith("-")):
        return [python, "-c", BOOTSTRAP, *args]
    return [python, *args]


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) < 3 or argv[0] != "--status-dir" or argv[2] != "--":
        sys.stderr.write("usage: rankwrap.py --status-dir DIR -- <python args...>\n")
        return 2
    status_dir, args = argv[1], argv[3:]
    rank = os.environ.get("RANK", "x")
    local_rank = os.environ.get("LOCAL_RANK", "x")
    args = [a.replace("{rank}", rank).replace("{local_rank}", local_rank) for a in args]
    os.makedirs(status_dir, exist_ok=True)
    log_path = os.path.join(status_dir, f"{RANK_STEM}{rank}.log")
    status_path = os.path.join(status_dir, f"{RANK_STEM}{rank}.json")
    start = time.time()
    with open(log_path, "ab", buffering=0) as log:
        child = subprocess.Popen(child_argv(sys.executable, args), stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)

        def forward(signum: int, _frame: object) -> None:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, forward)
        with open(os.path.join(status_dir, f"{RANK_STEM}{rank}.pid"), "w") as fh:
            fh.write(f"{child.pid}\n")
        rc = child.wait()
    status = {
        "rank": int(rank) if rank.isdigit() else rank,
        "local_rank": int(local_rank) if local_rank.isdigit() else local_rank,
        "pid": child.pid,
        "exit_code": rc if rc >= 0 else None,
        "signal": signal.Signals(-rc).name if rc < 0 else None,
        "start": start,
        "end": time.time(),
        "log": log_path,
    }
    tmp = status_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(status, fh)
    os.replace(tmp, status_path)
    if rc < 0:
        # die the same way, but without a core of our own: a soft limit of 1 disables
        # both file cores (below one page) and piped ones (the kernel's special case)
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (1 if hard == resource.RLIM_INFINITY or hard >= 1 else 0, hard))
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        time.sleep(1)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
