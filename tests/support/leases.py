"""The per-host answers of framework.lease's cluster calls, with a host that raised failing the test."""

from __future__ import annotations

from collections.abc import Mapping

from framework.lease import LeaseState


def answers(result: Mapping[str, str | BaseException]) -> dict[str, str]:
    """release_leases' answer per host."""
    said = {host: v for host, v in result.items() if isinstance(v, str)}
    assert said.keys() == result.keys(), result
    return said


def states(result: Mapping[str, LeaseState | BaseException]) -> dict[str, LeaseState]:
    """lease_status' state per host."""
    seen = {host: v for host, v in result.items() if isinstance(v, LeaseState)}
    assert seen.keys() == result.keys(), result
    return seen
