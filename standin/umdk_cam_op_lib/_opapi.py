"""The stand-in for the real ops' `libcust_opapi.so` requirement.

Upstream kernels run through `EXEC_NPU_CMD(aclnnXxx, ...)`, which dlopens `libcust_opapi.so` (found via the
`LD_LIBRARY_PATH` entry the CAM vendor `bin/set_env.bash` prepends: `<install>/vendors/CAM/op_api/lib`) and
fails at the first op call, not at import, when it is missing. The stand-in checks, at every call, that
some `LD_LIBRARY_PATH` entry holds a file `libcust_opapi.so` (the lab's CAM .run installs a placeholder).
`CAMIT_STANDIN_NO_OPAPI_CHECK=1` turns the check off (unit tests).
"""

from __future__ import annotations

import os

LIBRARY = "libcust_opapi.so"
DISABLE_ENV = "CAMIT_STANDIN_NO_OPAPI_CHECK"


def find_opapi(ld_library_path: str | None = None) -> str | None:
    """Path of the first `libcust_opapi.so` on LD_LIBRARY_PATH, or None."""
    value = os.environ.get("LD_LIBRARY_PATH", "") if ld_library_path is None else ld_library_path
    for entry in value.split(":"):
        if entry and os.path.isfile(os.path.join(entry, LIBRARY)):
            return os.path.join(entry, LIBRARY)
    return None


def missing_message(api: str) -> str:
    """The upstream error text for an aclnn API that could not be resolved."""
    return f"{api} or {api}GetWorkspaceSize not in libopapi.so, or libopapi.so not found."


def require_opapi(api: str) -> None:
    """Raise RuntimeError (upstream text) unless the vendor library is reachable or the check is off."""
    if os.environ.get(DISABLE_ENV) == "1":
        return
    if find_opapi() is None:
        raise RuntimeError(missing_message(api))
