# ruff: noqa: UP009, UP008, G004 - written as URMA suites are (their style kept on purpose)
# -*- coding: utf-8 -*-
"""
* Description: tcp public (a URMA-style suite: only the BaseTest import and the per-test hook names differ)
"""

import logging

from framework.base_test import BaseTest

logging.basicConfig(level=logging.INFO)
log = logging.getLogger()


class UBUSFeature(BaseTest):

    def setup_method(self, method):
        log.info('---------- [ UBUSFeature setup ] ----------')
        super(UBUSFeature, self).setup_method(method)

    def teardown_method(self, method):
        log.info('---------- [ UBUSFeature teardown ] ----------')
        super(UBUSFeature, self).teardown_method(method)

    def run_http_test(self, server, client):
        server_ip = server.test_nic1_ip
        port = self.get_free_port()

        srv_cmd = f"python3 -u -m http.server {port} --bind {server_ip}"
        p = server.exec_cmd(srv_cmd, background=True)
        self.assertEqual(p.expect("Serving HTTP", timeout=20), 0,
                         f"http server did not start: {p.stdout} {p.stderr}")

        full_cmd = f"curl -s -o /dev/null -w '%{{http_code}}' http://{server_ip}:{port}/"
        log.info(f"Starting http test: {full_cmd}")
        ret = client.exec_cmd(full_cmd)

        self.assertEqual(ret.ret, 0,
            f"curl process exited with non-zero code: {ret.ret}. Stderr: {ret.stderr}")
        self.assertIn("200", ret.stdout,
            f"http test incomplete: '200' not found in output. Stdout: {ret.stdout}")
        self.assertNotIn("refused", ret.stdout.lower(),
            f"server refused the connection on {server_ip}.")

    def echo_app_one_pair(self, server, client, app, timeout=60, **kwargs):
        """
        :param server: echo_app server side
        :param client: echo_app client side
        :param opt: additional parameters configured for both server and client
        """
        opt = kwargs.get("opt", "")
        expect_failed = kwargs.get("expect_failed", False)

        _cmd = f"python3 {app} {opt} -P {self.get_free_port()}"
        s_cmd = f"{_cmd} -d {server.test_nic1_dev} -B {server.test_nic1_ip}"
        c_cmd = f"{_cmd} -d {client.test_nic1_dev} -S {server.test_nic1_ip}"

        p1 = server.exec_cmd(s_cmd, background=True)
        # the message names no p1.ret: an argument is evaluated before the call, and ret waits for the end
        self.assertEqual(p1.expect("listening", timeout=20), 0,
                         f"server did not start: {p1.stdout} {p1.stderr}")
        p2 = client.exec_cmd(c_cmd, background=True)
        p1.wait(timeout)
        p2.wait(timeout)
        log.info("Verifying echo_app results")
        perf_ret = 0
        if p1.ret != 0 or p2.ret != 0:
            perf_ret = -1
        if not expect_failed:
            self.assertEqual(perf_ret, 0, f"ERROR: echo failed! server (ret {p1.ret}): {p1.stdout} {p1.stderr} client (ret {p2.ret}): "
                             f"{p2.stdout} {p2.stderr}")
        self.assertEqual(p1.match_keyword("echoed"), p2.match_keyword("echo ok"))
        return perf_ret
