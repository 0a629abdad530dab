"""Phase events: the executors (deploy, launch) say when a host's phase began and ended; a sink records it.

Deploy emits ``connect`` and ``deploy``, launch ``launch``, ``run``, ``teardown`` and
``collect`` per host, as :class:`PhaseEvent` values (epoch seconds) to an ``on_phase``
callback. :func:`rundir_sink` is the callback that appends them to the run folder's
``phases.json`` (the timeline of the report); the executors never write the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from framework.report.folder import RunDir


@dataclass(frozen=True)
class PhaseEvent:
    """``host`` was in ``phase`` from ``start`` to ``end`` (epoch seconds)."""

    host: str
    phase: str
    start: float
    end: float


PhaseSink = Callable[[PhaseEvent], None]


def rundir_sink(rundir: RunDir) -> PhaseSink:
    """The sink writing each event to ``<rundir>/phases.json``."""
    from framework.report.folder import record_phase

    def record(event: PhaseEvent) -> None:
        record_phase(rundir.path, event.host, event.phase, event.start, event.end)

    return record


def discard(_event: PhaseEvent) -> None:
    return None
