#!/usr/bin/env python3
"""camit wheelinst: install one wheel into the running interpreter's environment, without pip.

Shipped to the hosts by ``framework.deploy`` and run by the python of camit's venv there;
standard library only. ``wheelinst.py [--no-compile] [--installer NAME] [--sha256 HEX] WHEEL``.
What it checks and writes, step by step: docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import base64
import configparser
import csv
import errno
import hashlib
import importlib.util
import io
import os
import py_compile
import re
import shutil
import stat
import sys
import sysconfig
import zipfile
from email.parser import HeaderParser
from typing import IO, BinaryIO

CHUNK = 1 << 20
#: the hash algorithms a RECORD may use (PEP 376/427: sha256 or stronger)
HASHES = ("sha256", "sha384", "sha512")
#: ``<name>.data/<key>/`` keys and the scheme path each goes to
DATA_KEYS = ("purelib", "platlib", "scripts", "headers", "data")
#: RECORD's own name and the signature files that are listed without a hash
UNHASHED = ("RECORD", "RECORD.jws", "RECORD.p7s")
#: the staging folder in the target lib folder, ``<STAGING><pid>``
STAGING = ".camit-wheelinst-"
#: exit status: the wheel is refused (bad, tampered or unsupported); an I/O failure while
#: installing; the wheel file is not the one ``--sha256`` names (as
#: ``framework.remote.layout.sh_verified``'s exit status)
EXIT_REFUSED, EXIT_FAILED, EXIT_MISMATCH = 2, 1, 3


class Refused(Exception):
    """The wheel is not installed: ``member`` (or the wheel) is bad, tampered or unsupported."""

    def __init__(self, member: str, reason: str) -> None:
        super().__init__(f"{member}: {reason}" if member else reason)


def normalize(name: str) -> str:
    """PEP 503: runs of ``-_.`` are one ``-``, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def b64_digest(h: hashlib._Hash) -> str:
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")


def _is_absolute(name: str) -> bool:
    """An empty, absolute, drive-letter or backslashed path."""
    return not name or name.startswith(("/", "\\")) or bool(re.match(r"^[A-Za-z]:", name)) \
        or "\\" in name


def _has_bad_part(name: str) -> bool:
    """A ``..`` or an empty part, or a NUL byte."""
    return any(part in ("..", "") for part in name.rstrip("/").split("/")) or "\0" in name


def safe_member(name: str) -> str:
    """``name`` if it is a relative path without ``..`` (no member points outside its target)."""
    if _is_absolute(name):
        raise Refused(name, "absolute or non-POSIX path in the wheel")
    if _has_bad_part(name):
        raise Refused(name, "path with '..' or an empty part in the wheel")
    return name


def _open_zip(path: str | BinaryIO) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise Refused("", f"not a readable zip file: {exc}") from exc


def _check_names(names: list[str]) -> None:
    """Every member's name is safe and appears once."""
    for n in names:
        safe_member(n)
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise Refused(n, "appears more than once in the wheel")
        seen.add(n)


def _the_dist_info(names: list[str]) -> str:
    """The one top-level ``*.dist-info`` folder."""
    infos = sorted({t for t in (n.split("/", 1)[0] for n in names) if t.endswith(".dist-info")})
    if len(infos) != 1:
        raise Refused("", f"expected one top-level .dist-info folder, found {len(infos) or 'none'}")
    return infos[0]


def _check_wheel_version(member: str, version: str) -> None:
    """Only ``Wheel-Version: 1.x`` is installed."""
    if not re.match(r"^1(\.\d+)?$", version):
        raise Refused(member, f"Wheel-Version {version or '(none)'} is not supported (only 1.x)")


def _header(headers: dict[str, str], key: str) -> str:
    """A header's value, stripped; "" when it is missing."""
    return headers.get(key, "").strip()


def _record_row(row: list[str]) -> tuple[str, str, int | None]:
    """(algorithm, digest, size) of one RECORD row."""
    path, digest, size = (row + ["", ""])[:3]
    algo, _, value = digest.partition("=")
    if not size:
        return algo, value, None
    try:
        return algo, value, int(size)
    except ValueError:
        raise Refused(path, f"size {size!r} in RECORD is not a number") from None


