"""``common.constants.const`` (upstream ``test_framework/common/constants.py``) without
reading a file at import.

Design: docs/internals/urma.md.
"""

from __future__ import annotations

import logging
from typing import Any

import yaml

from framework.config.envfile import resolve_env_path

log = logging.getLogger("camit.urma")


class Const:
    """Upstream's mutable constants object; ``CONF_INFO`` loads lazily."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__ and self.__dict__[name] != value:
            log.debug("const.%s=%r", name, value)
        self.__dict__[name] = value

    def __getattr__(self, name: str) -> Any:
        if name == "CONF_INFO":
            with open(self.CONF_FILE, encoding="utf-8") as fh:
                self.__dict__["CONF_INFO"] = info = yaml.safe_load(fh)
            return info
        if name == "CONF_FILE":
            return resolve_env_path()[0]
        raise AttributeError(f"common.constants.const has no {name!r}")


const = Const()
const.TMOUT = 300
const.CASE_PATH = ""
const.CASE_DIR = ""
const.CASE_NAME = ""
const.CORE_PATH = "/Images/core/"
const.CASE_LOG_PATH = "/Images/case_log"
const.IP_VERSION = ["ip", "ipv6"]
const.URMA_MODE = ["RM", "RC", "UM"]
const.TP_KIND = ["TP", "CTP"]
const.GCC_INCLUDE_PATH_URPC = "/usr/include/ub/umdk/urpc"
const.URPC_LIB_LOG_PATH = "/var/log/umdk/urpc"
const.UMQ_MODE = ["UB_PLUS", "UB"]
const.FLAG_LOCK_FREE = 0
