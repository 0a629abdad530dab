#!/usr/bin/env python3
"""camit rank wrapper: runs one torchrun worker's real program and records how it ended.

Shipped to the hosts by ``framework.launch``; standard library only.
``rankwrap.py --status-dir DIR -- <python args...>``, started by torchrun once per local rank;
its files and the faulthandler bootstrap: docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time

# the protocol's words (framework.remote.protocol; this file ships alone,
# a unit test keeps them equal)
RANK_STEM = "rank"

#: python -c: faulthandler on SIGUSR1 (stacks of all threads to stderr = the rank log), then the
#: target as python itself would run it (``-m mod args`` or ``script args``)
BOOTSTRAP = (
    "import faulthandler, os, runpy, signal, sys\n"
    "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
    "a = sys.argv[1:]\n"
    "if a[0] == '-m':\n"
    "    sys.argv = a[1:]\n"
    "    runpy.run_module(a[1], run_name='__main__', alter_sys=True)\n"
    "elif a[0] == '-c':\n"
    "    sys.argv = ['-c', *a[2:]]\n"
    "    exec(compile(a[1], '<string>', 'exec'),"
    " {'__name__': '__main__', '__builtins__': __builtins__})\n"
    "else:\n"
    "    sys.argv = a\n"
    "    sys.path[0] = os.path.dirname(os.path.abspath(a[0]))\n"
    "    runpy.run_path(a[0], run_name='__main__')\n"
)


def child_argv(python: str, args: list[str]) -> list[str]:
    """The rank program's argv: through :data:`BOOTSTRAP` for a script, ``-m`` or ``-c`` target."""
    if args and (args[0] in ("-m", "-c") and len(args) > 1 or not args[0].startswith("-")):
        return [python, "-c", BOOTSTRAP, *args]
    return [python, *args]


def _number(value: str) -> int | str:
    """A rank as a number when it is one."""
    return int(value) if value.isdigit() else value


def run_child(status_dir: str, rank: str, args: list[str]) -> tuple[int, int]:
    """Run the rank program with its log, forwarding TERM/INT/HUP: (pid, return code)."""
    with open(os.path.join(status_dir, f"{RANK_STEM}{rank}.log"), "ab", buffering=0) as log:
        child = subprocess.Popen(child_argv(sys.executable, args), stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def forward(signum: int, _frame: object) -> None:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, forward)
        with open(os.path.join(status_dir, f"{RANK_STEM}{rank}.pid"), "w") as fh:
            fh.write(f"{child.pid}\n")
        return child.pid, child.wait()


def write_status(status_dir: str, status: dict[str, object], rank: str) -> None:
    """``rank<r>.json``, replaced whole (the supervisor never reads half of it)."""
    path = os.path.join(status_dir, f"{RANK_STEM}{rank}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(status, fh)
    os.replace(path + ".tmp", path)


def die_like(rc: int) -> None:
    """End by the child's signal ``-rc`` too, but without a core of our own.

    A soft limit of 1 disables both file cores (below one page) and piped ones (the kernel's
    special case).
    """
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    soft = 1 if hard == resource.RLIM_INFINITY or hard >= 1 else 0
    resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
    time.sleep(1)


def _outcome(rc: int) -> dict[str, object]:
    """The status fields of a return code: an exit code, or the signal that ended the child."""
    if rc < 0:
        return {"exit_code": None, "signal": signal.Signals(-rc).name}
    return {"exit_code": rc, "signal": None}


def _is_usage(argv: list[str]) -> bool:
    """``--status-dir DIR -- ...``."""
    return len(argv) >= 3 and argv[0] == "--status-dir" and argv[2] == "--"


def main() -> int:
    argv = sys.argv[1:]
    if not _is_usage(argv):
        sys.stderr.write("usage: rankwrap.py --status-dir DIR -- <python args...>\n")
        return 2
    status_dir = argv[1]
    rank = os.environ.get("RANK", "x")
    local_rank = os.environ.get("LOCAL_RANK", "x")
    args = [a.replace("{rank}", rank).replace("{local_rank}", local_rank) for a in argv[3:]]
    os.makedirs(status_dir, exist_ok=True)
    start = time.time()
    pid, rc = run_child(status_dir, rank, args)
    write_status(status_dir, {
        "rank": _number(rank), "local_rank": _number(local_rank), "pid": pid, **_outcome(rc),
        "start": start, "end": time.time(),
        "log": os.path.join(status_dir, f"{RANK_STEM}{rank}.log"),
    }, rank)
    if rc >= 0:
        return rc
    die_like(rc)
    return 128 - rc


if __name__ == "__main__":
    sys.exit(main())
