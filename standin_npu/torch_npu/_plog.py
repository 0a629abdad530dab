"""Host-side Ascend logs ("plogs"), written where and how CANN writes them.

Design: docs/internals/standin-npu.md.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from . import _env

LEVELS = {"DEBUG": 0, "INFO": 1, "WARNING": 2, "ERROR": 3}

_lock = threading.Lock()
_path: Path | None = None
_pid: int | None = None


def log_root() -> Path:
    if os.environ.get("ASCEND_PROCESS_LOG_PATH"):
        return Path(os.environ["ASCEND_PROCESS_LOG_PATH"])
    if os.environ.get("ASCEND_WORK_PATH"):
        return Path(os.environ["ASCEND_WORK_PATH"]) / "log"
    return Path.home() / "ascend" / "log"


def stamp(now: float | None = None) -> str:
    """``2025-07-23-03:47:57.070.463``: local time, milliseconds and microseconds."""
    now = time.time() if now is None else now
    micros = int(now * 1_000_000) % 1_000_000
    return time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(now)) + f".{micros // 1000:03d}.{micros % 1000:03d}"


def process_name() -> str:
    try:
        with open("/proc/self/comm", encoding="utf-8") as fh:
            return fh.read().strip() or "python3"
    except OSError:
        return os.path.basename(sys.executable) or "python3"


def current_path() -> Path | None:
    """This process's plog file, once a line has been written to it."""
    return _path if _pid == os.getpid() else None


def _open_path() -> Path:
    global _path, _pid
    if _path is None or _pid != os.getpid():  # a forked child gets its own file, as with CANN
        now = time.time()
        name = time.strftime("%Y%m%d%H%M%S", time.localtime(now)) + f"{int(now * 1000) % 1000:03d}"
        folder = log_root() / "debug" / "plog"
        folder.mkdir(parents=True, exist_ok=True)
        _path, _pid = folder / f"plog-{os.getpid()}_{name}.log", os.getpid()
    return _path


def write(level: str, module: str, where: str, message: str) -> Path | None:
    """One plog line; returns the file (None when the level is filtered out or printed to stdout).

    >>> write("ERROR", "HCCL", "hccl_socket.cc:100", "[123][HcclSocket][Listen] ...")  # doctest: +SKIP
    """
    if LEVELS[level] < _env.global_log_level():
        return None
    line = f"[{level}] {module}({os.getpid()},{process_name()}):{stamp()} [{where}] {message}\n"
    if os.environ.get("ASCEND_SLOG_PRINT_TO_STDOUT") == "1":
        sys.stdout.write(line)
        sys.stdout.flush()
        return None
    with _lock:
        path = _open_path()
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
    return path
