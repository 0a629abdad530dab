"""The rank-side suites: the runner (:mod:`.suite`), ``--launch-per world`` (:mod:`.batch`,
:mod:`.batches`), perf baselines (:mod:`.perfbase`) and coverage mode (:mod:`.coverage`).

This package's names (:data:`__all__`, loaded on first use) and ``framework``'s are the public
surface ``suites/`` imports (``tests/unit/project/test_public_surface.py``); the pytest plugin's names a
suite needs are in ``framework`` itself (the plugin is a layer above this package).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = [
    # the runner
    "RankSuite", "SuiteResult", "SMALL_WORLDS", "default_worlds", "slots_per_node",
    # the preflight, as a suite checks it
    "Preflight", "Report", "CHECKS", "ERROR", "FAIL", "SKIP", "WARN",
    # the run folder's shared files
    "append_text", "update_json",
    # performance: the row, the sweep and its matrix, the history, the baselines
    "Row", "sweep", "matrix", "history", "perfbase",
]

#: name -> the module defining it
_NAMES: dict[str, str] = {
    **dict.fromkeys(("RankSuite", "SuiteResult", "SMALL_WORLDS", "default_worlds",
                     "slots_per_node"), "framework.ranksuite.suite"),
    "Preflight": "framework.preflight.run",
    **dict.fromkeys(("Report", "CHECKS", "ERROR", "FAIL", "SKIP", "WARN"),
                    "framework.preflight.checks"),
    **dict.fromkeys(("append_text", "update_json"), "framework.records.folder"),
    "Row": "framework.perf.row",
}
#: name -> the module it is
_MODULES: dict[str, str] = {
    "sweep": "framework.perf.sweep",
    "matrix": "framework.perf.matrix",
    "history": "framework.perf.history",
    "perfbase": "framework.ranksuite.perfbase",
}

if TYPE_CHECKING:  # pragma: no cover - what the lazy names are, for type checkers and editors
    from framework.perf import history, matrix, sweep
    from framework.perf.row import Row
    from framework.preflight.checks import CHECKS, ERROR, FAIL, SKIP, WARN, Report
    from framework.preflight.run import Preflight
    from framework.ranksuite import perfbase
    from framework.ranksuite.suite import (
        SMALL_WORLDS,
        RankSuite,
        SuiteResult,
        default_worlds,
        slots_per_node,
    )
    from framework.records.folder import append_text, update_json


def __getattr__(name: str) -> object:
    """A public name, loaded from its module on first use (PEP 562): importing the package (as the
    plugin does for :mod:`.batches`) loads neither the launcher nor the perf stack."""
    if name in _MODULES:
        value: object = importlib.import_module(_MODULES[name])
    elif name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
