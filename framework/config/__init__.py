"""The environment file: which one (``envfile``), its text (``yaml_text``), its schema (``document``), its values.

``test_env.yaml`` becomes one validated, frozen :class:`EnvConfig` in three layers:
:mod:`~framework.config.yaml_text` reads the text as strict YAML and expands ``${VAR}``;
:mod:`~framework.config.document` is the schema model (pydantic, exported by ``python -m
framework.config schema``) and words its errors; :mod:`~framework.config.effective` resolves each
host's effective settings into frozen dataclasses (:func:`load`). :mod:`~framework.config.envfile`
holds the one rule for which file to load (:func:`resolve_env_path`). Import the public names from
here (``from framework.config import load``); they are loaded on first use, so the env-file rule
costs no pydantic import.
"""

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
