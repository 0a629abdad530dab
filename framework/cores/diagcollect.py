"""``camit collect --diag``: each host's NPU state, plogs and kernel lines now, as ascend-fd's input
tree (design: docs/internals/cores.md).
"""

from __future__ import annotations

import logging
import re
import secrets
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from framework import commands, fetchcaps
from framework.ascend.tools import state_script
from framework.commands import ShellScript
from framework.cores.faultbundle import write_bundle
from framework.cores.logs import DMESG_BYTES, _log_member
from framework.errors import FrameworkError
from framework.hosts import Cluster, Host
from framework.remote.packing import sh_pack

log = logging.getLogger("camit.collect")

#: the bytes of plogs taken from a host (newest first)
PLOG_BYTES = 256 << 20
_DONE = re.compile(r"^@@diag (\S+)$", re.M)
_PLOGS = re.compile(r"^@@plogs (\S+)$", re.M)
_PLOG_NAME = re.compile(r"^plog-[A-Za-z0-9_.-]*\.log$")


def diag_script(folder: str, devices: int, guard: str = "") -> ShellScript:
    """sh: the NPU state into ``<folder>/npu-state``, dmesg's tail, the newest plogs; ``@@diag
    <tgz>`` (``guard``: the workdir's safety check, run first; when it fails nothing is written)."""
    q = commands.quote
    lines = [
        *([f"{guard} || exit 0"] if guard else []),
        str(state_script(folder, devices)).replace("\nexit 0\n", "\n"),
        f"F={q(folder)}",
        "{ dmesg 2>&1 || echo 'dmesg: not readable'; } "
        f"| tail -c {int(DMESG_BYTES)} > \"$F/dmesg.txt\"",
        "tar czf \"$F.tgz\" -C \"$F\" . 2>/dev/null && printf '@@diag %s\\n' \"$F.tgz\"",
        "rm -rf -- \"$F\"",
        sh_pack('"$F.plogs.tgz"', PLOG_BYTES, 0, '"$HOME/ascend/log/debug" "$HOME/ascend/log/run"',
                {"names": ["plog-*.log"]}),
        "if [ \"${n:-0}\" -gt 0 ]; then printf '@@plogs %s\\n' \"$F.plogs.tgz\"; "
        "else rm -f \"$F.plogs.tgz\"; fi",
        "exit 0",
    ]
    return ShellScript("\n".join(lines) + "\n")


def _plog_member(member: tarfile.TarInfo) -> Path | None:
    """A packed plog's place in the tree: ``ascend/<its name>`` (the pack keeps each file's full
    path)."""
    name = PurePosixPath(member.name).name
    return Path("ascend", name) if _PLOG_NAME.match(name) else None


def _fetch(host: Host, remote: str, dest: Path,
           place: Callable[[tarfile.TarInfo], Path | None]) -> None:
    """``remote`` (a tgz the script wrote) into ``dest``, bounded; removed on the host whatever
    happens."""
    local = dest.with_name(PurePosixPath(remote).name)
    try:
        try:
            host.get(remote, local, keep_partial=True)
        except fetchcaps.FetchCapError as exc:
            log.warning("%s", exc)
        fetchcaps.extract_tar(local, dest, host=host.name, what="diagnostics", place=place)
    finally:
        local.unlink(missing_ok=True)
        host.run(["rm", "-f", "--", remote], timeout=60)


def collect_diag(cluster: Cluster, root: Path, workdir_of: Callable[[Host], str],
                 devices_of: Callable[[Host], int], *,
                 guard_of: Callable[[Host], str] = lambda _h: "",
                 scrub: Callable[[str], str] = str) -> tuple[Path, str | None, Mapping[str, str]]:
    """Every host's diagnostics into ``<root>/collect/<host>/diag/``, then the bundle; (bundle,
    ascend-fd's verdict or None, {host: what went wrong} for the hosts that gave nothing)."""

    def one(host: Host) -> Path:
        folder = f"{workdir_of(host)}/camit-diag-{secrets.token_hex(4)}"
        res = host.run(diag_script(folder, devices_of(host), guard_of(host)), timeout=600)
        found = _DONE.search(res.stdout)
        if not found:
            raise FrameworkError(
                f"{host.name}: the diagnostics script packed nothing: {res.tail(2)}")
        dest = root / "collect" / host.name / "diag"
        _fetch(host, found[1], dest, _log_member)
        plogs = _PLOGS.search(res.stdout)
        if plogs:
            _fetch(host, plogs[1], dest, _plog_member)
        return dest

    got = cluster.map(one)
    folders = {h: v for h, v in got.items() if isinstance(v, Path)}
    failed = {h: str(v) for h, v in got.items() if not isinstance(v, Path)}
    bundle, verdict = write_bundle(root, folders, scrub=scrub)
    return bundle, verdict, failed


__all__ = ["collect_diag", "diag_script"]
