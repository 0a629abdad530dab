"""The session's resources (cluster, lease, deploy-once, launcher, rank suite) opened
explicitly, closed by one ExitStack.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

from framework.errors import (
    SESSION_DEPLOY,
    FrameworkError,
    LeaseHeld,
    LeaseLost,
    MultiHostError,
    one_line,
    session_exit_code,
)
from framework.plugin.options import LeaseSettings
from framework.plugin.progress import QUIET

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig, HostSpec
    from framework.deploy import DeployResult
    from framework.hosts import Cluster, Host
    from framework.launch import Launcher
    from framework.lease import Lease
    from framework.plugin.context import RunContext
    from framework.ranksuite.suite import RankSuite
    from framework.transport.base import Transport

log = logging.getLogger("camit")

TransportFactory = Callable[["HostSpec"], "Transport"]
RESOURCES_KEY = pytest.StashKey["Resources"]()


def resources_of(config: pytest.Config) -> Resources:
    """The session's resources (``pytest_configure`` makes them; nothing is open until first asked)."""
    return config.stash[RESOURCES_KEY]


def log_event(host: str, message: str) -> None:
    """The deploy's and launcher's progress events, into the ``camit`` logger (shown by :mod:`.progress`)."""
    log.info("%s: %s", host, message, extra={"camit_event": (host, message)})


def _release(lease: Lease) -> None:
    try:
        lease.__exit__(None, None, None)  # release, then LeaseLost if it was taken over meanwhile
    except FrameworkError as exc:
        log_event("lease", f"release failed: {exc}")


@dataclass
class LeasedCluster:
    """An opened cluster: the hosts, the lease on the reachable ones, and why the others were not reached."""

    cluster: Cluster
    lease: Lease | None
    unreachable: MultiHostError | None = None


def open_leased_cluster(env: EnvConfig, names: Sequence[str] | None, stack: ExitStack, *,
                        lease: LeaseSettings | None = None, transport_factory: TransportFactory | None = None,
                        allow_unreachable: bool = False,
                        on_lost: Callable[[LeaseLost], None] | None = None) -> LeasedCluster:
    """The hosts ``names`` of ``env`` (None: all), connected and leased; ``stack`` releases, then closes them.

    Three explicit steps: build the cluster (``Cluster.from_env``), connect every host at once, take
    the lease (``LeaseHeld`` names the holder; ``$CAMIT_LEASE_WAIT`` seconds of waiting). A host that
    cannot be reached fails the opening (``MultiHostError`` naming each one) unless
    ``allow_unreachable`` (the preflight suite, which reports such hosts): then the reachable hosts
    are leased and the error is kept in ``unreachable``. On failure ``stack`` still closes the hosts.
    ``on_lost`` is the lease's (called on its heartbeat thread when the lease is taken over).
    """
    from framework.hosts import Cluster
    from framework.lease import Lease

    settings = lease or LeaseSettings.from_environ()
    cluster = Cluster.from_env(env, names, transport_factory=transport_factory)
    stack.callback(cluster.close)
    reachable, unreachable = _connect(cluster, allow_unreachable)
    if not reachable:
        return LeasedCluster(cluster, None, unreachable)
    # a sub-cluster (the same Host objects) when some hosts are down: the lease covers the others
    leased = cluster if len(reachable) == len(cluster) else Cluster(reachable, max_parallel=cluster.max_parallel)
    if leased is not cluster:
        stack.callback(leased.close)
    held = Lease(leased, owner=settings.owner, wait=settings.wait, on_lost=on_lost)
    held.acquire()
    stack.callback(_release, held)
    return LeasedCluster(cluster, held, unreachable)


def _connect(cluster: Cluster, allow_unreachable: bool) -> tuple[list[Host], MultiHostError | None]:
    """Connect every host at once: the reachable ones, and the error naming the others (raised
    unless ``allow_unreachable``)."""
    connected = cluster.connect()
    reachable = [cluster[n] for n in connected.succeeded]
    if not connected.failed:
        return reachable, None
    try:
        connected.raise_on_failure()
    except MultiHostError as exc:
        if not allow_unreachable:
            raise
        return reachable, exc
    return reachable, None