def parse_record(text: str) -> dict[str, tuple[str, str, int | None]]:
    """member -> (algorithm, digest, size) of every row of a RECORD file."""
    return {row[0]: _record_row(row) for row in csv.reader(io.StringIO(text)) if row and row[0]}


class Wheel:
    """One ``.whl``: its dist-info, WHEEL, METADATA and RECORD, checked before any write."""

    def __init__(self, path: str | BinaryIO) -> None:
        self.zip = _open_zip(path)
        self.members = [i for i in self.zip.infolist() if not i.filename.endswith("/")]
        names = [i.filename for i in self.members]
        _check_names(names)
        self.dist_info = _the_dist_info(names)
        wheel = self._headers("WHEEL")
        _check_wheel_version(f"{self.dist_info}/WHEEL", _header(wheel, "Wheel-Version"))
        self.purelib = _header(wheel, "Root-Is-Purelib").lower() == "true"
        meta = self._headers("METADATA")
        self.name, self.version = _header(meta, "Name"), _header(meta, "Version")
        if not self.name:
            raise Refused(f"{self.dist_info}/METADATA", "no Name")
        self.data_dir = self.dist_info[: -len(".dist-info")] + ".data"
        self.record = self._record()

    def _read(self, name: str) -> bytes:
        try:
            return self.zip.read(name)
        except KeyError:
            raise Refused(name, "missing from the wheel") from None

    def _headers(self, base: str) -> dict[str, str]:
        text = self._read(f"{self.dist_info}/{base}").decode("utf-8", "replace")
        return dict(HeaderParser().parsestr(text).items())

    def _record(self) -> dict[str, tuple[str, str, int | None]]:
        """member → (algorithm, digest, size) from RECORD; every member listed with a hash."""
        rows = parse_record(self._read(f"{self.dist_info}/RECORD").decode("utf-8"))
        for info in self.members:
            self._check_listed(info.filename, rows)
        return rows

    def _check_listed(self, member: str, rows: dict[str, tuple[str, str, int | None]]) -> None:
        """``member`` is in RECORD, with a sha256 or stronger hash unless it is listed unhashed."""
        if member not in rows:
            raise Refused(member, "is not listed in RECORD")
        if self._unhashed(member):
            return
        algo, value, _size = rows[member]
        if algo not in HASHES or not value:
            raise Refused(member, f"has no sha256 (or stronger) hash in RECORD ({algo or 'none'})")

    def _unhashed(self, member: str) -> bool:
        """RECORD itself and its signatures, listed without a hash."""
        return member.startswith(self.dist_info + "/") and member.split("/", 1)[1] in UNHASHED


class Scheme:
    """Where each part of the wheel goes: this interpreter's ``sysconfig`` paths (the venv's)."""

    def __init__(self, name: str) -> None:
        paths = sysconfig.get_paths()
        self.purelib, self.platlib = paths["purelib"], paths["platlib"]
        self.scripts, self.data = paths["scripts"], paths["data"]
        # pip's place for a venv's headers: <prefix>/include/site/pythonX.Y/<name>
        python = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        self.headers = os.path.join(sys.prefix, "include", "site", python, name)
        folders = (self.purelib, self.platlib, self.scripts, self.headers, self.data)
        self.dirs = dict(zip(DATA_KEYS, folders))
        self.roots = [os.path.realpath(p) for p in self.dirs.values()]

    def key(self, key: str) -> str:
        return self.dirs[key]

    def root(self, purelib: bool) -> str:
        """The lib folder of a wheel's root (``Root-Is-Purelib``)."""
        return self.purelib if purelib else self.platlib

    def inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return any(real.startswith(root.rstrip("/") + "/") for root in self.roots)


