"""Comparison helpers with upstream semantics, and mismatch messages that name op, rank and place.

``allclose_nparray`` and ``calc_diff`` follow umdk ``test/cam/ut/util/tool.py`` (cam-ops.md §7):
rtol also bounds the *fraction* of failing elements. Independent of the op library's code.
"""

from __future__ import annotations

import numpy as np
import pytest
from camcontract import LIMITS

#: the op's own error texts, for ``pytest.raises(..., match=OP_ERROR)``: a pybind check
#: (TORCH_BIND_ASSERT, umdk src/cam/comm_operator/pybind/torch_bind_exception.h: ``Failed: Assertion
#: error <file>:<line> error message or error code is '<cond>'``) or a failed aclnn call, where the tiling
#: checks live (EXEC_NPU_CMD in pybind/pytorch_extension/pytorch_npu_helper.hpp: ``call aclnnXxx failed,
#: detail:<EZ9999 ...>``)
OP_ERROR = r"Failed: Assertion error|call aclnn\w+ failed"


def refused_for(key: str):
    """``pytest.raises`` for a refusal of contract entry ``key`` (camcontract.LIMITS): the error form of the
    check that holds it (pybind assert or aclnn/tiling) AND the text naming that quantity, so an input
    refused for another reason (a different limit reached first) fails the case instead of passing it."""
    return pytest.raises(RuntimeError, match=LIMITS[key].pattern())


class Mismatch(AssertionError):
    """An op's output differs from the reference; the message says op, rank, what and where."""


def allclose_nparray(expect: np.ndarray, check: np.ndarray, rtol: float = 1e-4, atol: float = 1e-4,
                     equal_nan: bool = True) -> tuple[bool, int, int]:
    """(passed, bad elements, total) exactly as upstream judges it."""
    expect = np.asarray(expect, dtype=np.float64)
    check = np.asarray(check, dtype=np.float64)
    if np.isnan(expect).any():
        return bool(np.allclose(expect, check, rtol=rtol, atol=atol, equal_nan=equal_nan)), 0, expect.size
    if np.allclose(expect, check, rtol=rtol, atol=atol, equal_nan=equal_nan):
        return True, 0, expect.size
    if expect.shape != check.shape:
        return False, expect.size, expect.size
    bad = int(np.count_nonzero(np.abs(expect - check) > atol + np.abs(check) * rtol))
    return bad / max(expect.size, 1) < rtol, bad, expect.size


def calc_diff(x: np.ndarray, y: np.ndarray) -> float:
    """``1 − 2·Σ(x·y) / Σ(x² + y²)`` in float64 on ``x+1``, ``y+1`` (0 when identical)."""
    x = np.asarray(x, dtype=np.float64) + 1
    y = np.asarray(y, dtype=np.float64) + 1
    denom = float((x * x + y * y).sum())
    return 1 - 2 * float((x * y).sum()) / denom if denom else 0.0


def per_token_cast_back(q: np.ndarray, scales: np.ndarray, block: int = 128) -> np.ndarray:
    """Dequantize int8 rows: view (n, −1, block) × scale (n, −1, 1), as upstream (needs H % block == 0)."""
    n = q.shape[0]
    return (q.astype(np.float32).reshape(n, -1, block) * scales.astype(np.float32).reshape(n, -1, 1)).reshape(n, -1)


def _where(diff: np.ndarray) -> str:
    idx = np.argwhere(diff)
    return ", ".join(str(tuple(int(i) for i in row)) for row in idx[:3]) + (" ..." if len(idx) > 3 else "")


def expect_equal(op: str, what: str, got: np.ndarray, want: np.ndarray, rank: int) -> None:
    """Exact comparison; on mismatch raise ``Mismatch`` naming op, rank, count and first places."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise Mismatch(f"{op}: {what} on rank {rank}: shape {got.shape}, expected {want.shape}")
    diff = got != want
    if diff.any():
        first = tuple(int(i) for i in np.argwhere(diff)[0])
        raise Mismatch(f"{op}: {what} on rank {rank}: {int(diff.sum())} of {diff.size} elements differ "
                       f"(first at {first}: got {got[first]!r}, expected {want[first]!r}; at {_where(diff)})")


def expect_close(op: str, what: str, got: np.ndarray, want: np.ndarray, rank: int, *, rtol: float,
                 atol: float) -> None:
    ok, bad, total = allclose_nparray(want, got, rtol=rtol, atol=atol)
    if not ok:
        got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
        err = np.abs(got64 - want64) > atol + np.abs(got64) * rtol
        first = tuple(int(i) for i in np.argwhere(err)[0]) if err.any() else ()
        where = f"first at {first}: got {got64[first]:.6g}, expected {want64[first]:.6g}" if first else ""
        raise Mismatch(f"{op}: {what} on rank {rank}: {bad} of {total} elements outside "
                       f"atol={atol} rtol={rtol} (allowed fraction {rtol}); {where}")


def expect_diff(op: str, what: str, got: np.ndarray, want: np.ndarray, rank: int, limit: float) -> None:
    d = calc_diff(got, want)
    if not d < limit:
        rows = np.argwhere(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)).max(axis=-1) > 1e-2)
        raise Mismatch(f"{op}: {what} on rank {rank}: calc_diff {d:.3g} >= {limit:g}; "
                       f"rows differing: {[int(r[0]) for r in rows[:8]]}")


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """‖got − want‖₂ / ‖want‖₂ in float64 (‖got‖₂ when want is all zeros)."""
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    norm = float(np.linalg.norm(want64))
    diff = float(np.linalg.norm(got64 - want64))
    return diff / norm if norm else diff


def expect_rel(op: str, what: str, got: np.ndarray, want: np.ndarray, rank: int, bound: float) -> None:
    """Norm-relative bound beside upstream's tolerances: a systematic error of 1 % in an output moves
    ‖got − want‖/‖want‖ by 1 %, whatever the magnitudes (atol=2.0 alone passes it at small outputs)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise Mismatch(f"{op}: {what} on rank {rank}: shape {got.shape}, expected {want.shape}")
    rel = rel_error(got, want)
    if not rel < bound:
        raise Mismatch(f"{op}: {what} on rank {rank}: norm-relative error {rel:.3g} >= {bound:g} "
                       f"(‖got − want‖/‖want‖ over {want.size} elements)")
