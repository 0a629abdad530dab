"""The pipelined relay chain: controller -> host1 -> host2 -> ..., each host writing while it
forwards.

Design: docs/internals/deploy-ascend.md.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from framework import commands
from framework.commands import ShellScript
from framework.deploy.plan import RELAY_STREAM_CHUNK, Artifact, HostPlan, Probe, bin_sha, mb
from framework.errors import HostError
from framework.hosts import Cluster
from framework.remote import protocol
from framework.remote.layout import sh_sha_ok
from framework.transport.base import Process

#: seconds a listener has to print its port
LISTEN_TIMEOUT = 20


def relay_deadline(art: Artifact) -> float:
    """How long every relay of ``art`` may live: two minutes plus 2 MiB/s."""
    return 120 + art.size / (2 * 1024 * 1024)


def relay_argv(plan: HostPlan, relay_bin: str, art: Artifact, deadline: float, listen: bool) -> list[str]:
    a = [plan.python, relay_bin, "--out", plan.remote_path(art), "--sha256", art.sha256,
         "--size", str(art.size), "--deadline", f"{deadline:.0f}"]
    return a + (["--listen", plan.manage_ip] if listen else [])


def relay_command(plan: HostPlan, relay_bin: str, art: Artifact, deadline: float, listen: bool) -> ShellScript:
    """:func:`relay_argv`, run only when the relay program on the host hashes to the shipped one (a tampered
    one prints ``ERR`` and is never run: the chain falls back to direct pushes)."""
    sha = bin_sha(relay_bin)
    msg = commands.quote(f"{protocol.ERR} the relay program {relay_bin} does not match its sha256: not run")
    return ShellScript(f"{{ {sh_sha_ok(relay_bin, sha)} || {{ echo {msg}; exit 3; }}; }} && "
                       f"exec {commands.join(relay_argv(plan, relay_bin, art, deadline, listen))}")


def link_lines(links: Sequence[str], plans: Mapping[str, HostPlan], ports: Mapping[str, int],
               tokens: Mapping[str, str]) -> list[bytes]:
    """The ``NEXT`` line for each link of the chain (the last one: ``NEXT -``)."""
    out = []
    for i in range(len(links)):
        if i + 1 < len(links):
            n = links[i + 1]
            out.append(protocol.next_line(plans[n].manage_ip, ports[n], tokens[n]))
        else:
            out.append(protocol.next_line())
    return out


@dataclass
class RelayOutcome:
    """Which hosts got the artifact through the chain (and in how long), which did not, and why."""

    pending: list[str] = field(default_factory=list)
    received: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def judge(host: str, art: Artifact, output: str | None, lost: str | None, tail: str | None,
          outcome: RelayOutcome, seconds: float) -> None:
    """One relay's verdict from its output (None: it did not end by the deadline)."""
    ok, next_failed, err = protocol.relay_verdict(output or "", art.sha256)
    outcome.notes += [f"relay: {host}: {line}" for line in next_failed]
    if ok:
        outcome.received[host] = seconds
        return
    why = err or lost or (tail if output is not None else "timed out")
    outcome.notes.append(f"relay: {host} did not receive {art.name}: {why}")
    outcome.pending.append(host)


def _wait_and_judge(host: str, art: Artifact, proc: Process, deadline: float, outcome: RelayOutcome,
                    t0: float) -> None:
    """Wait up to ``deadline`` for ``host``'s relay (killed past it) and :func:`judge` it."""
    res = proc.wait(deadline)
    if res is None:
        proc.kill()
        judge(host, art, None, proc.lost, None, outcome, time.monotonic() - t0)
    else:
        judge(host, art, res.stdout, proc.lost, res.tail(3), outcome, time.monotonic() - t0)


def _ports(procs: dict[str, Process], outcome: RelayOutcome) -> dict[str, int]:
    """host → the port its started relay says it listens on; a relay that does not say is killed
    (and dropped from ``procs``)."""
    ports: dict[str, int] = {}
    for h in list(procs):
        line = procs[h].readline(timeout=LISTEN_TIMEOUT) or ""
        port = protocol.parse_port(line)
        if port is not None:
            ports[h] = port
        else:
            outcome.notes.append(f"relay: {h} did not listen: {line.strip() or 'no answer'}")
            procs.pop(h).kill()
    return ports


