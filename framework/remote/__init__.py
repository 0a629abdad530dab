"""The host side of camit: the programs it ships, the words they speak, the paths it uses.

The programs are files, not imports: ``script(name)`` gives the local path and its sha256.
Design: docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


@functools.cache
def script(name: str) -> tuple[Path, str]:
    """The shipped program ``name``: its local path and sha256, read once per process (every host's probe and
    install step names the program's content-addressed path and checks its hash)."""
    path = HERE / name
    return path, hashlib.sha256(path.read_bytes()).hexdigest()
