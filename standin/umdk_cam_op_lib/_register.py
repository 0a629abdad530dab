"""Registration of the four ops with torch.library: upstream schemas, CPU kernels (and, as upstream, a
Meta kernel for fused_deep_moe only). Registered once per process, even if the package is imported twice
under different paths."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._schemas import NAMESPACE, SCHEMAS, one_line
from .fused import fused_deep_moe, fused_deep_moe_meta
from .layout import get_dispatch_layout
from .prefill import moe_combine_prefill, moe_dispatch_prefill

CPU_KERNELS: dict[str, Callable[..., object]] = {
    "fused_deep_moe": fused_deep_moe,
    "get_dispatch_layout": get_dispatch_layout,
    "moe_dispatch_prefill": moe_dispatch_prefill,
    "moe_combine_prefill": moe_combine_prefill,
}

_LIBRARY: torch.library.Library | None = None


def _already_defined(name: str) -> bool:
    try:
        getattr(getattr(torch.ops, NAMESPACE), name)
    except (AttributeError, RuntimeError):
        return False
    return True


def register() -> None:
    """Define the ops and their kernels unless this process already has them."""
    global _LIBRARY
    if _LIBRARY is not None or all(_already_defined(name) for name in SCHEMAS):
        return
    lib = torch.library.Library(NAMESPACE, "DEF")
    for name, schema in SCHEMAS.items():
        lib.define(one_line(schema))
        lib.impl(name, CPU_KERNELS[name], "CPU")
    lib.impl("fused_deep_moe", fused_deep_moe_meta, "Meta")
    _LIBRARY = lib
