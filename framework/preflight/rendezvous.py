"""Preflight's reachability check: is node 0's rendezvous port reachable from every node?"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from framework.ascend.nic import hccl_host_ports, rendezvous_ip
from framework.errors import HostError, reason_of
from framework.preflight.checks import FAIL, OK, SKIP, CheckResult

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster, Host
    from framework.transport.base import Process

log = logging.getLogger("camit.preflight")

CHECK = "rdzv"
#: the listener's own end, should camit never stop it
LISTEN_LIFE = 60.0
CONNECT_TIMEOUT = 5.0

_LISTENER = r"""
import os, socket, sys, time
addr, port, lo, hi, life = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
held = []
try:
    for _ in range(200):
        s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        s.bind((addr, port))
        got = s.getsockname()[1]
        if port or not lo <= got < hi:
            break
        held.append(s)
    s.listen(64)
except OSError as exc:
    print("error %s" % exc, flush=True)
    sys.exit(1)
for h in held:
    h.close()
print("listen %d %d" % (os.getpid(), got), flush=True)
s.settimeout(0.5)
end = time.monotonic() + life
while time.monotonic() < end:
    try:
        c, _ = s.accept()
        c.close()
    except OSError:
        pass
"""

_CONNECT = r"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as exc:
    print("error %s" % exc, flush=True)
    sys.exit(1)
print("ok", flush=True)
"""


def listener_argv(python: str, addr: str, port: int | None, avoid: range) -> list[str]:
    """argv of the listener: prints ``listen <pid> <port>`` once listening, or ``error <why>`` and exits 1."""
    return [python, "-c", _LISTENER, addr, str(port or 0), str(avoid.start), str(avoid.stop), f"{LISTEN_LIFE:g}"]


def connect_argv(python: str, addr: str, port: int) -> list[str]:
    """argv of one connect: prints ``ok``, or ``error <why>`` and exits 1."""
    return [python, "-c", _CONNECT, addr, str(port), f"{CONNECT_TIMEOUT:g}"]


@dataclass(frozen=True)
class Listening:
    """Node 0's listener: where it listens, or why it could not."""

    host: str
    addr: str
    port: int | None
    error: str | None = None

    def refusal(self) -> str:
        """Why node 0 has no listener, naming it, its address and port (``any``: none asked)."""
        port = self.port or "any"
        return f"node 0 ({self.host}) cannot listen on {self.addr} port {port}: {self.error}"

    @property
    def target(self) -> str:
        return f"{self.addr}:{self.port}" if ":" not in self.addr else f"[{self.addr}]:{self.port}"


def parse_listener(line: str) -> tuple[int, int] | str:
    """``listen <pid> <port>`` → (pid, port); anything else → the reason it gave."""
    m = _LISTENING.fullmatch(line)
    if m is not None:
        return int(m[1]), int(m[2])
    return line.strip().removeprefix("error ").strip() or "the listener ended without a word"


#: the listener's word once it listens: ``listen <pid> <port>``
_LISTENING = re.compile(r"\s*listen\s+([0-9]+)\s+([0-9]+)\s*")


def verdicts(hosts: Sequence[str], listening: Listening | str, answers: Mapping[str, str]) -> dict[str, CheckResult]:
    """One ``rdzv`` result per host: ``listening`` is node 0's listener (or why it did not run, a skip);
    ``answers`` each probed host's connect output (``ok`` or the error)."""
    return {host: _verdict(host, listening, answers.get(host)) for host in hosts}


def _verdict(host: str, listening: Listening | str, answer: str | None) -> CheckResult:
    """One host's ``rdzv`` result from node 0's listener and the host's answer (None: not probed)."""
    if isinstance(listening, str):
        return CheckResult(host, CHECK, SKIP, listening)
    if listening.error is not None:
        return CheckResult(host, CHECK, FAIL, listening.refusal(), "no listener")
    if answer is None:
        return CheckResult(host, CHECK, SKIP, "not run: host unreachable (see ssh)")
    if answer.strip() == "ok":
        return CheckResult(host, CHECK, OK, f"reached node 0's rendezvous {listening.target}", "ok")
    why = answer.strip().removeprefix("error ").strip()
    return CheckResult(host, CHECK, FAIL, f"cannot reach node 0's rendezvous {listening.target} "
                                          f"({listening.host}): {why}", "unreachable")


def _node0_absent(node0: str, hosts: list[str], probed: Sequence[str]) -> str | None:
    """Why the check cannot run without node 0 (not a host here, or its probe did not answer)."""
    if node0 not in hosts:
        return f"node 0 ({node0}) is not among the hosts probed here"
    if node0 not in probed:
        return f"node 0 ({node0}) is unreachable (see its ssh check)"
    return None


def check_reachability(env: EnvConfig, cluster: Cluster, probed: Sequence[str]) -> dict[str, CheckResult]:
    """Listen on node 0, connect from every host in ``probed`` (the hosts whose probe answered), stop the listener."""
    hosts = list(cluster.hosts)
    node0 = next(iter(env.hosts))
    absent = _node0_absent(node0, hosts, probed)
    if absent is not None:
        return verdicts(hosts, absent, {})
    listening, answers = _listen_and_connect(env, cluster, node0, [h for h in hosts if h in probed])
    return verdicts(hosts, listening, answers)


def _listen_and_connect(env: EnvConfig, cluster: Cluster, node0: str,
                        probed: list[str]) -> tuple[Listening, dict[str, str]]:
    """Node 0's listener (or why it could not listen) and each probed host's answer to
    connecting to it; the listener is stopped before this returns."""
    spec0 = env.hosts[node0]
    addr = rendezvous_ip(spec0, env.launch.rendezvous_nic)
    avoid = hccl_host_ports({k: str(v) for k, v in env.launch.env.items()})
    host0 = cluster[node0]
    try:
        proc = host0.spawn(listener_argv(spec0.python, addr, env.launch.master_port, avoid))
    except HostError as exc:
        return Listening(node0, addr, env.launch.master_port, f"cannot start it: {exc}"), {}
    pid = None
    try:
        got = parse_listener(proc.readline(timeout=30.0) or "")
        if isinstance(got, str):
            return Listening(node0, addr, env.launch.master_port, got), {}
        pid, port = got
        return Listening(node0, addr, port), _connect_all(env, cluster, probed, addr, port)
    finally:
        _stop_listener(host0, proc, pid)


def _connect_all(env: EnvConfig, cluster: Cluster, hosts: list[str], addr: str,
                 port: int) -> dict[str, str]:
    """Each host's answer to connecting to ``addr:port`` (``ok``, or the error)."""

    def one(host: Host) -> str:
        argv = connect_argv(env.hosts[host.name].python, addr, port)
        res = host.run(argv, timeout=CONNECT_TIMEOUT + 30)
        return (res.stdout.strip() or res.stderr.strip()[-300:]) or f"rc {res.rc}"

    answers = cluster.map(one, hosts)
    got = dict(answers.succeeded)
    for h, err in answers.failed.items():
        got[h] = f"error {reason_of(err, h)}"
    return got


def _stop_listener(host0: Host, proc: Process, pid: int | None) -> None:
    """Kill node 0's listener (it ends by itself after LISTEN_LIFE: do not wait that long)."""
    if pid is not None:
        host0.run(["kill", str(pid)], timeout=30)
    if proc.wait(10) is None:
        proc.kill()
        proc.wait(5)
    proc.close()
