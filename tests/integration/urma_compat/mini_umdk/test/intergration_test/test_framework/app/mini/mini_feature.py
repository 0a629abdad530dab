# ruff: noqa - written as the URMA harness's app layer is (app/urma/urma_test.py)
# -*- coding: utf-8 -*-
"""
* Description: the miniature's feature class (inherits the harness's BaseTest, as URMAFeature)
"""
import logging

from common.constants import const
from ubus_test.base_test import BaseTest

log = logging.getLogger()


class MiniFeature(BaseTest):
    @classmethod
    def setup_class(cls):
        super(MiniFeature, cls).setup_class()

    def setup(self):
        super(MiniFeature, self).setup()
        self.collectors = [h.exec_cmd("sleep 600", background=True) for h in self.host_list]
        for p in self.collectors:
            assert p.ret is None, "ret must not block while the command runs"
            assert p.pid is not None and p.pid > 0, "pid is set when exec_cmd returns"

    def teardown(self):
        for p in self.collectors:
            p.kill()
        super(MiniFeature, self).teardown()
