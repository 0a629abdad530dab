"""Preflight: is every host ready for a CAM run? One probe script per host, pure verdicts.

Plan: :func:`plan_probe` turns a host's spec into a :class:`ProbePlan` and :func:`probe_script` into
one POSIX ``sh`` script that prints tagged sections (``@@camit@@ begin <name>`` … ``@@camit@@ end
<name> <rc>``): clock, identity, interpreter versions, free disk, ``core_pattern`` and core limits
and, on NPU hosts, ``npu-smi info``, version records of both CANN layouts, driver and firmware,
and the ``hccn_tool`` queries of the platform (run one after another: parallel calls answer "busy").

Executor: :class:`Preflight` connects to every host through the cluster's bounded pool and runs
that script once — one round trip per host, timed on the controller for the clock check.

Verdict: :func:`evaluate` (pure) turns the sections into one :class:`CheckResult` per host and
check (:data:`CHECKS`), then compares values across hosts (CANN, driver, torch, TLS; the majority
value wins, ties go to the first host) and clock offsets pairwise. On CPU hosts (``npu.soc: cpu``,
the lab) the NPU checks are skipped with the reason; everything else runs for real. Statuses:
``ok``, ``warn`` (passes, says why), ``skip``, ``fail`` (exit 1), ``error`` (host unreachable, exit 3).
"""

from __future__ import annotations

import logging
import posixpath
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from framework import ascend, commands
from framework.errors import EXIT_FAILED, EXIT_INFRA, EXIT_OK
from framework.result import Result

log = logging.getLogger("camit.preflight")

#: every check, in table order; test ids read ``test_check[<host>-<check>]``
CHECKS = ("ssh", "python", "torch", "torch_npu", "cann", "driver", "npu", "idle", "hccn", "tls",
          "disk", "clock", "core")
#: checks that only make sense with NPUs (skipped on CPU hosts)
NPU_CHECKS = frozenset({"torch_npu", "cann", "driver", "npu", "idle", "hccn", "tls"})
OK, WARN, SKIP, FAIL, ERROR = "ok", "warn", "skip", "fail", "error"

MARK = "@@camit@@"
SOC_CPU = "cpu"
#: hccn_tool queries per SoC (reference/ascend-hosts.md §5): on A3 only TLS must agree; -link may read
#: DOWN while HCCS works and -ip covers the RoCE side only, so those are informational there
HCCN_QUERIES = {
    "ascend910b": ("link", "net_health", "ip", "tls"),
    "ascend910_93": ("tls", "link"),
}
_HCCN_ARGS = {"link": "-link -g", "net_health": "-net_health -g", "ip": "-ip -g", "tls": "-tls -g"}
_CANN_RECORD = "ascend_toolkit_install.info"


@dataclass(frozen=True)
class Limits:
    """Thresholds and timeouts of a preflight."""

    min_free_gb: float = 2.0
    max_skew: float = 1.0
    probe_timeout: float = 180.0
    tool_timeout: float = 60.0


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class ProbePlan:
    """What to probe on one host (pure data, from its ``HostSpec``)."""

    host: str
    workdir: str
    python: str
    venv_python: str
    soc: str
    npu_count: int
    visible: tuple[int, ...] | None = None
    cann_set_env: str | None = None
    host_key: str = "known_hosts"
    tool_timeout: float = 60.0

    @property
    def npu(self) -> bool:
        return self.soc != SOC_CPU

    @property
    def hccn_queries(self) -> tuple[str, ...]:
        return HCCN_QUERIES.get(self.soc, HCCN_QUERIES["ascend910b"])

    @property
    def cann_homes(self) -> list[str]:
        """Toolkit homes to look for records in, the env's ``cann.set_env`` directory first."""
        homes = []
        if self.cann_set_env:
            base = posixpath.dirname(self.cann_set_env)
            homes += [base, f"{base}/latest"]
        for root in ("/usr/local/Ascend", "$HOME/Ascend"):
            homes += [f"{root}/cann", f"{root}/ascend-toolkit/latest"]
        return list(dict.fromkeys(homes))