def target_of(wheel: Wheel, scheme: Scheme, member: str) -> tuple[str, bool]:
    """(installed path, is a script) of ``member``."""
    if not member.startswith(wheel.data_dir + "/"):
        return os.path.join(scheme.root(wheel.purelib), member), False
    parts = member.split("/", 2)
    if len(parts) < 3 or parts[1] not in DATA_KEYS:
        raise Refused(member, f"unknown {wheel.data_dir}/ folder "
                              f"(expected one of {', '.join(DATA_KEYS)})")
    return os.path.join(scheme.key(parts[1]), parts[2]), parts[1] == "scripts"


def is_executable(info: zipfile.ZipInfo) -> bool:
    return bool((info.external_attr >> 16) & 0o111)


class Staged:
    """One file written to the staging folder: where it goes, its RECORD hash and size."""

    def __init__(self, staged: str, target: str, digest: str, size: int, mode: int) -> None:
        self.staged, self.target = staged, target
        self.digest, self.size, self.mode = digest, size, mode


def stage(wheel: Wheel, scheme: Scheme, tmp: str) -> list[Staged]:
    """Every member hashed while it is written under ``tmp``; a mismatch with RECORD is refused."""
    return [stage_one(wheel, scheme, info, os.path.join(tmp, str(i)))
            for i, info in enumerate(wheel.members)]


def stage_one(wheel: Wheel, scheme: Scheme, info: zipfile.ZipInfo, staged: str) -> Staged:
    """One member written to ``staged`` and checked against its RECORD row."""
    target, script = target_of(wheel, scheme, info.filename)
    algo, want, _size = wheel.record[info.filename]
    h = hashlib.new(algo if algo in HASHES else "sha256")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with wheel.zip.open(info) as src, open(fd, "wb") as dst:
        rewrite, got = copy_member(src, dst, h, script)
    _check_member(info.filename, wheel.record[info.filename], b64_digest(h), got)
    digest, length = file_digest(staged) if rewrite else (f"{algo}={want}", got)
    mode = 0o755 if script or is_executable(info) else 0o644
    return Staged(staged, target, digest, length, mode)


def _check_member(member: str, row: tuple[str, str, int | None], digest: str, size: int) -> None:
    """A staged member's digest and size are RECORD's (when RECORD gives them)."""
    algo, want, listed = row
    if want and digest != want:
        raise Refused(member, f"{algo} does not match RECORD")
    if listed is not None and size != listed:
        raise Refused(member, f"size {size} does not match RECORD ({listed})")


def copy_member(src: IO[bytes], dst: BinaryIO, h: hashlib._Hash, script: bool) -> tuple[bool, int]:
    """Copy and hash ``src``; a script's ``#!python`` line is rewritten: (rewritten, bytes read)."""
    first = src.read(CHUNK)
    h.update(first)
    got = len(first)
    rewrite = script and re.match(rb"^#!pythonw?(\s|$)", first) is not None
    dst.write(this_interpreter(first) if rewrite else first)
    for block in iter(lambda: src.read(CHUNK), b""):
        h.update(block)
        got += len(block)
        dst.write(block)
    return rewrite, got


def this_interpreter(first: bytes) -> bytes:
    """PEP 427: "#!python" means this interpreter (the first block with its first line replaced)."""
    rest = first[first.index(b"\n"):] if b"\n" in first else b"\n"
    return b"#!" + os.fsencode(sys.executable) + rest


def file_digest(path: str) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
            n += len(block)
    return f"sha256={b64_digest(h)}", n


def _listdir(folder: str) -> list[str]:
    """The folder's entries; [] when it cannot be listed."""
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _metadata_name(dist_info: str) -> str | None:
    """The normalized Name of a dist-info's METADATA; None when it cannot be read."""
    try:
        with open(os.path.join(dist_info, "METADATA"), encoding="utf-8", errors="replace") as f:
            meta = HeaderParser().parse(f)
    except OSError:
        return None
    return normalize(meta.get("Name", ""))


def _named_like(entry: str, name: str) -> bool:
    """A ``<name>-<version>.dist-info`` folder name of distribution ``name``."""
    stem = entry[: -len(".dist-info")]
    return entry.endswith(".dist-info") and normalize(stem.rsplit("-", 1)[0]) == normalize(name)


