"""camit's pytest plugin (entry point ``pytest11: camit = "framework.plugin"``): this module
registers it.

pytest finds the hooks and fixtures as attributes of this module; each lives in its own module.
The map: docs/internals/plugin.md.
"""

from __future__ import annotations

from framework.plugin.context import CONTEXT_KEY, LAUNCHES_KEY, RunContext, context_of
from framework.plugin.fixtures import camit, cluster, deployed, env, launcher, rank_suite, run_ranks
from framework.plugin.hooks import (
    pytest_addoption,
    pytest_collection_finish,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_configure_node,
    pytest_keyboard_interrupt,
    pytest_load_initial_conftests,
    pytest_report_header,
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_sessionfinish,
    pytest_sessionfinish_exit_status,
    pytest_terminal_summary,
    pytest_testnodedown,
    pytest_testnodeready,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)
from framework.plugin.markers import MARKERS, SOC_MARKERS
from framework.plugin.options import Options
from framework.plugin.resources import RESOURCES_KEY, Resources, open_leased_cluster, resources_of

#: the URMA harness layer (``framework.urma``, which sits above this plugin and imports it) is a pytest
#: plugin of its own, loaded by name with this one
pytest_plugins = ["framework.urma.harness"]

__all__ = [
    "CONTEXT_KEY", "LAUNCHES_KEY", "MARKERS", "RESOURCES_KEY", "SOC_MARKERS", "Options", "Resources", "RunContext",
    "camit", "cluster", "context_of", "deployed", "env", "launcher", "open_leased_cluster", "rank_suite",
    "resources_of", "run_ranks",
    "pytest_addoption", "pytest_collection_finish", "pytest_collection_modifyitems", "pytest_configure",
    "pytest_configure_node",
    "pytest_keyboard_interrupt", "pytest_load_initial_conftests", "pytest_report_header", "pytest_runtest_call",
    "pytest_runtest_setup",
    "pytest_sessionfinish", "pytest_sessionfinish_exit_status", "pytest_terminal_summary", "pytest_testnodedown",
    "pytest_testnodeready", "pytest_unconfigure", "pytest_xdist_make_scheduler",
]
