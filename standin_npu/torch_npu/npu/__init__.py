"""``torch_npu.npu`` (also ``torch.npu``): devices, ``config``, ``set_compile_mode``.

The device functions are in ``_device``; ``config.allow_internal_format`` in ``torch_npu._format``.
"""

from __future__ import annotations

from .._fault import set_op_timeout_ms
from .._fault import standin_fault as _standin_fault
from .._fault import standin_stuck as _standin_stuck
from .._format import config
from . import _device
from ._device import (
    _get_device_index,
    _lazy_init,
    current_device,
    device,
    device_count,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)

_compile_mode = {"jit_compile": False}


def set_compile_mode(jit_compile: bool = False) -> None:
    """Recorded only: the stand-in has no operator compiler (torch_npu/npu/npu_config.py)."""
    if is_initialized():
        synchronize()
    _compile_mode["jit_compile"] = bool(jit_compile)


def is_jit_compile_false() -> bool:
    return not _compile_mode["jit_compile"]


def get_device_name(device_index: object = None) -> str:
    """The SoC name; the stand-in emulates an A3 die."""
    return "Ascend910_9391"


def manual_seed(seed: int) -> None:
    """Seed the device's generator. The stand-in's device tensors are CPU tensors, so that is the CPU one.

    Not ``torch.manual_seed``: that seeds every registered device too, i.e. calls back into
    ``torch.npu.manual_seed_all`` (torch/random.py), which would recurse.
    """
    import torch

    torch.random.default_generator.manual_seed(int(seed))


manual_seed_all = manual_seed


def _is_in_bad_fork() -> bool:
    return False


__all__ = [
    "_device", "_standin_fault", "_standin_stuck", "_get_device_index", "_lazy_init", "config", "current_device",
    "device", "device_count", "get_device_name", "is_available", "is_initialized", "is_jit_compile_false",
    "manual_seed", "manual_seed_all", "set_compile_mode", "set_device", "set_op_timeout_ms", "synchronize",
]
