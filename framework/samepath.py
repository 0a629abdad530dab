"""Files at the same absolute path on every host: URMA's "Preparation" done by camit.

Design (what is refused, the trust rules for folders and files): docs/internals/core.md.
"""

from __future__ import annotations

import logging
import posixpath
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from framework import commands
from framework.commands import ShellScript
from framework.errors import CommandFailed, FrameworkError, TransferError
from framework.remote.layout import trust_functions_sh, unsafe_reason

if TYPE_CHECKING:
    from framework.hosts import Host
    from framework.result import Result

log = logging.getLogger("camit.samepath")

#: file and folder names never shipped (byte code, editor and VCS files)
SKIPPED = ("__pycache__",)
#: the probe's line naming a missing folder (by its index in the folders it was given)
MISSING = "@@missing"
#: the line of :func:`mkdir_script` naming a folder it made
MADE = "@@made"


def files_of(local: Path) -> list[Path]:
    """``local`` itself (a file), or the files under it (a folder; no ``__pycache__``, no dot-names), sorted."""
    local = local.resolve()
    if local.is_file():
        return [local]
    if not local.is_dir():
        raise FrameworkError(f"cannot ship {local}: no such file or folder")
    return sorted(p for p in local.rglob("*") if p.is_file()
                  and not any(part in SKIPPED or part.startswith(".") for part in p.relative_to(local).parts))


def ancestors(root: str) -> list[str]:
    """``root``'s folders from the top down, ``/`` left out: ``/a/b`` -> ``['/a', '/a/b']``."""
    parts = [p for p in root.split("/") if p]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def folders_of(files: Sequence[str]) -> list[str]:
    """Every folder holding one of ``files`` and every ancestor of those, parents before children."""
    found = {d for f in files for d in ancestors(posixpath.dirname(f))}
    return sorted(found, key=lambda d: (d.count("/"), d))


def probe_script(files: Sequence[str], folders: Sequence[str]) -> ShellScript:
    """A script judging ``folders`` (top down: :func:`~framework.remote.layout.trust_functions_sh`'s
    ``_ctrust``, a refusal ends it with ``@@unsafe``), printing ``@@missing <j>`` for each that does not
    exist, then ``<i> <sha256>`` (``-`` when absent) for each of ``files`` (1-based); a file there must
    pass ``_cmine`` (a regular file the SSH user owns) before it is read."""
    q = commands.quote
    dirs = " ".join(q(d) for d in folders)
    listed = " ".join(q(f) for f in files)
    script = trust_functions_sh()
    if folders:
        script += f'; j=0; for d in {dirs}; do j=$((j+1)); _ctrust "$d"; [ -e "$d" ] || echo "{MISSING} $j"; done'
    # the digest read from stdin: sha256sum escapes odd names in its output, never a hash of "-"
    script += (f'; i=0; for f in {listed}; do i=$((i+1)); if [ -e "$f" ] || [ -L "$f" ]; then _cmine "$f"; '
               f'h=$(sha256sum < "$f" | cut -c1-64); else h=-; fi; echo "$i ${{h:--}}"; done')
    return ShellScript(script)


def mkdir_script(folders: Sequence[str]) -> ShellScript:
    """Make each of ``folders`` (parents first, each under a judged parent) one level at a time, ``0755``,
    printing ``@@made <j>`` for each: ``mkdir`` without ``-p``, so a folder someone made meanwhile is
    refused (``@@unsafe``), never used."""
    q = commands.quote
    made = "; ".join(f"mkdir -m 0755 -- {q(d)} || _cbad {q(d)} 'could not be made (made by someone else "
                     f"meanwhile?)'; echo '{MADE} {j}'; _ctrust {q(d)}" for j, d in enumerate(folders, 1))
    return ShellScript(f"{trust_functions_sh()}; {made}")


def parse_made(output: str, folders: Sequence[str]) -> list[str]:
    """The folders ``mkdir_script`` made (its ``@@made`` records), in order."""
    made = []
    for line in output.splitlines():
        word, _, value = line.strip().partition(" ")
        if word == MADE and value.isdigit() and 1 <= int(value) <= len(folders):
            made.append(folders[int(value) - 1])
    return made


def parse_probe(output: str, files: Sequence[str], folders: Sequence[str]) -> tuple[dict[str, str | None], list[str]]:
    """``probe_script``'s output -> (each file's sha256 on the host or None, the missing folders, top down)."""
    digests: dict[str, str | None] = dict.fromkeys(files)
    missing = []
    for line in output.splitlines():
        word, _, value = line.strip().partition(" ")
        if word == MISSING and value.isdigit() and 1 <= int(value) <= len(folders):
            missing.append(folders[int(value) - 1])
        elif word.isdigit() and 1 <= int(word) <= len(files):
            digests[files[int(word) - 1]] = value if len(value) == 64 else None
    return digests, missing


def tops(missing: Sequence[str]) -> list[str]:
    """The topmost of ``missing`` folders (those whose parent is not missing too)."""
    gone = set(missing)
    return [d for d in missing if posixpath.dirname(d) not in gone]


