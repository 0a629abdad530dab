"""Phase events: the executors (deploy, launch) say when a host's phase began and ended; a sink
records it.

Design: docs/internals/core.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from framework.records.folder import RunDir


@dataclass(frozen=True)
class PhaseEvent:
    """``host`` was in ``phase`` from ``start`` to ``end`` (epoch seconds)."""

    host: str
    phase: str
    start: float
    end: float


PhaseSink = Callable[[PhaseEvent], None]


class RundirSink:
    """The sink writing events to ``<rundir>/phases.json``: one event per call, or a batch with ``many``."""

    def __init__(self, rundir: RunDir) -> None:
        self.rundir = rundir

    def __call__(self, event: PhaseEvent) -> None:
        self.many((event,))

    def many(self, events: Sequence[PhaseEvent]) -> None:
        """Every event of ``events`` in one locked update of ``phases.json``."""
        from framework.records.folder import record_phases

        record_phases(self.rundir.path, [(e.host, e.phase, e.start, e.end) for e in events])


def rundir_sink(rundir: RunDir) -> PhaseSink:
    """The sink writing each event to ``<rundir>/phases.json`` (a :class:`RundirSink`)."""
    return RundirSink(rundir)


def emit(sink: PhaseSink, events: Iterable[PhaseEvent]) -> None:
    """Give ``events`` to ``sink``: in one call when it takes batches (a ``many`` method), else one by one."""
    batch = list(events)
    many = getattr(sink, "many", None)
    if callable(many):
        if batch:
            many(batch)
        return
    for event in batch:
        sink(event)


def discard(_event: PhaseEvent) -> None:
    return None
