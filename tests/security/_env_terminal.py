"""Helpers for the env-loader and terminal tests: run the real ``camit`` CLI under bounds and measure it.

:func:`run_cli` starts ``python -m framework.cli`` (this checkout's code) as its own process with an
address-space-like bound (``RLIMIT_DATA``) and a CPU-time bound set before the CLI is imported, kills it
at a wall-clock deadline, and returns its exit status, output, CPU seconds and peak resident memory
(``os.wait4`` of that one child, so other children of the test process do not count).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: what the child may use at most (it is killed past these); the tests assert far tighter bounds
DATA_LIMIT = 1 << 30
CPU_LIMIT_S = 30
WALL_LIMIT_S = 90.0

# the limits are set in the child before framework.cli is imported; then the CLI runs as `python -m`
_BOOT = (
    "import resource, runpy, sys\n"
    "resource.setrlimit(resource.RLIMIT_DATA, ({data}, {data}))\n"
    "resource.setrlimit(resource.RLIMIT_CPU, ({cpu}, {cpu}))\n"
    "sys.argv = ['camit'] + sys.argv[1:]\n"
    # the peak of this process only: VmHWM belongs to the address space exec made, while ru_maxrss of a
    # child starts at its parent's (a long pytest session's 500 MiB) and wait4 reports that
    "def _hwm():\n"
    "    import os\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            open(os.environ['_CAMIT_TEST_HWM'], 'w').write(line.split()[1])\n"
    "import atexit; atexit.register(_hwm)\n"
    "runpy.run_module('framework.cli', run_name='__main__', alter_sys=True)\n"
)


@dataclass
class CliRun:
    """One finished (or killed) CLI process."""

    rc: int | None  # None: killed at the wall-clock deadline
    stdout: str
    stderr: str
    cpu_s: float  # user + system seconds of the child
    max_rss_mib: float
    wall_s: float

    def describe(self) -> str:
        return (f"rc={self.rc} cpu={self.cpu_s:.2f}s rss={self.max_rss_mib:.0f}MiB wall={self.wall_s:.1f}s "
                f"stderr={self.stderr[-600:]!r} stdout={self.stdout[-300:]!r}")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without CAMIT_* (no env file taken from the caller) and without CI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMIT_") and k != "CI"}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, wall_limit: float = WALL_LIMIT_S) -> CliRun:
    """``camit ARGS...`` from this checkout, bounded (see the module docstring), measured."""
    boot = _BOOT.format(data=DATA_LIMIT, cpu=CPU_LIMIT_S)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(prefix="hwm-") as hwm:
        child_env = dict(env if env is not None else clean_env(), _CAMIT_TEST_HWM=hwm.name)
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", boot, *args], cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, env=child_env)
        rc: int | None = None
        usage = None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - start > wall_limit:
                os.kill(proc.pid, signal.SIGKILL)
                _, _, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = rc if rc is not None else -9  # reaped by wait4: keep Popen from waiting again
        wall = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        peak_kib = Path(hwm.name).read_text().strip()
        # without the atexit report (killed at a limit) the child's ru_maxrss, which can only be higher
        rss_mib = int(peak_kib) / 1024 if peak_kib.isdigit() else usage.ru_maxrss / 1024
        return CliRun(rc=rc, stdout=out.read().decode(errors="replace"), stderr=err.read().decode(errors="replace"),
                      cpu_s=usage.ru_utime + usage.ru_stime, max_rss_mib=rss_mib, wall_s=wall)
