"""How an op reaches its aclnn API: `libcust_opapi.so` by bare name, as CAM's pybind does.

The upstream lookup it mirrors: docs/internals/standin.md.
"""

from __future__ import annotations

import ctypes
import os

LIBRARY = "libcust_opapi.so"
FALLBACK = "libopapi.so"
DISABLE_ENV = "CAMIT_STANDIN_NO_OPAPI_CHECK"

_found: set[str] = set()


def _handle(name: str) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(name, mode=os.RTLD_LAZY)
    except OSError:
        return None


def lookup(api: str) -> bool:
    """True when `api` and `api`GetWorkspaceSize resolve (libcust_opapi.so first, then libopapi.so)."""
    if api in _found:
        return True
    for symbol in (api + "GetWorkspaceSize", api):
        if not any(hasattr(lib, symbol) for lib in (_handle(LIBRARY), _handle(FALLBACK)) if lib is not None):
            return False
    _found.add(api)
    return True


def missing_message(api: str) -> str:
    """The upstream error text for an aclnn API that could not be resolved (TORCH_CHECK in EXEC_NPU_CMD)."""
    return f"{api} or {api}GetWorkspaceSize not in {FALLBACK}, or {FALLBACK}not found."


def require_opapi(api: str) -> None:
    """Raise RuntimeError (upstream text) unless the aclnn API resolves or the check is off."""
    if os.environ.get(DISABLE_ENV) == "1":
        return
    if not lookup(api):
        raise RuntimeError(missing_message(api))
