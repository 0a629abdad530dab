#!/usr/bin/env python3
"""camit wheelinst: install one wheel into the running interpreter's environment, without pip.

Shipped to the hosts by ``framework.deploy`` and run by the interpreter of camit's own venv
(``sysconfig.get_paths()`` is then the venv's scheme); standard library only:

    wheelinst.py [--no-compile] [--installer NAME] [--sha256 HEX] WHEEL

What pip's ``install --force-reinstall --no-deps`` does for a wheel, in one process that
imports no more than it needs (issue 18: pip's own start-up and its copy were ~0.9 s of CPU
per host for a 64 MiB wheel, on hosts that share cores):

0. with ``--sha256``: the wheel file is opened once (a regular file, no symlink followed) and hashed
   (hashlib: OpenSSL's SHA-256, several times ``sha256sum``'s speed where the CPU has SHA
   instructions); one that differs ends it with a line naming the file and exit status 3, before
   anything is read from it; the install then reads that same open file, so what was hashed is
   what is installed;
1. read the wheel; ``WHEEL`` must say ``Wheel-Version: 1.x``; ``Root-Is-Purelib`` picks
   purelib or platlib for the root;
2. every member is checked against the wheel's ``RECORD`` (a listed sha256/384/512 hash and
   size) while it is written to a staging folder beside the target: a member missing from
   RECORD, a hash or size that differs, an absolute path, a ``..`` or an unknown
   ``<name>.data/<key>`` ends the install with one line naming the member and exit status 2,
   the staging folder removed and nothing of the installed environment touched;
3. the installed distribution of the same (PEP 503 normalized) name is removed with its
   RECORD — only paths inside the scheme's directories, and the ``__pycache__`` files of its
   ``.py`` files — then the staged files are renamed into place: the root into its lib folder,
   ``<name>.data/{purelib,platlib,scripts,headers,data}`` into their scheme paths, scripts whose
   first line is ``#!python`` pointed at this interpreter and made executable;
   ``console_scripts``/``gui_scripts`` of ``entry_points.txt`` get a small wrapper in ``scripts``;
4. the ``.py`` files are byte-compiled (as pip does by default; ``--no-compile`` skips it) and
   ``INSTALLER``, ``REQUESTED`` and a new ``RECORD`` (every installed file, relative to the
   dist-info's parent folder, RECORD itself without a hash) are written, so ``pip show``,
   ``pip uninstall`` and ``importlib.metadata`` see it as pip's own install.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import stat
import sys
import sysconfig
import zipfile
from email.parser import HeaderParser
from typing import BinaryIO

CHUNK = 1 << 20
#: the hash algorithms a RECORD may use (PEP 376/427: sha256 or stronger)
HASHES = ("sha256", "sha384", "sha512")
#: ``<name>.data/<key>/`` keys and the scheme path each goes to
DATA_KEYS = ("purelib", "platlib", "scripts", "headers", "data")
#: RECORD's own name and the signature files that are listed without a hash
UNHASHED = ("RECORD", "RECORD.jws", "RECORD.p7s")
#: the staging folder in the target lib folder, ``<STAGING><pid>``
STAGING = ".camit-wheelinst-"
#: exit status: the wheel is refused (bad, tampered or unsupported); an I/O failure while installing; the wheel
#: file is not the one ``--sha256`` names (as ``framework.remote.layout.sh_verified``'s exit status)
EXIT_REFUSED, EXIT_FAILED, EXIT_MISMATCH = 2, 1, 3


class Refused(Exception):
    """The wheel is not installed: ``member`` (or the wheel as a whole) is bad, tampered or unsupported."""

    def __init__(self, member: str, reason: str) -> None:
        super().__init__(f"{member}: {reason}" if member else reason)


def normalize(name: str) -> str:
    """PEP 503: runs of ``-_.`` are one ``-``, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def b64_digest(h: hashlib._Hash) -> str:
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")


def safe_member(name: str) -> str:
    """``name`` if it is a relative path without ``..`` (a zip member may not point outside its target)."""
    if not name or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or "\\" in name:
        raise Refused(name, "absolute or non-POSIX path in the wheel")
    if any(part in ("..", "") for part in name.rstrip("/").split("/")) or "\0" in name:
        raise Refused(name, "path with '..' or an empty part in the wheel")
    return name


