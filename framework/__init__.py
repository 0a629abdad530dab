"""camit: multi-host integration tests for the CAM MoE dispatch/combine operators.

The public API is importable from ``framework`` itself, each name loaded on first use (PEP 562), so
``import framework`` stays cheap. The list of names and the package map: docs/internals/core.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework._lazy import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # environment
    "load", "EnvConfig", "HostSpec", "Secret",
    # hosts
    "Host", "Cluster", "GroupResult", "Result",
    # commands
    "Command", "Argv", "ShellScript",
    # leases and tests
    "Lease", "BaseTest",
    # suites: the pytest plugin's names
    "CONTEXT_KEY", "RunContext", "context_of", "resources_of", "record_launch", "min_nodes", "SOC_MARKERS",
    "host_share",
    # errors
    "FrameworkError", "UsageError", "ConfigError", "LabError", "ArtifactError", "LeaseHeld", "LeaseError",
    "LeaseLost", "HostError", "HostUnreachable", "AuthenticationFailed", "HostKeyError", "TransferError",
    "DeployError", "Cancelled", "CommandError", "CommandFailed", "CommandTimedOut", "MultiHostError",
]

#: the module that defines each public name (every name of ``__all__`` but ``__version__``)
_MODULES: dict[str, tuple[str, ...]] = {
    "framework.config.effective": ("load", "EnvConfig", "HostSpec", "Secret"),
    "framework.hosts": ("Host", "Cluster", "GroupResult"),
    "framework.result": ("Result",),
    "framework.commands": ("Command", "Argv", "ShellScript"),
    "framework.lease": ("Lease",),
    "framework.base_test": ("BaseTest",),
    "framework.plugin.context": ("CONTEXT_KEY", "RunContext", "context_of"),
    "framework.plugin.resources": ("resources_of",),
    "framework.plugin.fixtures": ("record_launch",),
    "framework.plugin.markers": ("min_nodes", "SOC_MARKERS"),
    "framework.plugin.xdist": ("host_share",),
    "framework.errors": tuple(__all__[__all__.index("FrameworkError"):]),
}
_EXPORTS: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names}

if TYPE_CHECKING:  # pragma: no cover - what the lazy names are, for type checkers and editors
    from framework.base_test import BaseTest
    from framework.commands import Argv, Command, ShellScript
    from framework.config.effective import EnvConfig, HostSpec, Secret, load
    from framework.errors import (
        ArtifactError,
        AuthenticationFailed,
        Cancelled,
        CommandError,
        CommandFailed,
        CommandTimedOut,
        ConfigError,
        DeployError,
        FrameworkError,
        HostError,
        HostKeyError,
        HostUnreachable,
        LabError,
        LeaseError,
        LeaseHeld,
        LeaseLost,
        MultiHostError,
        TransferError,
        UsageError,
    )
    from framework.hosts import Cluster, GroupResult, Host
    from framework.lease import Lease
    from framework.plugin.context import CONTEXT_KEY, RunContext, context_of
    from framework.plugin.fixtures import record_launch
    from framework.plugin.markers import SOC_MARKERS, min_nodes
    from framework.plugin.resources import resources_of
    from framework.plugin.xdist import host_share
    from framework.result import Result


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
