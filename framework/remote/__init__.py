"""Small standard-library programs that camit ships to the hosts (relay, supervisor).

They are files, not imports: ``script(name)`` gives the local path and its
sha256 so callers can stage them content-addressed under the host's workdir.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def script(name: str) -> tuple[Path, str]:
    path = HERE / name
    return path, hashlib.sha256(path.read_bytes()).hexdigest()
