"""What URMA cases call on BaseTest and its hosts, on hosts reached by ``LocalTransport`` (real processes on
this machine, each in its own session): exec_cmd results, background commands and their deadlines,
process-group kills, get_free_port, the env-file attributes and URMA's assertion semantics."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from typing import Any

import pytest

from framework.base_test import BackgroundCmd, BaseTest, ExecResult, UrmaHost
from framework.config.effective import HostSpec, NicSpec, TestNicSpec
from framework.errors import HostUnreachable
from framework.hosts import Host
from framework.transport.local import LocalTransport, group_alive


def host(name: str = "host1", ip: str = "192.0.2.11", *, timeout: float = 30, **spec: Any) -> UrmaHost:
    hs = HostSpec(name=name, manage_nic=NicSpec("enp1s0", ip, "52:54:00:12:34:56"), **spec)
    return UrmaHost(Host(name, LocalTransport(name), spec=hs, command_timeout=timeout))


# -- env-file attributes -----------------------------------------------------------------------------------
def test_env_file_attributes_by_urma_names():
    h = host(test_nic1=TestNicSpec(name="bonding_dev_0", dev="udma0", ip="198.51.100.11"), isolcpu="1-3,8",
             ssh_port=2222, arch="aarch64")
    assert (h.name, h.manage_ip, h.ssh_ip, h.ssh_port, h.manage_nic_dev, h.manage_mac) == \
        ("host1", "192.0.2.11", "192.0.2.11", 2222, "enp1s0", "52:54:00:12:34:56")
    assert h.manage_nic == {"name": "enp1s0", "ip": "192.0.2.11", "mac": "52:54:00:12:34:56"}
    assert (h.test_nic1, h.test_nic1_dev, h.test_nic1_ip, h.test_nic1_eid) == \
        ("bonding_dev_0", "udma0", "198.51.100.11", None)
    assert h.test_nic == {1: {"name": "bonding_dev_0", "dev": "udma0", "ip": "198.51.100.11"}}
    assert h.isolcpu == [1, 2, 3, 8] and h.arch == "aarch64"
    with pytest.raises(AttributeError, match="host1: no test_nic2 in the env file, so no test_nic2_ip"):
        _ = h.test_nic2_ip
    assert h.spec.name == "host1"  # everything else is the Host's
    bare = UrmaHost(Host("adhoc", LocalTransport("adhoc")))
    with pytest.raises(AttributeError, match="adhoc: manage_ip comes from the env file, and this host has none"):
        _ = bare.manage_ip


# -- exec_cmd ----------------------------------------------------------------------------------------------
def test_exec_cmd_returns_ret_stdout_stderr():
    res = host().exec_cmd("echo out; echo err >&2; exit 3")
    assert isinstance(res, ExecResult)
    assert (res.ret, res.return_code, res.stdout, res.stderr, res.ok) == (3, 3, "out\n", "err\n", False)
    assert host().exec_cmd("echo a | tr a b && echo $((1+2))").stdout == "b\n3\n"  # shell text, as in URMA


def test_exec_cmd_quotes_argv_and_env_in_the_one_place():
    h = host()
    assert h.exec_cmd(["printf", "%s", "a b;$(echo pwned)"]).stdout == "a b;$(echo pwned)"
    assert h.exec_cmd('printf %s "$X"', env={"X": "1 `id` $(id)"}).stdout == "1 `id` $(id)"


def test_exec_cmd_timeout_kills_the_process_group(tmp_path):
    pidfile = tmp_path / "child"
    start = time.monotonic()
    res = host().exec_cmd(f"sleep 60 & echo $! > {pidfile}; wait", timeout=1)
    assert time.monotonic() - start < 10
    assert res.ret is None and res.timed_out
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_exec_cmd_exp_ret_and_log_path(tmp_path):
    h = host()
    log = tmp_path / "case.log"
    h.exec_cmd("echo one", log_path=str(log), exp_ret=0)
    h.exec_cmd("echo two >&2", log_path=str(log))
    assert log.read_text() == "one\ntwo\n"
    with pytest.raises(AssertionError, match=r"host1: exit 4 \(4 != 0\)"):
        h.exec_cmd("exit 4", exp_ret=0)


def test_exec_cmd_on_an_unreachable_host_raises_naming_it():
    spec = HostSpec(name="host9", manage_nic=NicSpec("eth0", "192.0.2.99"))
    h = UrmaHost(Host("host9", LocalTransport("host9"), spec=spec))
    h.host.broken = HostUnreachable("host9", "no route")  # as Host.connect leaves a host it could not reach
    with pytest.raises(HostUnreachable, match="host9"):
        h.exec_cmd("true")


# -- background commands -----------------------------------------------------------------------------------
def test_background_expect_stdin_wait_ret():
    h = host()
    p = h.exec_cmd("echo ready; read x; echo got $x; echo oops >&2; exit 7", background=True, port=4242)
    assert isinstance(p, BackgroundCmd) and p.process_is_running and p.port == 4242
    assert p.expect("ready", msg="hello\n", timeout=10) == 0
    assert p.wait(10) is p
    assert (p.ret, p.stdout, p.stderr, p.need_kill, p.process_is_finished) == \
        (7, "ready\ngot hello\n", "oops\n", 0, True)
    assert p.match_keyword("got") == 1
    assert h.exec_cmd("exit 0", background=True).expect("never", timeout=5) == -1  # ended first


def test_background_stdout_is_live():
    p = host().exec_cmd("echo first; sleep 30", background=True)
    deadline = time.monotonic() + 10
    while "first" not in p.stdout and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.stdout == "first\n" and p.process_is_running
    p.kill()
    assert p.process_is_finished and p.ret is None and p.killed


def test_background_wait_timeout_kills_its_process_group():
    p = host().exec_cmd("sleep 60 & sleep 60; wait", background=True)
    pgid = p.pid
    assert pgid is not None and group_alive(pgid)
    start = time.monotonic()
    p.wait(1)
    assert time.monotonic() - start < 10
    assert p.timed_out and p.ret is None and not group_alive(pgid)


def test_background_command_is_killed_at_its_deadline_even_unwatched():
    p = host().exec_cmd("sleep 60", background=True, timeout=1)
    deadline = time.monotonic() + 10
    while p.process_is_running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.process_is_finished and p.timed_out
    assert p.ret is None  # never blocks on a finished command


def test_ret_of_a_running_command_waits_bounded_by_its_deadline():
    p = host().exec_cmd("sleep 60", background=True, timeout=1)
    start = time.monotonic()
    assert p.ret is None
    assert time.monotonic() - start < 10


def test_kill_background_ends_only_what_the_host_started(tmp_path):
    h = host()
    ours = h.exec_cmd("sleep 60", background=True)
    done = h.exec_cmd("true", background=True).wait(10)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # not started through this host
    try:
        pgid = ours.pid
        assert pgid is not None and group_alive(pgid)
        h.kill_background()
        assert not group_alive(pgid) and ours.need_kill == 0 and done.ret == 0
        assert other.poll() is None
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait()


# -- get_free_port -----------------------------------------------------------------------------------------
def _ephemeral() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
        lo, hi = (int(x) for x in fh.read().split())
    return lo, hi


def test_get_free_port_skips_bound_and_ephemeral_ports_and_never_repeats():
    h = host("porthost", "192.0.2.50")
    first = h.get_free_port()
    lo, hi = _ephemeral()
    listener = socket.socket()  # the next candidate above ``first`` is taken by a listener on this machine
    for candidate in range(first + 1, 65536):
        if lo <= candidate <= hi:
            continue
        try:
            listener.bind(("0.0.0.0", candidate))
            break
        except OSError:
            continue
    listener.listen()
    try:
        second = h.get_free_port()
        assert second not in (first, candidate)
        assert second > candidate or second < first
    finally:
        listener.close()
    for port in (first, second):
        assert 10000 <= port < 65536 and not lo <= port <= hi


def test_class_get_free_port_is_free_on_every_host_and_distinct():
    class TestTwo(BaseTest):
        pass

    TestTwo.host_list = [host("pa", "192.0.2.61"), host("pb", "192.0.2.62")]
    ports = {TestTwo.get_free_port() for _ in range(3)}
    assert len(ports) == 3
    assert not ports & {TestTwo.host_list[0].get_free_port()}


# -- URMA's assertions -------------------------------------------------------------------------------------
def test_assertions_have_urmas_semantics():
    t = BaseTest()
    t.assertEqual("0", 0)  # a number given as a string compares as that number
    t.assertEqual(" 3\n", 3.0)
    t.assertNotEqual("abc", "abd")
    t.assertGreater("10", 9)
    t.assertGreaterEqual(2, "2")
    t.assertLess(1, "1.5")
    t.assertLessEqual("1", 1)
    t.assertIn("sender", "[ ID] ... sender\n")
    t.assertIn(1, ["1"])  # str(a) in str(b), as URMA's
    t.assertNotIn("error", "all good")
    t.assertTrue(True)
    t.assertFalse(False)
    BaseTest.assertEqual(1, 1)  # also on the class (URMA's teardown_class calls cls().assertEqual)


@pytest.mark.parametrize(("call", "message"), [
    (lambda t: t.assertEqual(1, "2", "ret mismatch"), r"^ret mismatch \(1 != '2'\)$"),
    (lambda t: t.assertEqual("x", 0), r"^'x' != 0$"),
    (lambda t: t.assertIn("sender", "receiver only", msg="incomplete"),
     r"^incomplete \('sender' not in 'receiver only'\)$"),
    (lambda t: t.assertNotIn("error", "an error"), r"^'error' in 'an error'$"),
    (lambda t: t.assertTrue(1), r"^1 is not True$"),  # URMA's assertTrue is `flag is True`
    (lambda t: t.assertFalse(0), r"^0 is not False$"),
    (lambda t: t.assertGreater(1, 2), r"^1 <= 2$"),
    (lambda t: t.assertLessEqual(3, "2"), r"^3 > '2'$"),
])
def test_assertion_failures_show_msg_and_values(call, message):
    with pytest.raises(AssertionError, match=message):
        call(BaseTest())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


# -- which URMA env files load (the README's statement) ----------------------------------------------------
def test_the_urma_ut_sample_fails_on_passed_and_its_x_placeholders_in_one_run(tmp_path):
    """URMA_UT's shipped test_env.yaml: ``passed:`` is refused on both hosts and, in the same run, its
    four ``x.x.x.x`` (manage_nic.ip, test_nic1.ip of each host) are not IPv4; its ``xxx`` names and
    ``xxxx:…`` eids are accepted, so with passwd and addresses it loads."""
    from pathlib import Path

    from framework.config import load
    from framework.errors import FrameworkError

    sample = (Path(__file__).parents[2] / "data" / "envs" / "bad" / "urma_sample_passed.yaml").read_text()
    env = tmp_path / "test_env.yaml"

    def errors(text: str) -> list[str]:
        env.write_text(text)
        with pytest.raises(FrameworkError) as exc:
            load(env)
        return [line.split(": ", 1)[1] for line in str(exc.value).splitlines()]

    placeholders = {h: [f"host_info.{h}.{k}.ip: 'x.x.x.x' is not an IPv4 address" for k in ("manage_nic", "test_nic1")]
                    for h in ("host1", "host2")}
    assert errors(sample) == [line for h in ("host1", "host2")
                              for line in [f"host_info.{h}: unknown key 'passed' (did you mean 'passwd'?)",
                                           *placeholders[h]]]
    fixed = sample.replace("passed:", "passwd:")
    assert errors(fixed) == [f"host_info.{h}.{k}.ip: 'x.x.x.x' is not an IPv4 address"
                             for h in ("host1", "host2") for k in ("manage_nic", "test_nic1")]
    n = iter(range(1, 5))
    loaded = load(_write(env, "\n".join(line.replace("x.x.x.x", f"192.0.2.{next(n)}") if "x.x.x.x" in line else line
                                        for line in fixed.splitlines())))
    nics = [h.test_nic1 for h in loaded.hosts.values()]
    assert [n.eid if n else None for n in nics] == ["xxxx:xxxx:xxxx:xxxx:xxxx:xxxx:xxxx:xxxx"] * 2


def _write(path, text):
    path.write_text(text + "\n")
    return path
