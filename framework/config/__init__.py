"""The environment file: which one (``envfile``), its text (``yaml_text``), its schema (``document``), its values.

Import the public names from here (``from framework.config import load``): they load on first
use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework._lazy import lazy_exports
from framework.config.envfile import DEFAULT_ENV_PATH, ENV_VAR, INI_KEY, resolve_env_path

if TYPE_CHECKING:
    from framework.config.document import SCHEMA_VERSION
    from framework.config.effective import (
        ArtifactsSpec,
        CannSpec,
        Defaults,
        EnvConfig,
        HostSpec,
        LaunchSpec,
        NicSpec,
        NpuSpec,
        Secret,
        TestNicSpec,
        load,
    )

_EFFECTIVE = frozenset({"ArtifactsSpec", "CannSpec", "Defaults", "EnvConfig", "HostSpec", "LaunchSpec", "NicSpec",
                        "NpuSpec", "SCHEMA_VERSION", "Secret", "TestNicSpec", "load"})

__all__ = ["DEFAULT_ENV_PATH", "ENV_VAR", "INI_KEY", "SCHEMA_VERSION", "ArtifactsSpec", "CannSpec", "Defaults",
           "EnvConfig", "HostSpec", "LaunchSpec", "NicSpec", "NpuSpec", "Secret", "TestNicSpec", "load",
           "resolve_env_path"]


__getattr__, __dir__ = lazy_exports(__name__, globals(), dict.fromkeys(_EFFECTIVE, "framework.config.effective"))
