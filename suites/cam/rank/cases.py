"""Case shapes: small ones that keep the documented constraints (lab default), upstream's with CAMIT_FULL_SHAPES=1."""

from __future__ import annotations

import os

from camcontract import MAX_EXPERTS
from camref import FusedCase, PrefillCase

FULL = os.environ.get("CAMIT_FULL_SHAPES") == "1"
#: tokens of the layout case with more tokens than an A3 die's vector cores (48 AIV per die, 24 AI cores with
#: 2 vector units each): over twice the count, and not a multiple of it, so every core takes several tokens and
#: some one more (dispatch_layout.h:51-74, the rest split)
MANY_TOKENS = 2 * 48 + 11


def experts(world: int, per_rank: int) -> int:
    """``per_rank`` experts a rank, fewer where that passes the ops' 512 (every tiling's moeExpertNum limit)."""
    return world * max(1, min(per_rank, MAX_EXPERTS // world))


def prefill_case(world: int) -> PrefillCase:
    if FULL:  # upstream CASE_16RANK, experts scaled so that E % R == 0
        return PrefillCase(tokens=32, hidden=7168, experts=max(16, world), top_k=8)
    # inside the prefill tiling (umdk moe_dispatch_normal_tiling.cpp, moe_combine_normal_tiling.cpp): H in
    # [1024, 7168], tokens in [1, 8000]; H at its floor and few tokens keep the CPU lab's cost down
    e = experts(world, 2)
    return PrefillCase(tokens=16, hidden=1024, experts=e, top_k=min(4, e))


def fused_case(world: int, **flags: bool) -> FusedCase:
    if FULL:  # upstream CASE_4RANK / CASE_8RANK shapes
        batch = 32 if world >= 8 else 16
        e = experts(world, 4)
        return FusedCase(batch=batch, hidden=7168, inter=2048, experts=e, top_k=min(8, e - 1), **flags)
    # H in [1024, 7168] % 256, gmm1 width 2I in [1024, 6144] % 1024, E ≤ 512, top_k ≤ 12 and < E
    e = experts(world, 2)
    return FusedCase(batch=8, hidden=1024, inter=512, experts=e, top_k=min(4, e - 1), **flags)


#: upstream's production shape (umdk test_fused_deep_moe.py CASE_4RANK: 4 ranks, E 16, top_k 8, BS 16, H 7168,
#: I 2048, i.e. gmm1 width 2I = 4096), run once per run at world 4
PRODUCTION_WORLD = 4
PRODUCTION = FusedCase(batch=16, hidden=7168, inter=2048, experts=16, top_k=8)
