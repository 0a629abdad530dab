# ruff: noqa - written as the URMA harness's app layer is (test_framework/app/<module>/<module>_app.py)
# -*- coding: utf-8 -*-
"""
* Description: the miniature's app layer: compile a case on every host, run it
"""
import logging
import os

from common.constants import const

log = logging.getLogger()
local_path = os.path.dirname(os.path.abspath(__file__))


def prepare_test_case(host_list, case_path):
    _cmd = f'cd {local_path};' \
           f'gcc mini_atom.c {case_path}/test_case.c -I {local_path} -o {case_path}/test_case'
    p_list = []
    for host in host_list:
        p_list.append(host.exec_cmd(_cmd, background=True))
    for p in p_list:
        p.wait()
        if p.ret != 0:
            log.error("gcc test_case failed!")
            raise RuntimeError("gcc test_case failed!")


def exec_test_case(host_list, case_path):
    for host in host_list:
        res = host.exec_cmd(f"{case_path}/test_case {host.manage_ip}")
        if res.ret != 0:
            raise RuntimeError(f"Test case failed with return code: {res.ret}")
        assert res.stdout.endswith("\r\n"), repr(res.stdout)
        assert f"case {const.CASE_NAME} on {host.manage_ip}: 35" in res.stdout, res.stdout
