"""Launch torchrun across the cluster: fail fast, tear down everywhere, leave nothing behind.

Its names (``from framework.launch import Launcher, Target``) load on first use (PEP 562); the
design is in ``docs/internals/launch-preflight-config.md``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework._lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover - what the lazy names are, for type checkers and editors
    from framework.launch.plan import (
        FETCH_PATTERNS,
        HEARTBEAT,
        LOST_AFTER,
        SUPERVISOR_SILENCE,
        NodePlan,
        Target,
        backend_env,
        launch_label,
        node_command,
    )
    from framework.launch.result import LaunchResult, NodeResult, RankResult
    from framework.launch.runner import Launcher

__all__ = ["FETCH_PATTERNS", "HEARTBEAT", "LOST_AFTER", "SUPERVISOR_SILENCE", "LaunchResult", "Launcher", "NodePlan",
           "NodeResult", "RankResult", "Target", "backend_env", "launch_label", "node_command"]

#: the module that defines each public name; loaded on first use, so the pure submodules (``nic``,
#: ``timeouts``: the env loader's checks) import without the runner, SSH hosts and all
_MODULES: dict[str, tuple[str, ...]] = {
    "framework.launch.plan": ("FETCH_PATTERNS", "HEARTBEAT", "LOST_AFTER", "SUPERVISOR_SILENCE", "NodePlan", "Target",
                              "backend_env", "launch_label", "node_command"),
    "framework.launch.result": ("LaunchResult", "NodeResult", "RankResult"),
    "framework.launch.runner": ("Launcher",),
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), {n: m for m, ns in _MODULES.items() for n in ns})
