"""Preflight verdicts: every host's probe sections judged into one host × check report (pure, no
I/O)."""

from __future__ import annotations

import itertools
import posixpath
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from framework.ascend import parse as ascend
from framework.ascend.nic import parse_addrs
from framework.ascend.tools import NPU_CORE_LIMIT
from framework.cores.caps import core_findings, sections_text
from framework.cores.pattern import CorePattern, parse_core_pattern
from framework.errors import EXIT_FAILED, EXIT_INFRA, EXIT_OK, reason_of
from framework.preflight.probe import CANN_RECORD, Limits, ProbePlan, Section
from framework.result import Result

#: every check, in table order; test ids read ``test_check[<host>-<check>]``
CHECKS = ("ssh", "python", "torch", "torch_npu", "cann", "driver", "npu", "idle", "hccn", "tls", "spod",
          "disk", "clock", "core", "addr", "ports", "rdzv")
#: checks that only make sense with NPUs (skipped on CPU hosts)
NPU_CHECKS = frozenset({"torch_npu", "cann", "driver", "npu", "idle", "hccn", "tls", "spod", "ports"})
#: checks judged across hosts after the probe (framework.preflight.rendezvous), not from one host's sections
CROSS_CHECKS = ("rdzv",)
OK, WARN, SKIP, FAIL, ERROR = "ok", "warn", "skip", "fail", "error"


# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class Sample:
    """One host's probe: its sections, and the controller's clock (epoch seconds) around the host's ``t0``.

    ``sent`` is when the controller released the waiting script, ``received`` when the ``t0`` line
    arrived: the host read its clock in between.
    """

    host: str
    sections: Mapping[str, Section]
    sent: float
    received: float | None
    result: Result | None = field(default=None, compare=False)

    @property
    def timed_out(self) -> bool:
        return bool(self.result is not None and self.result.timed_out)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CheckResult:
    """One cell of the host × check table. ``value`` is short and compared across hosts."""

    host: str
    check: str
    status: str
    summary: str
    value: str | None = None
    details: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status in (OK, WARN, SKIP)


@dataclass(frozen=True)
class ClockSkew:
    """Offsets of host clocks from the controller's (NTP-style, ± half the round-trip delay)."""

    offsets: Mapping[str, float]
    uncertainty: Mapping[str, float]
    max_pairwise: float
    pair: tuple[str, str] | None


@dataclass
class Report:
    """Every check of every host, in host order, plus the clock summary."""

    hosts: list[str]
    results: dict[tuple[str, str], CheckResult]
    clock: ClockSkew | None = None
    duration: float = 0.0
    checks: tuple[str, ...] = CHECKS

    def get(self, host: str, check: str) -> CheckResult:
        return self.results[(host, check)]

    def of_host(self, host: str) -> list[CheckResult]:
        return [self.results[(host, c)] for c in self.checks if (host, c) in self.results]

    @property
    def problems(self) -> list[CheckResult]:
        return [r for r in self.results.values() if r.status in (FAIL, ERROR, WARN)]

    def host_faults(self) -> dict[str, tuple[str, str]]:
        """The hosts that failed (a FAIL or ERROR check), each with its first failing check: what
        makes a host suspect (framework.suspects)."""
        out: dict[str, tuple[str, str]] = {}
        for r in self.problems:
            if not r.passed and r.host not in out:
                out[r.host] = ("preflight", f"{r.check}: {r.status}: {r.summary}")
        return out

    @property
    def exit_code(self) -> int:
        statuses = {r.status for r in self.results.values()}
        if ERROR in statuses:
            return EXIT_INFRA
        return EXIT_FAILED if FAIL in statuses else EXIT_OK

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def table(self, width: int = 14) -> tuple[list[str], list[list[str]]]:
        """Headers and rows of the host × check table: status word and the value cut to ``width``."""
        rows = [[host, *(self._cell(host, c, width) for c in self.checks)] for host in self.hosts]
        return ["host", *self.checks], rows

    def _cell(self, host: str, check: str, width: int) -> str:
        """One cell: the status word and the value cut to ``width`` (``-``: no result)."""
        r = self.results.get((host, check))
        if r is None:
            return "-"
        return f"{_status_word(r.status, check)} {_cut(_table_value(r), width)}".strip()

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "duration": round(self.duration, 3),
            "hosts": self.hosts,
            "checks": list(self.checks),
            "results": [asdict(r) for r in self.results.values()],
            "clock": None if self.clock is None else _clock_json(self.clock),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Report:
        results = {}
        for r in data["results"]:
            res = CheckResult(**{**r, "details": tuple(r.get("details", ()))})
            results[(res.host, res.check)] = res
        clock = data.get("clock")
        return cls(
            hosts=list(data["hosts"]), results=results, duration=data.get("duration", 0.0),
            checks=tuple(data.get("checks", CHECKS)),
            clock=None if clock is None else ClockSkew(clock["offsets"], clock["uncertainty"], clock["max_pairwise"],
                                                       tuple(clock["pair"]) if clock["pair"] else None),
        )


def _table_value(r: CheckResult) -> str:
    """What the table shows of a result's value: nothing for a skip or for the ssh check."""
    if r.status == SKIP or r.check == "ssh":
        return ""
    return r.value or ""


