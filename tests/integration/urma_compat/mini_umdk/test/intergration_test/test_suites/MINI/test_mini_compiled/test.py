# ruff: noqa - written as a harness case is (test_suites/<SUITE>/<case>/test.py)
# -*- coding: utf-8 -*-
"""
* Description: a compiled case: the app layer compiles test_case.c against the src tree on every host
"""
import logging
import os

from app.mini.mini_app import prepare_test_case, exec_test_case
from public import UBUSFeature

local_path = os.path.dirname(os.path.abspath(__file__))
log = logging.getLogger()


class Test(UBUSFeature):

    def setup(self):
        super(Test, self).setup()
        prepare_test_case(self.host_list, local_path)

    def teardown(self):
        super(Test, self).teardown()

    def test_mini_compiled(self):
        exec_test_case(self.host_list, local_path)
