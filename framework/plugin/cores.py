"""The core watch around a test: cores snapshotted before the body, collected after, judged by
the policy.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from framework.plugin.context import LAUNCHES_KEY
from framework.plugin.markers import core_policy, uses_cluster
from framework.plugin.resources import log_event
from framework.ranksuite import batches

if TYPE_CHECKING:
    from framework.cores.inspection import Core
    from framework.launch.runwatch import ClusterWatch, WatchOutcome
    from framework.plugin.context import RunContext
    from framework.plugin.resources import Resources


def watched(item: pytest.Item, ctx: RunContext) -> bool:
    """Whether ``item`` runs inside the watch: an env, a test that drives the cluster, a policy other than ignore,
    and not a test of a shared launch (``--launch-per world``: its module ran under the batch's own watch, and a
    call that launches alone is watched there too: :mod:`framework.ranksuite.batches`)."""
    return (ctx.env is not None and uses_cluster(item) and core_policy(item, ctx) != "ignore"
            and batches.for_item(item) is None)


@contextmanager
def around_test(item: pytest.Item, ctx: RunContext, resources: Resources) -> Iterator[None]:
    """Snapshot cores before the body, collect them after; the policy may turn a pass into a failure.

    A failed body keeps its exception, with the cores' description appended to its message. The watch
    is the one :class:`~framework.launch.runwatch.ClusterWatch` that BaseTest and ``camit run`` use too.
    """
    from framework.launch.runwatch import ClusterWatch

    watch = ClusterWatch(resources.open_cluster(), ctx.env, policy=core_policy(item, ctx), label=item.nodeid)
    watch.begin()
    try:
        yield
    except BaseException as failure:  # the test failed: still collect cores and logs, then re-raise
        message = _collect(item, ctx, watch, failed=True, resources=resources)
        if message:
            failure.args = (f"{failure.args[0] if failure.args else failure}\n{message}",) + failure.args[1:]
        raise
    message = _collect(item, ctx, watch, failed=False, resources=resources)
    if message and core_policy(item, ctx) == "fail":
        raise AssertionError(message)


def _collect(item: pytest.Item, ctx: RunContext, watch: ClusterWatch, failed: bool, resources: Resources) -> str:
    """The new cores as text for the report ("" when none or under ``warn``); the logs of a failed test.

    The launches' run folders are removed only after the scan (a relative core_pattern puts cores there)."""
    try:
        watched = watch.end(ranks=item.stash.get(LAUNCHES_KEY, []) or None, failed=failed,
                            rundir=ctx.ensure_rundir())
    finally:
        if resources.launcher is not None:
            resources.launcher.cleanup_remote()
    _report_logs(item, watched)
    if not watched.cores:
        return ""
    text = "\n".join(_core_text(c) for c in watched.cores)
    item.add_report_section("call", "core dumps", text)
    if core_policy(item, ctx) == "warn":
        warnings.warn(pytest.PytestWarning(f"core dumps (policy warn):\n{text}"), stacklevel=1)
        return ""
    return text


def _report_logs(item: pytest.Item, watched: WatchOutcome) -> None:
    """The log collection's outcome: its failure logged, else the failure signatures it found
    into the test's report (e.g. an OOM kill behind a rank that "died of SIGKILL")."""
    if watched.log_error:
        log_event("collect", f"log collection failed: {watched.log_error}")
    elif watched.log_summary:
        item.add_report_section("call", "failure signatures", watched.log_summary)


def _core_text(core: Core) -> str:
    """One core dump for the report: its description, then its backtrace when there is one."""
    return core.describe() + ("\n" + core.backtrace if core.backtrace else "")
