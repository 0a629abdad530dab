"""The thresholds and timeouts of a preflight (:class:`Limits`), stdlib-only (``camit check --help``
prints them without importing the probe)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Thresholds and timeouts of a preflight."""

    min_free_gb: float = 2.0
    max_skew: float = 1.0
    probe_timeout: float = 180.0
    tool_timeout: float = 60.0
