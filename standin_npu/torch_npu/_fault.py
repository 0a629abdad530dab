"""Device faults: a kernel that broke the device poisons this process's stream (stand-in-only API).

On an NPU a kernel that writes out of bounds raises nothing where it is launched: the runtime reports it
asynchronously, at the next synchronisation of that process's stream, and the stream stays unusable
(every later synchronize or collective of the process fails again). The texts are torch_npu's:
``NPU_CHECK_ERROR`` of ``aclrtSynchronizeDeviceWithTimeout`` (torch_npu/csrc/core/npu/NPUFunctions.cpp,
``npuSynchronizeDevice``) with the 507035 text of torch_npu/csrc/core/npu/NPUErrorCodes.h, plus the
runtime's ``EE9999`` detail and a RUNTIME plog line.

``torch_npu.npu._standin_fault(code)`` records the fault. The real torch_npu has no such call: an op library
calls it only when ``getattr(torch_npu, "STANDIN", False)``. Nothing here knows any op library.
"""

from __future__ import annotations

import os
import threading

from . import _errors, _plog

#: the codes a kernel fault may report (NPUErrorCodes.h): aicore / vector core exceptions
CODES = {507015: "aicore exception", 507035: "vector core exception"}

_lock = threading.Lock()
_fault: tuple[int, int] | None = None   # (code, pid): a forked child starts clean, as a new NPU context


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


def current() -> int | None:
    """The fault code of this process, None when its device is healthy."""
    fault = _fault
    return fault[0] if fault is not None and fault[1] == os.getpid() else None


def clear() -> None:
    """Forget the fault (tests only; a real NPU needs a new process, or a device reset)."""
    global _fault
    with _lock:
        _fault = None


def check(call: str = "AclrtSynchronizeDeviceWithTimeout", func: str = "npuSynchronizeDevice",
          line: int = 479) -> None:
    """Raise torch_npu's RuntimeError if this process's device is poisoned (at every sync, for ever)."""
    code = current()
    if code is None:
        return
    tid = threading.get_native_id()
    _plog.write("ERROR", "RUNTIME", "api_c.cc:3286",
                f"{tid} rtDeviceSynchronizeWithTimeout:ErrCode={code}, desc=[{CODES[code]}], InnerCode=0x715002a")
    detail = (f"EE9999: Inner Error!\nEE9999: [PID: {os.getpid()}] {_plog.stamp()} rtDeviceSynchronizeWithTimeout "
              f"execution failed, reason={CODES[code]}[FUNC:FuncErrorReason][FILE:error_message_manage.cc]"
              "[LINE:53]\n")
    raise RuntimeError(_errors.npu_function_error(func, line, call, code, detail))
