"""What the stand-in puts where the kernels leave a result undefined: the worst plausible,
reproducibly.

Design: docs/internals/standin.md.
"""

from __future__ import annotations

import os
import zlib

import torch


def _generator(tag: str) -> torch.Generator:
    seed = zlib.crc32(f"{tag}:{os.environ.get('CAMIT_STANDIN_SEED', '0')}".encode())
    return torch.Generator().manual_seed(seed)


def garbage(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, tag: str) -> torch.Tensor:
    """A new tensor of never-written memory: for floats a mix of NaN, ±(near max) and large randoms; for
    integers random values over the whole range."""
    gen = _generator(f"{tag}:{tuple(shape)}:{dtype}")
    if dtype.is_floating_point:
        big = torch.finfo(dtype).max / 4
        out = (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * big
        pick = torch.randint(0, 3, tuple(shape), generator=gen)
        out[pick == 0] = float("nan")
        return out.to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape), generator=gen).to(torch.bool)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, tuple(shape), generator=gen, dtype=torch.int64).to(dtype)


def empty_like_kernel(t: torch.Tensor, tag: str) -> torch.Tensor:
    return garbage(t.shape, t.dtype, tag)


def fill_undefined(t: torch.Tensor, rows: torch.Tensor, tag: str) -> None:
    """Overwrite ``t[rows]`` (a bool mask or indices over dim 0) with garbage, in place."""
    sel = t[rows]
    if sel.numel():
        t[rows] = garbage(sel.shape, t.dtype, tag)


def corrupt(t: torch.Tensor, tag: str) -> None:
    """A stray write into ``t`` (in place): one element replaced by a garbage value."""
    if t.numel() == 0:
        return
    gen = _generator(f"corrupt:{tag}:{tuple(t.shape)}")
    flat = t.view(-1)
    at = int(torch.randint(0, flat.numel(), (1,), generator=gen))
    flat[at] = garbage((1,), t.dtype, f"corrupt:{tag}")[0]
