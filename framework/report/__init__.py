"""The run's report folder ``reports/<run-id>/`` and everything built from it, one concern a module.

``folder`` writes the folder (:class:`RunDir`, atomic and locked writes, :func:`record_phase`); ``model``
reads it back as data (:func:`read_run` → :class:`RunView`) and never writes; from that view ``junit``
merges every rank's JUnit into ``cluster.xml`` (and validates JUnit files), ``manifest`` writes
``manifest.json`` and holds THE reproduce-line builder (:func:`repro_command`), ``html`` renders
``index.html`` and ``summary`` the one-screen terminal summary; ``finish`` (:func:`finalize`) writes the
three report files at the end of a run and never raises. ``fmt`` (text helpers) and ``scrub`` (secrets
out) are shared by them. The names below are importable from ``framework.report`` directly; the modules
load on first use, so ``from framework.report import write_atomic`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework._lazy import lazy_exports

if TYPE_CHECKING:
    from framework.report.finish import finalize
    from framework.report.folder import RunDir, append_text, locked, new_run_id, record_phase, update_json, write_atomic
    from framework.report.html import render, write_index
    from framework.report.junit import validate_junit, write_cluster_junit
    from framework.report.manifest import repro_command, write_manifest
    from framework.report.model import CoreView, LaunchView, Phase, RankView, RunView, read_run
    from framework.report.summary import terminal_summary

_EXPORTS = {
    "RunDir": "folder", "append_text": "folder", "locked": "folder", "new_run_id": "folder",
    "record_phase": "folder", "update_json": "folder", "write_atomic": "folder",
    "CoreView": "model", "LaunchView": "model", "Phase": "model", "RankView": "model", "RunView": "model",
    "read_run": "model",
    "validate_junit": "junit", "write_cluster_junit": "junit",
    "repro_command": "manifest", "write_manifest": "manifest",
    "render": "html", "write_index": "html",
    "terminal_summary": "summary",
    "finalize": "finish",
}

__all__ = ["CoreView", "LaunchView", "Phase", "RankView", "RunDir", "RunView", "append_text", "finalize", "locked",
           "new_run_id", "read_run", "record_phase", "render", "repro_command", "terminal_summary", "update_json",
           "validate_junit", "write_atomic", "write_cluster_junit", "write_index", "write_manifest"]


__getattr__, __dir__ = lazy_exports(__name__, globals(), {name: f"{__name__}.{module}" for name, module in _EXPORTS.items()})
