# ruff: noqa: UP008, E402 - written as URMA cases are (their style kept on purpose)
""" test_urma_tcp_echo

:Preparation
    python3 and curl on both hosts; this tree at the same path on both

:TestStep
    1. host2 serves HTTP on test_nic1, host1 fetches it; the server is left running
    2. echo_app server on host2, client on host1, 5 messages each way

:ExpectOutput
    1. HTTP 200
    2. both sides exit 0, every message echoed

"""

import logging
import os
import sys

local_path = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(local_path))
from public import UBUSFeature

log = logging.getLogger()


class Test(UBUSFeature):

    def setup_method(self, method):
        super(Test, self).setup_method(method)
        log.info('---------- [ Test setup ] ----------')

    def teardown_method(self, method):
        log.info('---------- [ Test teardown ] ----------')
        super(Test, self).teardown_method(method)

    def test_urma_tcp_http(self):
        self.run_http_test(self.host2, self.host1)

    def test_urma_tcp_echo(self):
        app = os.path.join(local_path, "echo_app.py")
        ret = self.echo_app_one_pair(self.host2, self.host1, app, opt="-n 5")
        self.assertEqual(ret, 0, "echo_app traffic test failed")
