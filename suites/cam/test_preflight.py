"""Preflight as tests: one test per check per host, ids like ``test_check[host1-ssh]``.

The same checks as ``camit check`` (``framework.preflight.run``): every host is probed once per
session (one script, one round trip per host, through the cluster's bounded pool); each test then
reports its own cell. ``ok``/``warn`` pass (a warning is printed into the test's output),
``skip`` skips with the reason (NPU checks on CPU hosts), ``fail`` fails with the evidence, and an
unreachable host fails its ``ssh`` test while its other checks skip.

The env file comes from ``--env`` (camit's pytest plugin), ``$CAMIT_ENV`` or ini ``camit_env``. Under xdist the first
worker probes and the others read its report (a file lock in the session's shared temp dir).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from framework.preflight.checks import CHECKS, ERROR, FAIL, SKIP, WARN, Report


def _env_path(config: pytest.Config) -> str | None:
    from framework.config import resolve_env_path  # the one env-file rule, without the default file

    try:
        value, ini = config.getoption("--env"), config.getini("camit_env")
    except ValueError:  # camit's plugin is not loaded: no such option
        value, ini = None, None
    return resolve_env_path(value, os.environ, ini, default=None)[0]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "host_check" not in metafunc.fixturenames:
        return
    path = _env_path(metafunc.config)
    if not path:
        metafunc.parametrize("host_check", [pytest.param(None, marks=pytest.mark.skip(
            reason="no env file: pass --env FILE or set CAMIT_ENV"), id="no-env")])
        return
    from framework.config.effective import load

    env = load(path)
    cases = [(host, check) for host in env.hosts for check in CHECKS]
    metafunc.parametrize("host_check", cases, ids=[f"{h}-{c}" for h, c in cases])


def _run(path: str) -> Report:
    from framework.config.effective import load
    from framework.hosts import Cluster
    from framework.preflight.run import Preflight

    env = load(path)
    with Cluster.from_env(env) as cluster:
        return Preflight(env, cluster).run()


@pytest.fixture(scope="session")
def preflight_report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Report:
    path = _env_path(request.config)
    assert path, "no env file"
    if not hasattr(request.config, "workerinput"):
        return _run(path)
    from filelock import FileLock

    # one probe per session, shared by the xdist workers (pytest-xdist "how-to": session fixtures once)
    shared = tmp_path_factory.getbasetemp().parent
    key = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:12]
    cached = Path(shared) / f"camit-preflight-{key}.json"
    with FileLock(str(cached) + ".lock"):
        if cached.exists():
            return Report.from_json(json.loads(cached.read_text()))
        report = _run(path)
        cached.write_text(json.dumps(report.to_json()))
        return report


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
