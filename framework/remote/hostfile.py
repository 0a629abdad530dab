"""Opening a host file once, judged by its descriptor; packing a folder tree walked by descriptor.

Shipped to hosts as source (standard library only, self-contained): core files
(``<out_dir> <cap> (<index> <uids> <path>)...``) and pack mode (:func:`pack_main`, for logs).
The rules and why: docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import json
import os
import stat
import sys
import tarfile
from collections.abc import Callable
from typing import Any, BinaryIO

CHUNK = 1 << 20


class Refused(Exception):
    """The file is not one camit may read (its descriptor says why)."""


def open_checked(path: str, allowed: set[int], dir_fd: int | None = None,
                 writable: bool = False) -> tuple[int, os.stat_result]:
    """An ``O_NOFOLLOW`` descriptor of ``path`` (relative to ``dir_fd``) and its ``fstat``.

    Raises :class:`Refused`. ``writable``: a file group or others may write passes (a log: its
    text is data).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(f"cannot open without following links: {exc.strerror}") from None
    st = os.fstat(fd)
    why = why_refused(st, allowed, writable)
    if why:
        os.close(fd)
        raise Refused(why)
    return fd, st


def why_refused(st: os.stat_result, allowed: set[int], writable: bool) -> str:
    """Why a file with this ``fstat`` may not be read (the first rule it breaks); "" when it may."""
    rules = (
        (not stat.S_ISREG(st.st_mode), "not a regular file"),
        (st.st_nlink != 1, f"has {st.st_nlink} links"),
        (st.st_uid not in allowed, f"owned by uid {st.st_uid}"),
        (bool(st.st_mode & 0o022) and not writable, "writable by group or others"),
    )
    return next((why for broken, why in rules if broken), "")


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


# -- pack mode: a folder tree, walked by descriptor -------------------------------------------
MAX_DIRS = 512  # folder descriptors held open during a walk (well under the usual 1024 soft limit)
MAX_DEPTH = 16
MAX_FILES = 20000
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def keep_dir(sel: dict[str, Any], depth: int, name: str) -> bool:
    """Descend into folder ``name`` at ``depth`` (0: the root's own)?

    ``sel["dirs"]`` names the root's.
    """
    return depth < MAX_DEPTH and (depth > 0 or "dirs" not in sel or name in sel["dirs"])


def keep_file(sel: dict[str, Any], depth: int, name: str, st: os.stat_result, since: float) -> bool:
    """Pack this regular file?

    Changed after ``since``, its name matching one of ``sel["names"]`` (when given); at the root's
    top only the names matching ``sel["top"]`` (when given); below it only files under
    ``sel["each"]`` bytes (when given).
    """
    if not stat.S_ISREG(st.st_mode) or st.st_mtime <= since:
        return False
    if not matches(sel, "names", name):
        return False
    if depth == 0:
        return matches(sel, "top", name)
    return bool(st.st_size < sel.get("each", st.st_size + 1))


def matches(sel: dict[str, Any], key: str, name: str) -> bool:
    """Whether ``name`` matches one of the patterns ``sel[key]`` (True when ``sel`` has none)."""
    return key not in sel or any(fnmatch.fnmatchcase(name, p) for p in sel[key])


class Walker:
    """One walk's state: the folder descriptors held, the folders still to read, the files kept."""

    def __init__(self, dirs: list[int], sel: dict[str, Any], since: float) -> None:
        self.dirs, self.sel, self.since = dirs, sel, since
        self.todo: list[tuple[int, str, int]] = []
        self.found: list[tuple[float, int, int, str, str]] = []

    def open_dir(self, name: str, dir_fd: int | None, rel: str, depth: int) -> None:
        """Hold folder ``name`` open (never through a symlink) and queue it; skipped if it fails."""
        try:
            self.dirs.append(os.open(name, DIR_FLAGS, dir_fd=dir_fd))
        except OSError:
            return
        self.todo.append((len(self.dirs) - 1, rel, depth))

    def read_dir(self, k: int, rel: str, depth: int) -> None:
        """Visit the entries of the folder held at ``dirs[k]``, in name order."""
        try:
            names = sorted(os.listdir(self.dirs[k]))
        except OSError:
            return
        for name in names:
            self.visit(k, rel, depth, name)

    def visit(self, k: int, rel: str, depth: int, name: str) -> None:
        """Queue a folder to descend into, or keep a file (judged by ``lstat``)."""
        try:
            st = os.lstat(name, dir_fd=self.dirs[k])
        except OSError:
            return
        if self.descend(st, depth, name):
            self.open_dir(name, self.dirs[k], f"{rel}{name}/", depth + 1)
        elif keep_file(self.sel, depth, name, st, self.since):
            self.found.append((st.st_mtime, st.st_size, k, rel, name))

    def descend(self, st: os.stat_result, depth: int, name: str) -> bool:
        """A folder to walk, while descriptors are left."""
        room = len(self.dirs) < MAX_DIRS
        return stat.S_ISDIR(st.st_mode) and keep_dir(self.sel, depth, name) and room


