"""Failures of an op's tiling / aclnn checks, and device faults, as the real ops surface them.

A tiling check (`OPS_ERR_IF(..., OPS_LOG_E(nodeName, ...))`, umdk
`src/cam/comm_operator/ascend_kernels/utils/op_host/ops_log.h`: OPS_LOG_E reports an `EZ9999` inner error)
makes `aclnnXxxGetWorkspaceSize` fail; `EXEC_NPU_CMD` then raises
`call aclnnXxx failed, detail:<aclGetRecentErrMsg()>` (umdk `.../pybind/pytorch_extension/pytorch_npu_helper.hpp`).

A kernel that writes out of bounds raises nothing at the call. With the torch_npu stand-in present
(`torch_npu.STANDIN`) the process's device is poisoned through its stand-in-only `torch_npu.npu._standin_fault`
(the next synchronize or collective fails with 507035, for ever); without torch_npu (CPU/gloo host) the
write is silently lost and the affected rows are undefined.
"""

from __future__ import annotations

import os
import sys
import time
from typing import NoReturn

VECTOR_CORE_FAULT = 507035


def _stamp() -> str:
    now = time.time()
    micros = int(now * 1_000_000) % 1_000_000
    return time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(now)) + f".{micros // 1000:03d}.{micros % 1000:03d}"


def tiling_fail(api: str, node: str, source: str, message: str) -> NoReturn:
    """Raise RuntimeError as `EXEC_NPU_CMD` does when `api`'s tiling (file `source`) logs `message`."""
    raise RuntimeError(f"call {api} failed, detail:EZ9999: Inner Error!\n"
                       f"EZ9999: [PID: {os.getpid()}] {_stamp()} {node}: {message}[FUNC:TilingFunc][FILE:{source}]\n"
                       "        TraceBack (most recent call last):\n"
                       f"        {api[5:]} tiling failed\n")


def tiling_check(ok: bool, api: str, node: str, source: str, message: str) -> None:
    if not ok:
        tiling_fail(api, node, source, message)


def torch_npu_standin() -> object | None:
    """The torch_npu stand-in module when this process imported it (an emulated Ascend host), else None."""
    mod = sys.modules.get("torch_npu")
    return mod if mod is not None and getattr(mod, "STANDIN", False) else None


def device_fault(code: int = VECTOR_CORE_FAULT) -> None:
    """An out-of-bounds write by the kernel: poisons the emulated device, or (no torch_npu) does nothing."""
    mod = torch_npu_standin()
    if mod is not None:
        mod.npu._standin_fault(code)  # type: ignore[attr-defined]
