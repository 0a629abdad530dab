"""Comparing a calibration bundle's facts with the built-in profile, after normalisation (pure).

The normalisation rule: docs/internals/calibration.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from framework.calib import golden

#: (pattern, placeholder) applied to every fact value, in order
VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[- T]\d{2}:\d{2}:\d{2}(?:\.\d+)*"), "<time>"),
    (re.compile(r"\b[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\b"), "<bus-id>"),
    (re.compile(r"\b0x[0-9A-Fa-f]{8,}\b"), "<addr>"),
    (re.compile(r"\bpid[ =:]*\d+", re.I), "pid <n>"),
    # TORCH_BIND_ASSERT's source position is the build's (torch_bind_exception.h: __FILE__:__LINE__), not a fact
    (re.compile(r"(Failed: Assertion error )\S+:\d+"), r"\1<file:line>"),
)
#: facts whose values are live tables: numbers and spacing are volatile, the structure is the fact
TABLE_FACTS = frozenset({"host.npu_smi_info"})
#: fact keys never compared: measurements (their verdicts are compared)
EXCLUDED: frozenset[str] = frozenset(f"{golden.KEY}.{d}.measured" for d in golden.DTYPES)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_BLANKS = re.compile(r"[ \t]+")


def normalise(key: str, value: str) -> str:
    """``value`` with the volatile parts of fact ``key`` replaced (see the module's rule)."""
    for pattern, placeholder in VOLATILE:
        value = pattern.sub(placeholder, value)
    if key in TABLE_FACTS:
        value = _table_structure(value)
    return value.strip()


def _table_structure(value: str) -> str:
    """A live table's structure: the process table's rows dropped after its header, every number
    ``#``, runs of blanks one blank."""
    lines = value.splitlines()
    at = next((i for i, line in enumerate(lines) if "Process id" in line), None)
    if at is not None:
        lines = lines[: at + 2]  # the header and its rule line
    return _BLANKS.sub(" ", _NUMBER.sub("#", "\n".join(lines)))


def differences(bundle: Mapping[str, Any], profile: Mapping[str, Any]) -> list[str]:
    """Keys of the facts whose normalised values differ (or that one side lacks), sorted."""
    keys = (set(bundle) | set(profile)) - EXCLUDED
    return [key for key in sorted(keys) if _differs(key, bundle, profile)]


def _differs(key: str, bundle: Mapping[str, Any], profile: Mapping[str, Any]) -> bool:
    """Fact ``key`` is on one side only, or its normalised values differ."""
    if key not in bundle or key not in profile:
        return True
    return normalise(key, str(bundle[key])) != normalise(key, str(profile[key]))
