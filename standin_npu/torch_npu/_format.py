"""NPU storage formats: ``torch_npu.Format``, ``npu_format_cast``, ``get_npu_format``.

The rules mirrored, with their torch_npu files: docs/internals/standin-npu.md.
"""

from __future__ import annotations

from enum import IntEnum

import torch

from . import _env, _tensor

_ATTR = "_camit_npu_format"


class Format(IntEnum):
    """NPU storage formats (values as torch_npu/npu/_format.py)."""

    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47
    FRACTAL_NZ_C0_16 = 50
    FRACTAL_NZ_C0_32 = 51
    FRACTAL_NZ_C0_2 = 52
    FRACTAL_NZ_C0_4 = 53
    FRACTAL_NZ_C0_8 = 54

    def __str__(self) -> str:
        return self.name


_BASE = {Format.NCHW, Format.NHWC, Format.ND, Format.NDHWC, Format.NCDHW, Format.NC, Format.NCL, Format.HWCN}
# FormatHelper.cpp: the base format of each internal one
_BASE_OF = {Format.NC1HWC0: Format.NCHW, Format.FRACTAL_Z: Format.NCHW, Format.NC1HWC0_C04: Format.NCHW,
            Format.FRACTAL_NZ: Format.ND, Format.NDC1HWC0: Format.NCDHW, Format.FRACTAL_Z_3D: Format.NCDHW,
            Format.FRACTAL_NZ_C0_16: Format.ND, Format.FRACTAL_NZ_C0_32: Format.ND,
            Format.FRACTAL_NZ_C0_2: Format.ND, Format.FRACTAL_NZ_C0_4: Format.ND, Format.FRACTAL_NZ_C0_8: Format.ND}


class _NpuConfig:
    """``torch_npu.npu.config``: ``allow_internal_format`` (an ACL option upstream, stored here)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_allow_internal_format", False)

    @property
    def allow_internal_format(self) -> bool:
        return bool(object.__getattribute__(self, "_allow_internal_format"))

    @allow_internal_format.setter
    def allow_internal_format(self, value: object) -> None:
        object.__setattr__(self, "_allow_internal_format", bool(value))


config = _NpuConfig()


def _storage(t: torch.Tensor) -> torch.UntypedStorage:
    """The storage the tag lives on: an npu tensor's host storage (shared by its views)."""
    return _tensor.host(t).untyped_storage()


def _guess_base(t: torch.Tensor) -> Format:
    return {4: Format.NCHW, 5: Format.NCDHW}.get(t.dim(), Format.ND)


def get_npu_format(t: torch.Tensor) -> Format:
    """The storage format of ``t`` (a ``Format``, as torch_npu's patched ``get_npu_format`` returns)."""
    tag = getattr(_storage(t), _ATTR, None)
    return Format(tag) if tag is not None else _guess_base(t)


def _tag(t: torch.Tensor, fmt: Format) -> torch.Tensor:
    setattr(_storage(t), _ATTR, int(fmt))
    return t


def npu_format_cast(t: torch.Tensor, acl_format: int | Format, customize_dtype: object = None,
                    input_dtype: object = None) -> torch.Tensor:
    """``t`` in storage format ``acl_format`` (see the module docstring for what is a new tensor)."""
    fmt = Format(int(acl_format))
    src = get_npu_format(t)
    if src == fmt:
        return t
    if src in _BASE and fmt in _BASE:
        return _tag(t, fmt)
    if fmt in _BASE_OF and not config.allow_internal_format:
        _env.warn_once("internal-format", "Cannot create tensor with internal format while "
                       "allow_internal_format=False, tensor will be created with base format.")
        fmt = _BASE_OF[fmt]
    elif fmt in _BASE_OF and _BASE_OF[fmt] == Format.ND and t.dim() < 2:
        _env.warn_once("nz-dim", "Cannot create tensor with NZ format while dim < 2, "
                       "tensor will be created with ND format.")
        fmt = Format.ND
    out = _orig_clone(t.detach(), memory_format=torch.contiguous_format)
    if t.requires_grad:
        out.requires_grad_(True)
    return _tag(out, fmt)


def npu_format_cast_(t: torch.Tensor, acl_format: int | Format) -> torch.Tensor:
    """In-place variant: retags ``t`` itself (its storage) with the resulting format."""
    out = npu_format_cast(t, acl_format)
    return _tag(t, get_npu_format(out))


_orig_clone = torch.Tensor.clone


def _clone(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    out = _orig_clone(self, *args, **kwargs)
    tag = getattr(_storage(self), _ATTR, None)
    if tag is not None and tag not in (int(f) for f in _BASE):
        setattr(_storage(out), _ATTR, tag)
    return out


def install() -> None:
    """Make ``Tensor.clone`` keep internal formats (called once by ``import torch_npu``)."""
    if torch.Tensor.clone is not _clone:
        torch.Tensor.clone = _clone  # type: ignore[method-assign]
