"""Running :mod:`framework.remote.hostfile`'s pack mode on a host: its standalone source and the sh that
runs it (every fetched tree — Ascend logs, ``collect --logs``, a node's run folder — is read through it:
folders walked by descriptor, never through a symlink; each file opened once and judged by ``fstat``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

from framework import commands
from framework.remote import hostfile


def pack_program() -> str:
    """Python source of :mod:`framework.remote.hostfile` in pack mode, standalone (stdlib only)."""
    body = inspect.getsource(hostfile).replace("from __future__ import annotations\n", "")
    return body + "\n\nsys.exit(pack_main(sys.argv[1:]))\n"


def sh_pack(tgz: str, cap: int, since: float, roots: str, select: Mapping[str, Any] | None = None) -> str:
    """sh: pack the files below ``roots`` (shell words) changed after ``since`` into ``tgz`` (a shell word;
    a new file) with :func:`pack_program`, newest first up to ``cap`` bytes, under ``umask 077``; sets
    ``$n`` to the number of files packed (empty when the host has no python) and ``$r`` to the program's
    line. ``select``: which names (:func:`framework.remote.hostfile.keep_file`)."""
    sel = commands.quote(json.dumps(dict(select or {}), sort_keys=True))
    return (
        "umask 077; PY=$(command -v python3 2>/dev/null || command -v python 2>/dev/null); "
        f"HF={commands.quote(pack_program())}; n=; r='no python on the host'; "
        f"if [ -n \"$PY\" ]; then r=$(\"$PY\" -I -c \"$HF\" {tgz} {int(cap)} {int(since)} \"$(id -u)\" {sel} {roots} "
        "2>&1 | head -c 4096 | tr '\\n' ' '); "
        "n=$(printf '%s' \"$r\" | sed -n 's/.*\"files\": \\([0-9]*\\).*/\\1/p'); fi"
    )


__all__ = ["pack_program", "sh_pack"]
