"""camit's pytest plugin (entry point ``pytest11: camit = "framework.plugin"``): this module registers it.

``pytest suites/cam --env test_env.yaml`` — the env may also come from ``$CAMIT_ENV`` or the ini key
``camit_env``. Nothing touches a host until a test asks for the ``cluster``/``deployed``/``launcher``/
``rank_suite`` fixtures (or is a ``BaseTest``), so the plugin is inert for ordinary test runs; with only
``$CAMIT_ENV`` or the ini key (no ``--env``) it makes nothing at all — no run folder, no JUnit, no env
error — unless a test uses camit. pytest
finds the hooks and fixtures as attributes of this module; each lives in its own module:

- :mod:`.options` — the options and ini key, read once into a frozen ``Options``; the env-file rule;
- :mod:`.context` — the data-only ``RunContext`` in ``config.stash`` (the ``camit`` fixture);
- :mod:`.resources` — cluster, lease, deploy-once, launcher, rank suite: opened explicitly, one ExitStack;
- :mod:`.markers` — requirement markers (``ranks``, ``nodes``, ``soc``, ``a2_test``/``a3_test``), skips
  with the reason; the core policy marker;
- :mod:`framework.ranksuite.batches` — ``--launch-per world``: one launch per world, split back per test;
- :mod:`.xdist` — each worker's host share, the launch-first order, the round-robin first hand-out;
- :mod:`.cores` — the core watch around every test that drives the cluster;
- :mod:`.progress` — camit's events on the terminal (under ``-n`` forwarded in report sections), camit.log;
- :mod:`.reporting` — header and repro line, the run folder's finalize, the terminal summary;
- :mod:`.fixtures` — ``camit``, ``env``, ``cluster``, ``deployed``, ``launcher``, ``rank_suite``, ``run_ranks``;
- :mod:`.hooks` — the hook functions, each handing its work to one of the above.
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
