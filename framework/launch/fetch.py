"""Bringing a node's run folder back: one tar stream per node into ``<report>/<host>/``, then
reading it."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from framework import commands
from framework.commands import ShellScript
from framework.errors import FrameworkError
from framework.fetchcaps import FetchCapError, FetchCaps, caps, extract_tar
from framework.launch.plan import FETCH_DIRS, FETCH_PATTERNS, HCCL_PORT_CLASH, PORT_TAKEN
from framework.launch.result import LaunchResult, RankResult
from framework.remote import protocol
from framework.remote.packing import sh_pack

if TYPE_CHECKING:
    from framework.hosts import Host

log = logging.getLogger("camit.launch")

#: lines of the failed rank's log shown with the failure
TAIL_LINES = 20
#: larger files of the FETCH_DIRS stay on the host (a plog is rotated at 20 MB by default)
DIR_FILE_CAP_KB = 64 * 1024


def pack_script(run_dir: str, tgz: str, cap: int | None = None) -> ShellScript:
    """sh: pack the run folder's files a rank leaves for us into ``tgz`` (a new file), through the host
    program (:mod:`framework.remote.packing`: folders walked by descriptor, never through a symlink; each
    file the SSH user's, one link, opened once and read from that descriptor), up to ``cap`` bytes.

    Only what :data:`FETCH_PATTERNS` names at the top, and the files of :data:`FETCH_DIRS` (plogs, the
    failure's NPU state) under :data:`DIR_FILE_CAP_KB` each — never raw cores (a relative core_pattern
    drops them here; the core-dump collector fetches those compressed and capped). Fails (the program's
    line on stderr) when nothing could be packed.
    """
    q = commands.quote
    select = {"top": list(FETCH_PATTERNS), "dirs": list(FETCH_DIRS), "each": DIR_FILE_CAP_KB * 1024, "bare": True}
    return ShellScript(f"rm -f -- {q(tgz)}; "
                       + sh_pack(q(tgz), caps().max_bytes if cap is None else cap, -1, q(run_dir), select)
                       + f"; [ -n \"$n\" ] && [ -s {q(tgz)} ] || {{ printf '%s\\n' \"$r\" >&2; exit 1; }}")


def cleanup_argv(run_dir: str, tgz: str, keep_remote: bool) -> list[str]:
    return ["rm", "-rf", "--", tgz] + ([] if keep_remote else [run_dir])


def _local_path(member: str) -> Path | None:
    """Where a packed file goes below the local folder: top-level files by base name, files of
    :data:`FETCH_DIRS` at their path inside; nothing hidden, nothing outside (``..``, absolute)."""
    path = Path(member)
    if _refused(path):
        return None
    parts = path.parts
    if len(parts) > 1 and parts[0] in FETCH_DIRS:
        return Path(*parts)
    return Path(parts[-1])


def _refused(path: Path) -> bool:
    """A member name that is empty, absolute, hidden or a way out: never unpacked."""
    parts = path.parts  # pathlib drops "." and empty parts: "./a//b" is ("a", "b")
    if not parts or path.is_absolute():
        return True
    # ".." starts with a dot too: a hidden name and a way out are refused alike
    return any(p.startswith(".") for p in parts)


def unpack(tgz: Path, local_dir: Path, *, host: str = "host", what: str | None = None,
           cap: FetchCaps | None = None) -> list[str]:
    """The regular files of ``tgz`` into ``local_dir`` (see :func:`_local_path`), mode 0600, bounded.

    Streams each member under the caps of :func:`framework.fetchcaps.extract_tar` (member and total size);
    returns the notes of what was cut (naming ``host`` and the file), empty when everything came.
    """
    got = extract_tar(tgz, local_dir, host=host, what=what or tgz.name,
                      place=lambda m: _local_path(m.name), cap=cap)
    return list(got.notes or [])


def fetch_run_folder(host: Host, run_dir: str, tgz: str, local_dir: Path, *, keep_remote: bool,
                     cap: FetchCaps | None = None) -> list[str]:
    """Pack, download (bounded) and unpack (bounded) one node's run folder; the notes of every cap hit.

    A download stopped at its byte cap keeps what came and unpacks the members before the cut. The remote
    tgz (and, unless ``keep_remote``, the run folder) is removed whatever happened.
    """
    cap = cap or caps()
    notes: list[str] = []
    tmp = local_dir / ".fetch.tgz"
    try:
        host.check(pack_script(run_dir, tgz), timeout=120)
        local_dir.mkdir(parents=True, exist_ok=True)
        try:
            host.get(tgz, tmp, cap=cap, keep_partial=True)
        except FetchCapError as exc:
            notes.append(str(exc))
        if tmp.exists():
            notes += unpack(tmp, local_dir, host=host.name, what=f"run folder {run_dir}", cap=cap)
    finally:
        tmp.unlink(missing_ok=True)
        try:
            host.run(cleanup_argv(run_dir, tgz, keep_remote), timeout=60)
        except FrameworkError as exc:
            log.warning("%s: could not clean %s up: %s", host.name, run_dir, exc)
    return notes


def read_ranks(result: LaunchResult, host: str, local_dir: Path) -> None:
    """Status, log and JUnit of every rank fetched into ``local_dir`` (the files win over the lines)."""
    for status in sorted(local_dir.glob(protocol.rank_file("*", "json"))):
        _read_status(result, host, status)
    for rank_log in local_dir.glob(protocol.rank_file("*", "log")):
        stem = rank_log.stem[len(protocol.RANK_STEM):]
        if stem.isdigit():
            rr = result.ranks.setdefault(int(stem), RankResult(int(stem), host))
            rr.log = str(rank_log)
            junit = local_dir / protocol.rank_file(stem, "xml")
            rr.junit = str(junit) if junit.exists() else None


def _read_status(result: LaunchResult, host: str, status: Path) -> None:
    """A rank's exit code and signal from its status file (one that is not JSON or names no rank:
    skipped)."""
    try:
        st = json.loads(status.read_text())
    except ValueError:
        return
    rank = st.get("rank")
    if isinstance(rank, int):
        rr = result.ranks.setdefault(rank, RankResult(rank, host))
        rr.exit_code, rr.signal = st.get("exit_code"), st.get("signal")


def log_tail(path: str | None, lines: int = TAIL_LINES, window: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a fetched log, read from its last ``window`` bytes only (a log may be
    hundreds of MiB)."""
    if not path or not Path(path).exists():
        return ""
    with open(path, "rb") as fh:
        fh.seek(max(0, fh.seek(0, os.SEEK_END) - window))
        return "\n".join(fh.read().decode("utf-8", "replace").splitlines()[-lines:])


def port_taken(node_dir: Path) -> bool:
    """Did this node's launch fail on a taken port: torchrun's master port, or HCCL's host port (EI0019,
    "listen on ip ... fail" in a rank log or a plog under ``ascend/``)?"""
    torchrun_log = node_dir / protocol.TORCHRUN_LOG
    if torchrun_log.exists() and _mentions(torchrun_log, PORT_TAKEN):
        return True
    logs = [*node_dir.glob("rank*.log"), *node_dir.glob("ascend/**/plog-*.log")]
    return any(_mentions(p, HCCL_PORT_CLASH) for p in logs)


def _mentions(path: Path, words: Iterable[str]) -> bool:
    """Does the file say any of ``words`` (lower case)?"""
    text = path.read_text(errors="replace").lower()
    return any(w in text for w in words)
