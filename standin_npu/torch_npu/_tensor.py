"""Device identity: a tensor on ``npu`` is an :class:`NpuTensor`, a different device from the CPU.

Needs torch 2.13. Design: docs/internals/standin-npu.md.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import _replay

_local = threading.local()
#: ops that take tensors of two devices by design (cross-device copies) or allow CPU index tensors
_CROSS_DEVICE = {"aten::copy_", "aten::_to_copy", "aten::_copy_from", "aten::_copy_from_and_resize",
                 "aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_"}
_TORCH_NAMESPACES = ("aten", "prim", "prims")


class NpuTensor(torch.Tensor):
    """A tensor on ``npu:<index>`` whose values live in the host tensor ``_host``."""

    _host: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, host: torch.Tensor, index: int) -> NpuTensor:
        out = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls, host.shape, strides=host.stride(), storage_offset=host.storage_offset(), dtype=host.dtype,
            layout=host.layout, device=torch.device("npu", index), requires_grad=host.requires_grad)
        out._host = host
        return out  # type: ignore[no-any-return]

    def __init__(self, host: torch.Tensor, index: int) -> None:
        super().__init__()

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        body = repr(self._host)
        return body[:-1] + f", device='{self.device}')" if body.endswith(")") else body

    def numpy(self, *, force: bool = False) -> Any:
        """torch's refusal for a device tensor (torch/csrc/utils/tensor_numpy.cpp); ``force`` copies."""
        if force:
            return self.cpu().numpy(force=True)
        raise _replay.error("torch_npu.numpy_error", TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first."), str(self.device))

    def tolist(self) -> Any:
        """Read back through the host, as torch does for a device tensor."""
        return self.cpu().tolist()

    def __tensor_flatten__(self) -> tuple[list[str], dict[str, int]]:
        return ["_host"], {"index": int(self.device.index or 0)}

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], ctx: dict[str, int], outer_size: Any,
                             outer_stride: Any) -> NpuTensor:
        return NpuTensor(inner["_host"], ctx["index"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        return _dispatch(func, args, kwargs or {})


def host(t: torch.Tensor) -> torch.Tensor:
    """The host tensor holding ``t``'s values (``t`` itself for a CPU tensor)."""
    return t._host if isinstance(t, NpuTensor) else t


def on_device(t: torch.Tensor, index: int) -> NpuTensor:
    """``t`` (a CPU tensor, taken over as device memory, no copy) as a tensor on ``npu:<index>``."""
    return NpuTensor(t, index)


def _op_name(func: Any) -> str:
    return str(func._schema.name) if hasattr(func, "_schema") else str(func)


def _devices(args: Any) -> tuple[set[torch.device], list[torch.Tensor]]:
    """The devices of the tensors in ``args`` (0-dim CPU scalars do not count), and those tensors."""
    leaves, _ = tree_flatten(args)
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    devs = {t.device for t in tensors if isinstance(t, NpuTensor) or t.dim() > 0}
    return devs, tensors


def same_device_error(devices: set[torch.device]) -> Exception:
    """torch's text for an op given tensors of two devices (aten/native/TensorIterator, c10 device checks);
    a calibration bundle's text when the lab replays one (``_replay``)."""
    first, second = sorted(devices, key=lambda d: (d.type != "npu", str(d)))[:2]
    return _replay.error("torch_npu.mix_device_error", RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {second}!"), str(first))


def _unwrap(args: Any) -> Any:
    return tree_map(lambda a: a._host if isinstance(a, NpuTensor) else a, args)


def _wrap(out: Any, index: int) -> Any:
    def wrap(a: Any) -> Any:  # (under Dynamo's fake mode the host results are FakeTensors)
        if isinstance(a, torch.Tensor) and not isinstance(a, NpuTensor) and a.device.type == "cpu":
            return NpuTensor(a, index)
        return a

    return tree_map(wrap, out)


def _dispatch(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    name = _op_name(func)
    devs, _ = _devices((args, kwargs))
    npu = sorted(d for d in devs if d.type == "npu")
    index = int(npu[0].index or 0) if npu else 0
    namespace = name.split("::", 1)[0]
    if namespace not in _TORCH_NAMESPACES:  # an op library's kernel: it runs on the device's memory
        with device_op(index, (args, kwargs)):
            return _wrap(func(*_unwrap(args), **_unwrap(kwargs)), index)
    if len(devs) > 1 and name not in _CROSS_DEVICE:
        raise same_device_error(devs)
    if name == "aten::_to_copy":
        return _to_copy(func, args, kwargs, index)
    out = func(*_unwrap(args), **_unwrap(kwargs))
    return _wrap(out, index)


def _to_copy(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], index: int) -> Any:
    """``.to(...)``/``.cpu()`` of an npu tensor: a copy, on the CPU or on the requested npu device."""
    target = kwargs.get("device")
    out = func(*_unwrap(args), **{**kwargs, "device": torch.device("cpu")})
    if target is not None and torch.device(target).type == "cpu":
        return out
    dest = index if target is None or torch.device(target).index is None else int(torch.device(target).index)
    return NpuTensor(out, dest)


# -- device ops: an op library's kernel (or a stand-in golden op) on the device's memory ------------------------
@contextlib.contextmanager
def device_op(index: int, args: Any) -> Iterator[None]:
    """Inside: the host tensors of the npu tensors in ``args`` are device memory (see :func:`is_device`)."""
    leaves, _ = tree_flatten(args)
    hosts = [t._host for t in leaves if isinstance(t, NpuTensor)]
    stack: list[tuple[int, list[torch.Tensor]]] = _local.__dict__.setdefault("ops", [])
    stack.append((index, hosts))
    try:
        yield
    finally:
        stack.pop()


def in_device_op() -> bool:
    """True inside an op running on the device (its kernel's own tensors are device memory)."""
    return bool(_local.__dict__.get("ops"))


def is_device(t: torch.Tensor) -> bool:
    """``t`` is on the npu device: an npu tensor, or the host side of one handed to the running device op."""
    if isinstance(t, NpuTensor):
        return True
    ops: list[tuple[int, list[torch.Tensor]]] = _local.__dict__.get("ops", [])
    return bool(ops) and any(t is h for h in ops[-1][1])


def run_on_device(op: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A stand-in op (torch_npu's golden ops) on its npu arguments: tensors of another device fail as torch
    fails them (same-device text; no npu tensor at all: the dispatcher's "Could not run ... 'CPU' backend",
    torch_npu registers these ops for the NPU only), the kernel runs on the host tensors, results on npu."""
    devs, tensors = _devices((args, kwargs))
    if not any(isinstance(t, NpuTensor) for t in tensors):
        raise NotImplementedError(f"Could not run 'npu::{op}' with arguments from the 'CPU' backend. This could "
                                  "be because the operator doesn't exist for this backend.")
    if any(d.type != "npu" for d in devs):
        raise same_device_error(devs)
    index = int(sorted(d for d in devs if d.type == "npu")[0].index or 0)
    with device_op(index, (args, kwargs)):
        return _wrap(fn(*_unwrap(args), **_unwrap(kwargs)), index)


def device_kernel(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a stand-in op's kernel so it runs on the device (:func:`run_on_device`)."""

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        return run_on_device(fn.__name__, fn, args, kwargs)

    return op


# -- allocation on the device: the PrivateUse1 kernels of the factories ------------------------------------------
_LIBRARY: torch.library.Library | None = None


def _index(device: Any) -> int:
    dev = torch.device(device)
    if dev.index is not None:
        return int(dev.index)
    from .npu import _device

    return _device.current_device()


def _allocated(device: Any) -> int:
    from .npu import _device

    index = _index(device)
    _device.touch(index)
    return index


def _empty(size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
           memory_format: Any = None) -> torch.Tensor:
    index = _allocated(device)
    return NpuTensor(torch.empty(size, dtype=dtype, memory_format=memory_format), index)


def _empty_strided(size: Any, stride: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                   pin_memory: Any = None) -> torch.Tensor:
    index = _allocated(device)
    return NpuTensor(torch.empty_strided(size, stride, dtype=dtype), index)


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """A copy into npu memory that torch runs below the Python key (``torch.tensor(..., device="npu")``)."""
    host(dst).copy_(host(src))
    return dst


def install() -> None:
    """Register the PrivateUse1 (npu) allocation kernels (once per process)."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    lib.impl("_copy_from", _copy_from, "PrivateUse1")
    _LIBRARY = lib
