"""Upstream-style argument assertions (`TORCH_BIND_ASSERT`), raised as RuntimeError.

The real ops print `Failed: Assertion error <file>:<line> error message or error code is '<cond>'`; the
stand-in reproduces that shape (file and line of the failing check) and appends a detail.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def fail_assert(cond: str, detail: str = "", _depth: int = 1) -> NoReturn:
    """Raise RuntimeError in TORCH_BIND_ASSERT's format, located at the caller's line."""
    frame = sys._getframe(_depth)
    where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    msg = f"Failed: Assertion error {where} error message or error code is '{cond}'"
    raise RuntimeError(f"{msg}: {detail}" if detail else msg)


def bind_assert(ok: bool, cond: str, detail: str = "") -> None:
    """Raise RuntimeError in TORCH_BIND_ASSERT's format unless `ok`."""
    if not ok:
        fail_assert(cond, detail, _depth=2)


def standin_limit(ok: bool, what: str) -> None:
    """A check the real op does not make (its result would be garbage or a hang), which the stand-in needs
    to move rows over torch.distributed. Worded as the stand-in's, never as an upstream refusal, so no
    suite can mistake it for the op's contract (audit: stand-in checks upstream lacks)."""
    if not ok:
        raise RuntimeError(f"umdk_cam_op_lib stand-in cannot emulate this input: {what} (the real op does "
                           "not check it; its result is undefined)")
