"""Bounds on everything camit brings back from a host: bytes read, time taken, what an archive
expands to.

The caps, their defaults and ``CAMIT_FETCH_*`` overrides: docs/internals/core.md.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, cast

from framework.errors import Cancelled, TransferError, UsageError

if TYPE_CHECKING:  # imported where archives are read: the hosts module (every command) imports this one
    import tarfile

CHUNK = 1 << 20
MiB = 1 << 20
GiB = 1 << 30

#: the built-in caps: one download, its time, one archive member, one archive's whole expansion
DEFAULTS: Mapping[str, float] = {
    "max_bytes": 2 * GiB,   # a compressed core up to the core cap (1 GiB raw) always fits
    "timeout": 1800.0,
    "member_bytes": 256 * MiB,
    "total_bytes": 2 * GiB,
    "expand_bytes": 8 * GiB,  # expanded archive stream read at all (skipping a cut member's rest costs this)
}
ENV_KEYS: Mapping[str, str] = {
    "max_bytes": "CAMIT_FETCH_MAX_BYTES",
    "timeout": "CAMIT_FETCH_TIMEOUT",
    "member_bytes": "CAMIT_FETCH_MEMBER_BYTES",
    "total_bytes": "CAMIT_FETCH_TOTAL_BYTES",
    "expand_bytes": "CAMIT_FETCH_EXPAND_BYTES",
}
#: members of one archive read at all (each costs a header in memory)
MAX_MEMBERS = 50_000
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
#: a size suffix's multiplier (binary units)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class FetchCapError(TransferError):
    """A download stopped at its byte or time cap (what was read so far may be kept)."""

    def __init__(self, host: str, message: str, *, received: int = 0) -> None:
        super().__init__(host, message)
        self.received = received


@dataclass(frozen=True)
class FetchCaps:
    """The caps of one fetch (see the module doc); ``with_(...)`` for a variant."""

    max_bytes: int = int(DEFAULTS["max_bytes"])
    timeout: float = float(DEFAULTS["timeout"])
    member_bytes: int = int(DEFAULTS["member_bytes"])
    total_bytes: int = int(DEFAULTS["total_bytes"])
    expand_bytes: int = int(DEFAULTS["expand_bytes"])
    #: set by an interrupt (``Host.cancel_event``): the download stops at the next chunk (``Cancelled``)
    cancel: threading.Event | None = field(default=None, compare=False)

    def with_(self, **changes: Any) -> FetchCaps:
        return replace(self, **changes)

    @property
    def cancelled(self) -> bool:
        """An interrupt asked the download to stop."""
        return self.cancel is not None and self.cancel.is_set()


def parse_size(value: str, key: str) -> int:
    """``64M`` → 64 MiB; a clear error naming ``key`` otherwise."""
    m = _SIZE.match(value)
    if m is None or int(m.group(1)) <= 0:
        raise UsageError(f"{key}={value!r}: expected a positive size in bytes (K, M, G or T suffix allowed)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def caps(environ: Mapping[str, str] | None = None) -> FetchCaps:
    """The effective caps: :data:`DEFAULTS`, each overridden by its :data:`ENV_KEYS` variable when set."""
    env = os.environ if environ is None else environ
    values: dict[str, float] = {}
    for field_name, key in ENV_KEYS.items():
        raw = env.get(key, "").strip()
        if raw:
            values[field_name] = _PARSERS.get(field_name, parse_size)(raw, key)
    return FetchCaps().with_(**values)


def _seconds(value: str, key: str) -> float:
    """``90`` or ``1.5`` → seconds; a clear error naming ``key`` unless positive and below 1e7."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 1e7:
        raise UsageError(f"{key}={value!r}: expected a positive number of seconds")
    return seconds


#: how a cap's environment variable is read, when it is not a size (:func:`parse_size`)
_PARSERS: Mapping[str, Callable[[str, str], float]] = {"timeout": _seconds}


