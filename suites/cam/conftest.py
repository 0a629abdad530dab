"""Controller-side suite: each test launches a rank-side module (suites/cam/rank) across the
cluster.

Design: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import pytest

collect_ignore = ["rank"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "world" not in metafunc.fixturenames or hasattr(metafunc.module, "pytest_generate_tests"):
        return
    from camsuite import world_params

    metafunc.parametrize("world", world_params(metafunc.config))


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if getattr(config, "workerinput", None) is None or config.option.collectonly:
        return
    if not any("preflight_report" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    from preflight_share import publish_share

    from framework import CONTEXT_KEY

    ctx = config.stash.get(CONTEXT_KEY, None)
    if ctx is None or ctx.env is None:  # no camit plugin or no env: the preflight tests skip ("no env file")
        return
    # the session's shared temp dir, the one the tmp_path_factory fixture returns (pytest's own attribute)
    publish_share(config, config._tmp_path_factory.getbasetemp().parent)  # type: ignore[attr-defined]
