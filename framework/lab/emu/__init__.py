"""Emulated Ascend hosts for the lab: the tools and files an A2/A3 node shows, and its fault knobs.

Lab-only test scaffolding: nothing in deploy, launch or remote imports it.
Design: docs/internals/remote-and-lab.md.
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
