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
    return sorted(p for p in local.rglob("*") if _shipped(p, local))


def _shipped(path: Path, folder: Path) -> bool:
    """``path`` (under ``folder``) is a file and no name on its way is skipped."""
    return path.is_file() and not any(map(_skipped_name, path.relative_to(folder).parts))


def _skipped_name(name: str) -> bool:
    """A file or folder name never shipped: byte code folders and dot-names."""
    return name in SKIPPED or name.startswith(".")


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


def _records(output: str) -> list[tuple[str, str]]:
    """Each line of a script's output as (its first word, the rest)."""
    split = (line.strip().partition(" ") for line in output.splitlines())
    return [(word, rest) for word, _, rest in split]


def _nth(index: str, items: Sequence[str]) -> str | None:
    """The item of ``items`` that the 1-based ``index`` names, None when it names none."""
    if not index.isdigit() or not 1 <= int(index) <= len(items):
        return None
    return items[int(index) - 1]


def _marked(output: str, mark: str, items: Sequence[str]) -> list[str]:
    """The ``items`` named by the ``<mark> <index>`` lines of ``output``, in order."""
    found = []
    for word, value in _records(output):
        item = _nth(value, items)
        if word == mark and item is not None:
            found.append(item)
    return found


def parse_made(output: str, folders: Sequence[str]) -> list[str]:
    """The folders ``mkdir_script`` made (its ``@@made`` records), in order."""
    return _marked(output, MADE, folders)


def parse_probe(output: str, files: Sequence[str],
                folders: Sequence[str]) -> tuple[dict[str, str | None], list[str]]:
    """``probe_script``'s output -> (each file's sha256 on the host or None, the missing folders,
    top down)."""
    digests: dict[str, str | None] = dict.fromkeys(files)
    for word, value in _records(output):
        file = _nth(word, files)
        if file is not None:
            digests[file] = value if len(value) == 64 else None
    return digests, _marked(output, MISSING, folders)


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
        loose = [f for f in self.written if not self._made_folder_holds(f)]
        if self.created:
            self.host.check(["rm", "-rf", "--", *self.created], timeout=60)
        if loose:
            self.host.check(["rm", "-f", "--", *loose], timeout=60)
        self.written, self.created = [], []

    def _made_folder_holds(self, path: str) -> bool:
        """``path`` lies in a folder this shipment made (removing the folder takes it away)."""
        return any(path.startswith(d + "/") for d in self.created)


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
    shipment.created = _make_folders(host, missing, what)
    return shipment, [p for p, n in zip(files, remote, strict=True) if there[n] is None]


def _make_folders(host: Host, missing: Sequence[str], what: str) -> list[str]:
    """Make the ``missing`` folders one level at a time under judged parents, never by ``mkdir -p``
    or tar; the topmost of them."""
    if not missing:
        return []
    made = host.run(mkdir_script(missing), timeout=60)
    _refuse(host, made, what)
    return tops(parse_made(made.stdout, missing))


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
    digests.update({path: sha256_file(path) for path in files if path not in digests})
    shipment, absent = prepare(host, files, digests, root)
    _upload_or_undo(host, absent, digests, shipment)
    _log_shipped(shipment, root)
    return shipment


def _upload_or_undo(host: Host, absent: Sequence[Path], digests: Mapping[Path, str],
                    shipment: Shipment) -> None:
    """:func:`_upload`, and on any failure take away what it wrote: nothing half-shipped stays
    behind (only what was absent was written)."""
    try:
        _upload(host, absent, digests, shipment)
    except BaseException:
        try:
            shipment.remove()
        except FrameworkError as exc:
            log.warning("%s: cannot remove what was shipped: %s", host.name, exc)
        raise


def _log_shipped(shipment: Shipment, root: str) -> None:
    """One log line: what was shipped to ``root`` and the folders made, or that it was there."""
    name, kept = shipment.host.name, len(shipment.kept)
    if not shipment.written:
        log.debug("%s: %s already there (%d file(s), same sha256)", name, root, kept)
        return
    made = ", ".join(shipment.created)
    outcome = f"created {made}" if made else f"{kept} already there"
    log.info("%s: shipped %d file(s) to %s (%s)", name, len(shipment.written), root, outcome)
