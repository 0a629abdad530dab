"""Which environment file to use: the one rule every entry point follows (pure, no I/O).

First non-empty wins: the explicit path, ``$CAMIT_ENV``, the ini key ``camit_env`` (pytest
only), then :data:`DEFAULT_ENV_PATH` for the entry points that need an env."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import overload

#: where the URMA harness kept the file; used when no path is given
DEFAULT_ENV_PATH = "/etc/ubus_ci/test_env.yaml"
#: the environment variable naming the env file
ENV_VAR = "CAMIT_ENV"
#: the ini key (pytest) naming the env file
INI_KEY = "camit_env"
#: what :func:`resolve_env_path` reports as the source, in precedence order
SOURCES = ("option", ENV_VAR, INI_KEY, "default")


@overload
def resolve_env_path(explicit: str | os.PathLike[str] | None = ..., environ: Mapping[str, str] | None = ...,
                     ini: str | None = ..., *, default: str = ...) -> tuple[str, str]: ...
@overload
def resolve_env_path(explicit: str | os.PathLike[str] | None = ..., environ: Mapping[str, str] | None = ...,
                     ini: str | None = ..., *, default: None) -> tuple[str | None, str | None]: ...
def resolve_env_path(explicit: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None,
                     ini: str | None = None, *,
                     default: str | None = DEFAULT_ENV_PATH) -> tuple[str | None, str | None]:
    """``(path, source)`` of the env file: ``explicit``, else ``$CAMIT_ENV``, else ``ini``, else ``default``.

    ``environ`` defaults to ``os.environ``; ``source`` is one of :data:`SOURCES`, or None with the
    path when nothing is set and ``default`` is None.

    >>> resolve_env_path(None, {"CAMIT_ENV": "/a.yaml"}, "/b.yaml")
    ('/a.yaml', 'CAMIT_ENV')
    >>> resolve_env_path(None, {"CAMIT_ENV": ""}, None, default=None)
    (None, None)
    """
    env = os.environ if environ is None else environ
    for value, source in ((os.fspath(explicit) if explicit is not None else None, "option"),
                          (env.get(ENV_VAR), ENV_VAR), (ini, INI_KEY), (default, "default")):
        if value:
            return str(value), source
    return None, None


__all__ = ["DEFAULT_ENV_PATH", "ENV_VAR", "INI_KEY", "SOURCES", "resolve_env_path"]