class Wheel:
    """One ``.whl``: its dist-info, WHEEL, METADATA name and RECORD, read and checked before anything is written."""

    def __init__(self, path: str | BinaryIO) -> None:
        try:
            self.zip = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise Refused("", f"not a readable zip file: {exc}") from exc
        self.members = [i for i in self.zip.infolist() if not i.filename.endswith("/")]
        names = [i.filename for i in self.members]
        for n in names:
            safe_member(n)
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise Refused(n, "appears more than once in the wheel")
            seen.add(n)
        infos = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
        if len(infos) != 1:
            raise Refused("", f"expected one top-level .dist-info folder, found {len(infos) or 'none'}")
        self.dist_info = infos[0]
        wheel = self._headers("WHEEL")
        version = (wheel.get("Wheel-Version") or "").strip()
        if not re.match(r"^1(\.\d+)?$", version):
            raise Refused(f"{self.dist_info}/WHEEL", f"Wheel-Version {version or '(none)'} is not supported "
                                                      "(only 1.x)")
        self.purelib = (wheel.get("Root-Is-Purelib") or "").strip().lower() == "true"
        meta = self._headers("METADATA")
        self.name = (meta.get("Name") or "").strip()
        self.version = (meta.get("Version") or "").strip()
        if not self.name:
            raise Refused(f"{self.dist_info}/METADATA", "no Name")
        stem = self.dist_info[: -len(".dist-info")]
        self.data_dir = stem + ".data"
        self.record = self._record()

    def _read(self, name: str) -> bytes:
        try:
            return self.zip.read(name)
        except KeyError:
            raise Refused(name, "missing from the wheel") from None

    def _headers(self, base: str) -> dict[str, str]:
        msg = HeaderParser().parsestr(self._read(f"{self.dist_info}/{base}").decode("utf-8", "replace"))
        return {k: v for k, v in msg.items()}

    def _record(self) -> dict[str, tuple[str, str, int | None]]:
        """member → (algorithm, digest, size) from RECORD; every member must be listed with a hash."""
        rows: dict[str, tuple[str, str, int | None]] = {}
        text = self._read(f"{self.dist_info}/RECORD").decode("utf-8")
        for row in csv.reader(io.StringIO(text)):
            if not row or not row[0]:
                continue
            path, digest, size = (row + ["", ""])[:3]
            algo, _, value = digest.partition("=")
            try:
                rows[path] = (algo, value, int(size) if size else None)
            except ValueError:
                raise Refused(path, f"size {size!r} in RECORD is not a number") from None
        for info in self.members:
            n = info.filename
            if n not in rows:
                raise Refused(n, "is not listed in RECORD")
            if n.startswith(self.dist_info + "/") and n.split("/", 1)[1] in UNHASHED:
                continue
            algo, value, _size = rows[n]
            if algo not in HASHES or not value:
                raise Refused(n, f"has no sha256 (or stronger) hash in RECORD ({algo or 'none'})")
        return rows


class Scheme:
    """Where each part of the wheel goes: this interpreter's ``sysconfig`` paths (the venv's, run by its python)."""

    def __init__(self, name: str) -> None:
        paths = sysconfig.get_paths()
        self.purelib, self.platlib = paths["purelib"], paths["platlib"]
        self.scripts, self.data = paths["scripts"], paths["data"]
        # pip's place for a venv's headers: <prefix>/include/site/pythonX.Y/<name>
        self.headers = os.path.join(sys.prefix, "include", "site", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                                    name)
        self.dirs = dict(zip(DATA_KEYS, (self.purelib, self.platlib, self.scripts, self.headers, self.data)))
        self.roots = [os.path.realpath(p) for p in self.dirs.values()]

    def key(self, key: str) -> str:
        return self.dirs[key]

    def inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return any(real.startswith(root.rstrip("/") + "/") for root in self.roots)


def target_of(wheel: Wheel, scheme: Scheme, member: str) -> tuple[str, bool]:
    """(installed path, is a script) of ``member``."""
    if member.startswith(wheel.data_dir + "/"):
        parts = member.split("/", 2)
        if len(parts) < 3 or parts[1] not in DATA_KEYS:
            raise Refused(member, f"unknown {wheel.data_dir}/ folder (expected one of {', '.join(DATA_KEYS)})")
        return os.path.join(scheme.key(parts[1]), parts[2]), parts[1] == "scripts"
    return os.path.join(scheme.purelib if wheel.purelib else scheme.platlib, member), False


def is_executable(info: zipfile.ZipInfo) -> bool:
    return bool((info.external_attr >> 16) & 0o111)


class Staged:
    """One file written to the staging folder: where it goes, its RECORD hash and size."""

    def __init__(self, staged: str, target: str, digest: str, size: int, mode: int) -> None:
        self.staged, self.target, self.digest, self.size, self.mode = staged, target, digest, size, mode