def installed_dist_infos(scheme: Scheme, name: str) -> list[str]:
    """The ``*.dist-info`` folders of distribution ``name`` in the lib folders (by METADATA)."""
    libs = dict.fromkeys((scheme.purelib, scheme.platlib))
    candidates = [os.path.join(lib, e) for lib in libs for e in _listdir(lib)
                  if _named_like(e, name)]
    return [path for path in candidates if _metadata_name(path) == normalize(name)]


def _removable(scheme: Scheme, path: str) -> bool:
    """Inside the scheme's folders, and not this interpreter."""
    return scheme.inside(path) and os.path.realpath(path) != os.path.realpath(sys.executable)


def _installed_record(dist_info: str) -> list[list[str]]:
    """The rows of an installed dist-info's RECORD that name a path; [] when it cannot be read."""
    try:
        with open(os.path.join(dist_info, "RECORD"), encoding="utf-8", newline="") as f:
            return [row for row in csv.reader(f) if row and row[0]]
    except OSError:
        return []


def recorded_paths(scheme: Scheme, dist_info: str) -> list[str]:
    """The removable files ``dist_info``'s RECORD lists, with the cached pyc of each .py."""
    base = os.path.dirname(dist_info)
    paths = [os.path.normpath(os.path.join(base, row[0])) for row in _installed_record(dist_info)]
    removable = [path for path in paths if _removable(scheme, path)]
    caches = [importlib.util.cache_from_source(p) for p in removable if p.endswith(".py")]
    return removable + caches


def _unlink_all(paths: list[str]) -> set[str]:
    """Remove each path that is not a folder; the folders they were in."""
    dirs = set()
    for path in paths:
        try:
            if os.path.islink(path) or not os.path.isdir(path):
                os.unlink(path)
                dirs.add(os.path.dirname(path))
        except FileNotFoundError:
            pass
    return dirs


def _remove_empty(scheme: Scheme, folder: str) -> None:
    """Remove ``folder`` and its parents while they are empty, inside the scheme, not its roots."""
    while os.path.realpath(folder) not in scheme.roots and scheme.inside(folder):
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)


def uninstall(scheme: Scheme, dist_info: str) -> None:
    """Remove what ``dist_info``'s RECORD lists, the dist-info itself, and the folders left empty.

    Only paths inside the scheme's folders, with the ``__pycache__`` of its ``.py`` files.
    """
    dirs = _unlink_all(recorded_paths(scheme, dist_info))
    shutil.rmtree(dist_info, ignore_errors=True)
    for folder in sorted(dirs, key=len, reverse=True):
        _remove_empty(scheme, folder)


