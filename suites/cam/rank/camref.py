"""Reference models of the CAM ops in numpy, written from cam-ops.md, independent of any op library.

Every rank can compute every other rank's seeded inputs (``*_inputs(seed, rank)``), so
the reference for a rank's outputs needs no communication.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


def bf16_round(a: np.ndarray) -> np.ndarray:
    """Round float32 to the nearest bfloat16 value (ties to even), kept as float32."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


# -- prefill ------------------------------------------------------------------
@dataclass(frozen=True)
class PrefillCase:
    tokens: int
    hidden: int
    experts: int
    top_k: int
    uneven: bool = False  # ranks hold different token counts (the dispatch sizes by the max, combine its own)
    zero_rows: bool = False  # rank 0's first row is all zeros (upstream's UT sends zero rows from rank 0)


def prefill_tokens(case: PrefillCase, rank: int) -> int:
    """Rank ``rank``'s token count: ``case.tokens``, or with ``uneven`` fewer on some ranks (never 0)."""
    return max(1, case.tokens - (rank % 3) * (case.tokens // 3 + 1)) if case.uneven else case.tokens


def prefill_inputs(seed: int, rank: int, case: PrefillCase) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (T,H) bf16-representable float32, topk_idx (T,K) int64 (distinct per row), weights (T,K) f32."""
    rs = np.random.RandomState((seed * 7919 + rank * 104729) % (2**32))
    tokens = prefill_tokens(case, rank)
    x = bf16_round(rs.randn(tokens, case.hidden).astype(np.float32) * (1 + rank))
    if case.zero_rows and rank == 0:
        x[0] = 0
    score = np.abs(rs.randn(tokens, case.experts)) + 1
    # skew: some experts are hot, some cold, so counts are non-uniform
    score *= rs.gamma(0.6, size=case.experts)[None, :]
    topk = np.argsort(-score, axis=1, kind="stable")[:, : case.top_k].astype(np.int64)
    perm = rs.rand(tokens, case.top_k).argsort(axis=1)
    topk = np.take_along_axis(topk, perm, axis=1)  # unsorted ids per row, as argpartition gives
    weights = rs.rand(tokens, case.top_k).astype(np.float32) + 0.1
    return x, topk, weights


def dispatch_layout(topk_idx: np.ndarray, num_experts: int) -> tuple[np.ndarray, np.ndarray]:
    """num_tokens_per_expert (E,) and send_token_idx_small (T,K): slot inside the expert bucket, token-major."""
    ntpe = np.zeros(num_experts, dtype=np.int64)
    slots = np.zeros(topk_idx.shape, dtype=np.int64)
    for t in range(topk_idx.shape[0]):
        for k in range(topk_idx.shape[1]):
            e = int(topk_idx[t, k])
            slots[t, k] = ntpe[e]
            ntpe[e] += 1
    return ntpe.astype(np.int32), slots.astype(np.int32)


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dynamic per-row int8: scale = 127 / (max|x| + 1e-12), q = rint(x·scale), dequant scale = 1/scale."""
    x = np.asarray(x, dtype=np.float32)
    scale = np.float32(127.0) / (np.abs(x).max(axis=1) + np.float32(1e-12))
    q = np.clip(np.rint(x * scale[:, None]), -128, 127).astype(np.int8)
    return q, (np.float32(1.0) / scale).astype(np.float32)


@dataclass
class DispatchRef:
    recv_x: np.ndarray  # (max(R_d,1), H) float32 (bf16 values)
    expand_idx: np.ndarray  # (3·max(R_d,1),) int32
    recv_count: np.ndarray  # (E,) int32
    recv_tokens_per_expert: np.ndarray  # (L,) int64
    rows: int  # R_d


def dispatch_reference(seed: int, dest: int, world: int, case: PrefillCase) -> DispatchRef:
    """What rank ``dest`` must receive from every rank's seeded inputs (cam-ops.md §4)."""
    local = case.experts // world
    inputs = [prefill_inputs(seed, s, case) for s in range(world)]
    layouts = [dispatch_layout(topk, case.experts) for _, topk, _ in inputs]
    cnt = np.zeros((local, world), dtype=np.int64)  # cnt[l][s]
    for s, (ntpe, _) in enumerate(layouts):
        cnt[:, s] = ntpe[dest * local:(dest + 1) * local]
    flat = cnt.reshape(-1)  # i = l*R + s
    recv_count = np.cumsum(flat).astype(np.int32)
    rows = int(flat.sum())
    recv_x = np.zeros((max(rows, 1), case.hidden), dtype=np.float32)
    expand = np.zeros((max(rows, 1), 3), dtype=np.int32)
    for s, (x, topk, _) in enumerate(inputs):
        slots = layouts[s][1]
        for t in range(x.shape[0]):
            for k in range(case.top_k):
                e = int(topk[t, k])
                if e // local != dest:
                    continue
                i = (e % local) * world + s
                pos = int(recv_count[i]) - int(flat[i]) + int(slots[t, k])
                recv_x[pos] = x[t]
                expand[pos] = (s, t, k)
    return DispatchRef(recv_x, expand.reshape(-1), recv_count, cnt.sum(axis=1).astype(np.int64), rows)


def combine_reference(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Identity experts: out[t] = x[t] · Σ_k w[t,k] (fp32 accumulate, bf16 result)."""
    return bf16_round(x.astype(np.float32) * weights.astype(np.float32).sum(axis=1, keepdims=True))


# -- fused_deep_moe -----------------------------------------------------------
@dataclass(frozen=True)
class FusedCase:
    batch: int
    hidden: int
    inter: int  # I: gmm1 output width is 2I
    experts: int
    top_k: int
    with_share: bool = False
    with_smooth: bool = False
    with_mask: bool = False
    separated: bool = False  # dynamicEPLB: weight lists of L tensors
    dynamic_bs: bool = False  # ranks have different batch sizes; global_bs = max_bs · R
    fp16: bool = False  # x (and the gmm2 scales, so the op definition has a binary for them) in float16
    placeholders: bool = False  # some expert ids -1 (API guide: range [-1, num_experts), -1 a placeholder)


def fused_batch(case: FusedCase, rank: int) -> int:
    # dynamicBS: ranks hold different batch sizes, never fewer than one token (found by the fuzz)
    return max(1, case.batch - (rank % 3) * 2) if case.dynamic_bs else case.batch


def _int8(rs: np.random.RandomState, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform int8 in [-16, 16), drawn as int8 (no int64 temporary at the production shape's 700 M)."""
    return rs.randint(-16, 16, size=shape, dtype=np.int8)


def fused_weights(seed: int, case: FusedCase) -> dict[str, np.ndarray]:
    """Weights of every expert (each rank passes its own slice), seeded identically on all ranks; the last
    ones are kept (the op's arguments and the reference read the same arrays, never writing them), keyed by
    what they depend on only: cases that differ in batch or top_k (a perf sweep's) share them."""
    return _fused_weights(seed, case.experts, case.hidden, case.inter, case.with_smooth, case.with_share)


@functools.lru_cache(maxsize=1)
def _fused_weights(seed: int, e: int, h: int, inter: int, with_smooth: bool,
                   with_share: bool) -> dict[str, np.ndarray]:
    rs = np.random.RandomState((seed * 31337 + 17) % (2**32))
    i2 = 2 * inter
    w = {
        "w1": _int8(rs, (e, h, i2)),
        "s1": (rs.rand(e, i2) * 0.003 + 0.0015).astype(np.float32),
        "w2": _int8(rs, (e, inter, h)),
        "s2": bf16_round((rs.rand(e, h) * 0.003 + 0.0015).astype(np.float32)),
    }
    if with_smooth:
        w["smooth"] = (rs.rand(e, h) * 0.5 + 0.75).astype(np.float32)
    if with_share:
        w["sw1"] = _int8(rs, (h, i2))
        w["ss1"] = (rs.rand(i2) * 0.003 + 0.0015).astype(np.float32)
        w["sw2"] = _int8(rs, (inter, h))
        w["ss2"] = bf16_round((rs.rand(h) * 0.003 + 0.0015).astype(np.float32))
        w["ssmooth"] = (rs.rand(h) * 0.5 + 0.75).astype(np.float32) if with_smooth else None
    return w


def fused_inputs(seed: int, rank: int, case: FusedCase) -> dict[str, np.ndarray]:
    rs = np.random.RandomState((seed * 7919 + rank * 15485863 + 3) % (2**32))
    bs = fused_batch(case, rank)
    x = bf16_round((rs.rand(bs, case.hidden) * 10 - 5).astype(np.float32))
    score = rs.rand(bs, case.experts) * rs.gamma(0.8, size=case.experts)[None, :]
    ids = np.argsort(-score, axis=1, kind="stable")[:, : case.top_k].astype(np.int32)
    scales = rs.rand(bs, case.top_k).astype(np.float32)
    # x_active_mask is a count: the kernel sums it and takes that many tokens from the front
    # (umdk fused_deep_moe op_kernel TokenActiveMaskCal); upstream's UT builds ones then zeros
    valid = (int(rs.randint(1, bs)) if bs > 1 else 1) if case.with_mask else bs
    mask = np.concatenate([np.ones(valid, dtype=bool), np.zeros(bs - valid, dtype=bool)])
    if case.placeholders:  # every other token's last copy is the placeholder -1
        ids[::2, -1] = -1
    return {"x": x, "ids": ids, "scales": scales, "mask": mask, "valid": valid}


def _silu(v: np.ndarray) -> np.ndarray:
    return v / (1.0 + np.exp(-v))


def expert_ffn(rows: np.ndarray, w1: np.ndarray, s1: np.ndarray, w2: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """quant → GMM1 → SwiGLU (left half activated) → requant → GMM2, in float64 (the reference model). The
    integer products run in float32, exact here: |q| <= 128, |w| <= 16 (``_int8``), so every partial sum is
    below 7168 * 128 * 16 < 2**24."""
    q, sx = quantize_rows(rows)
    h = (q.astype(np.float32) @ w1.astype(np.float32)).astype(np.float64) * s1.astype(np.float64) \
        * sx[:, None].astype(np.float64)
    half = h.shape[1] // 2
    a = _silu(h[:, :half]) * h[:, half:]
    qa, sa = quantize_rows(a.astype(np.float32))
    return ((qa.astype(np.float32) @ w2.astype(np.float32)).astype(np.float64) * s2.astype(np.float64)
            * sa[:, None].astype(np.float64))


@dataclass
class FusedRef:
    output: np.ndarray  # (valid, H) float64: the active rows, the first sum(mask) tokens
    share: np.ndarray | None  # (bs, H): the shared expert runs on every token, masked or not
    # (…multistage_workspace.h:767-770 shareQuantCoreFunc over axisBS), so every row is defined
    expert_token_nums: np.ndarray  # (L,) int64
    valid: int  # compare the op's outputs [:valid]


def fused_reference(seed: int, rank: int, world: int, case: FusedCase) -> FusedRef:
    w = fused_weights(seed, case)
    local = case.experts // world
    mine = fused_inputs(seed, rank, case)
    valid = mine["valid"]
    x, ids, scales = mine["x"][:valid], mine["ids"][:valid], mine["scales"][:valid]
    out = np.zeros(x.shape, dtype=np.float64)
    # grouped by expert (each weight matrix converted once: the production shape's are 7168 x 4096); the
    # per-row quantisation makes a row's result independent of the rows beside it
    for e in np.unique(ids[ids >= 0]):  # -1 is the placeholder: no copy
        tok, slot = np.nonzero(ids == e)
        rows = x[tok].astype(np.float32)
        if case.with_smooth:
            rows = rows * w["smooth"][e][None, :]
        y = expert_ffn(rows, w["w1"][e], w["s1"][e], w["w2"][e], w["s2"][e])
        np.add.at(out, tok, scales[tok, slot].astype(np.float64)[:, None] * y)
    counts = np.zeros(local, dtype=np.int64)
    for s in range(world):
        other = fused_inputs(seed, s, case)
        for t in range(other["valid"]):
            for e in other["ids"][t]:
                if int(e) >= 0 and int(e) // local == rank:
                    counts[int(e) % local] += 1
    share = None
    if case.with_share:
        rows = mine["x"].astype(np.float32)
        if w.get("ssmooth") is not None:
            rows = rows * w["ssmooth"][None, :]
        share = expert_ffn(rows, w["sw1"], w["ss1"], w["sw2"], w["ss2"])
    return FusedRef(out, share, counts, valid)