def walk(root: str, since: float, dirs: list[int],
         sel: dict[str, Any]) -> list[tuple[float, int, int, str, str]]:
    """(mtime, size, folder index in ``dirs``, relative folder, name) of the files :func:`keep_file`
    keeps below ``root``, from ``lstat`` by folder descriptor.

    Each folder is opened ``O_NOFOLLOW`` once and kept in ``dirs``; a folder that is a symlink, or
    not openable, is skipped.
    """
    walker = Walker(dirs, sel, since)
    walker.open_dir(root, None, "", 0)
    while walker.todo and len(walker.found) < MAX_FILES:
        walker.read_dir(*walker.todo.pop())
    return walker.found


class _Exact:
    """Exactly ``size`` bytes of ``fd`` from offset 0 (pread; NUL-padded if the file shrank)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size, self.pos = fd, size, 0

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n < 0 else min(n, self.size - self.pos)
        chunk = os.pread(self.fd, n, self.pos) if n > 0 else b""
        chunk += b"\0" * (n - len(chunk))
        self.pos += n
        return chunk


def pack_one(tar: tarfile.TarFile, dir_fd: int, name: str, member: str, allowed: set[int],
             room: int) -> int:
    """Add ``name`` (opened once, relative to ``dir_fd``, judged by its descriptor) as ``member``.

    The bytes added (its size at open, at most ``room``), or -1 when refused.
    """
    try:
        fd, st = open_checked(name, allowed, dir_fd=dir_fd, writable=True)
    except Refused:
        return -1
    try:
        info = tarfile.TarInfo(member)
        info.size, info.mtime, info.mode = min(st.st_size, room), int(st.st_mtime), 0o600
        tar.addfile(info, _Exact(fd, info.size))
        return info.size
    finally:
        os.close(fd)


def pack(out: str, cap: int, since: float, allowed: set[int], roots: list[str],
         sel: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pack the files below ``roots`` changed after ``since`` into ``out`` (new, 0600).

    Newest first up to ``cap`` bytes; each member is named ``<root without its leading />/<relative
    path>``, or by its relative path alone when ``sel["bare"]`` (``sel``: :func:`keep_dir`,
    :func:`keep_file`).
    """
    sel = {} if sel is None else sel
    dirs: list[int] = []
    rec: dict[str, Any] = {"files": 0, "bytes": 0, "refused": 0}
    try:
        found = [(f, "" if sel.get("bare") else root.strip("/") + "/")
                 for root in roots for f in walk(root, since, dirs, sel)]
        found.sort(key=lambda item: -item[0][0])
        write_tar(out, cap, found, dirs, allowed, rec)
    except OSError as exc:
        rec["error"] = f"{type(exc).__name__}: {exc.strerror}"
    finally:
        for fd in dirs:
            os.close(fd)
    return rec


def write_tar(out: str, cap: int, found: list[tuple[tuple[float, int, int, str, str], str]],
              dirs: list[int], allowed: set[int], rec: dict[str, Any]) -> None:
    """The ``found`` files that fit in ``cap`` into a new gzipped tar ``out``; counts in ``rec``."""
    wflags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(out, wflags, 0o600), "wb") as raw, \
            tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.GNU_FORMAT,
                         compresslevel=1) as tar:
        for (_, size, k, rel, name), root in found:
            if rec["bytes"] + size > cap:  # over the budget: left on the host, older ones may fit
                continue
            got = pack_one(tar, dirs[k], name, f"{root}{rel}{name}", allowed, cap - rec["bytes"])
            rec["refused" if got < 0 else "files"] += 1
            rec["bytes"] += max(got, 0)


def pack_main(argv: list[str]) -> int:
    """``<out.tgz> <cap> <since> <uids> <selection JSON> <root>...``: one JSON line (files, bytes,
    refused)."""
    allowed = {int(u) for u in argv[3].split(",") if u.isdigit()}
    sel = json.loads(argv[4])
    rec = pack(argv[0], int(argv[1]), float(argv[2]), allowed, argv[5:], sel)
    sys.stdout.write(json.dumps(rec) + "\n")
    return 0
