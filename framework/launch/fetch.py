"""Bringing a node's run folder back: one tar stream per node into ``<report>/<host>/``, then reading it.

:func:`pack_script` and :func:`unpack` are the two ends of the stream;
:func:`read_ranks` turns what came back (the rank wrapper's ``rank<r>.json``,
``rank<r>.log``, ``rank<r>.xml``) into :class:`~framework.launch.result.RankResult` entries;
:func:`port_taken` reads ``torchrun.log`` for a master port another process had.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from framework import commands
from framework.commands import ShellScript
from framework.launch.plan import FETCH_DIRS, FETCH_PATTERNS, HCCL_PORT_CLASH, PORT_TAKEN
from framework.launch.result import LaunchResult, RankResult
from framework.remote import protocol

#: lines of the failed rank's log shown with the failure
TAIL_LINES = 20
#: larger files of the FETCH_DIRS stay on the host (a plog is rotated at 20 MB by default)
DIR_FILE_CAP_KB = 64 * 1024


def pack_script(run_dir: str, tgz: str) -> ShellScript:
    """sh: tar the run folder's files a rank leaves for us into ``tgz``.

    Only what :data:`FETCH_PATTERNS` names at the top, and the files of :data:`FETCH_DIRS` (plogs, the
    failure's NPU state) up to :data:`DIR_FILE_CAP_KB` each — never raw cores (a relative core_pattern
    drops them here; the core-dump collector fetches those compressed and capped).
    """
    q = commands.quote
    names = " -o ".join(f"-name {q(p)}" for p in FETCH_PATTERNS)
    dirs = " ".join(f"./{d}" for d in FETCH_DIRS)
    return ShellScript(f"cd {q(run_dir)} && {{ find . -maxdepth 1 -type f \\( {names} \\) -print0; "
                       f"find {dirs} -type f -size -{DIR_FILE_CAP_KB}k -print0 2>/dev/null; }} | "
                       f"tar czf {q(tgz)} --null -T -")


def cleanup_argv(run_dir: str, tgz: str, keep_remote: bool) -> list[str]:
    return ["rm", "-rf", "--", tgz] + ([] if keep_remote else [run_dir])


def _local_path(member: str) -> Path | None:
    """Where a packed file goes below the local folder: top-level files by base name, files of
    :data:`FETCH_DIRS` at their path inside; nothing hidden, nothing outside (``..``, absolute)."""
    parts = [p for p in Path(member).parts if p not in (".", "")]
    if not parts or any(p == ".." or p.startswith(".") for p in parts) or Path(member).is_absolute():
        return None
    if len(parts) > 1 and parts[0] in FETCH_DIRS:
        return Path(*parts)
    return Path(parts[-1])


def unpack(tgz: Path, local_dir: Path) -> None:
    """The regular files of ``tgz`` into ``local_dir`` (see :func:`_local_path`)."""
    with tarfile.open(tgz) as tar:
        for member in tar.getmembers():
            rel = _local_path(member.name) if member.isfile() else None
            data = tar.extractfile(member) if rel is not None else None
            if rel is None or data is None:
                continue
            dest = local_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data.read())


def read_ranks(result: LaunchResult, host: str, local_dir: Path) -> None:
    """Status, log and JUnit of every rank fetched into ``local_dir`` (the files win over the lines)."""
    for status in sorted(local_dir.glob(protocol.rank_file("*", "json"))):
        try:
            st = json.loads(status.read_text())
        except ValueError:
            continue
        rank = st.get("rank")
        if not isinstance(rank, int):
            continue
        rr = result.ranks.setdefault(rank, RankResult(rank, host))
        rr.exit_code, rr.signal = st.get("exit_code"), st.get("signal")
    for rank_log in local_dir.glob(protocol.rank_file("*", "log")):
        stem = rank_log.stem[len(protocol.RANK_STEM):]
        if stem.isdigit():
            rr = result.ranks.setdefault(int(stem), RankResult(int(stem), host))
            rr.log = str(rank_log)
            junit = local_dir / protocol.rank_file(stem, "xml")
            rr.junit = str(junit) if junit.exists() else None


def log_tail(path: str | None, lines: int = TAIL_LINES) -> str:
    if not path or not Path(path).exists():
        return ""
    return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])


def port_taken(node_dir: Path) -> bool:
    """Did this node's launch fail on a taken port: torchrun's master port, or HCCL's host port (EI0019,
    "listen on ip ... fail" in a rank log or a plog under ``ascend/``)?"""
    torchrun_log = node_dir / protocol.TORCHRUN_LOG
    if torchrun_log.exists() and any(s in torchrun_log.read_text(errors="replace").lower() for s in PORT_TAKEN):
        return True
    logs = [*node_dir.glob("rank*.log"), *node_dir.glob("ascend/**/plog-*.log")]
    return any(any(s in p.read_text(errors="replace").lower() for s in HCCL_PORT_CLASH) for p in logs)
