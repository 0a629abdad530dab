# ruff: noqa - written as a harness case is (IPoURMA style: shell commands only)
# -*- coding: utf-8 -*-
"""
* Description: a shell-only case: pty output, port lists split on \r\n, timeouts, transfers
"""
import logging
import os
import sys

import pytest

local_path = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(local_path))
from public import UBUSFeature
from common.constants import const

log = logging.getLogger()


class Test(UBUSFeature):

    @pytest.mark.timeout(77)
    def test_mini_shell(self):
        h1, h2 = self.host1, self.host2
        self.assertEqual(const.TMOUT, 77)
        self.assertEqual(const.CASE_NAME, "test_mini_shell")
        res = h1.exec_cmd("echo out; echo err >&2; printf '1\\n2\\n'")
        self.assertEqual(res.ret, 0)
        self.assertEqual(res.stdout.split("\r\n")[:4], ["out", "err", "1", "2"])
        ports = [p for p in h2.exec_cmd("printf '40001\\n40002\\n'").stdout.split("\r\n") if p.isdigit()]
        self.assertEqual(ports, ["40001", "40002"])
        src = os.path.join(local_path, "test.py")
        h1.put_file(src, h2, "/tmp/mini_put.py")
        self.assertEqual(h2.exec_cmd("cmp /tmp/mini_put.py " + src).ret, 0)
        h2.exec_cmd("rm -f /tmp/mini_put.py")
        bg = h1.exec_cmd("sleep 30", background=True)
        self.assertIn(bg.pid, h1.get_child_pid(bg.pid))
        bg.kill()
