"""BaseTest: the URMA harness's class API on camit's machinery.

    class TestMine(BaseTest):
        def test_x(self):
            assert self.host1.check("hostname").ok
            for host in self.host_list: ...

``setup_class`` takes the hosts from the session's resources when camit's plugin runs the class
(``--env``/``$CAMIT_ENV``/ini ``camit_env``): the same leased cluster the ``cluster`` fixture
returns, under ``-n`` the worker's host share. Without a plugin env it loads ``$CAMIT_ENV``, else
/etc/ubus_ci/test_env.yaml, and opens (and leases) the cluster for the class alone. It then connects
to every host (one error naming each host that failed), attaches each host as ``self.<name>``
(names are validated identifiers, never executed) and snapshots cores; ``teardown_class`` collects
cores (policy fail by default), closes what the class opened itself and fails the class when a core
appeared. Per-test hooks are ``setup_method``/``teardown_method``: pytest >= 8.1 no longer calls
nose-style ``setup()``/``teardown()``, and a subclass defining them gets a loud error instead of
silently skipped code. State lives on each subclass, never shared between them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, ClassVar

from framework.errors import FrameworkError

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.cores.runwatch import ClusterWatch
    from framework.hosts import Cluster, Host
    from framework.plugin.resources import Resources


class BaseTest:
    env: ClassVar[EnvConfig | None] = None
    cluster: ClassVar[Cluster | None] = None
    host_list: ClassVar[list[Host]] = []
    hosts: ClassVar[dict[str, Host]] = {}
    core_policy: ClassVar[str] = "fail"
    _core_watch: ClassVar[ClusterWatch | None] = None  # between setup_class and teardown_class
    #: the session's resources, set by the plugin (``pytest_runtest_setup``) when it runs the class
    _camit_resources: ClassVar[Resources | None] = None
    #: what the class opened itself (no plugin env): its own leased cluster, closed at teardown
    _own_stack: ClassVar[ExitStack | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for legacy in ("setup", "teardown"):
            if legacy in cls.__dict__:
                raise TypeError(f"{cls.__name__}.{legacy}() is nose-style and pytest >= 8.1 never calls it; "
                                f"rename it to {legacy}_method(self, method)")

    @classmethod
    def _session(cls) -> Resources | None:
        """The plugin session's resources when it has an env, else None (the class then opens its own)."""
        resources = cls._camit_resources
        return resources if resources is not None and resources.ctx.env is not None else None

    @classmethod
    def _open(cls) -> tuple[EnvConfig, Cluster]:
        """The env and the leased cluster: the session's, or the class's own."""
        session = cls._session()
        if session is not None:
            return session.ctx.require_env(), session.open_cluster()
        from framework.config import load, resolve_env_path  # the one env-file rule (with the default file)
        from framework.plugin.resources import open_leased_cluster

        env = load(resolve_env_path()[0])
        cls._own_stack = stack = ExitStack()
        try:
            cluster = open_leased_cluster(env, None, stack).cluster
        except BaseException:
            stack.close()
            cls._own_stack = None
            raise
        return env, cluster

    @classmethod
    def setup_class(cls) -> None:
        from framework.cores.runwatch import ClusterWatch  # the one watch around a run (also pytest, camit run)

        cls.env, cls.cluster = cls._open()
        cls.cluster.connect().raise_on_failure()
        cls.host_list = list(cls.cluster)
        cls.hosts = dict(cls.cluster.hosts)
        for name, host in cls.hosts.items():
            setattr(cls, name, host)
        cls._core_watch = ClusterWatch(cls.cluster, cls.env, policy=cls.core_policy, label=cls.__qualname__)
        cls._core_watch.begin()

    @classmethod
    def teardown_class(cls) -> None:
        message = ""
        try:
            if cls._core_watch is not None:
                resources = cls._camit_resources
                rundir = resources.ctx.ensure_rundir() if resources is not None else None
                watched = cls._core_watch.end(rundir=rundir)
                message = watched.message if watched.failed else ""
        finally:
            cls._close()
        if message:
            raise FrameworkError(f"CHECK CORE FAILED: {message}")

    @classmethod
    def _close(cls) -> None:
        """Close what the class opened itself (the session's cluster stays open for the session)."""
        stack, cls._own_stack = cls._own_stack, None
        try:
            if stack is not None:
                stack.close()
        finally:
            for name in cls.hosts:
                if name in cls.__dict__:
                    delattr(cls, name)
            cls._core_watch = None

    def setup_method(self, method: Callable[..., Any]) -> None:
        """Per-test set-up hook for subclasses."""

    def teardown_method(self, method: Callable[..., Any]) -> None:
        """Per-test tear-down hook for subclasses."""
