"""torch_npu's error texts: the ``ERRxxyyy`` suffix and the NPU_CHECK_ERROR message.

Mirrors torch_npu/utils/_error_code.py (``pta_error``: ``\\n[ERROR] <time> (PID:.., Device:.., RankID:..)
ERR<submodule:02><code:03> <SUBMODULE> <text>``), torch_npu/csrc/core/npu/NPUException.h
(``<func>:<file>:<line> NPU function error: <call>, error code is <n>`` + suffix + ``\\n[Error]: <text>``)
and the texts of torch_npu/csrc/core/npu/NPUErrorCodes.h.
"""

from __future__ import annotations

import os
import time

SUBMODULES = {"PTA": 0, "OPS": 1, "DIST": 2}
ERRCODES = {"VALUE": (3, "invalid value"), "INTERNAL": (5, "internal error"),
            "NOT_SUPPORT": (7, "feature not supported"), "ACL": (100, "call acl api failed"),
            "HCCL": (200, "call hccl api failed")}
# NPUErrorCodes.h (only the codes the stand-in raises)
ACL_TEXT = {
    107001: "Invalid device ID.\n        Check whether the device ID is valid.",
    507014: "The aicore execution times out. \n"
            "        Rectify the fault based on the error information in the ascend log.",
    507034: "Vector core execution timed out. \n"
            "        Rectify the fault based on the error information in the ascend log.",
    507015: "The aicore execution is abnormal. \n"
            "        Rectify the fault based on the error information in the ascend log.",
    507035: "The vector core execution is abnormal. \n"
            "        Rectify the fault based on the error information in the ascend log.",
    507048: "The execution of the internal task times out. \n"
            "        Rectify the fault based on the error information in the ascend log.",
}
# torch_npu's binaries report __FILE__ as this path (see the captured errors in camit's tests/data/ascend)
BUILD_FILE = "build/CMakeFiles/torch_npu.dir/compiler_depend.ts"


def suffix(submodule: str, code: str, device: int | None = None, rank: int | None = None) -> str:
    from . import _env
    from .npu import _device

    number, text = ERRCODES[code]
    dev = _device.current_or_minus_one() if device is None else device
    rank = _env.rank_id() if rank is None else rank
    return (f"\n[ERROR] {time.strftime('%Y-%m-%d-%H:%M:%S', time.localtime())} (PID:{os.getpid()}, "
            f"Device:{dev}, RankID:{rank}) ERR{SUBMODULES[submodule]:02d}{number:03d} {submodule} {text}")


def npu_function_error(func: str, line: int, call: str, code: int, detail: str = "") -> str:
    """The message of NPU_CHECK_ERROR for a failed ACL call."""
    text = ACL_TEXT.get(code)
    tail = f"\n[Error]: {text}" if text else "."
    return (f"{func}:{BUILD_FILE}:{line} NPU function error: {call}, error code is {code}"
            f"{suffix('PTA', 'ACL')}{tail}\n{detail}")