def stage(wheel: Wheel, scheme: Scheme, tmp: str) -> list[Staged]:
    """Every member hashed while it is written under ``tmp``; a member that does not match RECORD is refused."""
    out: list[Staged] = []
    for i, info in enumerate(wheel.members):
        n = info.filename
        target, script = target_of(wheel, scheme, n)
        algo, want, size = wheel.record[n]
        staged = os.path.join(tmp, str(i))
        h = hashlib.new(algo if algo in HASHES else "sha256")
        got = 0
        with wheel.zip.open(info) as src:
            first = src.read(CHUNK)
            h.update(first)
            got += len(first)
            rewrite = script and re.match(rb"^#!pythonw?(\s|$)", first) is not None
            with open(os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as dst:
                if rewrite:  # PEP 427: "#!python" means this interpreter
                    first = b"#!" + os.fsencode(sys.executable) + first[first.index(b"\n"):] if b"\n" in first \
                        else b"#!" + os.fsencode(sys.executable) + b"\n"
                dst.write(first)
                for block in iter(lambda: src.read(CHUNK), b""):
                    h.update(block)
                    got += len(block)
                    dst.write(block)
        if want and b64_digest(h) != want:
            raise Refused(n, f"{algo} does not match RECORD")
        if size is not None and got != size:
            raise Refused(n, f"size {got} does not match RECORD ({size})")
        digest, length = f"{algo}={want}", got
        if rewrite:
            digest, length = file_digest(staged)
        mode = 0o755 if script or is_executable(info) else 0o644
        out.append(Staged(staged, target, digest, length, mode))
    return out


def file_digest(path: str) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
            n += len(block)
    return f"sha256={b64_digest(h)}", n


def installed_dist_infos(scheme: Scheme, name: str) -> list[str]:
    """The ``*.dist-info`` folders of distribution ``name`` in the scheme's lib folders (METADATA's Name decides)."""
    found = []
    for lib in dict.fromkeys((scheme.purelib, scheme.platlib)):
        try:
            entries = os.listdir(lib)
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith(".dist-info") or \
                    normalize(entry[: -len(".dist-info")].rsplit("-", 1)[0]) != normalize(name):
                continue
            path = os.path.join(lib, entry)
            try:
                with open(os.path.join(path, "METADATA"), encoding="utf-8", errors="replace") as f:
                    meta = HeaderParser().parse(f)
            except OSError:
                continue
            if normalize(meta.get("Name") or "") == normalize(name):
                found.append(path)
    return found


def uninstall(scheme: Scheme, dist_info: str) -> None:
    """Remove what ``dist_info``'s RECORD lists (inside the scheme's folders only; with the ``__pycache__`` of
    its ``.py`` files), the dist-info itself, and the folders that left empty."""
    import importlib.util

    base = os.path.dirname(dist_info)
    paths: list[str] = []
    try:
        with open(os.path.join(dist_info, "RECORD"), encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except OSError:
        rows = []
    for row in rows:
        if not row or not row[0]:
            continue
        path = os.path.normpath(os.path.join(base, row[0]))
        if not scheme.inside(path) or os.path.realpath(path) == os.path.realpath(sys.executable):
            continue
        paths.append(path)
        if path.endswith(".py"):
            paths.append(importlib.util.cache_from_source(path))
    dirs = set()
    for path in paths:
        try:
            if os.path.islink(path) or not os.path.isdir(path):
                os.unlink(path)
                dirs.add(os.path.dirname(path))
        except FileNotFoundError:
            pass
    shutil.rmtree(dist_info, ignore_errors=True)
    roots = set(scheme.roots)
    for d in sorted(dirs, key=len, reverse=True):
        while os.path.realpath(d) not in roots and scheme.inside(d):
            try:
                os.rmdir(d)
            except OSError:
                break
            d = os.path.dirname(d)


def place(files: list[Staged]) -> None:
    """Rename each staged file to its target (a copy when the target is on another file system)."""
    for f in files:
        os.makedirs(os.path.dirname(f.target), exist_ok=True)
        os.chmod(f.staged, f.mode & ~UMASK)
        try:
            os.replace(f.staged, f.target)
        except OSError as exc:
            if exc.errno != 18:  # EXDEV
                raise
            shutil.move(f.staged, f.target)


def entry_scripts(wheel: Wheel, scheme: Scheme) -> list[tuple[str, bytes]]:
    """(path, content) of a wrapper for each ``console_scripts``/``gui_scripts`` entry point."""
    name = f"{wheel.dist_info}/entry_points.txt"
    if name not in wheel.zip.namelist():
        return []
    import configparser

    cp = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(wheel.zip.read(name).decode("utf-8"))
    out = []
    for section in ("console_scripts", "gui_scripts"):
        if not cp.has_section(section):
            continue
        for script, ref in cp.items(section):
            m = re.match(r"^\s*([\w.]+)\s*:\s*([\w.]+)\s*(\[.*\])?\s*$", ref)
            if not m or "/" in script or script.startswith(".") or not script.strip():
                raise Refused(name, f"entry point {script} = {ref} is not 'name = module:attribute'")
            module, attr = m.group(1), m.group(2)
            top = attr.split(".", 1)[0]
            text = (f"#!{sys.executable}\n"
                    f"# {section} entry point of {wheel.name}, written by camit wheelinst\n"
                    "import sys\n"
                    f"from {module} import {top}\n"
                    "if __name__ == '__main__':\n"
                    f"    sys.exit({attr}())\n")
            out.append((os.path.join(scheme.scripts, script.strip()), text.encode()))
    return out


def compile_all(paths: list[str]) -> list[str]:
    """Byte-compile the ``.py`` files among ``paths`` (what fails to compile is left uncompiled, as pip does);
    the pyc files written."""
    import importlib.util
    import py_compile

    written = []
    for path in paths:
        if not path.endswith(".py"):
            continue
        try:
            written.append(py_compile.compile(path, cfile=importlib.util.cache_from_source(path), doraise=True))
        except (py_compile.PyCompileError, OSError, SyntaxError, ValueError):
            continue
    return [p for p in written if p]


def write_new(path: str, data: bytes, mode: int = 0o644) -> tuple[str, int]:
    tmp = f"{path}.camit-{os.getpid()}"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
        f.write(data)
    os.chmod(tmp, mode & ~UMASK)
    os.replace(tmp, path)
    return f"sha256={b64_digest(hashlib.sha256(data))}", len(data)


def sweep(lib: str) -> None:
    """Remove the staging folders an installer killed mid-way left in ``lib`` (its process is gone)."""
    for entry in os.listdir(lib):
        pid = entry[len(STAGING):]
        if entry.startswith(STAGING) and pid.isdigit():
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(os.path.join(lib, entry), ignore_errors=True)
            except OSError:
                pass


def open_verified(path: str, sha256: str) -> BinaryIO | None:
    """``path`` opened for reading (a regular file; a symlink is not followed) when its content hashes to
    ``sha256``, at its start; None when it does not."""
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


def install(path: str | BinaryIO, installer: str = "camit", compile_py: bool = True) -> Wheel:
    """Install the wheel at ``path`` (or read from an open file) into this interpreter's scheme; raises
    :class:`Refused` before anything of the environment is changed when the wheel is bad."""
    wheel = Wheel(path)
    scheme = Scheme(wheel.name)
    lib = scheme.purelib if wheel.purelib else scheme.platlib
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
    rows = [(f.target, f.digest, f.size) for f in files
            if f.target != os.path.join(lib, wheel.dist_info, "RECORD")]
    for target, content in scripts:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        rows.append((target, *write_new(target, content, 0o755)))
    if compile_py:
        libs = tuple(os.path.join(d, "") for d in (scheme.purelib, scheme.platlib))
        for pyc in compile_all([f.target for f in files if f.target.startswith(libs)]):
            rows.append((pyc, *file_digest(pyc)))
    info = os.path.join(lib, wheel.dist_info)
    rows.append((os.path.join(info, "INSTALLER"), *write_new(os.path.join(info, "INSTALLER"),
                                                              f"{installer}\n".encode())))
    rows.append((os.path.join(info, "REQUESTED"), *write_new(os.path.join(info, "REQUESTED"), b"")))
    record = io.StringIO()
    w = csv.writer(record, lineterminator="\n")
    for target, digest, size in rows:
        w.writerow((os.path.relpath(target, lib), digest, size))
    w.writerow((os.path.relpath(os.path.join(info, "RECORD"), lib), "", ""))
    write_new(os.path.join(info, "RECORD"), record.getvalue().encode("utf-8"))
    return wheel


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()


def main(argv: list[str]) -> int:
    args = list(argv)
    compile_py, installer, sha256 = True, "camit", None
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt == "--no-compile":
            compile_py = False
        elif opt == "--installer" and args:
            installer = args.pop(0)
        elif opt == "--sha256" and args and re.fullmatch(r"[0-9a-fA-F]{64}", args[0]):
            sha256 = args.pop(0)
        else:
            print(f"wheelinst: unknown option {opt}", file=sys.stderr)
            return EXIT_REFUSED
    if len(args) != 1:
        print("usage: wheelinst.py [--no-compile] [--installer NAME] [--sha256 HEX] WHEEL", file=sys.stderr)
        return EXIT_REFUSED
    name = os.path.basename(args[0])
    source: str | BinaryIO = args[0]
    try:
        if sha256 is not None:
            opened = open_verified(args[0], sha256)
            if opened is None:
                print(f"wheelinst: {args[0]} does not match its sha256 {sha256[:12]}: not installed", file=sys.stderr)
                return EXIT_MISMATCH
            source = opened
        wheel = install(source, installer, compile_py)
    except Refused as exc:
        print(f"wheelinst: {name} refused, nothing installed: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except (OSError, UnicodeDecodeError, zipfile.BadZipFile, csv.Error) as exc:
        print(f"wheelinst: installing {name} failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if not isinstance(source, str):
            source.close()
    print(f"wheelinst: installed {wheel.name} {wheel.version} into {sys.prefix}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
