"""BaseTest: the URMA harness's class API on camit's machinery.

    class TestMine(BaseTest):
        def test_x(self):
            assert self.host1.check("hostname").ok
            for host in self.host_list: ...

``setup_class`` loads the env (the plugin's ``--env``, else ``$CAMIT_ENV``, else
/etc/ubus_ci/test_env.yaml), connects to every host (one error naming each host that
failed), attaches each host as ``self.<name>`` (names are validated identifiers, never
executed) and snapshots cores; ``teardown_class`` collects cores (policy fail by default),
closes the connections and fails the class when a core appeared. Per-test hooks are
``setup_method``/``teardown_method``: pytest >= 8.1 no longer calls nose-style
``setup()``/``teardown()``, and a subclass defining them gets a loud error instead of
silently skipped code. State lives on each subclass, never shared between them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from framework.errors import FrameworkError


class BaseTest:
    env: ClassVar[Any] = None
    cluster: ClassVar[Any] = None
    host_list: ClassVar[list[Any]] = []
    hosts: ClassVar[dict[str, Any]] = {}
    core_policy: ClassVar[str] = "fail"
    _core_watch: ClassVar[Any] = None  # a framework.cores.runwatch.ClusterWatch between setup and teardown
    _camit_session: ClassVar[Any] = None  # set by the plugin when it runs the class

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for legacy in ("setup", "teardown"):
            if legacy in cls.__dict__:
                raise TypeError(f"{cls.__name__}.{legacy}() is nose-style and pytest >= 8.1 never calls it; "
                                f"rename it to {legacy}_method(self, method)")

    @classmethod
    def _load_env(cls) -> Any:
        from framework.config import load, resolve_env_path

        session = cls._camit_session
        if session is not None and session.env is not None:
            return session.env
        return load(resolve_env_path()[0])

    @classmethod
    def setup_class(cls) -> None:
        from framework.hosts import Cluster

        cls.env = cls._load_env()
        cls.cluster = Cluster.from_env(cls.env)
        cls.cluster.connect().raise_on_failure()
        cls.host_list = list(cls.cluster)
        cls.hosts = dict(cls.cluster.hosts)
        for name, host in cls.hosts.items():
            setattr(cls, name, host)
        from framework.cores.runwatch import ClusterWatch

        cls._core_watch = ClusterWatch(cls.cluster, cls.env, policy=cls.core_policy, label=cls.__qualname__)
        cls._core_watch.begin()

    @classmethod
    def teardown_class(cls) -> None:
        message = ""
        try:
            if cls._core_watch is not None:
                rundir = cls._camit_session.ensure_rundir() if cls._camit_session is not None else None
                watched = cls._core_watch.end(rundir=rundir)
                message = watched.message if watched.failed else ""
        finally:
            if cls.cluster is not None:
                cls.cluster.close()
            for name in cls.hosts:
                if name in cls.__dict__:
                    delattr(cls, name)
        if message:
            raise FrameworkError(f"CHECK CORE FAILED: {message}")

    def setup_method(self, method: Any) -> None:
        """Per-test set-up hook for subclasses."""

    def teardown_method(self, method: Any) -> None:
        """Per-test tear-down hook for subclasses."""
