"""URMA's "Preparation": the harness tree (and the umdk ``src`` tree beside it) at the same path
on every host.

Design: docs/internals/urma.md.
"""

from __future__ import annotations

import logging
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from framework import commands
from framework.errors import MultiHostError
from framework.hosts import sha256_file
from framework.samepath import Shipment, ancestors, files_of, prepare

if TYPE_CHECKING:
    from framework.hosts import Host

log = logging.getLogger("camit.urma")

#: hosts the tree is shipped to at once
MAX_PARALLEL = 8
_PACK_LOCK = threading.Lock()


def trees_of(root: Path) -> list[Path]:
    """The harness ``root``, and the umdk ``src`` tree when ``root`` is
    ``<umdk>/test/<harness>``."""
    src = root.parent.parent / "src"
    return [root, src] if root.parent.name == "test" and src.is_dir() else [root]


def pack(files: Sequence[Path], archive: Path) -> str:
    """``files`` (absolute) into ``archive`` (gzip tar, names relative to ``/``); its sha256."""
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        for path in files:
            tar.add(path, arcname=path.as_posix().lstrip("/"), recursive=False)
    return sha256_file(archive)


def unpack_script(archive: str) -> commands.ShellScript:
    q = commands.quote(archive)
    # into folders the guard judged or made: files are new (a file that appeared meanwhile fails the unpack),
    # never group/other-writable whatever their mode here
    return commands.ShellScript(f"umask 022; tar -xzf {q} -C / --no-same-owner --no-same-permissions "
                                f"--keep-old-files; rc=$?; rm -f {q}; exit $rc")


def ship_tree(
    host: Host,
    trees: Sequence[Path],
    digests: dict[Path, str],
    *,
    packed: dict[tuple[Path, ...], tuple[Path, str]] | None = None,
    skip: Sequence[Path] = (),
) -> list[Shipment]:
    """Put ``trees`` at their own absolute paths on ``host``; one archive for everything missing
    there.

    ``packed`` (the missing files -> an archive and its sha256) lets hosts that lack the same files
    share one archive (the caller removes it); files under ``skip`` (camit's own run folders) are
    not shipped.
    """
    shipments: list[Shipment] = []
    missing: list[Path] = []
    for tree in trees:
        files = [f for f in files_of(tree) if not any(f.is_relative_to(s) for s in skip)]
        # the folders judged as the workdir is (samepath's guard, the tree's own ancestors too) and made
        shipment, absent = prepare(host, files, digests, tree.as_posix(),
                                   around=ancestors(tree.resolve().as_posix()))
        shipments.append(shipment)
        shipment.written = [p.as_posix() for p in absent]
        missing += absent
    if missing:
        cache = {} if packed is None else packed
        with tempfile.TemporaryDirectory(prefix="camit-tree-") as tmp:
            with _PACK_LOCK:  # hosts ship in parallel: one archive per set of missing files
                if tuple(missing) not in cache:
                    where = tmp if packed is None else tempfile.mkdtemp(prefix="camit-tree-")
                    archive = Path(where) / "tree.tar.gz"
                    cache[tuple(missing)] = (archive, pack(missing, archive))
            archive, digest = cache[tuple(missing)]
            remote_archive = host.check(["mktemp", "/tmp/camit-tree.XXXXXX"]).stdout.strip()
            try:
                host.put(archive, remote_archive, sha256=digest)
                host.check(unpack_script(remote_archive), timeout=600)
            except BaseException:
                host.run(["rm", "-f", "--", remote_archive], timeout=60)
                for shipment in shipments:
                    shipment.remove()
                raise
        log.info(
            "%s: shipped %d file(s) of %s as one archive",
            host.name,
            len(missing),
            ", ".join(str(t) for t in trees),
        )
    return shipments


class Prepared:
    """What :func:`ship_tree` wrote this session, by (host, harness root): each tree shipped
    once."""

    def __init__(self) -> None:
        self.shipments: dict[tuple[str, Path], list[Shipment]] = {}
        self.digests: dict[Path, str] = {}

    def ensure(self, hosts: Sequence[Host], root: Path, skip: Sequence[Path] = ()) -> None:
        """The trees of ``root`` on each of ``hosts`` (once per session and host), without
        ``skip``."""
        trees = trees_of(root)
        packed: dict[tuple[Path, ...], tuple[Path, str]] = {}
        try:
            self._ensure(hosts, root, trees, skip, packed)
        finally:
            for archive, _ in packed.values():
                shutil.rmtree(archive.parent, ignore_errors=True)

    def _ensure(
        self,
        hosts: Sequence[Host],
        root: Path,
        trees: Sequence[Path],
        skip: Sequence[Path],
        packed: dict[tuple[Path, ...], tuple[Path, str]],
    ) -> None:
        for tree in trees:
            for path in files_of(tree):
                if path not in self.digests and not any(path.is_relative_to(s) for s in skip):
                    self.digests[path] = sha256_file(path)
        todo = [h for h in hosts if (h.name, root) not in self.shipments]
        failed: dict[str, BaseException] = {}
        with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(todo)))) as pool:
            futures = {
                pool.submit(ship_tree, h, trees, self.digests, packed=packed, skip=skip): h
                for h in todo
            }
            for future, host in futures.items():
                try:
                    self.shipments[(host.name, root)] = future.result()
                except Exception as exc:  # noqa: BLE001 - every host's outcome, then one error
                    failed[host.name] = exc
        if len(failed) == 1:
            raise next(iter(failed.values()))
        if failed:
            raise MultiHostError(failed, total=len(todo))

    def remove_all(self) -> None:
        """Take away everything shipped (a failure is a warning naming the host)."""
        shipments, self.shipments = self.shipments, {}
        for (name, _), group in shipments.items():
            for shipment in group:
                try:
                    shipment.remove()
                except Exception as exc:  # noqa: BLE001 - best effort at the end, as the kills
                    log.warning("%s: cannot remove the shipped tree: %s", name, exc)


#: this process's shipped trees (the harness plugin removes them at session end)
PREPARED = Prepared()
