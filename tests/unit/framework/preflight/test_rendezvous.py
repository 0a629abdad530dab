"""Preflight's rendezvous checks: the address is bound (addr), HCCL's ports are reserved (ports), node 0's
rendezvous port is reachable (rdzv: real listener and connects on this machine)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from framework.preflight.checks import FAIL, OK, SKIP, WARN, CheckResult, evaluate, parse_port_list
from framework.preflight.probe import plan_probe
from framework.preflight.rendezvous import Listening, connect_argv, listener_argv, parse_listener, verdicts
from tests.support.builders import make_env
from tests.unit.framework.test_preflight_plan import BASE, a2_sections, make_sample


def test_listener_and_connects_for_real():
    proc = subprocess.Popen(listener_argv(sys.executable, "127.0.0.1", None, range(1024, 1024)),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        got = parse_listener(proc.stdout.readline())
        assert isinstance(got, tuple) and got[0] == proc.pid
        port = got[1]
        ok = subprocess.run(connect_argv(sys.executable, "127.0.0.1", port), capture_output=True, text=True)
        assert ok.returncode == 0 and ok.stdout.strip() == "ok"
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()
    refused = subprocess.run(connect_argv(sys.executable, "127.0.0.1", port), capture_output=True, text=True)
    assert refused.returncode == 1 and refused.stdout.startswith("error ") and "refused" in refused.stdout.lower()
    # an address this machine does not have: the listener says why and exits
    out = subprocess.run(listener_argv(sys.executable, "192.0.2.123", None, range(0)), capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 1
    assert "assign requested address" in str(parse_listener(out.stdout.splitlines()[0]))


def test_verdicts_name_node0_and_the_target():
    hosts = ["h1", "h2", "h3"]
    got = verdicts(hosts, Listening("h1", "10.0.0.1", 29500), {"h1": "ok", "h2": "error timed out"})
    assert got["h1"] == CheckResult("h1", "rdzv", OK, "reached node 0's rendezvous 10.0.0.1:29500", "ok")
    assert got["h2"].status == FAIL and got["h2"].summary == ("cannot reach node 0's rendezvous 10.0.0.1:29500 (h1): "
                                                              "timed out")
    assert got["h3"].status == SKIP
    bad = verdicts(hosts, Listening("h1", "10.0.0.9", None, "[Errno 99] Cannot assign requested address"), {})
    assert all(r.status == FAIL and "node 0 (h1) cannot listen on 10.0.0.9 port any" in r.summary
               for r in bad.values())
    assert verdicts(["h2"], "node 0 (h1) is not among the hosts probed here", {})["h2"].status == SKIP


def test_the_rendezvous_address_must_be_bound():
    env = make_env(("n1",), npu={"soc": "ascend910b", "count": 8})
    spec = env.hosts["n1"]
    plan = plan_probe(spec, env)
    assert plan.rendezvous_ip == spec.manage_nic.ip and plan.rendezvous_nic == "manage_nic"
    line = f"2: eth0    inet {spec.manage_nic.ip}/24 scope global eth0"
    r = evaluate({"n1": plan}, {"n1": make_sample("n1", {**a2_sections(), "addr": line})}).get("n1", "addr")
    assert r.status == OK and r.summary == f"manage_nic.ip {spec.manage_nic.ip} is on eth0"
    r = evaluate({"n1": plan}, {"n1": make_sample("n1", {**a2_sections(), "addr": BASE["addr"].replace(
        spec.manage_nic.ip, "10.9.9.9")})}).get("n1", "addr")
    assert r.status == FAIL and "(the rendezvous and HCCL_IF_IP) is not bound on this host" in r.summary


def test_unreserved_hccl_ports_are_a_warning_on_npu_hosts():
    env = make_env(("n1",), npu={"soc": "ascend910b", "count": 8})
    plan = plan_probe(env.hosts["n1"], env)
    sec = {**a2_sections(), "addr": f"2: eth0    inet {env.hosts['n1'].manage_nic.ip}/24 scope global eth0"}
    for value, status in (("60000-60031", OK), ("59000-61000,7", OK), ("", WARN), ("60000-60015", WARN)):
        r = evaluate({"n1": plan}, {"n1": make_sample("n1", {**sec, "reserved_ports": value})}).get("n1", "ports")
        assert r.status == status, (value, r)
    assert "60016-60031 missing" in r.summary and "sysctl -w net.ipv4.ip_local_reserved_ports=60000-60031" in r.summary
    moved = make_env(("n1",), npu={"soc": "ascend910b", "count": 8}, launch={"env": {"HCCL_IF_BASE_PORT": 50000}})
    assert plan_probe(moved.hosts["n1"], moved).hccl_ports == (50000, 50031)
    assert parse_port_list("1-3, 7") == [1, 2, 3, 7]


@pytest.mark.parametrize(("line", "got"), [
    ("listen 4242 29500\n", (4242, 29500)),
    ("  listen 7 0  ", (7, 0)),
    ("listen 4242\n", "listen 4242"),
    ("listen 4242 29500 more\n", "listen 4242 29500 more"),
    ("listen -1 29500\n", "listen -1 29500"),
    ("error [Errno 98] Address already in use\n", "[Errno 98] Address already in use"),
    ("", "the listener ended without a word"),
])
def test_the_listeners_word_is_its_pid_and_port_or_the_reason(line, got):
    assert parse_listener(line) == got
