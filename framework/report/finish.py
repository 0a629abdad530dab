"""The end of a run: :func:`finalize` writes ``cluster.xml``, ``manifest.json`` and ``index.html``
(and ``perf.csv``, ``summary.txt`` for a CI server) from whatever the run folder holds, and never
raises.

Order, scrubbing and fallbacks: docs/internals/report.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from framework.records.scrub import Scrubber, scrub_folder
from framework.report.ci import write_fallback_summary, write_perf_csv, write_summary_txt
from framework.report.html import write_fallback_index, write_index
from framework.report.junit import (
    CoreRecord,
    RerunRecord,
    fold_case_properties,
    fold_pytest_reruns,
    run_properties,
    write_cluster_junit,
    write_fallback_cluster,
)
from framework.report.manifest import write_fallback_manifest, write_manifest
from framework.report.model import read_run

log = logging.getLogger("camit.report")

__all__ = ["finalize"]

#: writes a minimal file from (run folder, status, error, problem)
Fallback = Callable[[Path, str, str, str], object]


def _keep(root: Path, status: str, error: str, problem: str) -> None:
    """pytest's junit.xml stays as pytest wrote it when folding its testcase properties failed."""


def finalize(rundir_path: str | os.PathLike[str], *, cores: Sequence[CoreRecord] = (),
             junit: str | os.PathLike[str] | None = None, reruns: Sequence[RerunRecord] = (),
             **manifest_kwargs: Any) -> None:
    """Write ``cluster.xml``, ``perf.csv``, ``manifest.json``, ``perf.html`` (a perf sweep's page), ``index.html``
    and ``summary.txt`` from whatever
    the folder holds (and keep
    pytest's ``junit.xml`` junit-10 valid: :func:`~framework.report.junit.fold_case_properties`), every
    file of the folder scrubbed of the env's secrets first (:func:`~framework.records.scrub.scrub_folder`).

    pytest's ``junit`` file (default ``junit.xml`` of the folder) also gets the run's properties (run id,
    seed, env, hosts, artifacts' sha256: :func:`~framework.report.junit.run_properties`) and each failed
    attempt pytest-rerunfailures reran (``reruns``) folded into its test's final testcase
    (:func:`~framework.report.junit.fold_pytest_reruns`).

    ``manifest_kwargs`` are :func:`framework.report.manifest.write_manifest`'s (``env``, ``seed``,
    ``argv``, ``repro``, ``started``, ``ended``, ``status``, ``error``, ``extra``). Never raises: a
    step that fails is logged, replaced by a minimal file saying so and listed in the manifest's
    ``report_problems``. Call it from ``finally:`` with ``status="interrupted", error=exc`` when the
    run did not complete.
    """
    root = Path(rundir_path)
    try:
        root.mkdir(parents=True, exist_ok=True)
        scrub = Scrubber.from_env(manifest_kwargs.get("env"))
    except Exception:
        log.exception("cannot prepare the report folder %s", root)
        return
    kw = {"status": "ok", "error": None, **manifest_kwargs}
    status = kw["status"]
    err_text = _error_text(kw["error"])
    problems: list[str] = []
    steps: list[tuple[str, Callable[[], object], Fallback]] = [
        ("junit.xml", lambda: _fold_junit(root, Path(junit) if junit else root / "junit.xml", reruns, scrub,
                                          kw.get("env"), kw.get("seed")), _keep),
        ("scrub", lambda: scrub_folder(root, scrub), _keep),
        ("cluster.xml", lambda: write_cluster_junit(root, cores, scrub=scrub, status=status, error=err_text,
                                                      env=kw.get("env"), seed=kw.get("seed")),
         write_fallback_cluster),
        ("perf.csv", lambda: write_perf_csv(root, scrub=scrub), _keep),
        ("manifest.json", lambda: write_manifest(root, scrub=scrub, report_errors=problems, **kw),
         write_fallback_manifest),
        ("perf.html", lambda: _perf_page(root), _keep),
        ("index.html", lambda: write_index(root, scrub=scrub), write_fallback_index),
        ("summary.txt", lambda: write_summary_txt(root, scrub=scrub), write_fallback_summary),
    ]
    for name, step, fallback in steps:
        try:
            step()
        except Exception as exc:
            log.exception("report: writing %s failed", name)
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            _fall_back(name, fallback, root, status, scrub(err_text or ""), scrub(problems[-1]))


def _error_text(err: object) -> str | None:
    """How the run's error reads in the report files (None without one)."""
    if not err:
        return None
    return f"{type(err).__name__}: {err}" if isinstance(err, BaseException) else str(err)


def _fall_back(name: str, fallback: Fallback, root: Path, status: str, error: str,
               problem: str) -> None:
    """Leave the step's minimal file; a fallback that fails too is only logged."""
    try:
        fallback(root, status, error, problem)
    except Exception:
        log.exception("report: even the fallback %s failed", name)


def _perf_page(root: Path) -> None:
    """``perf.html`` when the run measured a perf sweep (``perf-rows.jsonl``). Imported here, not at the top:
    matplotlib's import is half a second that a run without perf rows does not pay."""
    if (root / "perf-rows.jsonl").exists():
        from framework.perf.page import write_perf_page

        write_perf_page(root)


def _fold_junit(root: Path, junit: Path, reruns: Sequence[RerunRecord], scrub: Scrubber,
                env: Any, seed: int | None) -> None:
    """pytest's JUnit file made junit-10 valid, its reruns folded, the run's properties added (all scrubbed)."""
    if not junit.exists():
        return
    props = [(k, scrub(v)) for k, v in run_properties(read_run(root), env=env, seed=seed)]
    fold_pytest_reruns(junit, reruns, props)
    fold_case_properties(junit, scrub)
