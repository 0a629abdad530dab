"""Preflight's executor: one probe script per host through the cluster's pool, timed for the clock
check."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from framework.preflight import pings
from framework.preflight.checks import CHECKS, CheckResult, Report, Sample, evaluate
from framework.preflight.probe import MARK, Limits, ProbePlan, plan_probe, probe_script, split_sections
from framework.preflight.rendezvous import check_reachability

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster, Host
    from framework.transport.base import Process

#: the public API: the executor, plus the pure types a caller of it handles (defined in
#: framework.preflight.probe and .checks)
__all__ = ["CHECKS", "CheckResult", "Limits", "Preflight", "Report", "run_probe"]

log = logging.getLogger("camit.preflight")


# --------------------------------------------------------------------------- executor


def run_probe(host: Host, plan: ProbePlan, limits: Limits | None = None) -> Sample:
    """Connect (host key verified by the transport), run the probe once, time the clock exchange.

    The script waits for one line on stdin before reading its clock, so ``sent``/``received``
    bracket only that reading, not the SSH and shell start-up. Past ``probe_timeout`` the
    script's process group is killed and the sections printed so far are kept.
    """
    limits = limits or Limits()
    host.connect()
    deadline = time.monotonic() + limits.probe_timeout
    proc = host.spawn(probe_script(plan))
    lines: list[str] = []
    clock = _ClockExchange()
    try:
        while (line := proc.readline(timeout=max(0.0, deadline - time.monotonic()))) != "":
            if line is None:  # past the deadline
                proc.kill()
                break
            if line == f"{MARK} ready\n":
                clock.release(proc)
                continue
            clock.arrived(lines)
            lines.append(line)
        result = proc.wait(max(1.0, deadline - time.monotonic()) + 5.0)
    finally:
        proc.close()
    return Sample(host.name, split_sections("".join(lines)), clock.sent, clock.received, result)


@dataclass
class _ClockExchange:
    """The probe's clock reading, bracketed on the controller's clock: ``sent`` when the script was
    released, ``received`` when the line after its ``t0`` section mark arrived."""

    sent: float = 0.0
    mono: float = 0.0
    received: float | None = None

    def release(self, proc: Process) -> None:
        """Let the waiting script read its clock (one line on stdin), noting when."""
        self.sent, self.mono = time.time(), time.monotonic()
        proc.write(b"go\n")
        proc.close_stdin()

    def arrived(self, lines: list[str]) -> None:
        """A line came after ``lines``: the first after the ``t0`` mark is the host's clock."""
        if self.received is None and lines and lines[-1] == f"{MARK} begin t0\n":
            self.received = self.sent + (time.monotonic() - self.mono)


class Preflight:
    """Probe every host of ``cluster`` once (bounded pool) and judge the answers."""

    def __init__(self, env: EnvConfig, cluster: Cluster, limits: Limits | None = None) -> None:
        self.env = env
        self.cluster = cluster
        self.limits = limits or Limits()

    def plans(self) -> dict[str, ProbePlan]:
        return {h.name: plan_probe(self.env.hosts[h.name], self.env, self.limits) for h in self.cluster}

    def samples(self, plans: Mapping[str, ProbePlan] | None = None) -> Mapping[str, Sample | BaseException]:
        plans = plans or self.plans()
        return self.cluster.map(lambda h: run_probe(h, plans[h.name], self.limits))

    def run(self) -> Report:
        start = time.monotonic()
        plans = self.plans()
        samples = self.samples(plans)
        probed = [h for h, s in samples.items() if isinstance(s, Sample)]
        report = evaluate(plans, samples, self.limits, cross=check_reachability(self.env, self.cluster, probed))
        pings.run(self.cluster, plans, samples, report)  # A2: a device-NIC ping per node pair
        report.duration = time.monotonic() - start
        log.info("preflight of %d hosts took %.2fs", len(plans), report.duration)
        return report
