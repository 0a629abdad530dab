"""Opening a host file once (shipped to hosts as source: standard library only, self-contained).

Each file is opened ``O_NOFOLLOW`` and judged by its descriptor (``fstat``): a regular file, one link,
owned by an allowed uid, not writable by group or others. Everything camit needs is then read from that
one descriptor: the ELF core notes (the ``facts`` function given to :func:`main`), and, within the cap,
a private copy (``O_EXCL``, 0600: what gdb reads) and its gzip (what is fetched), hashed as they are
written. A path swapped for a symlink or a hard link between the scan and this open is refused, and
nothing re-opens the path later. One JSON line per file (names stay data):

    python3 -c <program> <out_dir> <cap_bytes> <index> <allowed uids, comma-separated> <path> [...]
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

CHUNK = 1 << 20


class Refused(Exception):
    """The file is not one camit may read (its descriptor says why)."""


def open_checked(path: str, allowed: set[int]) -> tuple[int, os.stat_result]:
    """An ``O_NOFOLLOW`` descriptor of ``path`` and its ``fstat``, or :class:`Refused`."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise Refused(f"cannot open without following links: {exc.strerror}") from None
    st = os.fstat(fd)
    why = ("not a regular file" if not stat.S_ISREG(st.st_mode)
           else f"has {st.st_nlink} links" if st.st_nlink != 1
           else f"owned by uid {st.st_uid}" if st.st_uid not in allowed
           else "writable by group or others" if st.st_mode & 0o022 else "")
    if why:
        os.close(fd)
        raise Refused(why)
    return fd, st


def copy_out(fd: int, size: int, copy: str, gz: str) -> str:
    """Copy the first ``size`` bytes of ``fd`` to ``copy`` and gzip them to ``gz`` (both new, 0600);
    returns their sha256."""
    digest = hashlib.sha256()
    wflags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(copy, wflags, 0o600), "wb") as raw, \
            os.fdopen(os.open(gz, wflags, 0o600), "wb") as zout, \
            gzip.GzipFile(fileobj=zout, mode="wb", compresslevel=1, mtime=0) as z:
        pos = 0
        while pos < size:
            chunk = os.pread(fd, min(CHUNK, size - pos), pos)
            if not chunk:
                break
            digest.update(chunk)
            raw.write(chunk)
            z.write(chunk)
            pos += len(chunk)
    return digest.hexdigest()


def one(out_dir: str, cap: int, index: str, allowed: set[int], path: str,
        facts: Callable[[BinaryIO], dict[str, Any]]) -> dict[str, Any]:
    """Open, judge, read the facts of, and (within ``cap``) copy and gzip one file."""
    rec: dict[str, Any] = {"i": index, "path": path}
    try:
        fd, st = open_checked(path, allowed)
    except Refused as exc:
        rec["refused"] = str(exc)
        return rec
    try:
        rec.update(size=st.st_size, owner=st.st_uid, inode=st.st_ino)
        with os.fdopen(os.dup(fd), "rb") as f:
            try:
                rec["facts"] = facts(f)
            except Exception as exc:  # a malformed core: its notes are unreadable, nothing else
                rec["facts"] = {"error": repr(exc)[:300]}
        if st.st_size <= cap:
            base = os.path.join(out_dir, index)
            rec["sha256"] = copy_out(fd, st.st_size, base + ".core", base + ".gz")
            rec.update(copy=base + ".core", gz=base + ".gz")
    except OSError as exc:
        rec["error"] = f"{type(exc).__name__}: {exc.strerror}"
    finally:
        os.close(fd)
    return rec


def main(argv: list[str], facts: Callable[[BinaryIO], dict[str, Any]]) -> int:
    """``<out_dir> <cap> (<index> <uids> <path>)...``: one JSON line per file."""
    out_dir, cap, rest = argv[0], int(argv[1]), argv[2:]
    for k in range(0, len(rest) - 2, 3):
        allowed = {int(u) for u in rest[k + 1].split(",") if u.isdigit()}
        sys.stdout.write(json.dumps(one(out_dir, cap, rest[k], allowed, rest[k + 2], facts)) + "\n")
    return 0
