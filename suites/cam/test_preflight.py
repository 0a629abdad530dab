"""Preflight as tests: one test per check per host, ids like ``test_check[host1-ssh]``.

How results map to outcomes, and xdist: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import pytest
from preflight_share import cluster_report, probe

from framework import CONTEXT_KEY, RunContext
from framework.ranksuite import CHECKS, ERROR, FAIL, SKIP, WARN, Report


def _context(config: pytest.Config) -> RunContext | None:
    """The plugin's run context, or None when camit's plugin is not loaded (``-p no:camit``)."""
    return config.stash.get(CONTEXT_KEY, None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "host_check" not in metafunc.fixturenames:
        return
    ctx = _context(metafunc.config)
    if ctx is None or ctx.env is None:
        metafunc.parametrize("host_check", [pytest.param(None, marks=pytest.mark.skip(
            reason="no env file: pass --env FILE or set CAMIT_ENV"), id="no-env")])
        return
    # every host, on every worker: xdist needs the same collection everywhere
    cases = [(host, check) for host in ctx.env.hosts for check in CHECKS]
    metafunc.parametrize("host_check", cases, ids=[f"{h}-{c}" for h, c in cases])


@pytest.fixture(scope="session")
def preflight_report(camit: RunContext, request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> Report:
    if camit.worker is None:
        return probe(request.config)
    # xdist: every worker's share report, its own included (published at collection, see conftest)
    return cluster_report(camit, tmp_path_factory.getbasetemp().parent)


def test_check(host_check: tuple[str, str], preflight_report: Report) -> None:
    host, check = host_check
    result = preflight_report.get(host, check)
    if result.status == SKIP:
        pytest.skip(f"{host} {check}: {result.summary}")
    if result.status in (FAIL, ERROR):
        details = "".join(f"\n  {d}" for d in result.details)
        pytest.fail(f"{host} {check}: {result.summary}{details}", pytrace=False)
    if result.status == WARN:
        print(f"warning: {host} {check}: {result.summary}")
