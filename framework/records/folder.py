"""The run's report folder: ``reports/<run-id>/`` with ``reports/latest`` pointing at it, and how
it is written (atomically, shared files under a lock).

Design: docs/internals/report.md.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

log = logging.getLogger("camit.rundir")
_UPDATE_LOCK = threading.Lock()


def new_run_id() -> str:
    """``<YYYYmmdd-HHMMSS>-<6 hex>``: sorts by start time, unique across concurrent runs."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def write_atomic(path: Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextmanager
def locked(path: Path) -> Iterator[Path]:
    """Hold ``path``'s lock file (``.<name>.lock`` next to it) for a read-modify-write: the threads and
    processes of one run (xdist workers) that add to one file then each keep their part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _UPDATE_LOCK, FileLock(str(path.parent / f".{path.name}.lock")):
        yield path


def update_json(path: Path, update: Callable[[Any], Any], *, indent: int = 2) -> Path:
    """Replace the JSON file ``path`` by ``update(old)`` — ``old`` is None when the file is absent or
    unreadable — under a lock file next to it (``.<name>.lock``), so the threads and processes of one run
    (xdist workers) each add their part (phases, cores, deploy records) instead of the last writer winning."""
    with locked(path):
        old = None
        if path.exists():
            try:
                old = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                log.warning("%s is unreadable (%s): starting it again", path, exc)
        return write_atomic(path, json.dumps(update(old), indent=indent, default=str) + "\n")


def append_text(path: Path, text: str) -> Path:
    """Add ``text`` at the end of ``path`` under its lock (:func:`locked`; the whole new content is written
    atomically): several failures of one run, perhaps in several xdist workers, each add a section
    instead of the last one replacing the others."""
    with locked(path):
        old = path.read_text(errors="replace") if path.exists() else ""
        return write_atomic(path, old + text)


def record_phase(rundir_path: str | os.PathLike[str], host: str, phase: str, start: float, end: float) -> None:
    """Append ``{host, phase, start, end}`` (epoch seconds) to ``phases.json``.

    Atomic and safe from several threads (and processes: a file lock next to it).
    Example: ``record_phase(rundir.path, "node1", "deploy", t0, time.time())``.
    """
    record_phases(rundir_path, [(host, phase, start, end)])


def record_phases(rundir_path: str | os.PathLike[str], entries: Iterable[tuple[str, str, float, float]]) -> None:
    """Append many ``(host, phase, start, end)`` to ``phases.json`` in one locked read-modify-write.

    A cluster's phases go in at once: one rewrite of the file per phase (a host) made recording N hosts'
    phases O(N²) — 256 entries one by one cost 0.22 s of CPU, 1024 cost 2.2 s; at once, 1 ms (issue 18).
    """
    root = Path(rundir_path)
    new = []
    for host, phase, start, end in entries:
        start, end = float(start), float(end)
        if end < start:
            log.warning("phase %s on %s ends before it starts (%s < %s): recorded as zero length",
                        phase, host, end, start)
            end = start
        new.append({"host": str(host), "phase": str(phase), "start": round(start, 3), "end": round(end, 3)})
    if not new:
        return

    def add(phases: Any) -> list[Any]:
        if phases is not None and not isinstance(phases, list):
            log.warning("%s is not a list: starting it again", root / "phases.json")
            phases = None
        return [*(phases or []), *new]

    update_json(root / "phases.json", add, indent=1)


class RunDir:
    """One run's folder. ``RunDir.create("reports")`` makes a new one and points ``latest`` at it."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id

    @classmethod
    def create(cls, base: str | Path = "reports", run_id: str | None = None) -> RunDir:
        base = Path(base)
        run_id = run_id or new_run_id()
        path = base / run_id
        path.mkdir(parents=True, exist_ok=True)
        link = base / "latest"
        tmp = base / f".latest.{secrets.token_hex(4)}"
        try:
            tmp.symlink_to(run_id)
            os.replace(tmp, link)
        except OSError:  # a file system without symlinks still gets the run folder
            tmp.unlink(missing_ok=True)
        return cls(path, run_id)

    def file(self, *parts: str) -> Path:
        p = self.path.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_json(self, name: str, data: Any) -> Path:
        return write_atomic(self.file(name), json.dumps(data, indent=2, default=str) + "\n")

    def update_json(self, name: str, update: Callable[[Any], Any]) -> Path:
        """``update_json`` on a file of this run (see the module function)."""
        return update_json(self.file(name), update)

    def write_text(self, name: str, text: str) -> Path:
        return write_atomic(self.file(name), text)

    def __repr__(self) -> str:
        return f"<RunDir {self.path}>"
