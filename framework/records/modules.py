"""The ranks' module records of a shared launch (``--launch-per world``): one JSON line per event
(``start``, ``test``, ``done``) in ``camit-modules-rank<rank>.jsonl`` of each rank's run folder,
written by the rank tree's conftest. What they mean: :mod:`framework.ranksuite.batch`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class RankLog(Protocol):
    """A rank as :func:`records_of` reads it (``framework.launch.result.RankResult``)."""

    @property
    def log(self) -> str | None: ...


class RankLogs(Protocol):
    """A launch as :func:`records_of` reads it (``framework.launch.result.LaunchResult``)."""

    @property
    def ranks(self) -> Mapping[int, RankLog]: ...


#: the variable that turns the rank-side record on, and the record's file name in the rank's run
#: folder
RECORD_ENV = "CAMIT_MODULE_RECORD"
RECORD_FILE = "camit-modules-rank{rank}.jsonl"


@dataclass
class ModuleProgress:
    """One rank's progress through one module: when it began and ended (the rank host's clock) and
    its tests."""

    started: float | None = None
    done: float | None = None
    #: (test id, outcome: passed | failed | skipped, message)
    tests: list[tuple[str, str, str]] = field(default_factory=list)

    def window(self) -> tuple[float, float]:
        """(start, end) of the module on this rank; an unfinished module is open-ended."""
        return (self.started if self.started is not None else float("-inf"),
                self.done if self.done is not None else float("inf"))


def read_record(path: Path) -> dict[str, ModuleProgress]:
    """module (path inside the tree) → its progress on one rank; a missing file is no progress, and
    a line cut short by the rank's death (its last) is left out."""
    out: dict[str, ModuleProgress] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            event = json.loads(line)
            module, kind, ts = str(event["module"]), str(event["event"]), float(event["ts"])
        except (ValueError, KeyError, TypeError):
            continue
        progress = out.setdefault(module, ModuleProgress())
        if kind == "start":
            progress.started = ts
        elif kind == "done":
            progress.done = ts
        elif kind == "test":
            progress.tests.append((str(event.get("test", "")), str(event.get("outcome", "")),
                                   str(event.get("message", ""))))
    return out


def records_of(launch: RankLogs) -> dict[int, dict[str, ModuleProgress]]:
    """rank → its record (:func:`read_record`), from the rank's run folder as the launch fetched it
    (beside its log); a rank without a log has none."""
    return {rank: read_record(Path(rr.log).parent / RECORD_FILE.format(rank=rank))
            for rank, rr in launch.ranks.items() if rr.log}


__all__ = ["RECORD_ENV", "RECORD_FILE", "ModuleProgress", "RankLog", "RankLogs", "read_record",
           "records_of"]