def place(files: list[Staged]) -> None:
    """Rename each staged file to its target (a copy when the target is on another file system)."""
    for f in files:
        os.makedirs(os.path.dirname(f.target), exist_ok=True)
        os.chmod(f.staged, f.mode & ~UMASK)
        try:
            os.replace(f.staged, f.target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.move(f.staged, f.target)


#: the entry point groups that get a wrapper script
SCRIPT_GROUPS = ("console_scripts", "gui_scripts")


def _entry_point(where: str, script: str, ref: str) -> tuple[str, str]:
    """(module, attribute) of ``script = module:attribute [extras]``; anything else is refused."""
    m = re.match(r"^\s*([\w.]+)\s*:\s*([\w.]+)\s*(\[.*\])?\s*$", ref)
    if not m or "/" in script or script.startswith(".") or not script.strip():
        raise Refused(where, f"entry point {script} = {ref} is not 'name = module:attribute'")
    return m.group(1), m.group(2)


def _wrapper(group: str, dist: str, module: str, attr: str) -> bytes:
    """The script that runs one entry point with this interpreter."""
    return (f"#!{sys.executable}\n"
            f"# {group} entry point of {dist}, written by camit wheelinst\n"
            "import sys\n"
            f"from {module} import {attr.split('.', 1)[0]}\n"
            "if __name__ == '__main__':\n"
            f"    sys.exit({attr}())\n").encode()


def entry_scripts(wheel: Wheel, scheme: Scheme) -> list[tuple[str, bytes]]:
    """(path, content) of a wrapper for each ``console_scripts``/``gui_scripts`` entry point."""
    name = f"{wheel.dist_info}/entry_points.txt"
    if name not in wheel.zip.namelist():
        return []
    cp = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(wheel.zip.read(name).decode("utf-8"))
    out = []
    for group in (g for g in SCRIPT_GROUPS if cp.has_section(g)):
        for script, ref in cp.items(group):
            module, attr = _entry_point(name, script, ref)
            path = os.path.join(scheme.scripts, script.strip())
            out.append((path, _wrapper(group, wheel.name, module, attr)))
    return out


def _compile(path: str) -> str | None:
    """The pyc written for ``path``; None when it does not compile (left so, as pip does)."""
    try:
        return py_compile.compile(path, cfile=importlib.util.cache_from_source(path), doraise=True)
    except (py_compile.PyCompileError, OSError, SyntaxError, ValueError):
        return None


def compile_all(paths: list[str]) -> list[str]:
    """Byte-compile the ``.py`` files among ``paths``; the pyc files written."""
    written = [_compile(path) for path in paths if path.endswith(".py")]
    return [p for p in written if p]


def write_new(path: str, data: bytes, mode: int = 0o644) -> tuple[str, int]:
    tmp = f"{path}.camit-{os.getpid()}"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
        f.write(data)
    os.chmod(tmp, mode & ~UMASK)
    os.replace(tmp, path)
    return f"sha256={b64_digest(hashlib.sha256(data))}", len(data)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (True when it is someone else's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def sweep(lib: str) -> None:
    """Remove the staging folders a killed installer left in ``lib`` (its process is gone)."""
    for entry in os.listdir(lib):
        pid = entry[len(STAGING):]
        if entry.startswith(STAGING) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(lib, entry), ignore_errors=True)


def open_verified(path: str, sha256: str) -> BinaryIO | None:
    """``path`` opened for reading, at its start, when its content hashes to ``sha256``.

    A regular file only; a symlink is not followed. None when the content differs.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    f = os.fdopen(fd, "rb")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        h = hashlib.sha256()
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
        if h.hexdigest() != sha256.lower():
            f.close()
            return None
        f.seek(0)
        return f
    except BaseException:
        f.close()
        raise


def _stage_and_place(wheel: Wheel, scheme: Scheme,
                     lib: str) -> tuple[list[Staged], list[tuple[str, bytes]]]:
    """Stage every member, then remove the installed version and move the staged files in."""
    os.makedirs(lib, exist_ok=True)
    sweep(lib)
    tmp = os.path.join(lib, f"{STAGING}{os.getpid()}")
    os.mkdir(tmp, 0o700)
    try:
        files = stage(wheel, scheme, tmp)
        scripts = entry_scripts(wheel, scheme)
        for old in installed_dist_infos(scheme, wheel.name):
            uninstall(scheme, old)
        place(files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return files, scripts


def _write_scripts(scripts: list[tuple[str, bytes]]) -> list[tuple[str, str, int]]:
    """Write the entry points' wrappers; their RECORD rows."""
    rows = []
    for target, content in scripts:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        rows.append((target, *write_new(target, content, 0o755)))
    return rows


def _compile_rows(scheme: Scheme, files: list[Staged]) -> list[tuple[str, str, int]]:
    """Byte-compile the installed .py files of the lib folders; the pyc files' RECORD rows."""
    libs = tuple(os.path.join(d, "") for d in (scheme.purelib, scheme.platlib))
    return [(pyc, *file_digest(pyc))
            for pyc in compile_all([f.target for f in files if f.target.startswith(libs)])]


def _write_metadata(info: str, lib: str, installer: str, rows: list[tuple[str, str, int]]) -> None:
    """INSTALLER, REQUESTED and the new RECORD (paths relative to ``lib``, RECORD unhashed)."""
    for name, data in (("INSTALLER", f"{installer}\n".encode()), ("REQUESTED", b"")):
        rows.append((os.path.join(info, name), *write_new(os.path.join(info, name), data)))
    record = io.StringIO()
    w = csv.writer(record, lineterminator="\n")
    for target, digest, size in rows:
        w.writerow((os.path.relpath(target, lib), digest, size))
    w.writerow((os.path.relpath(os.path.join(info, "RECORD"), lib), "", ""))
    write_new(os.path.join(info, "RECORD"), record.getvalue().encode("utf-8"))


def install(path: str | BinaryIO, installer: str = "camit", compile_py: bool = True) -> Wheel:
    """Install the wheel at ``path`` (or read from an open file) into this interpreter's scheme.

    Raises :class:`Refused` before anything of the environment is changed when the wheel is bad.
    """
    wheel = Wheel(path)
    scheme = Scheme(wheel.name)
    lib = scheme.root(wheel.purelib)
    files, scripts = _stage_and_place(wheel, scheme, lib)
    info = os.path.join(lib, wheel.dist_info)
    rows = [(f.target, f.digest, f.size) for f in files if f.target != os.path.join(info, "RECORD")]
    rows += _write_scripts(scripts)
    if compile_py:
        rows += _compile_rows(scheme, files)
    _write_metadata(info, lib, installer, rows)
    return wheel


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()

USAGE = "usage: wheelinst.py [--no-compile] [--installer NAME] [--sha256 HEX] WHEEL"
#: option -> the pattern its value must match (None: a flag without a value)
OPTIONS = {"--no-compile": None, "--installer": r"(?s).*", "--sha256": r"[0-9a-fA-F]{64}"}


class Usage(Exception):
    """A command line this program does not take (the message is the line to print)."""


class Mismatch(Exception):
    """The wheel file is not the one ``--sha256`` names (the message is the line to print)."""


class Options:
    """The parsed command line."""

    def __init__(self, given: dict[str, str], wheel: str) -> None:
        self.compile_py = "--no-compile" not in given
        self.installer = given.get("--installer", "camit")
        self.sha256 = given.get("--sha256")
        self.wheel = wheel


def _value(opt: str, args: list[str]) -> str:
    """The value of ``opt`` taken from ``args`` ("" for a flag); missing or malformed: unknown."""
    pattern = OPTIONS[opt]
    if pattern is None:
        return ""
    if not args or not re.fullmatch(pattern, args[0]):
        raise Usage(f"wheelinst: unknown option {opt}")
    return args.pop(0)


def parse_options(argv: list[str]) -> Options:
    args = list(argv)
    given: dict[str, str] = {}
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt not in OPTIONS:
            raise Usage(f"wheelinst: unknown option {opt}")
        given[opt] = _value(opt, args)
    if len(args) != 1:
        raise Usage(USAGE)
    return Options(given, args[0])


def _source(opts: Options) -> str | BinaryIO:
    """The wheel's path, or with ``--sha256`` the wheel opened and verified."""
    if opts.sha256 is None:
        return opts.wheel
    opened = open_verified(opts.wheel, opts.sha256)
    if opened is None:
        raise Mismatch(f"wheelinst: {opts.wheel} does not match its sha256 {opts.sha256[:12]}: "
                       "not installed")
    return opened


def install_as(opts: Options) -> Wheel:
    """Install the wheel the command line names, as it says."""
    source = _source(opts)
    try:
        return install(source, opts.installer, opts.compile_py)
    finally:
        if not isinstance(source, str):
            source.close()


def run(opts: Options) -> int:
    """Install; the exit status, with one line on stderr when it is not 0."""
    name = os.path.basename(opts.wheel)
    try:
        wheel = install_as(opts)
    except Mismatch as exc:
        print(exc, file=sys.stderr)
        return EXIT_MISMATCH
    except Refused as exc:
        print(f"wheelinst: {name} refused, nothing installed: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except (OSError, UnicodeDecodeError, zipfile.BadZipFile, csv.Error) as exc:
        print(f"wheelinst: installing {name} failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wheelinst: installed {wheel.name} {wheel.version} into {sys.prefix}")
    return 0


def main(argv: list[str]) -> int:
    try:
        opts = parse_options(argv)
    except Usage as exc:
        print(exc, file=sys.stderr)
        return EXIT_REFUSED
    return run(opts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
