"""The ops run on the NPU only: a tensor argument not on the device is refused, naming the argument.

The upstream rule it mirrors: docs/internals/standin.md.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

import torch


def torch_npu_standin() -> object | None:
    """The torch_npu stand-in module when this process imported it (an emulated Ascend host), else None."""
    mod = sys.modules.get("torch_npu")
    return mod if mod is not None and getattr(mod, "STANDIN", False) else None


def _items(name: str, value: object) -> list[tuple[str, torch.Tensor]]:
    """The tensors of one argument: itself, or the items of a tensor list (`gmm1_weight[0]`)."""
    if isinstance(value, torch.Tensor):
        return [(name, value)]
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [(f"{name}[{i}]", t) for i, t in enumerate(value) if isinstance(t, torch.Tensor)]
    return []


def require_npu(op: str, args: Mapping[str, object]) -> None:
    """RuntimeError naming the first tensor argument of `op` (in `args`, e.g. the kernel's `locals()` at its
    entry) that is not on the NPU; emulated hosts only."""
    mod = torch_npu_standin()
    if mod is None:
        return
    for name, value in args.items():
        for label, t in _items(name, value):
            if not mod._tensor.is_device(t):  # type: ignore[attr-defined]
                raise RuntimeError(
                    f"umdk_cam_op_lib::{op}: argument '{label}' is on {t.device}, not on the NPU; the op runs "
                    "on the NPU only (its kernels are registered for PrivateUse1, umdk pybind): move it with "
                    ".npu() first")
