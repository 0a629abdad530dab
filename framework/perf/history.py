"""The performance history of one cluster: an SQLite file beside the baselines,
``<dir>/<cluster>.perf.sqlite``.

Design: docs/internals/perf.md.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from framework.perf.changepoint import Verdict, assess

__all__ = ["MIGRATIONS", "History", "RunKey", "Series", "path_for"]

#: one entry per schema version: the statements that take version ``i`` to ``i + 1``
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    ("CREATE TABLE runs (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, cluster TEXT NOT NULL,"
     " soc TEXT NOT NULL, cann TEXT NOT NULL, op_lib_version TEXT NOT NULL, recorded REAL NOT NULL)",
     "CREATE TABLE results (run INTEGER NOT NULL REFERENCES runs(id), config TEXT NOT NULL,"
     " metric TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (run, config, metric))"),
    ("ALTER TABLE runs ADD COLUMN accepted INTEGER NOT NULL DEFAULT 0",
     "CREATE INDEX results_series ON results (config, metric, run)",
     "CREATE INDEX runs_key ON runs (cluster, soc, cann)"),
)
VERSION = len(MIGRATIONS)


def path_for(baseline_dir: Path, cluster: str) -> Path:
    """Where ``cluster``'s history lives: beside its ``<cluster>.json`` baseline."""
    return baseline_dir / f"{cluster}.perf.sqlite"


@dataclass(frozen=True)
class RunKey:
    """What a result is compared within (cluster, soc, CANN) and labelled by (op-library version)."""

    run_id: str
    cluster: str
    soc: str
    cann: str
    op_lib_version: str


@dataclass(frozen=True)
class Series:
    config: str
    metric: str
    values: list[float]
    labels: list[str]
    #: the index of the newest accepted run (its point and later ones are judged), 0 when none
    since: int


class History:
    """An open history file; use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        # a commit per recorded run without an fsync of the whole file each time (16 ms -> <1 ms here)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self._migrate()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @property
    def version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        with self._transaction() as db:
            have = int(db.execute("PRAGMA user_version").fetchone()[0])
            if have > VERSION:
                raise ValueError(f"{self.path}: perf history schema version {have} is newer than this camit's "
                                 f"{VERSION}; use a newer camit")
            for steps in MIGRATIONS[have:]:
                for sql in steps:
                    db.execute(sql)
            db.execute(f"PRAGMA user_version = {VERSION}")

    def record(self, key: RunKey, values: Mapping[tuple[str, str], float], *, accepted: bool = False,
               recorded: float | None = None) -> None:
        """Store one run's ``{(config, metric): value}``: a run id already there keeps its other configurations
        (xdist workers add theirs to the same run), the same configuration and metric are replaced."""
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO runs (run_id, cluster, soc, cann, op_lib_version, recorded, accepted)"
                       " VALUES (?, ?, ?, ?, ?, ?, 0)", (key.run_id, key.cluster, key.soc, key.cann,
                                                         key.op_lib_version, time.time() if recorded is None
                                                         else recorded))
            if accepted:
                db.execute("UPDATE runs SET accepted = 1 WHERE run_id = ?", (key.run_id,))
            run = db.execute("SELECT id FROM runs WHERE run_id = ?", (key.run_id,)).fetchone()[0]
            db.executemany("INSERT OR REPLACE INTO results (run, config, metric, value) VALUES (?, ?, ?, ?)",
                           [(run, c, m, float(v)) for (c, m), v in values.items()])

    def series(self, key: RunKey, config: str, metric: str) -> Series:
        """One configuration's metric over the runs of ``key``'s cluster, soc and CANN, oldest first."""
        rows = self.db.execute(
            "SELECT results.value, runs.run_id, runs.op_lib_version, runs.accepted FROM results"
            " JOIN runs ON runs.id = results.run WHERE runs.cluster = ? AND runs.soc = ? AND runs.cann = ?"
            " AND results.config = ? AND results.metric = ? ORDER BY runs.id",
            (key.cluster, key.soc, key.cann, config, metric)).fetchall()
        accepted = [i for i, r in enumerate(rows) if r[3]]
        return Series(config, metric, [r[0] for r in rows], [f"{r[1]} op-lib {r[2]}" for r in rows],
                      accepted[-1] if accepted else 0)

    def configs(self, key: RunKey) -> list[tuple[str, str]]:
        """The (configuration, metric) pairs of run ``key.run_id``."""
        return [(c, m) for c, m in self.db.execute(
            "SELECT config, metric FROM results JOIN runs ON runs.id = results.run WHERE runs.run_id = ?"
            " ORDER BY config, metric", (key.run_id,))]

    def assess_run(self, key: RunKey, *, higher_is_better: Iterable[str] = (),
                   margin: float | None = None) -> dict[tuple[str, str], Verdict]:
        """The verdict of every configuration and metric the run ``key`` recorded, on its series."""
        better = set(higher_is_better)
        out = {}
        for config, metric in self.configs(key):
            s = self.series(key, config, metric)
            out[(config, metric)] = assess(s.values, higher_is_better=metric in better, margin=margin,
                                           since=s.since, labels=s.labels)
        return out


def record_and_judge(path: Path, key: RunKey, config: str, numbers: Mapping[str, float], *,
                     higher_is_better: Iterable[str] = (), margin: float | None = None,
                     accepted: bool = False) -> list[str]:
    """Add one configuration's ``numbers`` of run ``key`` to the history at ``path`` and judge them: one
    paragraph per regressed metric (:meth:`Verdict.describe`: the series, the change point, the step)."""
    with History(path) as h:
        h.record(key, {(config, m): v for m, v in numbers.items()}, accepted=accepted)
        verdicts = h.assess_run(key, higher_is_better=higher_is_better, margin=margin)
    return [v.describe(f"{c} {m}") for (c, m), v in sorted(verdicts.items()) if c == config and v.regression]
