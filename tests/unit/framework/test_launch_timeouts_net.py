"""Launch timeouts (their order and the load warning), the rendezvous NIC, the master port, the port-clash retry."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from framework.ascend.nic import HostNet, hccl_host_ports, rendezvous_ip
from framework.ascend.timeouts import CONNECT_MIN, MIN_CASE, PG_TIMEOUT_VAR, derive, order_problems
from framework.config import load
from framework.errors import ConfigError
from framework.launch import fetch
from framework.launch.plan import Prepared, free_port_argv, plan_nodes
from framework.remote.layout import HostLayout
from tests.support.builders import make_env

STANDIN = Path(__file__).resolve().parents[3] / "standin_npu"


@pytest.mark.parametrize("case", [MIN_CASE, 150, 300, 600, 1800, 7200])
def test_derived_timeouts_keep_hccls_order_below_the_case_timeout(case):
    t = derive(case)
    assert t.connect == CONNECT_MIN < t.exec < t.pg < case and t.note is None
    assert case - t.pg >= 10  # camit's kill comes last, with room for the watchdog's report
    assert t.env() == {"HCCL_CONNECT_TIMEOUT": str(t.connect), "HCCL_EXEC_TIMEOUT": str(t.exec),
                       PG_TIMEOUT_VAR: str(t.pg)}
    assert order_problems(t.env(), case) == []


def test_a_short_case_timeout_keeps_exec_below_the_watchdog_and_says_why_connect_cannot_follow():
    t = derive(60)
    assert 0 < t.exec < t.pg < 60 and t.connect == CONNECT_MIN
    assert t.note and "too short" in t.note and f"{MIN_CASE:g}s" in t.note


def test_the_derived_timeouts_give_no_torch_npu_watchdog_warning_and_the_old_ones_did(tmp_path):
    """The stand-in mirrors torch_npu's rule (ProcessGroupHCCL.cpp): an explicit watchdog timeout not above the
    exec timeout warns that the plog may not be recorded. camit's derived values must not trigger it."""
    pytest.importorskip("torch")
    body = textwrap.dedent("""\
        import datetime, os, sys, warnings
        from torch_npu.distributed import Timeouts
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Timeouts(datetime.timedelta(seconds=float(sys.argv[1])), teardown=True)
        print([str(w.message) for w in caught])
    """)
    script = tmp_path / "t.py"
    script.write_text(body)

    def warned(pg: str, **env: str) -> str:
        base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(STANDIN), "HOME": str(tmp_path),
                "ASCEND_PROCESS_LOG_PATH": str(tmp_path / "log"), "CAMIT_EMU_NPU_COUNT": "2"}
        out = subprocess.run([sys.executable, str(script), pg], env={**base, **env}, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    t = derive(600)
    assert warned(str(t.pg), **{k: v for k, v in t.env().items() if k.startswith("HCCL_")}).strip() == "[]"
    # before: the case timeout as process-group timeout, HCCL's exec timeout at its 1836 s default
    assert "The plog may not be recorded" in warned("600")


def test_order_problems_name_the_key_path():
    assert order_problems({}) == []
    [msg] = order_problems({"HCCL_EXEC_TIMEOUT": "8"})
    assert msg.startswith("launch.env.HCCL_EXEC_TIMEOUT:") and "HCCL_CONNECT_TIMEOUT (120s)" in msg
    [msg] = order_problems({"HCCL_EXEC_TIMEOUT": "900"}, 600)
    assert "CAMIT_PG_TIMEOUT (540s)" in msg
    [msg] = order_problems({PG_TIMEOUT_VAR: "700"}, 600, where="launch env")
    assert msg.startswith(f"launch env.{PG_TIMEOUT_VAR}:") and "case timeout (600s)" in msg
    [msg] = order_problems({"HCCL_EXEC_TIMEOUT": "0"})
    assert "0 means never" in msg
    [msg] = order_problems({"HCCL_CONNECT_TIMEOUT": "soon"})
    assert "'soon' is not a number of seconds" in msg
    assert order_problems({"HCCL_EXEC_TIMEOUT": "300"}) == []


def _write_env(tmp_path: Path, launch: str, nic1: str = "") -> Path:
    path = tmp_path / "env.yaml"
    hosts = "".join(f"""
  node{i}:
    manage_nic: {{name: eth0, ip: 192.0.2.1{i}}}{nic1.format(i=i)}""" for i in (1, 2))
    path.write_text(f"host_info:{hosts}\nlaunch:\n{textwrap.indent(launch, '  ')}\n")
    return path


def test_a_launch_env_that_breaks_the_order_is_a_warning_at_load(tmp_path, caplog):
    path = _write_env(tmp_path, "backend: hccl\nenv:\n  HCCL_CONNECT_TIMEOUT: 600\n  HCCL_EXEC_TIMEOUT: 300\n")
    with caplog.at_level(logging.WARNING, logger="camit.config"):
        env = load(path)
    [warning] = env.warnings
    assert warning.startswith(f"{path}: launch.env.HCCL_EXEC_TIMEOUT:") and "must be below" in warning
    assert warning in caplog.text
    assert load(_write_env(tmp_path, "backend: hccl\nenv:\n  HCCL_EXEC_TIMEOUT: 300\n")).warnings == ()


def test_rendezvous_nic_is_validated_and_needs_the_nic_on_every_host(tmp_path):
    env = load(_write_env(tmp_path, "backend: hccl\n"))
    assert env.launch.rendezvous_nic == "manage_nic"
    with pytest.raises(ConfigError, match=r"launch\.rendezvous_nic.*(manage_nic|test_nic1)"):
        load(_write_env(tmp_path, "rendezvous_nic: eth7\n"))
    with pytest.raises(ConfigError, match=r"host_info\.node1\.test_nic1: launch.rendezvous_nic is test_nic1, but "
                                          r"host 'node1' has no test_nic1.ip"):
        load(_write_env(tmp_path, "rendezvous_nic: test_nic1\n"))
    env = load(_write_env(tmp_path, "rendezvous_nic: test_nic1\n",
                          "\n    test_nic1: {{name: bonding_dev_0, ip: 198.51.100.1{i}}}"))
    assert env.launch.rendezvous_nic == "test_nic1"
    assert [rendezvous_ip(h, "test_nic1") for h in env.hosts.values()] == ["198.51.100.11", "198.51.100.12"]


def test_a_master_port_among_hccls_host_ports_is_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match=r"launch\.master_port: 60010 is one of HCCL's host ports \(60000-60031"):
        load(_write_env(tmp_path, "backend: hccl\nmaster_port: 60010\n"))
    with pytest.raises(ConfigError, match=r"50005 is one of HCCL's host ports \(50000-50031"):
        load(_write_env(tmp_path, "backend: hccl\nmaster_port: 50005\nenv: {HCCL_IF_BASE_PORT: 50000}\n"))
    assert load(_write_env(tmp_path, "backend: hccl\nmaster_port: 29500\n")).launch.master_port == 29500