def plan_probe(spec: Any, env: Any = None, limits: Limits | None = None) -> ProbePlan:
    """The probe plan of one host from its ``config.HostSpec`` (and the env's ``cann``)."""
    if spec.host_key:
        key = "pinned"
    elif spec.host_key_policy == "insecure":
        key = "insecure"
    else:
        key = f"known_hosts ({spec.host_key_policy})"
    wd = spec.workdir.rstrip("/") or "/"
    cann = getattr(env, "cann", None)
    return ProbePlan(
        host=spec.name, workdir=wd, python=spec.python, venv_python=f"{wd}/venv/bin/python",
        soc=spec.npu.soc, npu_count=spec.npu.count, visible=spec.npu.visible,
        cann_set_env=cann.set_env if cann else None, host_key=key,
        tool_timeout=(limits or Limits()).tool_timeout,
    )


_PY_VERSIONS = """\
import sys
try:
    from importlib import metadata as md
except ImportError:
    md = None
print("python %d.%d.%d" % tuple(sys.version_info[:3]))
for name in ("torch", "torch_npu"):
    version = "-"
    for dist in (name, name.replace("_", "-")) if md else ():
        try:
            version = md.version(dist)
            break
        except Exception:
            pass
    print(name + " " + version)
"""

# core facts: the pattern, both limits, and whether its handler/directory is usable
_CORE_FACTS = r"""core_facts() {
  p=$(cat /proc/sys/kernel/core_pattern)
  printf 'pattern=%s\nsoft=%s\nhard=%s\n' "$p" "$(ulimit -S -c)" "$(ulimit -H -c)"
  case $p in
    "|"*) h=${p#|}; h=${h%% *}; if [ -x "$h" ]; then echo target=ok; else echo target=missing; fi ;;
    /*) d=${p%%%*}; d=${d%/*}; [ -n "$d" ] || d=/
        if [ -d "$d" ]; then if [ -w "$d" ]; then echo target=ok; else echo target=readonly; fi
        else a=$d; while [ ! -d "$a" ]; do a=$(dirname "$a"); done
             if [ -w "$a" ]; then echo target=creatable; else echo target=uncreatable; fi; fi ;;
  esac
}"""


def probe_script(plan: ProbePlan) -> str:
    """The one script a host runs; every fact it prints sits in a tagged section."""
    q = commands.quote
    wd = plan.workdir
    lines = [
        # the clock exchange: once we are ready the controller writes a line (at `sent`) and times
        # the arrival of the date line (`received`)
        f"echo {MARK} ready; read _go; exec </dev/null",
        f"sec() {{ _n=$1; shift; echo {MARK} begin \"$_n\"; \"$@\" 2>&1; _r=$?; "
        f"printf '\\n{MARK} end %s %s\\n' \"$_n\" \"$_r\"; }}",
        "catf() { for _f in \"$@\"; do [ -f \"$_f\" ] && sec \"file:$_f\" cat -- \"$_f\"; done; return 0; }",
        f"TO=; command -v timeout >/dev/null 2>&1 && TO='timeout -k 5 {plan.tool_timeout:g}'",
        "sec t0 date +%s.%N",
        "sec id sh -c 'id -un; hostname'",
        f"PY={q(plan.python)}; [ -x {q(plan.venv_python)} ] && PY={q(plan.venv_python)}",
        f"pyv() {{ echo \"interpreter $PY\"; $TO \"$PY\" -c {q(_PY_VERSIONS)}; }}",
        "sec python pyv",
        f"dfw() {{ d={q(wd)}; while [ ! -d \"$d\" ]; do d=$(dirname \"$d\"); done; echo \"dir $d\"; df -Pk \"$d\"; }}",
        "sec disk dfw",
        _CORE_FACTS,
        "sec core core_facts",
    ]
    if plan.npu:
        lines += _npu_probe(plan)
    return "\n".join(lines) + "\n"


