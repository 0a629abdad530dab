"""The device API of ``torch.npu``: visible devices, the current device, set_device and its failure.

Mirrors torch_npu/npu/utils.py (``set_device``, ``_get_device_index``, ``current_device``,
``synchronize``) and torch_npu/npu/__init__.py (``device_count``, ``is_available``). Devices are logical
ids after ``ASCEND_RT_VISIBLE_DEVICES``; the host's count comes from the lab (see ``torch_npu._env``).
Setting a device registers this process in the occupancy registry (``torch_npu._occupancy``).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import torch

from .. import _env, _errors, _fault, _occupancy, _plog

_current: int | None = None
_initialized = False
_lock = threading.Lock()


def _device_type_error(device: torch.device, allow_cpu: bool) -> ValueError:
    wanted = "a npu or cpu device" if allow_cpu else "a npu device"
    return ValueError(f"Expected {wanted}, but got: {device}" + _errors.suffix("PTA", "VALUE"))


def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """The NPU index ``device`` names, with the semantics of torch's ``_get_device_index`` for CUDA.

    An int is the index itself; ``"npu:1"`` or ``torch.device("npu", 1)`` give 1; a CPU device gives -1 when
    ``allow_cpu``; an npu device without an index, or None, gives the current device when ``optional``.
    Anything else is a ValueError (texts as torch_npu's)."""
    if isinstance(device, int):
        return device
    as_device = torch.device(device) if isinstance(device, str) else device
    if as_device is not None and not isinstance(as_device, torch.device):
        raise ValueError(f"Invalid device: {device!r}" + _errors.suffix("PTA", "VALUE"))
    index: int | None = None
    if as_device is not None:
        if as_device.type not in (("npu", "cpu") if allow_cpu else ("npu",)):
            raise _device_type_error(as_device, allow_cpu)
        index = -1 if as_device.type == "cpu" else as_device.index
    if index is not None:
        return index
    if not optional:
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}"
                         + _errors.suffix("PTA", "VALUE"))
    return current_device()


def device_count() -> int:
    return _env.device_count()


def is_available() -> bool:
    return device_count() > 0


def is_initialized() -> bool:
    return _initialized


def current_or_minus_one() -> int:
    """The device the error suffix names: the set device, -1 before any."""
    return -1 if _current is None else _current


def _set(index: int) -> None:
    """aclrtSetDevice: fails with 107001 past the visible devices (the runtime lines go to the plog)."""
    global _current, _initialized
    _check(index)
    with _lock:
        _current, _initialized = index, True
    _occupancy.register(index, _env.physical_id(index))


def touch(device: Any) -> None:
    """Data placed on ``device`` (``t.npu(i)``): opens that device (occupying it) without making it current."""
    index = _get_device_index(device, optional=True)
    if index >= 0:
        _check(index)
        _occupancy.register(index, _env.physical_id(index))


def _check(index: int) -> None:
    count = device_count()
    if index >= count:
        visible = ",".join(str(v) for v in _env.visible_devices()[:count])
        tid = threading.get_native_id()
        _plog.write("ERROR", "RUNTIME", "api_error.cc:2350",
                    f"{tid} SetDevice:Set visible device failed, invalid device={index}, "
                    f"input visible devices:{visible}")
        _plog.write("ERROR", "RUNTIME", "api_c_device.cc:92",
                    f"{tid} rtSetDevice:ErrCode=107001, desc=[device id error], InnerCode=0x7010003")
        _plog.write("ERROR", "ASCENDCL", "device.cpp:54",
                    f"{tid} aclrtSetDeviceImpl: open device {index} failed, runtime result = 107001.")
        detail = (f"EE1001: [PID: {os.getpid()}] {_plog.stamp()} The argument is invalid.Reason: Set visible device "
                  f"failed, invalid device={index}, input visible devices:{visible}\n"
                  "        Solution: 1.Check the input parameter range of the function. "
                  "2.Check the function invocation relationship.\n")
        # torch_npu/csrc/core/npu/sys_ctrl/npu_sys_ctrl.cpp, NpuSysCtrl::ExchangeDevice
        raise RuntimeError(_errors.npu_function_error("ExchangeDevice", 349, "c10_npu::SetDevice(device)", 107001,
                                                      detail))


def set_device(device: Any) -> None:
    index = _get_device_index(device, optional=True)
    if index >= 0:
        _set(index)


def _lazy_init() -> None:
    """First NPU use without set_device initialises device 0, as torch_npu's lazy init does."""
    if _current is None:
        _set(0)


def current_device() -> int:
    _lazy_init()
    assert _current is not None
    return _current


def synchronize(device: Any = None) -> None:
    """Nothing runs asynchronously on the stand-in except a recorded kernel fault (``torch_npu._fault``),
    which fails here, and at every later call; collectives fail in their own call (or the watchdog)."""
    _lazy_init()
    if device is not None:
        _get_device_index(device, optional=True)
    _fault.check()


class device:  # noqa: N801 - torch_npu's name
    """``with torch.npu.device(d):`` makes ``d`` the current device inside the block and restores the one
    before it afterwards; a device naming no NPU (index < 0, e.g. the CPU) changes nothing."""

    def __init__(self, device: Any) -> None:
        self.idx = _get_device_index(device, optional=True)
        self._restore: int | None = None

    def __enter__(self) -> None:
        before = current_or_minus_one()
        if self.idx >= 0 and before != self.idx:
            self._restore = before
            _set(self.idx)

    def __exit__(self, *args: object) -> None:
        restore, self._restore = self._restore, None
        if restore is not None and restore >= 0:
            _set(restore)