def _cut(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the cut marked with an ellipsis."""
    return text if len(text) <= width else text[:width - 1] + "…"


def _status_word(status: str, check: str) -> str:
    """A status as the table shows it: an unreachable host's ssh says so; failures in capitals."""
    if status == ERROR:
        return "UNREACHABLE" if check == "ssh" else "ERROR"
    return "FAIL" if status == FAIL else status


def _clock_json(clock: ClockSkew) -> dict[str, Any]:
    return {
        "offsets": {h: round(v, 6) for h, v in clock.offsets.items()},
        "uncertainty": {h: round(v, 6) for h, v in clock.uncertainty.items()},
        "max_pairwise": round(clock.max_pairwise, 6),
        "pair": list(clock.pair) if clock.pair else None,
    }


# --------------------------------------------------------------------------- verdicts (pure)


def _rdzv(cross: Mapping[str, CheckResult] | None, host: str) -> CheckResult:
    """The host's rendezvous result, or a skip when the cross-host check did not run for it."""
    found = cross.get(host) if cross is not None else None
    return found if found is not None else CheckResult(host, "rdzv", SKIP, "not run")


def evaluate(plans: Mapping[str, ProbePlan], samples: Mapping[str, Sample | BaseException],
             limits: Limits | None = None, cross: Mapping[str, CheckResult] | None = None) -> Report:
    """Turn every host's probe (or its connection error) into the full host × check report.

    ``cross``: host → its ``rdzv`` result (framework.preflight.rendezvous); not run without it.
    """
    limits = limits or Limits()
    hosts = list(plans)
    results: dict[tuple[str, str], CheckResult] = {}
    for host in hosts:
        results.update(_host_results(plans[host], samples.get(host), limits, cross))
    for check, key in _COMPARED:
        _consistency(results, hosts, check, key)
    clock = clock_skew(_answered(samples))
    _judge_clocks(results, hosts, clock or _NOT_TIMED, limits)
    return Report(hosts, results, clock)


#: the clock summary when no host's clock exchange was timed
_NOT_TIMED = ClockSkew({}, {}, 0.0, None)


def _answered(samples: Mapping[str, Sample | BaseException]) -> dict[str, Sample]:
    """The samples of the hosts whose probe answered."""
    return {h: s for h, s in samples.items() if isinstance(s, Sample)}


def _judge_clocks(results: dict[tuple[str, str], CheckResult], hosts: Sequence[str],
                  clock: ClockSkew, limits: Limits) -> None:
    """Each host whose clock was read, judged against the controller's and the other hosts'."""
    for host in hosts:
        if results[(host, "clock")].status == OK:
            results[(host, "clock")] = _clock_verdict(results[(host, "clock")], clock, limits)


def _host_results(plan: ProbePlan, sample: Sample | BaseException | None, limits: Limits,
                  cross: Mapping[str, CheckResult] | None) -> dict[tuple[str, str], CheckResult]:
    """One host's row: its own checks, and its rendezvous result when its probe answered."""
    out = {(plan.host, r.check): r for r in _host_checks(plan, sample, limits)}
    if isinstance(sample, Sample):
        out[(plan.host, "rdzv")] = _rdzv(cross, plan.host)
    return out


def _host_checks(plan: ProbePlan, sample: Sample | BaseException | None, limits: Limits) -> list[CheckResult]:
    if not isinstance(sample, Sample):
        return _unreachable(plan.host, sample)
    late = f" (probe timed out after {limits.probe_timeout:g}s)" if sample.timed_out else ""
    # (the cross-host checks are added by evaluate)
    checks = [_run_check(plan, check, fn, sample.sections, limits, late)
              for check, fn in _CHECK_FNS.items()]
    return [_check_ssh(plan, sample.sections), *checks]


def _unreachable(host: str, error: BaseException | None) -> list[CheckResult]:
    """A host whose probe did not answer: its ssh check says why, every other check is skipped."""
    why = reason_of(error, host) if error is not None else "not probed"
    out = [CheckResult(host, "ssh", ERROR, why)]
    skipped = "not run: host unreachable (see ssh)"
    return out + [CheckResult(host, c, SKIP, skipped) for c in CHECKS[1:]]


def _run_check(plan: ProbePlan, check: str, fn: _CheckFn, sec: Mapping[str, Section],
               limits: Limits, late: str) -> CheckResult:
    """One check of one host: skipped without NPUs when it needs them, failed when its section
    is missing."""
    if check in NPU_CHECKS and not plan.npu:
        return CheckResult(plan.host, check, SKIP, f"npu.soc is {plan.soc}: no NPU on this host")
    try:
        return fn(plan, sec, limits)
    except _Missing as exc:
        return CheckResult(plan.host, check, FAIL, f"no output from {exc}{late}")


_CheckFn = Callable[[ProbePlan, Mapping[str, Section], Limits], CheckResult]


class _Missing(Exception):
    """A section the check needs is absent (the probe died or timed out before it)."""


def _need(sec: Mapping[str, Section], name: str) -> Section:
    s = sec.get(name)
    if s is None or s.rc is None:
        raise _Missing(name)
    return s


def _check_ssh(plan: ProbePlan, sec: Mapping[str, Section]) -> CheckResult:
    ident = sec.get("id")
    who = "@".join(ident.text.split()[:2]) if ident and ident.rc == 0 else "?"
    if plan.host_key == "insecure":
        return CheckResult(plan.host, "ssh", WARN, f"reached {who}; host key NOT verified (host_key_policy insecure)",
                           "insecure")
    return CheckResult(plan.host, "ssh", OK, f"reached {who}; host key verified ({plan.host_key})", who)


def _versions(sec: Mapping[str, Section]) -> dict[str, str]:
    s = _need(sec, "python")
    out = {}
    for line in s.text.splitlines():
        key, _, value = line.partition(" ")
        out[key] = value.strip()
    return out


def _check_python(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    v = _versions(sec)
    interp = v.get("interpreter", "?")
    if "python" not in v:
        tail = _need(sec, "python").text.strip().splitlines()[-1:] or ["no output"]
        return CheckResult(plan.host, "python", FAIL, f"{interp} does not run: {tail[0]}")
    where = "deploy venv" if interp == plan.venv_python else "no deploy venv yet"
    return CheckResult(plan.host, "python", OK, f"Python {v['python']} ({interp}, {where})", v["python"])


def _check_package(name: str) -> Callable[[ProbePlan, Mapping[str, Section], Limits], CheckResult]:
    """A check that ``name`` is installed for the host's interpreter (its distribution metadata)."""

    def check(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
        v = _versions(sec)
        version = v.get(name, "-")
        if "python" not in v:
            return CheckResult(plan.host, name, FAIL, "interpreter does not run (see python)")
        if version == "-":
            return CheckResult(plan.host, name, FAIL, f"{name} is not installed for {v.get('interpreter', '?')}")
        return CheckResult(plan.host, name, OK, f"{name} {version}", version)

    return check


def _files(sec: Mapping[str, Section], suffix: str) -> list[Section]:
    return [s for n, s in sec.items() if n.startswith("file:") and n.endswith(suffix) and s.rc == 0]


#: a CANN install the probe found: (path, version, layout)
_Install = tuple[str, str, "str | None"]


def _cann_installs(sec: Mapping[str, Section]) -> list[_Install]:
    """Every CANN install the probe found, as (path, version, layout)."""
    return _toolkit_records(sec) + _version_cfgs(sec)


def _toolkit_records(sec: Mapping[str, Section]) -> list[_Install]:
    """The installs an ``ascend_toolkit_install.info`` record names."""
    found: list[_Install] = []
    for s in _files(sec, CANN_RECORD):
        rec = ascend.parse_toolkit_install_info(s.text)
        if rec is not None:
            found.append((s.name[5:], rec.version, rec.layout or ascend.cann_layout(s.name[5:])))
    return found


def _version_cfgs(sec: Mapping[str, Section]) -> list[_Install]:
    """The installs a ``version.cfg`` names (the toolkit's other version record)."""
    found: list[_Install] = []
    for s in _files(sec, "/version.cfg"):
        version = ascend.cann_version_from_cfg(ascend.parse_version_cfg(s.text))
        if version:
            found.append((s.name[5:], version, ascend.cann_layout(s.name[5:])))
    return found


def _set_env_missing(plan: ProbePlan, sec: Mapping[str, Section]) -> bool:
    """The env's ``cann.set_env`` was probed and is not on this host."""
    env_sec = sec.get("set_env")
    return bool(plan.cann_set_env) and env_sec is not None and env_sec.rc != 0


def _check_cann(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    found = _cann_installs(sec)
    problems: list[str] = []
    if _set_env_missing(plan, sec):
        problems.append(f"cann.set_env {plan.cann_set_env} does not exist on this host")
    if not found:
        return CheckResult(plan.host, "cann", FAIL, "; ".join(problems + [
            "no CANN version record (looked in " + ", ".join(plan.cann_homes) + ")"]))
    return _cann_verdict(plan.host, _chosen_install(plan, found), found, problems)


def _cann_verdict(host: str, chosen: _Install, found: list[_Install],
                  problems: list[str]) -> CheckResult:
    """The chosen install, failed by a problem, warned about when other versions are there too."""
    path, version, layout = chosen
    details = tuple(f"{v} in {p}" for p, v, _ in found)
    summary = f"CANN {version}, {layout or 'unknown'} layout ({path})"
    if problems:
        why = "; ".join(problems) + f"; found {summary}"
        return CheckResult(host, "cann", FAIL, why, version, details)
    others = _other_versions(found, version)
    if others:
        summary += "; other installs: " + ", ".join(others)
        return CheckResult(host, "cann", WARN, summary, version, details)
    return CheckResult(host, "cann", OK, summary, version, details)


def _other_versions(found: list[_Install], version: str) -> list[str]:
    """The installs of a version other than ``version``: ``<version> (<path>)``, sorted."""
    return sorted({f"{v} ({p})" for p, v, _ in found if v != version})


def _chosen_install(plan: ProbePlan, found: list[_Install]) -> _Install:
    """The install ``cann.set_env`` lives in, else the first one found."""
    if not plan.cann_set_env:
        return found[0]
    home = posixpath.dirname(plan.cann_set_env) + "/"
    return next((f for f in found if f[0].startswith(home)), found[0])


def _check_driver(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    drv = next(iter(_files(sec, "/driver/version.info")), None)
    if drv is None:
        return CheckResult(plan.host, "driver", FAIL, "no driver version.info (driver not installed?)")
    dv = ascend.driver_version(drv.text) or "?"
    fv = _firmware_version(sec)
    if not fv:
        return CheckResult(plan.host, "driver", OK, f"driver {dv}, firmware unknown", dv)
    return CheckResult(plan.host, "driver", OK, f"driver {dv}, firmware {fv}", f"{dv} fw {fv}")


def _firmware_version(sec: Mapping[str, Section]) -> str | None:
    """The firmware's version.info version, None without one."""
    fw = next(iter(_files(sec, "/firmware/version.info")), None)
    return ascend.driver_version(fw.text) if fw else None


def _npu_info(plan: ProbePlan, sec: Mapping[str, Section]) -> ascend.NpuSmiInfo | str:
    path = sec.get("npu-smi.path")
    if path is not None and not path.text.strip():
        return f"npu-smi not found (npu.soc is {plan.soc}: is the driver installed?)"
    s = _need(sec, "npu-smi")
    if s.rc != 0:
        return f"npu-smi info failed (rc {s.rc}): {s.tail()}"
    return ascend.parse_npu_smi_info(s.text)


def _check_npu(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    info = _npu_info(plan, sec)
    if isinstance(info, str):
        return CheckResult(plan.host, "npu", FAIL, info)
    n, platform = len(info.chips), info.platform
    shape = f"{platform}, {n} chips on {len(info.npus)} NPUs ({'/'.join(info.names)}), npu-smi {info.version}"
    problems = _npu_problems(plan, info)
    value = f"{platform} {n}x{info.names[0] if info.names else '?'}"
    if problems:
        return CheckResult(plan.host, "npu", FAIL, "; ".join(problems) + f" [{shape}]", value)
    if not plan.npu_count:
        return CheckResult(plan.host, "npu", WARN, f"{shape}; env declares no npu.count", value)
    return CheckResult(plan.host, "npu", OK, shape + ", all OK", value)


def _npu_problems(plan: ProbePlan, info: ascend.NpuSmiInfo) -> list[str]:
    """Where the host's NPUs differ from the env (count, SoC) or are not healthy."""
    return list(filter(None, (judge(plan, info) for judge in _NPU_JUDGES)))


def _count_problem(plan: ProbePlan, info: ascend.NpuSmiInfo) -> str | None:
    """The chips npu-smi lists are not the env's ``npu.count`` (when it declares one)."""
    n = len(info.chips)
    if not plan.npu_count or n == plan.npu_count:
        return None
    return f"{n} chips, env npu.count says {plan.npu_count}"


def _soc_problem(plan: ProbePlan, info: ascend.NpuSmiInfo) -> str | None:
    """The host's platform is not the env's ``npu.soc`` (when that names an NPU SoC)."""
    want = ascend.SOC_OF_PLATFORM[info.platform]
    if plan.soc not in ascend.SOC_OF_PLATFORM.values() or plan.soc == want:
        return None
    return f"this is an {info.platform} host ({want}), env npu.soc says {plan.soc}"


def _health_problem(plan: ProbePlan, info: ascend.NpuSmiInfo) -> str | None:
    """The chips npu-smi says are not healthy."""
    bad = [f"NPU {c.npu} chip {c.chip}: {c.health}" for c in info.unhealthy]
    return "not healthy: " + ", ".join(bad) if bad else None


#: what fails the npu check, in the order its summary names the problems
_NPU_JUDGES: tuple[Callable[[ProbePlan, ascend.NpuSmiInfo], str | None], ...] = (
    _count_problem, _soc_problem, _health_problem)


def _logical_ids(info: ascend.NpuSmiInfo, sec: Mapping[str, Section]) -> dict[tuple[int, int], int]:
    """Each (NPU, chip)'s logical id: from ``npu-smi info -m`` where the probe has it, else from the table."""
    logical = {(c.npu, c.chip): info.logical_id(c) for c in info.chips}
    m = sec.get("npu-smi-m")
    if m is not None and m.rc == 0:
        logical.update(_mapped_ids(m.text))
    return logical


def _mapped_ids(text: str) -> dict[tuple[int, int], int]:
    """Each (NPU, chip)'s logical id as ``npu-smi info -m`` maps it (rows without one left out)."""
    rows = ascend.parse_npu_smi_mapping(text)
    return {(r.npu, r.chip): r.logic_id for r in rows if r.logic_id is not None}


def _busy_processes(procs: Sequence[ascend.NpuProcess]) -> str:
    """The first 8 processes holding NPUs, and how many more."""
    shown = ", ".join(f"NPU {p.npu} chip {p.chip} pid {p.pid}{' ' + p.name if p.name else ''}"
                      f" ({p.memory_mb} MB)" for p in procs[:8])
    more = f" and {len(procs) - 8} more" if len(procs) > 8 else ""
    return shown + more


def _processes_in_scope(plan: ProbePlan, info: ascend.NpuSmiInfo,
                       sec: Mapping[str, Section]) -> list[ascend.NpuProcess]:
    """The processes on the devices the env uses (its visible ones, else every NPU)."""
    if plan.visible is None:
        return list(info.processes)
    logical = _logical_ids(info, sec)
    return [p for p in info.processes if logical.get((p.npu, p.chip)) in plan.visible]


def _check_idle(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    info = _npu_info(plan, sec)
    if isinstance(info, str):
        return CheckResult(plan.host, "idle", FAIL, info)
    if not info.has_process_table:
        return CheckResult(plan.host, "idle", FAIL, "npu-smi printed no process table: cannot judge idleness")
    procs = _processes_in_scope(plan, info, sec)
    if procs:
        return CheckResult(plan.host, "idle", FAIL, f"busy: {_busy_processes(procs)}", f"{len(procs)} procs")
    scope = "visible devices" if plan.visible is not None else "all NPUs"
    return CheckResult(plan.host, "idle", OK, f"no processes on {scope} (judged by the process table)", "idle")


def _hccn_unusable(plan: ProbePlan, sec: Mapping[str, Section], check: str, missing: str) -> CheckResult | None:
    """The verdict of an hccn_tool check on a host without hccn_tool or without declared devices, else None."""
    path = sec.get("hccn.path")
    if path is not None and path.rc != 0:
        return CheckResult(plan.host, check, FAIL, missing)
    if plan.npu_count <= 0:
        return CheckResult(plan.host, check, SKIP, "env declares no npu.count: no devices to query")
    return None


def _check_hccn(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    unusable = _hccn_unusable(plan, sec, "hccn", "hccn_tool not found (/usr/local/Ascend/driver/tools/hccn_tool)")
    if unusable:
        return unusable
    problems, notes = _hccn_findings(plan, sec)
    queries = "/".join(q for q in plan.hccn_queries if q != "tls")
    if problems:
        return CheckResult(plan.host, "hccn", FAIL, "; ".join(problems + notes), f"{len(problems)} bad")
    if notes:
        return CheckResult(plan.host, "hccn", WARN, "; ".join(notes) + " (A3: -link may read DOWN while HCCS works)",
                           "link?")
    return CheckResult(plan.host, "hccn", OK, f"{plan.npu_count} devices: {queries} fine", "up")


def _hccn_findings(plan: ProbePlan, sec: Mapping[str, Section]) -> tuple[list[str], list[str]]:
    """(problems, notes) of every device's judged hccn_tool answers."""
    problems: list[str] = []
    notes: list[str] = []
    for dev, query in _hccn_asked(plan):
        text = _need(sec, f"hccn:{dev}:{query}").text.strip()
        if _busy(text):
            problems.append(f"dev {dev} {query}: {_BUSY_NOTE}")
        elif problem := _HCCN_JUDGES[query](dev, text):
            (notes if _only_noted(plan, query) else problems).append(problem)
    return problems, notes


def _hccn_asked(plan: ProbePlan) -> list[tuple[int, str]]:
    """(device, query) of every judged hccn_tool answer, device by device."""
    judged = [q for q in plan.hccn_queries if q in _HCCN_JUDGES]
    return list(itertools.product(range(plan.npu_count), judged))


def _only_noted(plan: ProbePlan, query: str) -> bool:
    """A3: -link may read DOWN while HCCS works: a note, not a failure."""
    return plan.soc == "ascend910_93" and query == "link"


def _hccn_link(dev: int, text: str) -> str | None:
    state = ascend.parse_link(text)
    return None if state == "UP" else f"dev {dev} link {state or text or 'no answer'}"


def _hccn_net_health(dev: int, text: str) -> str | None:
    states = ascend.parse_net_health(text)
    if states == ["Success"]:
        return None
    return f"dev {dev} net health {states[0] if states else text or 'no answer'}"


def _hccn_ip(dev: int, text: str) -> str | None:
    ips = ascend.parse_ip(text)
    return None if ips and ips[0].configured else f"dev {dev} has no IP ({text or 'no answer'})"


#: the per-device hccn_tool queries judged by the hccn check (tls has its own check); others are shown only
_HCCN_JUDGES: dict[str, Callable[[int, str], str | None]] = {
    "link": _hccn_link, "net_health": _hccn_net_health, "ip": _hccn_ip}


#: what hccn_tool answers while another hccn_tool (or the driver) holds the device (ascend-hosts.md §5)
_BUSY_NOTE = "hccn_tool stayed busy through the probe's retries (another hccn_tool or a device job holds it)"


def _busy(text: str) -> bool:
    return "hccn_tool is busy" in text


def _tls_switch(dev: int, text: str) -> int | None:
    """The TLS switch ``hccn_tool -i <dev> -tls -g`` printed for ``dev`` (else its first state), or None."""
    states = ascend.parse_tls(text)
    state = next((s for s in states if s.dev == dev), states[0] if states else None)
    return None if state is None else state.switch


def _check_tls(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    unusable = _hccn_unusable(plan, sec, "tls", "hccn_tool not found")
    if unusable:
        return unusable
    texts = _tls_texts(plan, sec)
    busy = [dev for dev, text in texts.items() if _busy(text)]
    if busy:
        return CheckResult(plan.host, "tls", FAIL, f"no TLS state from devices {busy}: {_BUSY_NOTE}", "busy")
    return _tls_verdict(plan.host, {dev: _tls_switch(dev, text) for dev, text in texts.items()})


def _tls_texts(plan: ProbePlan, sec: Mapping[str, Section]) -> dict[int, str]:
    """Each declared device's answer to ``hccn_tool -tls -g``."""
    return {dev: _need(sec, f"hccn:{dev}:tls").text for dev in range(plan.npu_count)}


def _tls_verdict(host: str, read: Mapping[int, int | None]) -> CheckResult:
    """One TLS switch on every device: OK; a device without one, or mixed: FAIL (link setup times
    out, EI0006)."""
    unknown = [dev for dev, switch in read.items() if switch is None]
    if unknown:
        return CheckResult(host, "tls", FAIL, f"no TLS state from devices {unknown}")
    return _tls_agreement(host, {dev: switch for dev, switch in read.items() if switch is not None})


def _tls_agreement(host: str, switches: Mapping[int, int]) -> CheckResult:
    """Every device's TLS switch read: one value is OK, mixed ones FAIL."""
    values = sorted(set(switches.values()))
    if len(values) > 1:
        by = _by_switch(switches)
        return CheckResult(host, "tls", FAIL, f"TLS differs between devices ({by}); link setup will "
                                              "time out (EI0006)", "mixed")
    (value,) = values
    text = f"TLS switch {value} on all {len(switches)} devices"
    return CheckResult(host, "tls", OK, text, str(value))


def _by_switch(switches: Mapping[int, int]) -> str:
    """The devices of each TLS switch: ``switch 0: devices [1], switch 1: devices [0, 2]``."""
    return ", ".join(f"switch {v}: devices {[d for d, s in switches.items() if s == v]}"
                     for v in sorted(set(switches.values())))


def _check_spod(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    """A3: the Super Pod ID of the host (compared across hosts: a multi-node CAM run needs one Super Pod)."""
    if plan.soc != "ascend910_93":
        return CheckResult(plan.host, "spod", SKIP, f"npu.soc is {plan.soc}: Super Pods are A3 only")
    if not _npu_smi_found(sec):
        return CheckResult(plan.host, "spod", FAIL, "npu-smi not found: cannot read the Super Pod ID")
    s = _need(sec, "spod")
    pod = _super_pod(s)
    if pod is None:
        why = f"npu-smi info -t spod-info failed (rc {s.rc}): {s.tail()}"
        return CheckResult(plan.host, "spod", FAIL, why)
    pod_id, sdid = pod
    return CheckResult(plan.host, "spod", OK, f"Super Pod ID {pod_id} (NPU 0 chip 0 SDID {sdid}); "
                       "a multi-node CAM run needs every host in one Super Pod", str(pod_id))


def _npu_smi_found(sec: Mapping[str, Section]) -> bool:
    """The probe found an npu-smi to run (its path section names one)."""
    path = sec.get("npu-smi.path")
    return path is not None and bool(path.text.strip())


def _super_pod(s: Section) -> tuple[int, int | None] | None:
    """(Super Pod ID, SDID) that ``npu-smi info -t spod-info`` printed; None when it read none."""
    info = ascend.parse_spod_info(s.text) if s.rc == 0 else None
    if info is None or info.super_pod_id is None:
        return None
    return info.super_pod_id, info.sdid


def _check_disk(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    s = _need(sec, "disk")
    df = ascend.parse_df(s.text)
    where = _probed_dir(s, plan.workdir)
    if df is None:
        return CheckResult(plan.host, "disk", FAIL, f"df failed for {where}: {s.text.strip()[-200:]}")
    gib = df.available_kb / 1024 ** 2
    text = f"{gib:.1f} GiB free at {where} ({df.mount})"
    if where != plan.workdir:
        text += f"; workdir {plan.workdir} not created yet"
    if gib < limits.min_free_gb:
        return CheckResult(plan.host, "disk", FAIL, f"only {text}, need {limits.min_free_gb:g} GiB", f"{gib:.1f}G")
    return CheckResult(plan.host, "disk", OK, text, f"{gib:.1f}G")


def _probed_dir(s: Section, workdir: str) -> str:
    """The folder the probe measured: the workdir, or its nearest existing ancestor."""
    return next((ln[4:] for ln in s.text.splitlines() if ln.startswith("dir ")), workdir)


def _check_clock(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    if _float(_need(sec, "t0").text) is None:
        return CheckResult(plan.host, "clock", FAIL, f"cannot read the host clock: {sec['t0'].text.strip()!r}")
    return CheckResult(plan.host, "clock", OK, "measured")  # the verdict needs every host: see _clock_verdict


def _judge_core_pattern(pattern: CorePattern, target: str | None, problems: list[str], notes: list[str]) -> None:
    """How the kernel's core pattern delivers cores here (``target``: the probe's verdict on its handler
    or directory), appended to ``problems`` (fail) and ``notes``."""
    delivery = pattern.delivery
    problem = _core_pattern_problem(pattern, target)
    if problem:
        problems.append(problem)
    elif delivery in _CORE_DELIVERY_NOTES:
        notes.append(_CORE_DELIVERY_NOTES[delivery].format(handler=pattern.handler))
    if delivery == "file" and target == "creatable":
        notes.append(f"{pattern.directory} will be created")


def _core_pattern_problem(pattern: CorePattern, target: str | None) -> str | None:
    """Why no core would be delivered: an empty pattern, or an unusable handler or directory."""
    if not pattern.raw:
        return "kernel.core_pattern is empty"
    judge = _DELIVERY_PROBLEMS.get(pattern.delivery)
    return None if judge is None else judge(pattern, target)


def _pipe_problem(pattern: CorePattern, target: str | None) -> str | None:
    """A piped pattern's handler must be an executable."""
    if target == "ok":
        return None
    return f"core_pattern pipes to {pattern.handler}, which is not an executable here"


def _file_problem(pattern: CorePattern, target: str | None) -> str | None:
    """A file pattern's directory must be writable, or creatable."""
    if target in ("ok", "creatable"):
        return None
    return f"core directory {pattern.directory} is {target or 'unusable'}"


#: the deliveries whose target the probe judged, and how a bad one fails the check
_DELIVERY_PROBLEMS: dict[str, Callable[[CorePattern, str | None], str | None]] = {
    "pipe": _pipe_problem, "file": _file_problem}


#: the deliveries that pass with a note
_CORE_DELIVERY_NOTES = {
    "relative": "relative pattern: cores land in the crashing process's cwd (the launch run dir)",
    "socket": "cores go to the socket {handler}: camit does not read them",
}


def _check_core(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    facts = dict(ln.split("=", 1) for ln in _need(sec, "core").text.splitlines() if "=" in ln)
    # the one pattern model the core watcher reads too; the check judges how cores are delivered
    pattern = parse_core_pattern(facts.get("pattern", ""))
    soft, hard = facts.get("soft", "?"), facts.get("hard", "?")
    limit = f"ulimit -c soft {soft} hard {hard}"
    problems, notes = _core_limit(soft, hard, limit)
    _judge_core_pattern(pattern, facts.get("target"), problems, notes)
    limit_bytes = int(NPU_CORE_LIMIT) * 1024 if plan.npu else None
    warnings, more = core_findings(pattern, sections_text(sec, "core.caps"), sections_text(sec, "core.space"),
                                   npu=plan.npu, core_limit_bytes=limit_bytes)
    notes += warnings + more
    warn = pattern.delivery in ("relative", "socket") or bool(warnings)
    text = f"{pattern.raw!r}, {limit}"
    return _core_verdict(plan.host, text, pattern.delivery, problems, notes, warn)


def _core_limit(soft: str, hard: str, limit: str) -> tuple[list[str], list[str]]:
    """(problems, notes) of the core size limit: a hard limit of 0 or 1 block writes no core."""
    if hard in ("0", "1"):
        return [f"{limit}: no core can be written and launches cannot raise it"], []
    if soft == "0":
        return [], [f"soft limit 0 (launches raise it to {hard})"]
    return [], []


def _core_verdict(host: str, text: str, delivery: str, problems: list[str], notes: list[str],
                  warn: bool) -> CheckResult:
    if problems:
        return CheckResult(host, "core", FAIL, "; ".join(problems) + f" [{text}]", delivery)
    if warn:
        return CheckResult(host, "core", WARN, f"{text}; " + "; ".join(notes), delivery)
    return CheckResult(host, "core", OK, "; ".join([text, *notes]), delivery)


def _check_addr(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    """The rendezvous address (manage_nic, or launch.rendezvous_nic) is bound on this host (``ip -o addr``)."""
    s = _need(sec, "addr")
    addrs = parse_addrs(s.text)
    ip = plan.rendezvous_ip
    where = f"{plan.rendezvous_nic}.ip {ip}"
    if not addrs:
        return CheckResult(plan.host, "addr", FAIL, f"cannot list this host's addresses (ip -o addr): "
                                                    f"{s.text.strip()[-200:]}")
    if ip not in addrs:
        why = (f"{where} (the rendezvous and HCCL_IF_IP) is not bound on this host; "
               f"it has {_own_addresses(addrs)}")
        return CheckResult(plan.host, "addr", FAIL, why, "unbound")
    return CheckResult(plan.host, "addr", OK, f"{where} is on {addrs[ip]}", addrs[ip])


def _own_addresses(addrs: Iterable[str]) -> str:
    """The host's addresses, loopback and link-local ones left out (``only loopback``: none)."""
    mine = ", ".join(a for a in addrs if not a.startswith(("127.", "::1", "fe80:")))
    return mine or "only loopback"


def _check_ports(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    """HCCL's host ports are out of the ephemeral range (``net.ipv4.ip_local_reserved_ports``), as CANN's docs ask
    (HCCL_IF_BASE_PORT: ``sysctl -w net.ipv4.ip_local_reserved_ports=60000-60015``, 60000-60031 from CANN 8.2)."""
    text = _need(sec, "reserved_ports").text.strip()
    first, last = plan.hccl_ports
    missing = sorted(set(range(first, last + 1)) - set(parse_port_list(text)))
    if missing:
        gap = _span(missing)
        return CheckResult(plan.host, "ports", WARN, f"HCCL's host ports {first}-{last} are not all reserved "
                                                     f"(net.ipv4.ip_local_reserved_ports={text or 'empty'}; {gap} "
                                                     "missing): an outgoing connection may take one and HCCL fail "
                                                     f"with EI0019; sysctl -w net.ipv4.ip_local_reserved_ports="
                                                     f"{first}-{last}", "unreserved")
    return CheckResult(plan.host, "ports", OK, f"HCCL's host ports {first}-{last} are reserved", "reserved")


def _span(ports: Sequence[int]) -> str:
    """Sorted ports as their first and last (``60016-60031``), one port as itself."""
    return f"{ports[0]}-{ports[-1]}" if len(ports) > 1 else str(ports[0])


def parse_port_list(text: str) -> list[int]:
    """Ports of a ``ip_local_reserved_ports`` value (``60000-60015,61000``)."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        lo, _, hi = part.partition("-")
        last = hi or lo  # a single port is its own range
        if lo.isdigit() and last.isdigit():
            out += range(int(lo), int(last) + 1)
    return out


_CHECK_FNS: dict[str, _CheckFn] = {
    "python": _check_python,
    "torch": _check_package("torch"),
    "torch_npu": _check_package("torch_npu"),
    "cann": _check_cann,
    "driver": _check_driver,
    "npu": _check_npu,
    "idle": _check_idle,
    "hccn": _check_hccn,
    "tls": _check_tls,
    "spod": _check_spod,
    "disk": _check_disk,
    "clock": _check_clock,
    "core": _check_core,
    "addr": _check_addr,
    "ports": _check_ports,
}
assert tuple(["ssh", *_CHECK_FNS, *CROSS_CHECKS]) == CHECKS


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _compared_value(r: CheckResult | None) -> str | None:
    """The value a passing (ok or warn) check compares across hosts, if it has one."""
    return r.value if r is not None and r.status in (OK, WARN) and r.value else None


def _majority(keyed: Mapping[str, str]) -> str:
    """The most frequent value (ties: the first host's)."""
    counts = Counter(keyed.values())
    top = max(counts.values())
    return next(v for v in keyed.values() if counts[v] == top)


#: the checks whose values must agree across hosts, and what of a value is compared (str: all of it)
_COMPARED: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("python", _minor), ("torch", str), ("torch_npu", str), ("cann", str), ("driver", str),
    ("tls", str), ("spod", str))


def _consistency(results: dict[tuple[str, str], CheckResult], hosts: Sequence[str], check: str,
                 key: Callable[[str], str] = str) -> None:
    """Fail the hosts whose value differs from the majority (ties: the first host's value)."""
    keyed = _compared_values(results, hosts, check, key)
    if len(set(keyed.values())) < 2:
        return
    majority = _majority(keyed)
    holders, others = _split_by(keyed, majority)
    for h in others:
        r = results[(h, check)]
        text = f"{r.summary}; differs from {majority} on {', '.join(holders)}"
        results[(h, check)] = CheckResult(h, check, FAIL, text, r.value, r.details)


def _split_by(keyed: Mapping[str, str], majority: str) -> tuple[list[str], list[str]]:
    """The hosts holding the ``majority`` value, and the others, each in host order."""
    holders: list[str] = []
    others: list[str] = []
    for host, value in keyed.items():
        (holders if value == majority else others).append(host)
    return holders, others


def _compared_values(results: Mapping[tuple[str, str], CheckResult], hosts: Sequence[str],
                     check: str, key: Callable[[str], str]) -> dict[str, str]:
    """Each host's compared part of the check's value (hosts whose check has none left out)."""
    found = {h: _compared_value(results.get((h, check))) for h in hosts}
    return {h: key(v) for h, v in found.items() if v}


def _float(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def clock_skew(samples: Mapping[str, Sample]) -> ClockSkew | None:
    """Offset of each host clock from the controller's, and the worst pair of hosts.

    The host read ``t0`` between ``sent`` and ``received`` (controller clock), so its offset is
    ``t0 - (sent + received) / 2``, known to ± half that interval (one in-session round trip: the
    SSH and shell start-up are outside it).
    """
    offsets: dict[str, float] = {}
    unc: dict[str, float] = {}
    for host, s in samples.items():
        measured = _offset(s)
        if measured is not None:
            offsets[host], unc[host] = measured
    if not offsets:
        return None
    return ClockSkew(offsets, unc, *_worst_pair(offsets))


def _offset(s: Sample) -> tuple[float, float] | None:
    """(offset, uncertainty) of the host's clock; None when it was not read or not timed."""
    t0 = _float(s.sections["t0"].text) if "t0" in s.sections else None
    if t0 is None or s.received is None:
        return None
    return t0 - (s.sent + s.received) / 2, (s.received - s.sent) / 2


def _worst_pair(offsets: Mapping[str, float]) -> tuple[float, tuple[str, str] | None]:
    """The largest offset between two hosts and the pair (fastest, slowest); one host: none."""
    if len(offsets) < 2:
        return 0.0, None
    lo = min(offsets, key=offsets.__getitem__)
    hi = max(offsets, key=offsets.__getitem__)
    return offsets[hi] - offsets[lo], (hi, lo)


def _clock_verdict(r: CheckResult, clock: ClockSkew, limits: Limits) -> CheckResult:
    """Fail a host off the controller by more than ``max_skew``, or off the hosts' median by more than half
    of it (so when no host fails, every pair is within ``max_skew``, give or take the uncertainties)."""
    host = r.host
    if host not in clock.offsets:
        return CheckResult(host, "clock", WARN, "the host clock was read but the exchange was not timed")
    off, u = clock.offsets[host], clock.uncertainty[host]
    text = f"{off:+.3f}s ±{u:.3f}s vs controller"
    if len(clock.offsets) > 1:
        text += f"; hosts spread {clock.max_pairwise:.3f}s"
    problems = _clock_problems(off, u, clock, limits)
    value = f"{off:+.3f}s"
    if problems:
        return CheckResult(host, "clock", FAIL, "; ".join(problems) + f" (limit {limits.max_skew:g}s) [{text}]", value)
    return CheckResult(host, "clock", OK, text, value)


def _clock_problems(off: float, u: float, clock: ClockSkew, limits: Limits) -> list[str]:
    """How a clock ``off`` the controller's (± ``u``) is too far from it or from the hosts'
    median."""
    problems = []
    if abs(off) - u > limits.max_skew:
        problems.append(f"{off:+.3f}s from the controller")
    median = statistics.median(clock.offsets.values())
    if len(clock.offsets) > 1 and abs(off - median) - u > limits.max_skew / 2:
        problems.append(f"{off - median:+.3f}s from the median of the hosts")
    return problems