def _npu_probe(plan: ProbePlan) -> list[str]:
    q = commands.quote
    records = []
    for home in plan.cann_homes:
        h = home if home.startswith("$HOME") else q(home)
        h = h.replace("$HOME", "\"$HOME\"")
        records += [f"{h}/*-linux/{_CANN_RECORD}", f"{h}/version.cfg"]
    lines = [
        "NPUSMI=$(command -v npu-smi 2>/dev/null)",
        "for _c in /usr/local/sbin/npu-smi /usr/local/bin/npu-smi; do [ -z \"$NPUSMI\" ] && [ -x $_c ] && NPUSMI=$_c; done",
        "sec npu-smi.path echo \"$NPUSMI\"",
        "[ -n \"$NPUSMI\" ] && sec npu-smi $TO \"$NPUSMI\" info",
    ]
    if plan.visible:
        lines.append("[ -n \"$NPUSMI\" ] && sec npu-smi-m $TO \"$NPUSMI\" info -m")
    lines += [
        "catf /etc/ascend_install.info",
        "D=$(sed -n 's/^Driver_Install_Path_Param=//p' /etc/ascend_install.info 2>/dev/null | head -n 1)",
        "F=$(sed -n 's/^Firmware_Install_Path_Param=//p' /etc/ascend_install.info 2>/dev/null | head -n 1)",
        "catf \"${D:-/usr/local/Ascend}/driver/version.info\" \"${F:-/usr/local/Ascend}/firmware/version.info\"",
        "catf " + " ".join(records),
    ]
    if plan.cann_set_env:
        lines.append(f"sec set_env ls -l -- {q(plan.cann_set_env)}")
    lines += [
        "HCCN=$(command -v hccn_tool 2>/dev/null); [ -n \"$HCCN\" ] || HCCN=/usr/local/Ascend/driver/tools/hccn_tool",
        "sec hccn.path sh -c '[ -x \"$1\" ] && echo \"$1\"' - \"$HCCN\"",
        # one call at a time; "hccn_tool is busy" is retried
        "hc() { _i=0; while :; do _o=$($TO \"$HCCN\" \"$@\" 2>&1); _c=$?; case $_o in *\"is busy\"*) "
        "_i=$((_i+1)); if [ $_i -lt 5 ]; then sleep 1; continue; fi;; esac; printf '%s\\n' \"$_o\"; return $_c; done; }",
    ]
    if plan.npu_count > 0:
        body = "; ".join(f"sec hccn:$i:{name} hc -i $i {_HCCN_ARGS[name]}" for name in plan.hccn_queries)
        lines.append(f"if [ -x \"$HCCN\" ]; then i=0; while [ $i -lt {plan.npu_count} ]; do {body}; "
                     "i=$((i+1)); done; fi")
    return lines


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class Section:
    name: str
    text: str
    rc: int | None  # None: the script never closed the section (killed on timeout)


