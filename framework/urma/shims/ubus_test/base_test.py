"""``ubus_test.base_test.BaseTest`` (upstream ``test_framework/ubus_test/base_test.py``) on
camit's BaseTest, with nose-style ``setup()``/``teardown()``.

Design: docs/internals/urma.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from framework.base_test import BaseTest as _CamitBaseTest
from framework.errors import FrameworkError
from framework.urma.host import UBUSHost
from framework.urma.shims.common.utils import BaseObject
from framework.urma.tree import PREPARED

log = logging.getLogger("camit.urma")

#: upstream BaseTest methods camit does the work of itself
NOT_PROVIDED = {
    "parse_host": "setup_class connects the env file's hosts",
    "get_core_list": "camit's core watch snapshots cores in setup_class",
    "check_core_list": "camit's core watch checks cores at teardown_class (core_policy)",
    "rename_core": "camit collects cores into the run folder",
}


def _unprovided(name: str) -> Callable[..., Any]:
    def method(self: object, *args: Any, **kwargs: Any) -> Any:
        raise FrameworkError(
            f"URMA's ubus_test.base_test.BaseTest.{name} is not provided by camit: "
            f"{NOT_PROVIDED[name]}"
        )

    method.__name__ = name
    return method


class BaseTest(_CamitBaseTest, BaseObject):  # the assertions are the same functions
    host_class = UBUSHost
    calls_nose_hooks = True
    test_base_flag: ClassVar[dict[str, bool]] = {"check_core": True}
    core_list_setup: ClassVar[list[str]] = []
    used_ports: ClassVar[set[int] | None] = None
    free_port: ClassVar[int] = 40000

    @classmethod
    def setup_class(cls) -> None:
        """camit's set-up, then the harness tree (and umdk ``src``) at the same path on every
        host."""
        super().setup_class()
        from framework.urma.harness import harness_root
        from framework.urma.shims.common.constants import const

        root = harness_root(Path(const.CASE_PATH)) if const.CASE_PATH else None
        if root is not None:
            resources = cls._camit_resources
            rundir = resources.ctx.rundir if resources is not None else None
            skip = (
                [rundir.path.resolve().parent] if rundir is not None else []
            )  # camit's run folders
            PREPARED.ensure([h.host for h in cls.host_list], root, skip)

    @classmethod
    def teardown_class(cls) -> None:
        own = cls._own_stack is not None  # no plugin env: the class's own cluster closes now
        try:
            if own:
                PREPARED.remove_all()
        finally:
            super().teardown_class()

    def setup_method(self, method: Callable[..., Any]) -> None:
        self.setup()

    def teardown_method(self, method: Callable[..., Any]) -> None:
        self.teardown()

    def setup(self, *args: Any) -> None:
        log.info("---------- [ BaseTest setup ] ----------")

    def teardown(self, *args: Any) -> None:
        log.info("---------- [ BaseTest teardown ] ----------")

    parse_host = _unprovided("parse_host")
    get_core_list = _unprovided("get_core_list")
    check_core_list = _unprovided("check_core_list")
    rename_core = _unprovided("rename_core")