def human(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def open_private(path: Path) -> BinaryIO:
    """A new file at ``path`` for host data: mode 0600, never through a symlink, never an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    return os.fdopen(fd, "wb")


def write_private(path: Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` (mode 0600) via a new file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        with open_private(tmp) as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def copy_bounded(read: Callable[[int], bytes], out: BinaryIO, *, host: str, remote: str, cap: FetchCaps,
                 started: float | None = None) -> int:
    """Copy ``read(n)`` chunks to ``out`` until EOF; raise :class:`FetchCapError` past the byte or time cap.

    The bytes counted are the bytes read: at most ``cap.max_bytes`` are written (what came so far stays in
    ``out``); the time cap is checked after every chunk.
    """
    start = time.monotonic() if started is None else started
    got = 0
    while chunk := read(CHUNK):
        room = cap.max_bytes - got
        if len(chunk) > room:
            out.write(chunk[:room])
            raise FetchCapError(host, f"download of {remote} stopped at the cap of {human(cap.max_bytes)} "
                                      f"({ENV_KEYS['max_bytes']}); the first {human(cap.max_bytes)} are kept",
                                received=cap.max_bytes)
        out.write(chunk)
        got += len(chunk)
        _stop_if_due(cap, host, remote, got, start)
    return got


def _stop_if_due(cap: FetchCaps, host: str, remote: str, got: int, started: float) -> None:
    """Raise when the download is interrupted (``Cancelled``) or past its time cap."""
    if cap.cancelled:
        raise Cancelled(host, f"interrupted: download of {remote} stopped after {human(got)}")
    if time.monotonic() - started > cap.timeout:
        why = (f"download of {remote} took longer than {cap.timeout:g}s ({ENV_KEYS['timeout']}); "
               f"stopped after {human(got)}")
        raise FetchCapError(host, why, received=got)


@dataclass
class Extracted:
    """What :func:`extract_tar` wrote and where it stopped (``notes`` name the host and file)."""

    files: list[Path]
    total: int = 0
    notes: list[str] | None = None

    def __post_init__(self) -> None:
        if self.notes is None:
            self.notes = []


def extract_tar(tgz: Path, dest: Path, *, host: str, what: str, place: Callable[[tarfile.TarInfo], Path | None],
                cap: FetchCaps | None = None) -> Extracted:
    """Extract the regular files of ``tgz`` that ``place`` maps to a relative path into ``dest`` (mode 0600).

    Members are read one at a time in chunks (never whole): each stops at ``cap.member_bytes`` (the part
    written is kept, a note says so), the archive at ``cap.total_bytes`` written, at ``cap.expand_bytes``
    of expanded stream (what skipping a cut member's rest costs) and at :data:`MAX_MEMBERS` members. A
    truncated or corrupt archive (a download cut at its cap) keeps the members read before the damage.
    Never follows or writes through a symlink; never leaves ``dest``. ``what`` names the archive in the notes.
    """
    import tarfile

    cap = cap or caps()
    out = Extracted([])
    notes: list[str] = out.notes if out.notes is not None else []
    dest.mkdir(parents=True, exist_ok=True)
    label = f"{host}: {what}"
    try:
        with (_bounded_stream(tgz, cap.expand_bytes) as stream,
              tarfile.open(fileobj=cast(BinaryIO, stream), mode="r:") as tar):
            _extract_members(tar, dest, place, cap, out, notes, label)
    except ArchiveBound as exc:
        notes.append(f"{label}: stopped after {len(out.files)} file(s): {exc}; "
                     "the files before it are kept")
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error, MemoryError) as exc:
        notes.append(f"{label}: archive unreadable after {len(out.files)} file(s): "
                     f"{shown(str(exc))}")
    out.notes = notes
    return out


def _relative_target(member: tarfile.TarInfo, place: Callable[[tarfile.TarInfo], Path | None]
                     ) -> Path | None:
    """Where a regular member goes, relative to the destination; None for any other member and
    for a path that would leave the destination."""
    rel = place(member) if member.isfile() else None
    if rel is None or rel.is_absolute() or ".." in rel.parts:
        return None
    return rel


def _extract_members(tar: tarfile.TarFile, dest: Path,
                     place: Callable[[tarfile.TarInfo], Path | None], cap: FetchCaps,
                     out: Extracted, notes: list[str], label: str) -> None:
    """The member loop of :func:`extract_tar`: one member at a time, up to the caps."""
    root = dest.resolve()
    for count in range(MAX_MEMBERS + 1):
        member = tar.next()
        if member is None:
            return
        stop = _stop_before(member, count, out.total, cap)
        if stop:
            notes.append(f"{label}: {stop} before {shown(member.name)}; the files before it are kept")
            return
        rel = _relative_target(member, place)
        if rel is None:
            continue
        note = _extract_member(tar, member, dest / rel, root, cap, out)
        if note:
            notes.append(f"{label}: {note}")


#: the largest GNU long-name/long-link or pax header a member may carry (tarfile reads one whole)
HEADER_BYTES = 64 * 1024
_LONG_HEADERS = frozenset(b"LKxgX")


class ArchiveBound(Exception):
    """An archive's expanded stream broke a bound before tarfile could read it (a header bomb, a bomb)."""


def shown(text: str, limit: int = 200) -> str:
    """At most ``limit`` printable characters of a host-supplied name, for a note."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return clean + ("…" if len(text) > limit else "")


def _header_size(block: bytes) -> int:
    """The size field of a 512-byte tar header (octal, or GNU base-256)."""
    field = block[124:136]
    if field[:1] and field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    return _octal(field.split(b"\0", 1)[0].strip())


def _octal(digits: bytes) -> int:
    """The value of an octal number field's digits (0 when they are none or not octal)."""
    if not digits or any(c not in _OCTAL_DIGITS for c in digits):
        return 0
    return int(digits, 8)


_OCTAL_DIGITS = frozenset(b"01234567")


class _Bounded:
    """The expanded archive stream as tarfile reads it, bounded before anything is parsed: a long-name or
    pax header over :data:`HEADER_BYTES`, a single read over 4 MiB, or reading or seeking past
    ``expand`` bytes raises :class:`ArchiveBound` (tarfile reads such a header whole inside ``next()``)."""

    def __init__(self, raw: BinaryIO, expand: int) -> None:
        self.raw, self.expand = raw, expand

    def read(self, n: int = -1) -> bytes:
        if _reads_all(n) or n > 4 * CHUNK:
            amount = "all" if _reads_all(n) else human(n)
            raise ArchiveBound(f"a single read of {amount} refused "
                               f"(a header bigger than {human(HEADER_BYTES)}?)")
        pos = self.raw.tell()
        n = self._allowed(pos, n)
        data = self.raw.read(n)
        _refuse_long_header(data, n, pos)
        return data

    def _allowed(self, pos: int, n: int) -> int:
        """``n`` bytes from ``pos``, cut at the expand bound; at the bound, :class:`ArchiveBound`."""
        if pos + n <= self.expand:
            return n
        if self.expand - pos <= 0:
            raise ArchiveBound(f"the archive expands past {human(self.expand)} "
                               f"({ENV_KEYS['expand_bytes']})")
        return self.expand - pos

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self.raw.tell() + offset if whence == 1 else -1
        if whence == 2 or target > self.expand:
            raise ArchiveBound(f"the archive expands past {human(self.expand)} ({ENV_KEYS['expand_bytes']})")
        return self.raw.seek(target)

    def tell(self) -> int:
        return self.raw.tell()


def _reads_all(n: int | None) -> bool:
    """A ``read(n)`` asking for the rest of the stream."""
    return n is None or n < 0


def _refuse_long_header(data: bytes, n: int, pos: int) -> None:
    """:class:`ArchiveBound` when ``data`` is a long-name or pax header over
    :data:`HEADER_BYTES`."""
    if _is_long_header(data, n, pos) and _header_size(data) > HEADER_BYTES:
        raise ArchiveBound(f"a member header of {human(_header_size(data))} "
                           f"(type {chr(data[156])}) is over {human(HEADER_BYTES)}")


def _is_long_header(data: bytes, n: int, pos: int) -> bool:
    """Whether ``data`` (``n`` bytes read at ``pos``) is a whole 512-byte block holding a GNU
    long-name/long-link or pax header."""
    return n == 512 and pos % 512 == 0 and len(data) == 512 and data[156] in _LONG_HEADERS


@contextlib.contextmanager
def _bounded_stream(tgz: Path, expand: int) -> Iterator[_Bounded]:
    """``tgz`` (gzip or plain tar) as a :class:`_Bounded` stream."""
    with open(tgz, "rb") as f:
        magic = f.read(2)
        f.seek(0)
        raw: BinaryIO = gzip.GzipFile(fileobj=f, mode="rb") if magic == b"\x1f\x8b" else f  # type: ignore[assignment]
        with raw:
            yield _Bounded(raw, expand)


def _stop_before(member: tarfile.TarInfo, count: int, total: int, cap: FetchCaps) -> str:
    """Why extraction stops before ``member`` ("" to go on)."""
    if count >= MAX_MEMBERS:
        return f"stopped at {MAX_MEMBERS} members"
    if total >= cap.total_bytes:
        return f"stopped at the total cap of {human(cap.total_bytes)} ({ENV_KEYS['total_bytes']})"
    if member.offset_data + member.size > cap.expand_bytes:
        return f"stopped: the archive expands past {human(cap.expand_bytes)} ({ENV_KEYS['expand_bytes']})"
    return ""


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, root: Path, cap: FetchCaps,
                    out: Extracted) -> str:
    """Copy one member to ``target`` up to the member and total caps; the note when it was cut."""
    if not _cleared(target, root):
        return ""
    src = tar.extractfile(member)
    if src is None:
        return ""
    limit = min(cap.member_bytes, cap.total_bytes - out.total)
    with src, open_private(target) as fh:
        written = _copy_capped(src, fh, limit)
    out.total += written
    out.files.append(target)
    return "" if written >= member.size else _cut_note(member, limit, cap)


def _cleared(target: Path, root: Path) -> bool:
    """Make ``target``'s folder and take away what is at ``target``; False (nothing touched) when
    the folder resolves outside ``root``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.parent.resolve().is_relative_to(root):
        return False
    if target.is_symlink() or target.exists():
        target.unlink()
    return True


def _cut_note(member: tarfile.TarInfo, limit: int, cap: FetchCaps) -> str:
    """The note of a member cut at ``limit``: which cap cut it (member or total)."""
    which = "member_bytes" if limit == cap.member_bytes else "total_bytes"
    return (f"{shown(member.name)} is {human(member.size)}, cut at the {which.split('_')[0]} cap of "
            f"{human(getattr(cap, which))} ({ENV_KEYS[which]})")


def _copy_capped(src: IO[bytes], fh: IO[bytes], limit: int) -> int:
    """Copy ``src`` to ``fh`` in chunks up to ``limit`` bytes, then read past the rest; the bytes
    written."""
    written = 0
    while written < limit:
        chunk = src.read(min(CHUNK, limit - written))
        if not chunk:
            break
        fh.write(chunk)
        written += len(chunk)
    while written >= limit and src.read(4 * CHUNK):  # skip the rest in large reads (tar's seek reads 8 KiB)
        pass
    return written


__all__ = ["DEFAULTS", "ENV_KEYS", "HEADER_BYTES", "ArchiveBound", "Extracted", "FetchCapError", "FetchCaps", "caps",
           "copy_bounded", "extract_tar", "open_private", "parse_size", "shown", "write_private"]