def split_sections(stdout: str) -> dict[str, Section]:
    """Tagged sections of a probe's stdout; an unterminated last section keeps what it printed."""
    out: dict[str, Section] = {}
    name: str | None = None
    buf: list[str] = []
    for line in stdout.splitlines(keepends=True):
        if line.startswith(MARK + " "):
            words = line.split()
            if len(words) >= 3 and words[1] == "begin":
                name, buf = line.rstrip("\n")[len(MARK) + 7:], []
                continue
            if len(words) >= 4 and words[1] == "end" and name is not None:
                text = "".join(buf)
                text = text[:-1] if text.endswith("\n") else text  # the newline printed before the end mark
                out[name] = Section(name, text, int(words[-1]) if words[-1].lstrip("-").isdigit() else None)
                name = None
                continue
        if name is not None:
            buf.append(line)
    if name is not None:
        out[name] = Section(name, "".join(buf), None)
    return out


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
        rows = []
        for host in self.hosts:
            row = [host]
            for c in self.checks:
                r = self.results.get((host, c))
                if r is None:
                    row.append("-")
                    continue
                word = {ERROR: "UNREACHABLE" if c == "ssh" else "ERROR", FAIL: "FAIL"}.get(r.status, r.status)
                value = r.value if r.value and r.status != SKIP and c != "ssh" else ""
                if len(value) > width:
                    value = value[:width - 1] + "…"
                row.append(f"{word} {value}".strip())
            rows.append(row)
        return ["host", *self.checks], rows

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "duration": round(self.duration, 3),
            "hosts": self.hosts,
            "checks": list(self.checks),
            "results": [asdict(r) for r in self.results.values()],
            "clock": None if self.clock is None else {
                "offsets": {h: round(v, 6) for h, v in self.clock.offsets.items()},
                "uncertainty": {h: round(v, 6) for h, v in self.clock.uncertainty.items()},
                "max_pairwise": round(self.clock.max_pairwise, 6),
                "pair": list(self.clock.pair) if self.clock.pair else None,
            },
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


# --------------------------------------------------------------------------- verdicts (pure)


def evaluate(plans: Mapping[str, ProbePlan], samples: Mapping[str, Sample | BaseException],
             limits: Limits | None = None) -> Report:
    """Turn every host's probe (or its connection error) into the full host × check report."""
    limits = limits or Limits()
    hosts = list(plans)
    results: dict[tuple[str, str], CheckResult] = {}
    for host in hosts:
        sample = samples.get(host)
        for r in _host_checks(plans[host], sample, limits):
            results[(host, r.check)] = r
    for check, key in (("python", _minor), ("torch", None), ("torch_npu", None), ("cann", None),
                       ("driver", None), ("tls", None)):
        _consistency(results, hosts, check, key)
    clock = clock_skew({h: s for h, s in samples.items() if isinstance(s, Sample)})
    empty = ClockSkew({}, {}, 0.0, None)
    for host in hosts:
        if results[(host, "clock")].status == OK:  # the host's clock was read: judge it against the others
            results[(host, "clock")] = _clock_verdict(results[(host, "clock")], clock or empty, limits)
    return Report(hosts, results, clock)


def _host_checks(plan: ProbePlan, sample: Sample | BaseException | None, limits: Limits) -> list[CheckResult]:
    host = plan.host
    if not isinstance(sample, Sample):
        why = str(sample) if sample is not None else "not probed"
        prefix = f"{host}: "
        why = why[len(prefix):] if why.startswith(prefix) else why
        out = [CheckResult(host, "ssh", ERROR, why)]
        return out + [CheckResult(host, c, SKIP, "not run: host unreachable (see ssh)") for c in CHECKS[1:]]
    sec = sample.sections
    late = f" (probe timed out after {limits.probe_timeout:g}s)" if sample.timed_out else ""
    out = [_check_ssh(plan, sec)]
    for check, fn in _CHECK_FNS.items():
        if check in NPU_CHECKS and not plan.npu:
            out.append(CheckResult(host, check, SKIP, f"npu.soc is {plan.soc}: no NPU on this host"))
            continue
        try:
            r = fn(plan, sec, limits)
        except _Missing as exc:
            r = CheckResult(host, check, FAIL, f"no output from {exc}{late}")
        out.append(r)
    return out


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


