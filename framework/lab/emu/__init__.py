"""Emulated Ascend hosts for the lab: the tools and files an A2/A3 node shows, and its fault knobs.

Lab-only test scaffolding: nothing in ``framework.deploy``, ``framework.launch`` or ``framework.remote``
imports it. The lab (``python -m framework.lab up --npu <profile>``) calls :func:`populate` for each
emulated host's tree (``<state>/hosts/<host>/emu``) and bind-mounts its parts (:data:`MOUNTS`) inside
the host; ``fault HOST KNOB`` calls :func:`set_fault` / :func:`clear_faults` and, for ``held-device``,
runs :func:`holder_argv` inside the host. The contract is ``EMU_INTERFACE.md`` of issue 14.

- :mod:`.profiles`: :class:`Profile`, :data:`PROFILES` (``a2``, ``a3``, ``a3-26``), host paths
  (:data:`NPU_JSON`, :data:`PYTHON`);
- :mod:`.tree`: :class:`Mount`, :data:`MOUNTS`, :func:`populate`;
- :mod:`.faults`: :data:`KNOBS`, :func:`set_fault`, :func:`clear_faults`, :func:`active_faults`,
  :func:`set_linger`, :func:`holder_argv`;
- :mod:`.tools`: the fake ``npu-smi``, ``hccn_tool``, ``msnpureport`` (stdlib only, copied into each tree);
- ``data/``: the captures they replay, the one copy of each (tests read them here; each with its ``# source:`` line).
"""

from framework.lab.emu.faults import (
    KNOBS,
    active_faults,
    clear_faults,
    fault_params,
    holder_argv,
    set_fault,
    set_linger,
    sync_peer_links,
)
from framework.lab.emu.profiles import NPU_JSON, PROFILES, PYTHON, Profile, profile
from framework.lab.emu.tree import MOUNTS, Mount, populate

__all__ = [
    "KNOBS", "MOUNTS", "NPU_JSON", "PROFILES", "PYTHON", "Mount", "Profile", "active_faults", "clear_faults",
    "fault_params", "holder_argv", "populate", "profile", "set_fault", "set_linger", "sync_peer_links",
]
