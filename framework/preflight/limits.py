"""The thresholds and timeouts of a preflight (:class:`Limits`), stdlib-only.

Its own module so that ``camit``'s parser can print the defaults in ``camit check --help`` without
importing the probe (which pulls in ``framework.launch``): the CLI's start-up imports only what the
chosen command needs. :mod:`framework.preflight.probe` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Thresholds and timeouts of a preflight."""

    min_free_gb: float = 2.0
    max_skew: float = 1.0
    probe_timeout: float = 180.0
    tool_timeout: float = 60.0