class Resources:
    """What this process opened on the cluster for the run (``config.stash[RESOURCES_KEY]``).

    ``open_cluster``, ``deploy``, ``open_launcher`` and ``open_suite`` each open their resource on
    the first call (and the ones it needs before it) and return it after; ``close`` undoes them all.
    ``transport_factory`` replaces SSH for every host (a conftest may set it before the first
    opening, e.g. to ``LocalTransport`` in the plugin's own tests).
    """

    def __init__(self, ctx: RunContext, *, transport_factory: TransportFactory | None = None) -> None:
        self.ctx = ctx
        self.transport_factory = transport_factory
        self.stack = ExitStack()
        self.cluster: Cluster | None = None
        self.lease: Lease | None = None
        self.deployed: DeployResult | str | None = None
        self.launcher: Launcher | None = None
        self.suite: RankSuite | None = None
        self.unreachable: MultiHostError | None = None
        self._broken: FrameworkError | None = None
        #: (exit status, reason) when an infrastructure failure ended the session (``end_session``)
        self.ended: tuple[int, str] | None = None

    def open_cluster(self, *, allow_unreachable: bool = False) -> Cluster:
        """This process's hosts (``ctx.host_names()``), connected and leased (see :func:`open_leased_cluster`).

        Opened once: a lease that cannot be taken is raised again to every later caller (one
        attempt, not one per test), and so are unreachable hosts, except to ``allow_unreachable``.
        """
        if self.cluster is None:
            self.cluster = self._open()
        if self.unreachable is not None and not allow_unreachable:
            self.end_session(self.unreachable)
        self._end_if_lease_lost()
        return self.cluster

    def _open(self) -> Cluster:
        """The first opening (the suspects loaded first on the controller); a failure is kept for
        every later caller."""
        if self._broken is not None:
            self.end_session(self._broken)
        if self.ctx.is_controller:
            self.ctx.load_suspects()
        try:
            opened = open_leased_cluster(
                self.ctx.require_env(), self.ctx.host_names(), self.stack,
                lease=self.ctx.options.lease, transport_factory=self.transport_factory,
                allow_unreachable=True, on_lost=self._lease_lost)
        except FrameworkError as exc:
            self._broken = exc
            self.end_session(exc)
        self.cluster = opened.cluster
        self.lease, self.unreachable = opened.lease, opened.unreachable
        self._mark_unreachable()
        return opened.cluster

    def _end_if_lease_lost(self) -> None:
        """End the session when the lease was taken over while held."""
        if self.lease is None or not self.lease.lost:
            return
        try:
            self.lease.check()
        except LeaseLost as exc:
            self.end_session(exc)

    def _mark_unreachable(self) -> None:
        """Hosts that could not be reached become suspect (framework.suspects), marked on the
        reachable ones."""
        from framework import suspects

        if self.unreachable is None or self.cluster is None or self.lease is None:
            return
        down = {h: ("unreachable", one_line(e)) for h, e in self.unreachable.errors.items()}
        suspects.mark(self.cluster, down, on=[h.name for h in self.lease.hosts])

    def end_session(self, exc: FrameworkError) -> NoReturn:
        """Raise ``exc`` again, or — an infrastructure failure (:func:`framework.errors.session_exit_code`) —
        end the session: ``pytest.exit`` with one line naming host and step, and the code."""
        code = session_exit_code(exc)
        if code is None:
            raise exc
        reason = self._reason(exc, code)
        if self.ended is None:
            self.ended = (code, reason)
        # the whole story (every host, the output's tail) in camit.log; the terminal gets pytest.exit's one line
        log.error("%s", str(exc), extra={QUIET: True})
        pytest.exit(self.ended[1], returncode=self.ended[0])

    @staticmethod
    def _reason(exc: FrameworkError, code: int) -> str:
        if isinstance(exc, LeaseLost):
            return f"camit: {one_line(exc)}"
        what = "lease held" if isinstance(exc, LeaseHeld) else \
            "deploy failed" if code == SESSION_DEPLOY else "cluster unreachable"
        return f"camit: {what}: {one_line(exc)}"

    def _lease_lost(self, exc: LeaseLost) -> None:
        """The lease heartbeat (its own thread) found the lease taken over: stop the run now, exit status 7."""
        from framework.plugin.signals import signals_of

        code = session_exit_code(exc) or 1
        reason = self._reason(exc, code)
        if self.ended is None:
            self.ended = (code, reason)
        log.error("%s; stopping the run", reason)
        signals = signals_of(self.ctx.config)
        if signals is not None:
            signals.end_session(reason, code)  # raised in the main thread; otherwise the next opening raises it

    def deploy(self, tmp_root: Path) -> DeployResult | str:
        """Deploy once per run and host share (file lock + a record of what was deployed): a worker that
        xdist restarts on the same share does not deploy again; workers on other shares do not wait."""
        if self.deployed is not None:
            return self.deployed
        env = self.ctx.require_env()
        if self.ctx.options.no_deploy or not (env.artifacts.run_package or env.artifacts.wheel):
            self.deployed = "skipped"
        else:
            self.deployed = self._deploy_share(env, tmp_root)
        return self.deployed

    def _deploy_share(self, env: EnvConfig, tmp_root: Path) -> DeployResult | str:
        """Deploy this process's host share, unless another worker of the run did it already."""
        from filelock import FileLock

        from framework.deploy import Deployer, resolve_artifacts

        # one deploy per run and host share: the run id is shared by the controller and its xdist workers,
        # and each worker deploys its own (disjoint) share, at the same time as the others
        names = self.ctx.host_names()
        rundir = self.ctx.ensure_rundir()
        share = f"{rundir.run_id}-{names[0]}"
        marker = tmp_root / f"camit-deployed-{share}.txt"
        key = ",".join(a.sha256 for a in resolve_artifacts(env)) + "@" + ",".join(names)
        with FileLock(str(tmp_root / f"camit-deploy-{share}.lock")):
            if marker.exists() and marker.read_text() == key:
                return "done by another worker"
            result = Deployer(env, self.open_cluster(), rundir=rundir, on_event=log_event).run()
            if not result.ok:
                self.end_session(MultiHostError(result.errors, total=len(result.manifests)))
            marker.write_text(key)
        return result

    def open_launcher(self) -> Launcher:
        """A ``Launcher`` over the cluster, fetching into the run folder (call ``deploy`` first)."""
        if self.launcher is None:
            from framework.launch import Launcher

            self.launcher = Launcher(self.ctx.require_env(), self.open_cluster(), rundir=self.ctx.ensure_rundir(),
                                     on_event=log_event, per_launch_dirs=True, keep_remote=self.ctx.options.keep_remote,
                                     defer_cleanup=True,  # after the core watch: cores.around_test, close()
                                     owner=lambda: self.ctx.test)
        return self.launcher

    def open_suite(self) -> RankSuite:
        """The ``RankSuite`` of suites/cam/rank over the launcher: seed, shapes, slots, timeout and coverage mode."""
        if self.suite is None:
            from framework.ranksuite.suite import RankSuite

            ctx = self.ctx
            rank_env = {"CAMIT_SEED": str(ctx.seed)}
            if ctx.options.full_shapes:
                rank_env["CAMIT_FULL_SHAPES"] = "1"
            cov = None
            if ctx.cov_ranks:
                from framework.ranksuite.coverage import RankCoverage

                cov = RankCoverage(ctx.require_env(), self.open_cluster(), ctx.ensure_rundir().path)
            self.suite = RankSuite(ctx.require_env(), self.open_cluster(), self.open_launcher(),
                                   slots=ctx.options.slots, rank_env=rank_env, case_timeout=ctx.case_timeout,
                                   coverage=cov, spread=ctx.options.spread)
        return self.suite

    def close(self) -> None:
        """Release the lease and close the connections (reverse order of opening); idempotent."""
        if self.launcher is not None:
            try:  # run folders of tests outside the core watch
                self.launcher.cleanup_remote()
            except Exception as exc:  # noqa: BLE001 - closing must go on
                log_event("cleanup", f"removing run folders failed: {exc}")
        self.stack.close()
        self.cluster = self.lease = self.launcher = self.suite = self.unreachable = None
