"""Device faults and stuck kernels: what a broken kernel does to this process's stream
(stand-in-only API).

The torch_npu behaviour it mirrors: docs/internals/standin-npu.md.
"""

from __future__ import annotations

import os
import threading
import time

from . import _errors, _plog

#: the codes a kernel fault may report (NPUErrorCodes.h): aicore / vector core exceptions
CODES = {507015: "aicore exception", 507035: "vector core exception"}
#: the codes of a kernel past the op-execute timeout (NPUErrorCodes.h: "... execution times out")
TIMEOUT_CODES = {507014: "aicore timeout", 507034: "vector core timeout"}
#: torch_npu's op-execute timeout, seconds (npu_sys_ctrl.cpp, kMaxOpExecuteTimeOut)
DEFAULT_OP_TIMEOUT_S = 547.0

_lock = threading.Lock()
_fault: tuple[int, int] | None = None   # (code, pid): a forked child starts clean, as a new NPU context
_stuck: tuple[int, int, float] | None = None   # (code, pid, monotonic deadline) of a spinning kernel
_op_timeout_s = DEFAULT_OP_TIMEOUT_S


def standin_fault(code: int = 507035) -> None:
    """Poison this process's device stream with `code` (507015 or 507035)."""
    global _fault
    if code not in CODES:
        raise ValueError(f"_standin_fault: code {code} is not a kernel fault code ({', '.join(map(str, CODES))})")
    with _lock:
        if _fault is None or _fault[1] != os.getpid():
            _fault = (code, os.getpid())
    tid = threading.get_native_id()
    _plog.write("ERROR", "RUNTIME", "device_error_proc.cc:1421",
                f"{tid} ProcessStarsCoreErrorInfo:report error module_type=5, module_name=EZ9999")
    _plog.write("ERROR", "RUNTIME", "stream.cc:1245",
                f"{tid} GetError:Stream Synchronize failed, retCode={code}, [{CODES[code]}].")


def set_op_timeout_ms(timeout: int) -> None:
    """torch_npu.npu.set_op_timeout_ms: the op-execute timeout of kernels launched from now on."""
    global _op_timeout_s
    if int(timeout) < 0:
        raise ValueError(f"set_op_timeout_ms: timeout must be >= 0, got {timeout}")
    _op_timeout_s = int(timeout) / 1000.0


def op_timeout_s() -> float:
    return _op_timeout_s


def standin_stuck(code: int = 507034, since: float | None = None) -> None:
    """A kernel launched now (or at monotonic time `since`) spins (507034 vector core, 507014 aicore): the
    next synchronize waits out the op-execute timeout from then, then fails with `code`; the first stuck
    kernel of the process counts."""
    global _stuck
    if code not in TIMEOUT_CODES:
        raise ValueError(f"_standin_stuck: code {code} is not a kernel timeout code "
                         f"({', '.join(map(str, TIMEOUT_CODES))})")
    with _lock:
        if _stuck is None or _stuck[1] != os.getpid():
            _stuck = (code, os.getpid(), (time.monotonic() if since is None else since) + _op_timeout_s)


def stuck() -> bool:
    """True while a kernel of this process spins (before the synchronize that reports it)."""
    entry = _stuck
    return entry is not None and entry[1] == os.getpid()


def _expire_stuck() -> None:
    """Wait out a spinning kernel's op-execute timeout; then the stream is broken with its code."""
    global _fault, _stuck
    stuck = _stuck
    if stuck is None or stuck[1] != os.getpid():
        return
    code, pid, deadline = stuck
    time.sleep(max(0.0, deadline - time.monotonic()))
    with _lock:
        _stuck = None
        if _fault is None or _fault[1] != pid:
            _fault = (code, pid)
    tid = threading.get_native_id()
    _plog.write("ERROR", "RUNTIME", "stream.cc:1245",
                f"{tid} GetError:Stream Synchronize failed, retCode={code}, [{TIMEOUT_CODES[code]}].")


def current() -> int | None:
    """The fault code of this process, None when its device is healthy."""
    fault = _fault
    return fault[0] if fault is not None and fault[1] == os.getpid() else None


def clear() -> None:
    """Forget the fault and any stuck kernel (tests only; a real NPU needs a new process, or a reset)."""
    global _fault, _stuck
    with _lock:
        _fault, _stuck = None, None


def check(call: str = "AclrtSynchronizeDeviceWithTimeout", func: str = "npuSynchronizeDevice",
          line: int = 479) -> None:
    """Raise torch_npu's RuntimeError if this process's device is poisoned (at every sync, for ever); a
    spinning kernel is waited for until its op-execute timeout first."""
    _expire_stuck()
    code = current()
    if code is None:
        return
    desc = {**CODES, **TIMEOUT_CODES}[code]
    tid = threading.get_native_id()
    _plog.write("ERROR", "RUNTIME", "api_c.cc:3286",
                f"{tid} rtDeviceSynchronizeWithTimeout:ErrCode={code}, desc=[{desc}], InnerCode=0x715002a")
    detail = (f"EE9999: Inner Error!\nEE9999: [PID: {os.getpid()}] {_plog.stamp()} rtDeviceSynchronizeWithTimeout "
              f"execution failed, reason={desc}[FUNC:FuncErrorReason][FILE:error_message_manage.cc]"
              "[LINE:53]\n")
    raise RuntimeError(_errors.npu_function_error(func, line, call, code, detail))
