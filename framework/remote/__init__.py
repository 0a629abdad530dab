"""The host side of camit: the programs it ships, the words they speak, the paths it uses.

- ``relay.py``, ``supervisor.py``, ``rankwrap.py``, ``wheelinst.py`` (the wheel into camit's venv,
  without pip): small standard-library programs run on the hosts. They are files, not imports: ``script(name)`` gives
  the local path and its sha256 so callers can stage them content-addressed under the host's workdir
  (``HostLayout.bin``). Each is self-contained: it keeps its own copy of the protocol words.
- :mod:`~framework.remote.protocol`: the line protocol those programs and the controller share.
- :mod:`~framework.remote.layout`: :class:`HostLayout` (every path under a host's workdir) and
  :class:`DeployState` (``deploy-state.json``).
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
