"""``camit collect --diag``: each host's NPU state, plogs and kernel lines now, as ascend-fd's input tree.

One script per host (:func:`diag_script`) saves into a fresh folder of the workdir what a failed launch's
snapshot holds (:func:`framework.ascend.tools.state_script`: npu-smi, hccn_tool, msnpureport), the tail of
dmesg and the SSH user's newest plogs (single-link files, never a symlink), packs it and prints its path; the
controller fetches it bounded (:mod:`framework.fetchcaps`), removes it on the host and writes
``fault-bundle/<host>/`` (:func:`framework.cores.faultbundle.write_bundle`).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

from framework import commands, fetchcaps
from framework.ascend.tools import state_script
from framework.commands import ShellScript
from framework.cores.faultbundle import write_bundle
from framework.cores.logs import DMESG_BYTES, _log_member
from framework.errors import FrameworkError
from framework.hosts import Cluster, Host

log = logging.getLogger("camit.collect")

#: plogs taken from a host (newest first)
MAX_PLOGS = 200
_DONE = re.compile(r"^@@diag (\S+)$", re.M)


def diag_script(folder: str, devices: int, guard: str = "") -> ShellScript:
    """sh: the NPU state into ``<folder>/npu-state``, dmesg's tail, the newest plogs; ``@@diag <tgz>``
    (``guard``: the workdir's safety check, run first; when it fails nothing is written)."""
    q = commands.quote
    lines = [
        *([f"{guard} || exit 0"] if guard else []),
        str(state_script(folder, devices)).replace("\nexit 0\n", "\n"),
        f"F={q(folder)}",
        f"{{ dmesg 2>&1 || echo 'dmesg: not readable'; }} | tail -c {int(DMESG_BYTES)} > \"$F/dmesg.txt\"",
        "mkdir -p \"$F/ascend\"",
        "find \"$HOME/ascend/log/debug\" \"$HOME/ascend/log/run\" -type f -name 'plog-*.log' -user \"$(id -u)\" "
        f"-links 1 -printf '%T@ %p\\0' 2>/dev/null | sort -z -rn | head -z -n {MAX_PLOGS} "
        "| sed -z 's/^[^ ]* //' | xargs -0 -r cp -t \"$F/ascend/\" -- 2>/dev/null",
        "tar czf \"$F.tgz\" -C \"$F\" . 2>/dev/null && printf '@@diag %s\\n' \"$F.tgz\"",
        "rm -rf -- \"$F\"",
        "exit 0",
    ]
    return ShellScript("\n".join(lines) + "\n")


def collect_diag(cluster: Cluster, root: Path, workdir_of: Callable[[Host], str], devices_of: Callable[[Host], int],
                 *, guard_of: Callable[[Host], str] = lambda _h: "", scrub: Callable[[str], str] = str) -> tuple[Path, str | None, Mapping[str, str]]:
    """Every host's diagnostics into ``<root>/collect/<host>/diag/``, then the bundle; (bundle, ascend-fd's
    verdict or None, {host: what went wrong} for the hosts that gave nothing)."""

    def one(host: Host) -> Path:
        folder = f"{workdir_of(host)}/camit-diag-{secrets.token_hex(4)}"
        res = host.run(diag_script(folder, devices_of(host), guard_of(host)), timeout=600)
        found = _DONE.search(res.stdout)
        if not found:
            raise FrameworkError(f"{host.name}: the diagnostics script packed nothing: {res.tail(2)}")
        local = root / "collect" / host.name / "diag.tgz"
        dest = root / "collect" / host.name / "diag"
        try:
            try:
                host.get(found[1], local, keep_partial=True)
            except fetchcaps.FetchCapError as exc:
                log.warning("%s", exc)
            fetchcaps.extract_tar(local, dest, host=host.name, what="diagnostics", place=_log_member)
        finally:
            local.unlink(missing_ok=True)
            host.run(["rm", "-f", "--", found[1]], timeout=60)
        return dest

    got = cluster.map(one)
    folders = {h: v for h, v in got.items() if isinstance(v, Path)}
    failed = {h: str(v) for h, v in got.items() if not isinstance(v, Path)}
    bundle, verdict = write_bundle(root, folders, scrub=scrub)
    return bundle, verdict, failed


__all__ = ["collect_diag", "diag_script"]