def _refuse(host: Host, result: Result, what: str) -> None:
    """One line naming host and path when the guard refused (``@@unsafe``); CommandFailed otherwise."""
    why = unsafe_reason(result.stdout)
    if why is not None:
        raise TransferError(host.name, f"refusing to ship {what}: {why}")
    if not result.ok:
        raise CommandFailed(result)


@dataclass
class Shipment:
    """What :func:`ship` did on one host: the topmost folders it ``created`` and the files it ``written``."""

    host: Host
    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # there already, same sha256, owned by the SSH user
    created: list[str] = field(default_factory=list)

    def remove(self) -> None:
        """Take away what was written (nothing when the host had every file already)."""
        inside = [f for f in self.written if not any(f.startswith(d + "/") for d in self.created)]
        if self.created:
            self.host.check(["rm", "-rf", "--", *self.created], timeout=60)
        if inside:
            self.host.check(["rm", "-f", "--", *inside], timeout=60)
        self.written, self.created = [], []


def _refuse_different(host: Host, files: Sequence[Path], remote: list[str],
                      there: Mapping[str, str | None], digests: Mapping[Path, str]) -> None:
    """``TransferError`` when a file is already on the host with other content (never
    overwritten), naming the first and both digests."""
    differ = [(n, there[n], digests[p]) for p, n in zip(files, remote, strict=True)
              if there[n] not in (None, digests[p])]
    if not differ:
        return
    name, theirs, ours = differ[0]
    more = f"; {len(differ) - 1} more" if len(differ) > 1 else ""
    raise TransferError(host.name, f"{name} is there with other content (sha256 {theirs} on the "
                                   f"host, {ours} here{more}): not overwritten")


def prepare(host: Host, files: Sequence[Path], digests: dict[Path, str], what: str, *,
            around: Sequence[str] = ()) -> tuple[Shipment, list[Path]]:
    """Judge the folders, make the missing ones, return the shipment: the one step :func:`ship` and
    :func:`framework.urma.tree.ship_tree` share (only their upload differs).

    ``files`` (absolute, hashed in ``digests``) go to their own paths on ``host``; every folder on the way
    (and those of ``around``: a tree's own root) must pass the workdir's guard and a file kept must be the
    SSH user's, else ``TransferError`` names host and path (``what``: the tree) before anything is
    written; a file there with other content is never overwritten (``TransferError`` naming it and both
    digests). Missing folders are made one level at a time. Returns the :class:`Shipment` (``kept``,
    ``created``; the caller fills ``written`` as it uploads) and the files the host lacks.
    """
    remote = [f.as_posix() for f in files]
    folders = folders_of([*remote, *around])
    probe = host.run(probe_script(remote, folders), timeout=max(host.command_timeout, 60.0))
    _refuse(host, probe, what)
    there, missing = parse_probe(probe.stdout, remote, folders)
    _refuse_different(host, files, remote, there, digests)
    shipment = Shipment(host, kept=[n for n in remote if there[n] is not None])
    if missing:  # made one level at a time under judged parents, never by mkdir -p or tar
        made = host.run(mkdir_script(missing), timeout=60)
        shipment.created = tops(parse_made(made.stdout, missing))
        _refuse(host, made, what)
    return shipment, [p for p, n in zip(files, remote, strict=True) if there[n] is None]


def _upload(host: Host, absent: Sequence[Path], digests: Mapping[Path, str],
            shipment: Shipment) -> None:
    """Put each ``absent`` file at its own path (noted in ``shipment.written``), then set the
    modes: put leaves 0600, the local bits are kept (a test binary stays executable), never
    group/other-writable."""
    modes: dict[str, list[str]] = {}
    for path in absent:
        name = path.as_posix()
        host.put(path, name, sha256=digests[path])
        shipment.written.append(name)
        modes.setdefault(f"{stat.S_IMODE(path.stat().st_mode) & 0o755:o}", []).append(name)
    for mode, names in modes.items():
        host.check(["chmod", mode, "--", *names])


def ship(host: Host, local: Path, *, digests: dict[Path, str] | None = None) -> Shipment:
    """Put ``local`` (a file, or a folder's files) at the same absolute path on ``host``; see the module docstring
    and :func:`prepare` (the folders judged and made, the refusals). ``digests`` (local file -> sha256) spares
    hashing the same files again for the next host.
    """
    from framework.hosts import sha256_file

    local = local.resolve()
    files = files_of(local)
    root = local.as_posix() if local.is_dir() else posixpath.dirname(local.as_posix())
    digests = {} if digests is None else digests
    for path in files:
        if path not in digests:
            digests[path] = sha256_file(path)
    shipment, absent = prepare(host, files, digests, root)
    try:
        _upload(host, absent, digests, shipment)
    except BaseException:
        try:  # nothing half-shipped stays behind (only what was absent was written)
            shipment.remove()
        except FrameworkError as exc:
            log.warning("%s: cannot remove what was shipped: %s", host.name, exc)
        raise
    if shipment.written:
        outcome = (f"created {', '.join(shipment.created)}" if shipment.created
                   else f"{len(shipment.kept)} already there")
        log.info("%s: shipped %d file(s) to %s (%s)", host.name, len(shipment.written), root, outcome)
    else:
        log.debug("%s: %s already there (%d file(s), same sha256)", host.name, root, len(shipment.kept))
    return shipment