class RelayChain:
    """Runs artifacts through the relay chain of a cluster's hosts (one :meth:`send` per artifact)."""

    def __init__(self, cluster: Cluster, plans: Mapping[str, HostPlan], relay_script: Path,
                 relay_bin: Mapping[str, str], *, on_event: Callable[[str, str], None],
                 progress: Callable[[str, Artifact], Callable[[int, int], None]]) -> None:
        self.cluster = cluster
        self.plans = plans
        self.relay_script = relay_script
        self.relay_bin = relay_bin
        self.on_event = on_event
        self.progress = progress

    def ship(self, targets: Sequence[str], probes: Mapping[str, Probe], outcome: RelayOutcome) -> list[str]:
        """Put the relay program where it is missing (content-addressed: once per version); the hosts that have it."""
        ship = [h for h in targets if not probes[h].relay_ok]
        shipped = self.cluster.map(lambda host: host.put(self.relay_script, self.relay_bin[host.name]), ship)
        for h in ship:
            value = shipped[h]
            probes[h].relay_ok = not isinstance(value, BaseException)
            if isinstance(value, BaseException):
                outcome.notes.append(f"relay: cannot ship the relay program to {h}: {value}")
        return [h for h in targets if not isinstance(shipped.get(h), BaseException)]

    def send(self, art: Artifact, targets: list[str], probes: Mapping[str, Probe]) -> RelayOutcome:
        """Stream ``art`` through a chain of ``targets``; ``pending`` lists the hosts that still need a direct push."""
        outcome = RelayOutcome()
        chain = self.ship(targets, probes, outcome)
        if len(chain) < 2:
            outcome.pending = list(targets)
            return outcome
        procs: dict[str, Process] = {}
        try:
            links = self._run(art, chain, procs, outcome)
            if links is None:
                outcome.pending = list(targets)
            else:
                outcome.pending += [h for h in targets if h not in links]
        except HostError as exc:
            outcome.notes.append(f"relay failed ({exc}); falling back to direct push")
            for p in procs.values():
                p.kill()
            outcome.pending, outcome.received = list(targets), {}
        finally:
            for p in procs.values():
                p.close()
        return outcome

    def _run(self, art: Artifact, chain: list[str], procs: dict[str, Process],
             outcome: RelayOutcome) -> list[str] | None:
        deadline = relay_deadline(art)
        tokens = {h: secrets.token_hex(16) for h in chain}
        t0 = time.monotonic()
        ports = self._listen(art, chain[1:], deadline, procs, outcome)
        links = [chain[0]] + [h for h in chain[1:] if h in ports]
        if len(links) < 2:
            return None
        lines = link_lines(links, self.plans, ports, tokens)
        for i, h in enumerate(links[1:], 1):
            procs[h].write(lines[i] + protocol.token_line(tokens[h]))
            procs[h].close_stdin()
        self._stream(art, links, lines[0], deadline, procs)
        for h in links:
            _wait_and_judge(h, art, procs[h], deadline, outcome, t0)
        return links

    def _listen(self, art: Artifact, hosts: Sequence[str], deadline: float, procs: dict[str, Process],
                outcome: RelayOutcome) -> dict[str, int]:
        """Start a listening relay on each of ``hosts``; host → the port it listens on."""
        for h in hosts:
            try:
                procs[h] = self.cluster[h].spawn(relay_command(self.plans[h], self.relay_bin[h], art, deadline, True))
            except HostError as exc:
                outcome.notes.append(f"relay: cannot start the relay on {h}: {exc}")
        return _ports(procs, outcome)

    def _stream(self, art: Artifact, links: Sequence[str], first_line: bytes, deadline: float,
                procs: dict[str, Process]) -> None:
        """Start the head of the chain and feed it the artifact."""
        head = links[0]
        procs[head] = self.cluster[head].spawn(relay_command(self.plans[head], self.relay_bin[head], art, deadline,
                                                             False))
        self.on_event(head, f"relay {art.name} ({mb(art.size)}) through {' -> '.join(links)}")
        proc = procs[head]
        proc.write(first_line)
        progress = self.progress(head, art)
        sent = 0
        end = time.monotonic() + deadline
        with open(art.path, "rb") as fh:
            for block in iter(lambda: fh.read(RELAY_STREAM_CHUNK), b""):
                if time.monotonic() > end:
                    raise HostError(head, f"relay of {art.name} passed its deadline ({deadline:.0f} s) while sending")
                proc.write(block)
                sent += len(block)
                progress(sent, art.size)
        proc.close_stdin()
