"""Preflight probe: what to ask each host, and the one script that asks it (pure, no I/O)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from framework import commands
from framework.ascend.nic import hccl_host_ports, rendezvous_ip
from framework.cores.caps import CAPS_SCRIPT, space_script
from framework.preflight.limits import Limits
from framework.remote.sections import PROBE_MARK, Record, read_records

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig, HostSpec

#: the probe's tag mark without its trailing space (``@@camit@@ begin <name>``)
MARK = PROBE_MARK.rstrip()
SOC_CPU = "cpu"
#: hccn_tool queries per SoC (reference/ascend-hosts.md §5): on A3 only TLS must agree; -link may read
#: DOWN while HCCS works and -ip covers the RoCE side only, so those are informational there
HCCN_QUERIES = {
    "ascend910b": ("link", "net_health", "ip", "tls"),
    "ascend910_93": ("tls", "link"),
}
_HCCN_ARGS = {"link": "-link -g", "net_health": "-net_health -g", "ip": "-ip -g", "tls": "-tls -g"}
CANN_RECORD = "ascend_toolkit_install.info"


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
    #: the address launches use on this host (rendezvous, HCCL_IF_IP: manage_nic or launch.rendezvous_nic)
    rendezvous_ip: str | None = None
    #: which NIC role that is
    rendezvous_nic: str = "manage_nic"
    #: HCCL's host ports (HCCL_IF_BASE_PORT and after), as (first, last)
    hccl_ports: tuple[int, int] = (60000, 60031)

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


def plan_probe(spec: HostSpec, env: EnvConfig | None = None, limits: Limits | None = None) -> ProbePlan:
    """The probe plan of one host from its ``config.HostSpec`` (and the env's ``cann``)."""
    wd = spec.workdir.rstrip("/") or "/"
    set_env, nic, ports = _env_facts(env)
    return ProbePlan(
        host=spec.name, workdir=wd, python=spec.python, venv_python=f"{wd}/venv/bin/python",
        soc=spec.npu.soc, npu_count=spec.npu.count, visible=spec.npu.visible,
        cann_set_env=set_env, host_key=_host_key(spec),
        tool_timeout=(limits or Limits()).tool_timeout,
        rendezvous_ip=rendezvous_ip(spec, nic), rendezvous_nic=nic, hccl_ports=(ports.start, ports.stop - 1),
    )


def _host_key(spec: HostSpec) -> str:
    """How the host's key is checked: pinned in the env, not at all, or against known_hosts."""
    if spec.host_key:
        return "pinned"
    if spec.host_key_policy == "insecure":
        return "insecure"
    return f"known_hosts ({spec.host_key_policy})"


def _env_facts(env: EnvConfig | None) -> tuple[str | None, str, range]:
    """(``cann.set_env``, the rendezvous NIC role, HCCL's host ports) of the env; without one: none,
    ``manage_nic`` and HCCL's default ports."""
    if env is None:
        return None, "manage_nic", hccl_host_ports({})
    set_env = env.cann.set_env if env.cann else None
    ports = hccl_host_ports({k: str(v) for k, v in env.launch.env.items()})
    return set_env, env.launch.rendezvous_nic, ports


# the interpreter and the torch / torch_npu versions without importing them: find the package (no
# import), read the version.py their builds generate, and only when that fails ask the distribution
# metadata, whose scan of every sys.path entry cost this probe a third of its CPU on every host
_PY_VERSIONS = r"""
import re, sys
import importlib.util as iu
print("python %d.%d.%d" % tuple(sys.version_info[:3]))
for name in ("torch", "torch_npu"):
    version = "-"
    try:
        spec = iu.find_spec(name)
    except Exception:
        spec = None
    for d in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(d + "/version.py") as fh:
                m = re.search(r"^__version__\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)", fh.read(), re.M)
        except OSError:
            m = None
        if m:
            version = m.group(1)
            break
    if spec and version == "-":
        try:
            from importlib import metadata as md
        except ImportError:
            md = None
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


def probe_script(plan: ProbePlan) -> commands.ShellScript:
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
        # systemd-coredump's caps and the free space where cores land (framework.cores.caps)
        CAPS_SCRIPT, "sec core.caps core_caps", space_script(wd), "sec core.space core_space",
        # the addresses bound here (the rendezvous address must be one of them)
        "sec addr ip -o addr",
    ]
    if plan.npu:
        lines += _npu_probe(plan)
    return commands.ShellScript("\n".join(lines) + "\n")


def _npu_probe(plan: ProbePlan) -> list[str]:
    q = commands.quote
    records = [f"{h}/{name}" for h in map(_shell_home, plan.cann_homes)
               for name in (f"*-linux/{CANN_RECORD}", "version.cfg")]
    lines = [
        "sec reserved_ports cat /proc/sys/net/ipv4/ip_local_reserved_ports",
        "NPUSMI=$(command -v npu-smi 2>/dev/null)",
        "for _c in /usr/local/sbin/npu-smi /usr/local/bin/npu-smi; "
        "do [ -z \"$NPUSMI\" ] && [ -x $_c ] && NPUSMI=$_c; done",
        "sec npu-smi.path echo \"$NPUSMI\"",
        "[ -n \"$NPUSMI\" ] && sec npu-smi $TO \"$NPUSMI\" info",
    ]
    if plan.visible:
        lines.append("[ -n \"$NPUSMI\" ] && sec npu-smi-m $TO \"$NPUSMI\" info -m")
    if plan.soc == "ascend910_93":
        # A3: the Super Pod of the first die (one Super Pod per multi-node CAM run; ascend-hosts.md §1)
        lines.append("[ -n \"$NPUSMI\" ] && sec spod $TO \"$NPUSMI\" info -t spod-info -i 0 -c 0")
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
        "_i=$((_i+1)); if [ $_i -lt 5 ]; then sleep 1; continue; fi;; esac; "
        "printf '%s\\n' \"$_o\"; return $_c; done; }",
    ]
    return lines + _hccn_loop(plan)


def _shell_home(home: str) -> str:
    """A toolkit home as sh text: quoted, ``$HOME`` left for the host's shell to expand."""
    h = home if home.startswith("$HOME") else commands.quote(home)
    return h.replace("$HOME", "\"$HOME\"")


def _hccn_loop(plan: ProbePlan) -> list[str]:
    """The sh loop asking every declared device the SoC's hccn_tool queries (none without
    devices)."""
    if plan.npu_count <= 0:
        return []
    body = "; ".join(f"sec hccn:$i:{q} hc -i $i {_HCCN_ARGS[q]}" for q in plan.hccn_queries)
    return [f"if [ -x \"$HCCN\" ]; then i=0; while [ $i -lt {plan.npu_count} ]; do {body}; "
            "i=$((i+1)); done; fi"]


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class Section:
    name: str
    text: str
    rc: int | None  # None: the script never closed the section (killed on timeout)

    def tail(self) -> str:
        """The section's last two lines, on one line (what a failed tool said last)."""
        return " ".join(self.text.strip().splitlines()[-2:])


def split_sections(stdout: str) -> dict[str, Section]:
    """Tagged sections of a probe's stdout; an unterminated last section keeps what it printed.

    The records are :mod:`framework.remote.sections`' format under :data:`PROBE_MARK`; a tag line
    that is neither ``begin <name>`` nor ``end <name> <rc>`` inside a section is part of its text.
    """
    out: dict[str, Section] = {}
    name: str | None = None
    buf: list[str] = []
    for rec in read_records(stdout, PROBE_MARK):
        if _opens(rec):
            name, buf = rec.value, [rec.body]
        elif name is None:
            continue
        elif _closes(rec):
            out[name] = _closed(name, buf, rec.value.split()[-1])
            name, buf = None, []
        else:
            buf.append(rec.raw)
    if name is not None:
        out[name] = Section(name, "".join(buf), None)
    return out


def _opens(rec: Record) -> bool:
    """``begin <name>``: a section starts."""
    return rec.tag == "begin" and bool(rec.value.split())


def _closes(rec: Record) -> bool:
    """``end <name> <rc>``: the open section ends."""
    return rec.tag == "end" and len(rec.value.split()) >= 2


def _closed(name: str, buf: list[str], rc: str) -> Section:
    """A section its end mark closed (the newline printed before the mark is not its text)."""
    text = "".join(buf).removesuffix("\n")
    return Section(name, text, int(rc) if rc.lstrip("-").isdigit() else None)
