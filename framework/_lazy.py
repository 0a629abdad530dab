"""Lazy package exports (PEP 562): a package's public names load from their modules on first use.

``framework``, ``framework.config`` and ``framework.report`` each name their public API in one mapping
(name -> defining module); :func:`lazy_exports` gives them the module ``__getattr__`` and ``__dir__``
that resolve it, so ``import framework`` stays cheap and the loader is written once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping


def lazy_exports(package: str, namespace: MutableMapping[str, object],
                 exports: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps a name to its module's full name.

    A resolved name is stored in ``namespace`` (the package's globals), so the next access is a plain lookup.
    """

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
