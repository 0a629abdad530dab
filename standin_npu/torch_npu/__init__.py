"""CPU stand-in for ``torch_npu`` (Ascend's PyTorch adapter), for camit's emulated Ascend lab.

Lab-only test scaffolding: nothing runs on an NPU. What ``import torch_npu`` provides:
docs/internals/standin-npu.md (faithful or not: README.md).
"""

from __future__ import annotations

from typing import Any

import torch

from . import _env, _format, _occupancy, _plog, _tensor
from . import distributed as distributed
from . import npu as npu
from ._format import Format, get_npu_format, npu_format_cast, npu_format_cast_
from ._ops import (
    npu_dequant_swiglu_quant,
    npu_dynamic_quant,
    npu_grouped_matmul,
    npu_moe_distribute_combine_v2,
    npu_moe_distribute_dispatch_v2,
    npu_quant_matmul,
)
from .version import __version__

STANDIN = True  # lets the lab tell the stand-in from the real package

__all__ = [
    "Format", "STANDIN", "__version__", "distributed", "get_npu_format", "npu", "npu_dequant_swiglu_quant",
    "npu_dynamic_quant", "npu_format_cast", "npu_format_cast_", "npu_grouped_matmul",
    "npu_moe_distribute_combine_v2", "npu_moe_distribute_dispatch_v2", "npu_quant_matmul",
    "_env", "_occupancy", "_plog",
]


class _NoAcceleratorHooks(torch._C._acc.PrivateUse1Hooks):
    """PrivateUse1 hooks reporting no usable device to torch's C++ side: ``dist.barrier`` (which asks
    ``torch._C._get_accelerator()``, raising without hooks) then runs on the CPU. The Python side
    (``torch.accelerator``, ``torch.npu.is_available()``) still sees the emulated NPUs."""

    def is_available(self) -> bool:
        return False

    def has_primary_context(self, device_index: int) -> bool:
        return False

    def is_built(self) -> bool:
        return True


class _NpuDeviceGuard(torch._C._acc.DeviceGuard):
    """The device guard torch.accelerator (and Dynamo, which asks for the current stream) calls for "npu":
    it reads and sets the stand-in's current device; every device has one stream, id 0."""

    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1

    def getDevice(self) -> torch.device:  # noqa: N802 - c10's names
        return torch.device("npu", max(npu._device.current_or_minus_one(), 0))

    def setDevice(self, device: torch.device) -> None:  # noqa: N802
        npu.set_device(device.index if device.index is not None else 0)

    def uncheckedSetDevice(self, device: torch.device) -> None:  # noqa: N802
        self.setDevice(device)

    def exchangeDevice(self, device: torch.device) -> torch.device:  # noqa: N802
        previous = self.getDevice()
        self.setDevice(device)
        return previous

    def getStream(self, device: torch.device) -> torch.Stream:  # noqa: N802
        index = device.index if device.index is not None else self.getDevice().index
        return torch.Stream(stream_id=0, device_index=index, device_type=self.type_())

    def deviceCount(self) -> int:  # noqa: N802
        return npu.device_count()


def _npu_device(device: Any) -> torch.device:
    """The npu device ``t.npu(device)`` means: the current device, or the index / device given."""
    if device is None:
        return torch.device("npu", npu.current_device())
    if isinstance(device, int):
        return torch.device("npu", device)
    dev = torch.device(device)
    if dev.type != "npu":
        raise ValueError(f"Expected a npu device, but got: {dev}")
    return dev if dev.index is not None else torch.device("npu", npu.current_device())


def _tensor_npu(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
    """A copy on the NPU (``self`` when already there), as torch_npu's ``Tensor.npu``."""
    return self.to(_npu_device(device), non_blocking=non_blocking)


def _module_npu(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    dev = _npu_device(device)
    return self._apply(lambda t: t.npu(dev))


def _install() -> None:
    if torch._C._get_privateuse1_backend_name() != "npu":
        torch.utils.rename_privateuse1_backend("npu")
        torch._C._acc.register_python_privateuseone_hook(_NoAcceleratorHooks())
        torch._C._acc.register_python_privateuseone_device_guard(_NpuDeviceGuard())
    torch._register_device_module("npu", npu)
    torch.Tensor.npu = _tensor_npu  # type: ignore[attr-defined]
    torch.Tensor.is_npu = property(lambda self: self.device.type == "npu")  # type: ignore[attr-defined]
    torch.nn.Module.npu = _module_npu  # type: ignore[attr-defined]
    _tensor.install()
    _format.install()
    distributed.register()


_install()
