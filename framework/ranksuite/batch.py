"""One launch for the rank-side modules of a world (``--launch-per world``): what each rank
finished (its module records, :mod:`framework.records.modules`) and the launch's split back per
module: ``done``, ``crashed`` or ``not run`` (docs/design.md, "The rank-side suites").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from framework.records.modules import (
    RECORD_ENV,
    RECORD_FILE,
    ModuleProgress,
    RankLog,
    RankLogs,
    read_record,
    records_of,
)

DONE, CRASHED, NOT_RUN = "done", "crashed", "not run"


def module_states(modules: Sequence[str], records: Mapping[int, Mapping[str, ModuleProgress]],
                  world: int) -> dict[str, str]:
    """module → ``done`` | ``crashed`` | ``not run`` over the ``world`` ranks' records (a rank with no record
    finished nothing)."""
    return {module: _state([records.get(rank, {}).get(module) for rank in range(world)])
            for module in modules}


def _state(per_rank: Sequence[ModuleProgress | None]) -> str:
    """A module's state from each rank's progress through it: finished by every rank, begun by
    one (then it crashed), else not run."""
    if all(_finished(p) for p in per_rank):
        return DONE
    if any(_begun(p) for p in per_rank):
        return CRASHED
    return NOT_RUN


def _finished(progress: ModuleProgress | None) -> bool:
    return progress is not None and progress.done is not None


def _begun(progress: ModuleProgress | None) -> bool:
    return progress is not None and progress.started is not None


#: what a failure or skip without a message says instead
_NO_MESSAGE = {"failed": "(no message)", "skipped": "(no reason)"}


def counts_of(progress: ModuleProgress) -> tuple[dict[str, int], list[tuple[str, str]], list[tuple[str, str]]]:
    """(counts, failures, skips) of one rank's module from its record, as
    :func:`framework.ranksuite.suite.read_rank_junit` gives them from JUnit."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    listed: dict[str, list[tuple[str, str]]] = {"failed": [], "skipped": []}
    for test, outcome, message in progress.tests:
        kind = outcome if outcome in counts else "failed"
        counts[kind] += 1
        if kind in listed:
            listed[kind].append((test, message or _NO_MESSAGE[kind]))
    return counts, listed["failed"], listed["skipped"]


def junit_prefix(module: str) -> str:
    """The ``classname`` prefix pytest's JUnit gives the cases of ``module`` (a path inside the rank tree):
    ``sub/test_x.py`` → ``sub.test_x`` (``_pytest.junitxml.mangle_test_address``: the path without ``.py``,
    ``/`` as ``.``; a class adds ``.Class``)."""
    path = module[:-3] if module.endswith(".py") else module
    return path.replace("/", ".")


def in_module(classname: str, module: str) -> bool:
    """Whether a JUnit case of ``classname`` belongs to ``module``."""
    prefix = junit_prefix(module)
    return classname == prefix or classname.startswith(prefix + ".")


def module_at(records: Mapping[str, ModuleProgress], when: float, order: Iterable[str],
              resolution: float = 0.0) -> str | None:
    """The module one rank was running at ``when`` (its host's clock), by the record's windows; None: none.

    ``resolution``: how coarse ``when`` is (a core pattern's ``%t`` is whole seconds, rounded down: the
    event lies in ``[when, when + resolution]``). Every module whose window meets that span is a candidate,
    and the one the rank started last wins: a rank that crashed died in the last module it began."""
    met = [(start, module) for module, (start, end) in _windows(records, order)
           if start <= when + resolution and when <= end]
    if not met:
        return None
    # the latest start wins; of equal starts, the module later in ``order``
    return max(reversed(met), key=lambda found: found[0])[1]


def _windows(records: Mapping[str, ModuleProgress], order: Iterable[str]
             ) -> list[tuple[str, tuple[float, float]]]:
    """(module, window) of each module in ``order`` the rank began."""
    return [(m, records[m].window()) for m in order if _begun(records.get(m))]


__all__ = ["CRASHED", "DONE", "NOT_RUN", "RECORD_ENV", "RECORD_FILE", "ModuleProgress", "RankLog", "RankLogs",
           "counts_of", "in_module", "junit_prefix", "module_at", "module_states", "read_record", "records_of"]
