"""Device occupancy: which process holds which NPU, for the lab's fake ``npu-smi``.

Stdlib only, loadable by path without torch. Design: docs/internals/standin-npu.md.
"""

from __future__ import annotations

import atexit
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HEARTBEAT_S = 1.0

_lock = threading.Lock()
_devices: list[tuple[int, int]] = []  # (logical, physical)
_file: Path | None = None
_owner: int | None = None


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: the process start time in clock ticks (None if no such process)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            stat = fh.read()
    except OSError:
        return None
    try:
        fields = stat.rsplit(")", 1)[1].split()
        # a zombie has exited (its memory, and so its device, is released): only its pid is left to reap
        return None if fields[0] == "Z" else int(fields[19])
    except (IndexError, ValueError):
        return None


def _write(path: Path, record: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)


def _remove() -> None:
    if _file is not None and _owner == os.getpid():
        try:
            _file.unlink()
        except OSError:
            pass


def _heartbeat(path: Path, pid: int) -> None:
    while os.getpid() == pid:
        time.sleep(HEARTBEAT_S)
        try:
            os.utime(path)
        except OSError:
            return


def registry_dir() -> Path:
    """``CAMIT_EMU_NPU_DIR``, else the ``registry_dir`` of the ``CAMIT_EMU_NPU`` JSON file, else
    ``<tmp>/camit-emu-npu``."""
    return Path(_setting("CAMIT_EMU_NPU_DIR", "registry_dir", "") or Path(tempfile.gettempdir()) / "camit-emu-npu")


def linger_s() -> float:
    """``CAMIT_EMU_NPU_LINGER`` (or the JSON file's ``linger_s``): seconds a dead holder stays listed."""
    try:
        return max(0.0, float(_setting("CAMIT_EMU_NPU_LINGER", "linger_s", 0) or 0))
    except (TypeError, ValueError):
        return 0.0


def _setting(env: str, key: str, default: object) -> object:
    if os.environ.get(env):
        return os.environ[env]
    path = os.environ.get("CAMIT_EMU_NPU")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            if isinstance(data, dict):
                return data.get(key, default)
        except (OSError, ValueError):
            pass
    return default


def register(logical: int, physical: int) -> None:
    """Record that this process uses logical device ``logical`` (host NPU ``physical``); idempotent."""
    global _file, _owner
    pid = os.getpid()
    with _lock:
        if _owner != pid:  # a forked child starts its own record
            _devices.clear()
            _file, _owner = None, pid
        entry = (logical, physical)
        if entry in _devices:
            return
        _devices.append(entry)
        folder = registry_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{pid}.json"
            _write(path, {
                "pid": pid, "start_ticks": _start_ticks(pid), "name": _proc_name(),
                "devices": [p for _, p in _devices], "logical": [lg for lg, _ in _devices],
                "linger_s": linger_s(),
            })
        except OSError:
            return  # occupancy is best effort: the code under test must not fail for it
        if _file is None:
            _file = path
            atexit.register(_remove)
            threading.Thread(target=_heartbeat, args=(path, pid), name="npu-occupancy", daemon=True).start()


def _proc_name() -> str:
    try:
        with open("/proc/self/comm", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return "python3"


@dataclass(frozen=True)
class Occupant:
    """One process holding NPUs, as ``npu-smi info`` lists it."""

    pid: int
    name: str
    devices: tuple[int, ...]
    alive: bool


def occupants(folder: Path | None = None, now: float | None = None, prune: bool = True) -> list[Occupant]:
    """The processes to list as holding NPUs, by pid (see the module docstring for the rule)."""
    folder = registry_dir() if folder is None else folder
    now = time.time() if now is None else now
    out = []
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            mtime = path.stat().st_mtime
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        ticks = _start_ticks(pid)
        alive = ticks is not None and (record.get("start_ticks") in (None, ticks))
        linger = float(record.get("linger_s") or 0.0)
        if not alive and now - mtime > linger + HEARTBEAT_S:
            if prune:
                try:
                    path.unlink()
                except OSError:
                    pass
            continue
        out.append(Occupant(pid, str(record.get("name", "")), tuple(int(d) for d in record.get("devices", [])),
                            alive))
    return sorted(out, key=lambda o: o.pid)
