"""The report built from a run folder: ``model`` reads it, ``junit``, ``manifest``, ``html`` and
``summary`` render it, ``finish`` writes them at the end of a run.

The folder's writer is :mod:`framework.records.folder`; its names are re-exported here, loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework._lazy import lazy_exports

if TYPE_CHECKING:
    from framework.records.folder import (
        RunDir,
        append_text,
        locked,
        new_run_id,
        record_phase,
        update_json,
        write_atomic,
    )
    from framework.report.finish import finalize
    from framework.report.html import render, write_index
    from framework.report.junit import validate_junit, write_cluster_junit
    from framework.report.manifest import repro_command, write_manifest
    from framework.report.model import CoreView, LaunchView, Phase, RankView, RunView, read_run
    from framework.report.summary import terminal_summary

#: the run folder itself is written below the executors (framework.records); re-exported here
_FOLDER = "framework.records.folder"
_EXPORTS = {
    "RunDir": _FOLDER, "append_text": _FOLDER, "locked": _FOLDER, "new_run_id": _FOLDER,
    "record_phase": _FOLDER, "update_json": _FOLDER, "write_atomic": _FOLDER,
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


__getattr__, __dir__ = lazy_exports(__name__, globals(),
                                    {name: module if module.startswith("framework.") else f"{__name__}.{module}"
                                     for name, module in _EXPORTS.items()})