def _check_cann(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    found: list[tuple[str, str, str | None]] = []  # (path, version, layout)
    for s in _files(sec, _CANN_RECORD):
        rec = ascend.parse_toolkit_install_info(s.text)
        if rec is not None:
            found.append((s.name[5:], rec.version, rec.layout or ascend.cann_layout(s.name[5:])))
    for s in _files(sec, "/version.cfg"):
        version = ascend.cann_version_from_cfg(ascend.parse_version_cfg(s.text))
        if version:
            found.append((s.name[5:], version, ascend.cann_layout(s.name[5:])))
    problems: list[str] = []
    if plan.cann_set_env and (env_sec := sec.get("set_env")) is not None and env_sec.rc != 0:
        problems.append(f"cann.set_env {plan.cann_set_env} does not exist on this host")
    if not found:
        return CheckResult(plan.host, "cann", FAIL, "; ".join(problems + [
            "no CANN version record (looked in " + ", ".join(plan.cann_homes) + ")"]))
    home = posixpath.dirname(plan.cann_set_env) + "/" if plan.cann_set_env else ""
    chosen = next((f for f in found if home and f[0].startswith(home)), found[0])
    path, version, layout = chosen
    others = sorted({f"{v} ({p})" for p, v, _ in found if v != version})
    details = tuple(f"{v} in {p}" for p, v, _ in found)
    summary = f"CANN {version}, {layout or 'unknown'} layout ({path})"
    if problems:
        return CheckResult(plan.host, "cann", FAIL, "; ".join(problems) + f"; found {summary}", version, details)
    if others:
        return CheckResult(plan.host, "cann", WARN, summary + "; other installs: " + ", ".join(others), version, details)
    return CheckResult(plan.host, "cann", OK, summary, version, details)


def _check_driver(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    drv = next((s for s in _files(sec, "/driver/version.info")), None)
    fw = next((s for s in _files(sec, "/firmware/version.info")), None)
    if drv is None:
        return CheckResult(plan.host, "driver", FAIL, "no driver version.info (driver not installed?)")
    dv = ascend.driver_version(drv.text) or "?"
    fv = ascend.driver_version(fw.text) if fw else None
    value = f"{dv} fw {fv}" if fv else dv
    return CheckResult(plan.host, "driver", OK, f"driver {dv}, firmware {fv or 'unknown'}", value)


def _npu_info(plan: ProbePlan, sec: Mapping[str, Section]) -> ascend.NpuSmiInfo | str:
    path = sec.get("npu-smi.path")
    if path is not None and not path.text.strip():
        return f"npu-smi not found (npu.soc is {plan.soc}: is the driver installed?)"
    s = _need(sec, "npu-smi")
    if s.rc != 0:
        return f"npu-smi info failed (rc {s.rc}): " + " ".join(s.text.strip().splitlines()[-2:])
    return ascend.parse_npu_smi_info(s.text)


def _check_npu(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    info = _npu_info(plan, sec)
    if isinstance(info, str):
        return CheckResult(plan.host, "npu", FAIL, info)
    n, platform = len(info.chips), info.platform
    shape = f"{platform}, {n} chips on {len(info.npus)} NPUs ({'/'.join(info.names)}), npu-smi {info.version}"
    problems = []
    if plan.npu_count and n != plan.npu_count:
        problems.append(f"{n} chips, env npu.count says {plan.npu_count}")
    want = ascend.SOC_OF_PLATFORM[platform]
    if plan.soc in ascend.SOC_OF_PLATFORM.values() and plan.soc != want:
        problems.append(f"this is an {platform} host ({want}), env npu.soc says {plan.soc}")
    bad = [f"NPU {c.npu} chip {c.chip}: {c.health}" for c in info.unhealthy]
    if bad:
        problems.append("not healthy: " + ", ".join(bad))
    value = f"{platform} {n}x{info.names[0] if info.names else '?'}"
    if problems:
        return CheckResult(plan.host, "npu", FAIL, "; ".join(problems) + f" [{shape}]", value)
    if not plan.npu_count:
        return CheckResult(plan.host, "npu", WARN, f"{shape}; env declares no npu.count", value)
    return CheckResult(plan.host, "npu", OK, shape + ", all OK", value)


def _check_idle(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    info = _npu_info(plan, sec)
    if isinstance(info, str):
        return CheckResult(plan.host, "idle", FAIL, info)
    if not info.has_process_table:
        return CheckResult(plan.host, "idle", FAIL, "npu-smi printed no process table: cannot judge idleness")
    logical = {(c.npu, c.chip): info.logical_id(c) for c in info.chips}
    m = sec.get("npu-smi-m")
    if m is not None and m.rc == 0:
        logical.update({(r.npu, r.chip): r.logic_id for r in ascend.parse_npu_smi_mapping(m.text)
                        if r.logic_id is not None})
    procs = [p for p in info.processes
             if plan.visible is None or logical.get((p.npu, p.chip)) in plan.visible]
    if procs:
        shown = ", ".join(f"NPU {p.npu} chip {p.chip} pid {p.pid}{' ' + p.name if p.name else ''}"
                          f" ({p.memory_mb} MB)" for p in procs[:8])
        more = f" and {len(procs) - 8} more" if len(procs) > 8 else ""
        return CheckResult(plan.host, "idle", FAIL, f"busy: {shown}{more}", f"{len(procs)} procs")
    scope = "visible devices" if plan.visible is not None else "all NPUs"
    return CheckResult(plan.host, "idle", OK, f"no processes on {scope} (judged by the process table)", "idle")


def _check_hccn(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    path = sec.get("hccn.path")
    if path is not None and path.rc != 0:
        return CheckResult(plan.host, "hccn", FAIL, "hccn_tool not found (/usr/local/Ascend/driver/tools/hccn_tool)")
    if plan.npu_count <= 0:
        return CheckResult(plan.host, "hccn", SKIP, "env declares no npu.count: no devices to query")
    a3 = plan.soc == "ascend910_93"
    problems: list[str] = []
    notes: list[str] = []
    for dev in range(plan.npu_count):
        for query in plan.hccn_queries:
            if query == "tls":
                continue
            s = _need(sec, f"hccn:{dev}:{query}")
            text = s.text.strip()
            if query == "link":
                state = ascend.parse_link(text)
                if state != "UP":
                    (notes if a3 else problems).append(f"dev {dev} link {state or text or 'no answer'}")
            elif query == "net_health":
                states = ascend.parse_net_health(text)
                if states != ["Success"]:
                    problems.append(f"dev {dev} net health {states[0] if states else text or 'no answer'}")
            elif query == "ip":
                ips = ascend.parse_ip(text)
                if not ips or not ips[0].configured:
                    problems.append(f"dev {dev} has no IP ({text or 'no answer'})")
    queries = "/".join(q for q in plan.hccn_queries if q != "tls")
    if problems:
        return CheckResult(plan.host, "hccn", FAIL, "; ".join(problems), f"{len(problems)} bad")
    if notes:
        return CheckResult(plan.host, "hccn", WARN, "; ".join(notes) + " (A3: -link may read DOWN while HCCS works)",
                           "link?")
    return CheckResult(plan.host, "hccn", OK, f"{plan.npu_count} devices: {queries} fine", "up")


def _check_tls(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    path = sec.get("hccn.path")
    if path is not None and path.rc != 0:
        return CheckResult(plan.host, "tls", FAIL, "hccn_tool not found")
    if plan.npu_count <= 0:
        return CheckResult(plan.host, "tls", SKIP, "env declares no npu.count: no devices to query")
    switches: dict[int, int] = {}
    unknown = []
    for dev in range(plan.npu_count):
        states = ascend.parse_tls(_need(sec, f"hccn:{dev}:tls").text)
        state = next((s for s in states if s.dev == dev), states[0] if states else None)
        if state is None:
            unknown.append(dev)
        else:
            switches[dev] = state.switch
    if unknown:
        return CheckResult(plan.host, "tls", FAIL, f"no TLS state from devices {unknown}")
    values = Counter(switches.values())
    if len(values) > 1:
        by = ", ".join(f"switch {v}: devices {[d for d, s in switches.items() if s == v]}" for v in sorted(values))
        return CheckResult(plan.host, "tls", FAIL, f"TLS differs between devices ({by}); link setup will time out "
                                                    "(EI0006)", "mixed")
    (value,) = values
    return CheckResult(plan.host, "tls", OK, f"TLS switch {value} on all {len(switches)} devices", str(value))


def _check_disk(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    s = _need(sec, "disk")
    df = ascend.parse_df(s.text)
    where = next((ln[4:] for ln in s.text.splitlines() if ln.startswith("dir ")), plan.workdir)
    if df is None:
        return CheckResult(plan.host, "disk", FAIL, f"df failed for {where}: {s.text.strip()[-200:]}")
    gib = df.available_kb / 1024 ** 2
    text = f"{gib:.1f} GiB free at {where} ({df.mount})"
    if where != plan.workdir:
        text += f"; workdir {plan.workdir} not created yet"
    if gib < limits.min_free_gb:
        return CheckResult(plan.host, "disk", FAIL, f"only {text}, need {limits.min_free_gb:g} GiB", f"{gib:.1f}G")
    return CheckResult(plan.host, "disk", OK, text, f"{gib:.1f}G")


def _check_clock(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    if _float(_need(sec, "t0").text) is None:
        return CheckResult(plan.host, "clock", FAIL, f"cannot read the host clock: {sec['t0'].text.strip()!r}")
    return CheckResult(plan.host, "clock", OK, "measured")  # the verdict needs every host: see _clock_verdict


def _check_core(plan: ProbePlan, sec: Mapping[str, Section], limits: Limits) -> CheckResult:
    facts = dict(ln.split("=", 1) for ln in _need(sec, "core").text.splitlines() if "=" in ln)
    pattern = ascend.parse_core_pattern(facts.get("pattern", ""))
    soft, hard = facts.get("soft", "?"), facts.get("hard", "?")
    limit = f"ulimit -c soft {soft} hard {hard}"
    target = facts.get("target")
    problems, notes = [], []
    if hard in ("0", "1"):
        problems.append(f"{limit}: no core can be written and launches cannot raise it")
    elif soft == "0":
        notes.append(f"soft limit 0 (launches raise it to {hard})")
    if not pattern.raw:
        problems.append("kernel.core_pattern is empty")
    elif pattern.kind == "pipe" and target != "ok":
        problems.append(f"core_pattern pipes to {pattern.handler}, which is not an executable here")
    elif pattern.kind == "file" and target not in ("ok", "creatable"):
        problems.append(f"core directory {pattern.directory} is {target or 'unusable'}")
    elif pattern.kind == "relative":
        notes.append("relative pattern: cores land in the crashing process's cwd (the launch run dir)")
    if pattern.kind == "file" and target == "creatable":
        notes.append(f"{pattern.directory} will be created")
    text = f"{pattern.raw!r}, {limit}"
    if problems:
        return CheckResult(plan.host, "core", FAIL, "; ".join(problems) + f" [{text}]", pattern.kind)
    if pattern.kind == "relative":
        return CheckResult(plan.host, "core", WARN, f"{text}; " + "; ".join(notes), pattern.kind)
    return CheckResult(plan.host, "core", OK, text + ("; " + "; ".join(notes) if notes else ""), pattern.kind)


_CHECK_FNS: dict[str, Callable[[ProbePlan, Mapping[str, Section], Limits], CheckResult]] = {
    "python": _check_python,
    "torch": _check_package("torch"),
    "torch_npu": _check_package("torch_npu"),
    "cann": _check_cann,
    "driver": _check_driver,
    "npu": _check_npu,
    "idle": _check_idle,
    "hccn": _check_hccn,
    "tls": _check_tls,
    "disk": _check_disk,
    "clock": _check_clock,
    "core": _check_core,
}
assert tuple(["ssh", *_CHECK_FNS]) == CHECKS


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _consistency(results: dict[tuple[str, str], CheckResult], hosts: Sequence[str], check: str,
                 key: Callable[[str], str] | None = None) -> None:
    """Fail the hosts whose value differs from the majority (ties: the first host's value)."""
    values = {h: r.value for h in hosts if (r := results.get((h, check))) and r.status in (OK, WARN) and r.value}
    keyed = {h: key(v) if key else v for h, v in values.items()}
    if len(set(keyed.values())) < 2:
        return
    counts = Counter(keyed.values())
    top = max(counts.values())
    majority = next(keyed[h] for h in keyed if counts[keyed[h]] == top)
    holders = [h for h in keyed if keyed[h] == majority]
    for h, v in keyed.items():
        if v != majority:
            r = results[(h, check)]
            results[(h, check)] = CheckResult(
                h, check, FAIL, f"{r.summary}; differs from {majority} on {', '.join(holders)}", r.value, r.details)


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
        t0 = _float(s.sections["t0"].text) if "t0" in s.sections else None
        if t0 is None or s.received is None:
            continue
        offsets[host] = t0 - (s.sent + s.received) / 2
        unc[host] = (s.received - s.sent) / 2
    if not offsets:
        return None
    pair = None
    worst = 0.0
    if len(offsets) > 1:
        lo = min(offsets, key=offsets.__getitem__)
        hi = max(offsets, key=offsets.__getitem__)
        worst, pair = offsets[hi] - offsets[lo], (hi, lo)
    return ClockSkew(offsets, unc, worst, pair)


def _clock_verdict(r: CheckResult, clock: ClockSkew, limits: Limits) -> CheckResult:
    """Fail a host off the controller by more than ``max_skew``, or off the hosts' median by more than half
    of it (so when no host fails, every pair is within ``max_skew``, give or take the uncertainties)."""
    host = r.host
    if host not in clock.offsets:
        return CheckResult(host, "clock", WARN, "the host clock was read but the exchange was not timed")
    off, u = clock.offsets[host], clock.uncertainty[host]
    text = f"{off:+.3f}s ±{u:.3f}s vs controller"
    problems = []
    if abs(off) - u > limits.max_skew:
        problems.append(f"{off:+.3f}s from the controller")
    if len(clock.offsets) > 1:
        median = statistics.median(clock.offsets.values())
        if abs(off - median) - u > limits.max_skew / 2:
            problems.append(f"{off - median:+.3f}s from the median of the hosts")
        text += f"; hosts spread {clock.max_pairwise:.3f}s"
    value = f"{off:+.3f}s"
    if problems:
        return CheckResult(host, "clock", FAIL, "; ".join(problems) + f" (limit {limits.max_skew:g}s) [{text}]", value)
    return CheckResult(host, "clock", OK, text, value)


# --------------------------------------------------------------------------- executor


def run_probe(host: Any, plan: ProbePlan, limits: Limits | None = None) -> Sample:
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
    sent = m0 = 0.0
    received: float | None = None
    try:
        while (line := proc.readline(timeout=max(0.0, deadline - time.monotonic()))) != "":
            if line is None:  # past the deadline
                proc.kill()
                break
            if line == f"{MARK} ready\n":
                sent, m0 = time.time(), time.monotonic()
                proc.write(b"go\n")
                proc.close_stdin()
                continue
            if received is None and lines and lines[-1] == f"{MARK} begin t0\n":
                received = sent + (time.monotonic() - m0)
            lines.append(line)
        result = proc.wait(max(1.0, deadline - time.monotonic()) + 5.0)
    finally:
        proc.close()
    return Sample(host.name, split_sections("".join(lines)), sent, received, result)


class Preflight:
    """Probe every host of ``cluster`` once (bounded pool) and judge the answers."""

    def __init__(self, env: Any, cluster: Any, limits: Limits | None = None) -> None:
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
        report = evaluate(plans, self.samples(plans), self.limits)
        report.duration = time.monotonic() - start
        log.info("preflight of %d hosts took %.2fs", len(plans), report.duration)
        return report
