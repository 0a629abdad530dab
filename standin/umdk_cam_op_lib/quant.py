"""Dynamic per-row int8 quantisation as the CAM kernels do it (cam-ops.md §4, quant mode 2).

`scale = 127 / (max|x_row| + 1e-12)` in float32; `q = int8(round_half_even(x · scale))` (the kernel casts
float → int32 with CAST_RINT, then → half → int8, which is exact for |v| ≤ 127); the dequant scale handed
out is `1 / scale`, and `x ≈ q · dequant_scale`.
"""

from __future__ import annotations

import torch

EPS = 1e-12
QMAX = 127.0


def quantize_per_row(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, H) any float dtype → (int8 (n, H), float32 dequant scale (n,))."""
    xf = x.to(torch.float32)
    amax = xf.abs().amax(dim=-1) if xf.shape[-1] else torch.zeros(xf.shape[:-1])
    scale = QMAX / (amax + EPS)
    q = torch.round(xf * scale.unsqueeze(-1)).clamp_(-128, 127).to(torch.int8)  # round = half-to-even
    return q, (1.0 / scale).to(torch.float32)


def dequantize_per_row(q: torch.Tensor, dequant_scale: torch.Tensor,
                       dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverse of `quantize_per_row`: `q · dequant_scale`, cast to `dtype`."""
    return (q.to(torch.float32) * dequant_scale.to(torch.float32).unsqueeze(-1)).to(dtype)