def test_hccl_host_ports():
    assert hccl_host_ports({}) == range(60000, 60032)
    assert hccl_host_ports({"HCCL_IF_BASE_PORT": "50000"}) == range(50000, 50032)


def test_the_free_port_is_never_one_of_hccls():
    """Real sockets: with half of the kernel's ephemeral range avoided, the port printed is in the other half."""
    lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    avoid = range(lo, (lo + hi) // 2)
    for _ in range(3):
        out = subprocess.run(free_port_argv(sys.executable, "127.0.0.1", avoid), capture_output=True, text=True,
                             check=True).stdout
        assert int(out) not in avoid and int(out) > 0
    # every port avoided: after its bounded tries it prints nothing rather than one of them
    assert subprocess.run(free_port_argv(sys.executable, "127.0.0.1", range(1, 65536)), capture_output=True,
                          text=True, check=True).stdout == ""


def test_plan_nodes_use_the_rendezvous_nic_and_the_derived_timeouts(tmp_path):
    env = make_env(("node1", "node2"), npu={"soc": "ascend910_93", "count": 16}, launch={"backend": "hccl"},
                   cann={"set_env": "/usr/local/Ascend/cann/set_env.sh"})
    names = list(env.hosts)
    nets = {n: HostNet(frozenset({"lo", "eth0"}), {env.hosts[n].manage_nic.ip: "eth0"}) for n in names}
    prepared = {n: Prepared(HostLayout.of(env.hosts[n]), "s", "r", net=nets[n]) for n in names}
    plans = plan_nodes(env, names, prepared, nproc=2, backend="hccl", master_port=29500, launch_id="x",
                       extra_env={}, timeout=600, core_limit=None)
    p0, p1 = plans.values()
    assert p0.master_addr == p1.master_addr == env.hosts[names[0]].manage_nic.ip
    assert p1.env["HCCL_IF_IP"] == env.hosts[names[1]].manage_nic.ip
    timeouts = (p1.env["HCCL_CONNECT_TIMEOUT"], p1.env["HCCL_EXEC_TIMEOUT"], p1.env[PG_TIMEOUT_VAR])
    assert timeouts == ("120", "400", "540")
    assert "HCCL_BUFFSIZE" not in p1.env
    plans = plan_nodes(env, names, prepared, nproc=2, backend="hccl", master_port=29500, launch_id="x",
                       extra_env={"HCCL_BUFFSIZE": "4096"}, timeout=600, core_limit=None)
    assert plans[names[1]].env["HCCL_BUFFSIZE"] == "4096"


@pytest.mark.parametrize(("where", "text", "taken"), [
    ("torchrun.log", "RuntimeError: The server socket has failed to listen on any local network address. "
                     "[errno 98] Address already in use", True),
    ("rank0.log", "RuntimeError: EI0019: Failed to bind the socket", True),
    ("ascend/debug/plog/plog-1_2.log", "[ERROR] HCCL(1,python):... listen on ip[10.0.0.1] and specific "
                                       "port[60000] fail", True),
    ("rank0.log", "AssertionError: output differs", False),
])
def test_port_clashes_of_torchrun_and_hccl_are_retried(tmp_path, where, text, taken):
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    assert fetch.port_taken(tmp_path) is taken
