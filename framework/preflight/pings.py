"""A2 preflight: one device-NIC ping per node pair and direction
(``hccn_tool -i <dev> -ping -g address <ip>``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from framework import commands
from framework.ascend import parse as ascend
from framework.preflight.checks import FAIL, OK, WARN, CheckResult, Report, Sample
from framework.preflight.probe import MARK, ProbePlan, Section, split_sections

if TYPE_CHECKING:  # pragma: no cover
    from framework.hosts import Cluster, Host

A2 = "ascend910b"


@dataclass(frozen=True)
class Ping:
    """One ping to send: from ``host``'s ``device`` to ``peer``'s ``peer_device`` at ``address``."""

    host: str
    device: int
    peer: str
    peer_device: int
    address: str

    @property
    def section(self) -> str:
        return f"ping:{self.peer}"


def first_device(plan: ProbePlan) -> int:
    return plan.visible[0] if plan.visible else 0


def _device_ip(plan: ProbePlan, sections: Mapping[str, Section]) -> str | None:
    """The IP of the host's first device, as the probe's ``hccn_tool -ip -g`` read it (None: none)."""
    s = sections.get(f"hccn:{first_device(plan)}:ip")
    ips = ascend.parse_ip(s.text) if s is not None else []
    return ips[0].ip if ips and ips[0].ip else None


def plan_pings(plans: Mapping[str, ProbePlan], sections: Mapping[str, Mapping[str, Section]]) -> dict[str, list[Ping]]:
    """host → the pings it sends: A2 nodes only, two or more of them, peers whose device IP the probe read."""
    a2 = _pinging(plans, sections)
    if len(a2) < 2:
        return {}
    address = _device_ips(a2, plans, sections)
    return {h: _pings_from(h, plans, address) for h in a2}


def _pinging(plans: Mapping[str, ProbePlan],
             sections: Mapping[str, Mapping[str, Section]]) -> list[str]:
    """The nodes that ping their peers (:func:`_pings`) and whose probe answered."""
    return [h for h, p in plans.items() if _pings(p) and h in sections]


def _device_ips(hosts: Sequence[str], plans: Mapping[str, ProbePlan],
                sections: Mapping[str, Mapping[str, Section]]) -> dict[str, str]:
    """host → its first device's IP, for the ``hosts`` whose probe read one."""
    found = {h: _device_ip(plans[h], sections[h]) for h in hosts}
    return {h: ip for h, ip in found.items() if ip}


def _pings_from(host: str, plans: Mapping[str, ProbePlan], address: Mapping[str, str]) -> list[Ping]:
    """The pings ``host`` sends: one to each other node whose device IP is known."""
    return [Ping(host, first_device(plans[host]), p, first_device(plans[p]), ip)
            for p, ip in address.items() if p != host]


def _pings(plan: ProbePlan) -> bool:
    """The node pings its peers' devices: an A2 node with devices."""
    return plan.soc == A2 and plan.npu_count > 0


def ping_script(pings: Sequence[Ping]) -> commands.ShellScript:
    """sh running the pings one after another (hccn_tool answers "busy" to parallel calls), in tagged sections."""
    q = commands.quote
    lines = ["HCCN=$(command -v hccn_tool 2>/dev/null); "
             "[ -n \"$HCCN\" ] || HCCN=/usr/local/Ascend/driver/tools/hccn_tool"]
    for p in pings:
        lines.append(f"echo {MARK} begin {q(p.section)}; \"$HCCN\" -i {p.device} -ping -g address {q(p.address)} 2>&1; "
                     f"printf '\\n{MARK} end %s %s\\n' {q(p.section)} \"$?\"")
    return commands.ShellScript("\n".join(lines) + "\n")


def verdict(pings: Sequence[Ping], sections: Mapping[str, Section] | BaseException) -> tuple[list[str], list[str]]:
    """(problems, notes) of one node's pings."""
    if isinstance(sections, BaseException):
        return [f"device ping round failed: {sections}"], []
    problems, notes = [], []
    for p in pings:
        what = f"ping dev {p.device} -> {p.peer} dev {p.peer_device} {p.address}"
        problem = _ping_problem(sections.get(p.section))
        if problem:
            problems.append(f"{what}: {problem}")
        else:
            notes.append(f"{what} ok")
    return problems, notes


def _ping_problem(section: Section | None) -> str | None:
    """What went wrong with one ping (its section of the round's output), None: it was answered."""
    text = "" if section is None else section.text
    results = ascend.parse_ping(text)
    if not results:
        return f"no answer ({text.strip() or 'no output'})"
    r = results[-1]
    return None if r.ok else f"{r.received} of {r.transmitted} replies ({r.loss_pct:g}% loss)"


def apply(report: Report, pings: Mapping[str, Sequence[Ping]],
          answers: Mapping[str, Mapping[str, Section] | BaseException]) -> None:
    """Fold each node's ping verdict into its ``hccn`` column (a lost ping fails it; an ok one is noted)."""
    for host, mine in pings.items():
        key = (host, "hccn")
        current = report.results.get(key)
        if current is None or not mine or host not in answers:
            continue
        report.results[key] = _with_pings(current, *verdict(mine, answers[host]))


def _with_pings(current: CheckResult, problems: list[str], notes: list[str]) -> CheckResult:
    """A host's ``hccn`` result with its pings' verdict: a lost ping fails it, an ok one is noted."""
    if problems:
        before = f"; {current.summary}" if current.status != OK else ""
        return dataclasses.replace(current, status=FAIL, summary="; ".join(problems) + before,
                                   value="ping lost")
    if current.status in (OK, WARN):
        return dataclasses.replace(current, summary=f"{current.summary}; " + "; ".join(notes))
    return current


def run(cluster: Cluster, plans: Mapping[str, ProbePlan], samples: Mapping[str, Sample | BaseException],
        report: Report, timeout: float = 120.0) -> None:
    """The second round: send each A2 node's pings (one script per node, in parallel) and judge them."""
    pings = plan_pings(plans, _sections(samples))
    targets = [h for h, mine in pings.items() if mine]
    if not targets:
        return

    def send(host: Host) -> Mapping[str, Section]:
        res = host.run(ping_script(pings[host.name]), timeout=timeout)
        return split_sections(res.stdout)

    answers = dict(cluster.map(send, targets).items())
    apply(report, pings, answers)


def _sections(samples: Mapping[str, Sample | BaseException]) -> dict[str, Mapping[str, Section]]:
    """The probe sections of each host whose probe answered."""
    return {h: s.sections for h, s in samples.items() if isinstance(s, Sample)}
