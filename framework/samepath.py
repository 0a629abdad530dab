"""Files at the same absolute path on every host: URMA's "Preparation" done by camit.

URMA cases start the program beside their ``test.py`` by its path on the controller
(``os.path.join(local_path, "echo_app")``): the harness assumes the tree sits at the same path on every
host (an NFS checkout). A CI clone under /tmp, or a controller the hosts share no file system with, breaks
that (each lab host has a private /tmp). :func:`ship` puts each file at its own absolute path on one host,
unless the host has it there already with the same sha256 (a host sharing the controller's file system:
nothing is written), through :meth:`Host.put <framework.hosts.Host.put>` (sha256 verified, atomic), with
the local permission bits. A file there with other content is refused, never overwritten.
:meth:`Shipment.remove` takes away what was written: the topmost folder the upload created, else the
files it wrote (each of them absent before). The probe is one shell script per host, every path quoted by
:func:`framework.commands.quote`; :func:`probe_script` and :func:`parse_probe` are pure.
"""

from __future__ import annotations

import logging
import posixpath
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from framework import commands
from framework.commands import ShellScript
from framework.errors import FrameworkError, TransferError

if TYPE_CHECKING:
    from framework.hosts import Host

log = logging.getLogger("camit.samepath")

#: file and folder names never shipped (byte code, editor and VCS files)
SKIPPED = ("__pycache__",)
#: the probe's line naming the topmost missing folder (by its index in the ancestors it was given)
TOP = "@@top"


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


def probe_script(files: Sequence[str], folders: Sequence[str]) -> ShellScript:
    """A script printing ``<i> <sha256>`` (``-`` when absent) for each of ``files`` (1-based), then
    ``@@top <j>`` for the first of ``folders`` (top down) that does not exist, if one does not."""
    q = commands.quote
    listed = " ".join(q(f) for f in files)
    dirs = " ".join(q(d) for d in folders)
    # the digest read from stdin: sha256sum escapes odd names in its output, never a hash of "-"
    script = (f'i=0; for f in {listed}; do i=$((i+1)); if [ -f "$f" ]; then '
              f'h=$(sha256sum < "$f" | cut -c1-64); else h=-; fi; echo "$i ${{h:--}}"; done')
    if folders:
        script += f'; j=0; for d in {dirs}; do j=$((j+1)); [ -d "$d" ] || {{ echo "{TOP} $j"; break; }}; done'
    return ShellScript(script)


def parse_probe(output: str, files: Sequence[str], folders: Sequence[str]) -> tuple[dict[str, str | None], str | None]:
    """``probe_script``'s output -> (each file's sha256 on the host or None, the topmost missing folder or None)."""
    digests: dict[str, str | None] = dict.fromkeys(files)
    top = None
    for line in output.splitlines():
        word, _, value = line.strip().partition(" ")
        if word == TOP and value.isdigit() and 1 <= int(value) <= len(folders):
            top = folders[int(value) - 1]
        elif word.isdigit() and 1 <= int(word) <= len(files):
            digests[files[int(word) - 1]] = value if len(value) == 64 else None
    return digests, top


@dataclass
class Shipment:
    """What :func:`ship` wrote on one host: ``created`` (the topmost folder it made) or ``written`` files."""

    host: Host
    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # there already, same sha256
    created: str | None = None

    def remove(self) -> None:
        """Take away what was written (nothing when the host had every file already)."""
        if self.created is not None:
            self.host.check(["rm", "-rf", "--", self.created], timeout=60)
        elif self.written:
            self.host.check(["rm", "-f", "--", *self.written], timeout=60)
        self.written, self.created = [], None


def ship(host: Host, local: Path, *, digests: dict[Path, str] | None = None) -> Shipment:
    """Put ``local`` (a file, or a folder's files) at the same absolute path on ``host``; see the module docstring.

    A file already there with other content is never overwritten: ``TransferError`` names it and both
    digests, before anything is written. ``digests`` (local file -> sha256) spares hashing the same files
    again for the next host.
    """
    from framework.hosts import sha256_file

    local = local.resolve()
    files = files_of(local)
    remote = [f.as_posix() for f in files]
    root = local.as_posix() if local.is_dir() else posixpath.dirname(local.as_posix())
    folders = ancestors(root)
    probe = host.check(probe_script(remote, folders), timeout=max(host.command_timeout, 60.0))
    there, top = parse_probe(probe.stdout, remote, folders)
    digests = {} if digests is None else digests
    for path in files:
        if path not in digests:
            digests[path] = sha256_file(path)
    differ = [(n, there[n], digests[p]) for p, n in zip(files, remote, strict=True) if there[n] not in (None, digests[p])]
    if differ:
        name, theirs, ours = differ[0]
        raise TransferError(host.name, f"{name} is there with other content (sha256 {theirs} on the host, {ours} "
                                       f"here{f'; {len(differ) - 1} more' if len(differ) > 1 else ''}): not overwritten")
    shipment = Shipment(host, created=top)
    modes: dict[str, list[str]] = {}
    try:
        for path, name in zip(files, remote, strict=True):
            if there[name] is not None:
                shipment.kept.append(name)
                continue
            host.put(path, name, sha256=digests[path])
            shipment.written.append(name)
            modes.setdefault(f"{stat.S_IMODE(path.stat().st_mode):o}", []).append(name)
        for mode, names in modes.items():  # put leaves 0600: keep the local bits (a test binary stays executable)
            host.check(["chmod", mode, "--", *names])
    except BaseException:
        try:  # nothing half-shipped stays behind (only what was absent was written)
            shipment.remove()
        except FrameworkError as exc:
            log.warning("%s: cannot remove what was shipped: %s", host.name, exc)
        raise
    if shipment.written:
        log.info("%s: shipped %d file(s) to %s (%s)", host.name, len(shipment.written), root,
                 f"created {top}" if top else f"{len(shipment.kept)} already there")
    else:
        log.debug("%s: %s already there (%d file(s), same sha256)", host.name, root, len(shipment.kept))
    return shipment
