"""Failures of an op's tiling / aclnn checks, as the real ops surface them.

A tiling check (`OPS_ERR_IF(..., OPS_LOG_E(nodeName, ...))`, umdk
`src/cam/comm_operator/ascend_kernels/utils/op_host/ops_log.h`: OPS_LOG_E reports an `EZ9999` inner error)
makes `aclnnXxxGetWorkspaceSize` fail; `EXEC_NPU_CMD` then raises
`call aclnnXxx failed, detail:<aclGetRecentErrMsg()>` (umdk `.../pybind/pytorch_extension/pytorch_npu_helper.hpp`).
"""

from __future__ import annotations

import os
import time
from typing import NoReturn


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
