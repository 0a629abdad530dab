"""Environment loading: one ``test_env.yaml`` becomes one validated, typed, frozen
:class:`EnvConfig`."""

from __future__ import annotations

import dataclasses
import hmac
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from framework.ascend.nic import hccl_host_ports
from framework.ascend.timeouts import order_problems
from framework.config import document as schema
from framework.config import legacy
from framework.config.document import SCHEMA_VERSION, Loc, parse_cpu_list
from framework.config.envfile import DEFAULT_ENV_PATH
from framework.config.sshconfig import SSH_CONFIG_ENV, SshConfigFile, SshHostConfig, controller_path
from framework.config.sshconfig import find as find_ssh_config
from framework.config.yaml_text import MAX_CHARS, expand_vars, parse_yaml, read_text
from framework.errors import ConfigError

log = logging.getLogger("camit.config")

__all__ = [
    "DEFAULT_ENV_PATH",
    "SCHEMA_VERSION",
    "ArtifactsSpec",
    "CannSpec",
    "Defaults",
    "EnvConfig",
    "HostSpec",
    "JumpSpec",
    "LaunchSpec",
    "NicSpec",
    "NpuSpec",
    "Secret",
    "TestNicSpec",
    "load",
]


_SECRET_NAME = re.compile(r"PASS|TOKEN|SECRET|KEY|CREDENTIAL", re.IGNORECASE)
_MAX_LINES = 10  # validation problems listed in one ConfigError


class Secret:
    """A string that prints as ``***`` everywhere; :meth:`reveal` returns the value.

    Two secrets are equal when their values are (compared in constant time).
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = str(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__

    def __format__(self, format_spec: str) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))


# --------------------------------------------------------------------------- effective values


@dataclass(frozen=True)
class NicSpec:
    """The management NIC (``manage_nic``)."""

    name: str
    ip: str
    mac: str | None = None


@dataclass(frozen=True)
class TestNicSpec:
    """A test NIC (``test_nic1``/``test_nic2``); every key is optional."""

    __test__ = False  # not a pytest class, despite the name

    name: str | None = None
    dev: str | None = None
    gid: str | None = None
    ip: str | None = None
    ipv6: str | None = None
    eid: str | None = None


@dataclass(frozen=True)
class NpuSpec:
    """NPUs on one host: ``count`` devices of ``soc``; ``visible`` restricts which are used."""

    count: int = 0
    soc: str = schema.BUILTIN["npu.soc"]
    visible: tuple[int, ...] | None = None

    @property
    def devices(self) -> int:
        """Ranks this host can take: its visible devices, else all ``count`` (0: no NPU declared)."""
        return len(self.visible) if self.visible else self.count

    def describe(self) -> str:
        """``16 x ascend910_93``, or just the SoC when no count is declared."""
        return f"{self.count} x {self.soc}" if self.count else self.soc


@dataclass(frozen=True)
class JumpSpec:
    """The SSH jump host a host is reached through; ``origin`` says which key (or ssh_config file) named it."""

    address: str
    port: int = schema.BUILTIN["ssh_port"]
    user: str = schema.BUILTIN["user"]
    key_file: Path | None = None
    origin: str = ""

    @property
    def display(self) -> str:
        """``user@address:port`` (a valid ``jump_host:`` value)."""
        return f"{self.user}@{self.address}:{self.port}"


@dataclass(frozen=True)
class Defaults:
    """The effective ``defaults:`` section (built-in values filled in)."""

    user: str = schema.BUILTIN["user"]
    key_file: Path | None = None
    host_key: str | None = None
    workdir: str = schema.BUILTIN["workdir"]
    python: str = schema.BUILTIN["python"]
    venv: bool = schema.BUILTIN["venv"]
    npu: NpuSpec = field(default_factory=NpuSpec)
    known_hosts: Path = field(default_factory=lambda: Path(schema.BUILTIN["known_hosts"]).expanduser())
    host_key_policy: str = schema.BUILTIN["host_key_policy"]
    connect_timeout: float = schema.BUILTIN["connect_timeout"]
    command_timeout: float = schema.BUILTIN["command_timeout"]
    max_parallel: int = schema.BUILTIN["max_parallel"]
    #: the ssh_config file read (None: none)
    ssh_config: Path | None = None
    jump_host: str | None = None


@dataclass(frozen=True)
class CannSpec:
    """Where CANN's ``set_env.sh`` lives on the hosts; ``extra_set_env``: SHMEM/ATB scripts sourced after it."""

    set_env: str
    extra_set_env: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArtifactsSpec:
    """What deploy copies: absolute local path patterns (globs unresolved) and the host install path."""

    run_package: str | None = None
    wheel: str | None = None
    install_path: str | None = None


@dataclass(frozen=True)
class LaunchSpec:
    """torchrun settings shared by every node."""

    backend: str = schema.BUILTIN["backend"]
    master_port: int | None = None
    nproc_per_node: int | None = None
    env: Mapping[str, str | Secret] = field(default_factory=lambda: MappingProxyType({}))
    #: the NIC role (manage_nic, test_nic1, test_nic2) whose address the rendezvous and HCCL_IF_IP use
    rendezvous_nic: str = "manage_nic"


@dataclass(frozen=True, kw_only=True)
class HostSpec:
    """One host with its effective settings; built by :func:`load` (or directly in unit tests).

    ``ssh_ip`` defaults to ``manage_nic.ip``, ``install_path`` to ``<workdir>/opp`` and
    ``isolcpu_list`` to the parsed ``isolcpu``.
    """

    name: str
    manage_nic: NicSpec
    user: str = schema.BUILTIN["user"]
    password: Secret | None = None
    ssh_ip: str = ""
    ssh_port: int = schema.BUILTIN["ssh_port"]
    test_nic1: TestNicSpec | None = None
    test_nic2: TestNicSpec | None = None
    bmc: str | None = None
    isolcpu: str | None = None
    isolcpu_list: tuple[int, ...] = ()
    env_type: str | None = None
    arch: str | None = None
    key_file: Path | None = None
    host_key: str | None = None
    known_hosts: Path | None = None
    host_key_policy: str = schema.BUILTIN["host_key_policy"]
    connect_timeout: float = schema.BUILTIN["connect_timeout"]
    command_timeout: float = schema.BUILTIN["command_timeout"]
    workdir: str = schema.BUILTIN["workdir"]
    python: str = schema.BUILTIN["python"]
    venv: bool = schema.BUILTIN["venv"]
    npu: NpuSpec = field(default_factory=NpuSpec)
    install_path: str = ""
    #: the jump host this host is reached through (None: directly)
    jump: JumpSpec | None = None

    def __post_init__(self) -> None:
        if not self.ssh_ip:
            object.__setattr__(self, "ssh_ip", self.manage_nic.ip)
        if not self.install_path:
            object.__setattr__(self, "install_path", f"{self.workdir.rstrip('/')}/opp")
        if self.isolcpu and not self.isolcpu_list:
            object.__setattr__(self, "isolcpu_list", parse_cpu_list(self.isolcpu))

    @property
    def address(self) -> str:
        """``ssh_ip:ssh_port``."""
        return f"{self.ssh_ip}:{self.ssh_port}"

    @property
    def route(self) -> str:
        """``ssh_ip:ssh_port``, with `` via <jump>`` when reached through a jump host."""
        return f"{self.address} via {self.jump.display}" if self.jump else self.address

    @property
    def test_ip(self) -> str:
        """The data-plane address: ``test_nic1.ip`` when set, else ``manage_nic.ip``."""
        if self.test_nic1 is not None and self.test_nic1.ip:
            return self.test_nic1.ip
        return self.manage_nic.ip


@dataclass(frozen=True, eq=False, repr=False)
class EnvConfig:
    """A loaded environment: hosts in file order plus cluster-wide settings."""

    path: Path
    source: str
    hosts: Mapping[str, HostSpec]
    defaults: Defaults
    cann: CannSpec | None
    artifacts: ArtifactsSpec
    launch: LaunchSpec
    relay: bool
    #: what the loader found questionable but not wrong (each names its key path); logged at load
    warnings: tuple[str, ...] = ()

    @property
    def max_parallel(self) -> int:
        return self.defaults.max_parallel

    def select(self, names: Sequence[str] | None) -> list[HostSpec]:
        """The named hosts in the order given (``None``: all, in file order).

        Raises:
            ConfigError: a name is not in ``host_info``.
        """
        if names is None:
            return list(self.hosts.values())
        unknown = [n for n in names if n not in self.hosts]
        if unknown:
            known = ", ".join(self.hosts)
            raise ConfigError(self.source, "host_info", f"unknown host {unknown[0]!r} (known: {known})")
        return [self.hosts[n] for n in dict.fromkeys(names)]

    def redacted(self) -> dict[str, Any]:
        """The effective document as plain JSON-serialisable data, secrets as ``"***"``.

        It has the shape of a ``test_env.yaml`` (it validates against the schema); unset keys
        are left out.
        """
        d = self.defaults
        doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "defaults": _prune(
                {
                    "user": d.user,
                    "key_file": d.key_file,
                    "host_key": d.host_key,
                    "workdir": d.workdir,
                    "python": d.python,
                    "venv": d.venv,
                    "npu": _npu_doc(d.npu),
                    "known_hosts": d.known_hosts,
                    "host_key_policy": d.host_key_policy,
                    "connect_timeout": d.connect_timeout,
                    "command_timeout": d.command_timeout,
                    "max_parallel": d.max_parallel,
                    "ssh_config": d.ssh_config,
                    "jump_host": d.jump_host,
                }
            ),
            "host_info": {name: _host_doc(h) for name, h in self.hosts.items()},
            "cann": _cann_doc(self.cann),
            "artifacts": _prune(vars(self.artifacts)) or None,
            "launch": _prune(
                {
                    "backend": self.launch.backend,
                    "master_port": self.launch.master_port,
                    "nproc_per_node": self.launch.nproc_per_node,
                    "env": {k: str(v) for k, v in self.launch.env.items()} or None,
                }
            ),
            "relay": self.relay,
        }
        return _prune(doc)

    def summary_rows(self) -> list[dict[str, str]]:
        """One row per host for a table: name, address, user, auth, host_key, workdir, npu."""
        return [
            {
                "name": h.name,
                "address": h.route,
                "user": h.user,
                "auth": _auth(h),
                "host_key": _host_key_check(h),
                "workdir": h.workdir,
                "npu": h.npu.describe(),
            }
            for h in self.hosts.values()
        ]

    def __repr__(self) -> str:
        return f"<EnvConfig {self.source}: {len(self.hosts)} host(s) {', '.join(self.hosts)}>"


def _auth(h: HostSpec) -> str:
    """How camit logs in: its key file, its password (shown as a Secret), or the agent."""
    if h.key_file is not None:
        return f"key {h.key_file}"
    if h.password is not None:
        return f"password {h.password}"
    return "agent"


def _host_key_check(h: HostSpec) -> str:
    """How the host's key is checked: pinned in the env, not at all, or against known_hosts."""
    if h.host_key:
        return "pinned"
    return "not checked (insecure)" if h.host_key_policy == "insecure" else "known_hosts"


def _cann_doc(cann: CannSpec | None) -> dict[str, Any] | None:
    if cann is None:
        return None
    return _prune({"set_env": cann.set_env, "extra_set_env": list(cann.extra_set_env) or None})


def _npu_doc(npu: NpuSpec) -> dict[str, Any]:
    return _prune({"count": npu.count, "soc": npu.soc, "visible": list(npu.visible) if npu.visible else None})


def _nic_doc(nic: NicSpec | TestNicSpec | None) -> dict[str, Any] | None:
    return _prune(vars(nic)) if nic is not None else None


def _host_doc(h: HostSpec) -> dict[str, Any]:
    return _prune(
        {
            "user": h.user,
            "passwd": str(h.password) if h.password is not None else None,
            "manage_nic": _nic_doc(h.manage_nic),
            "ssh_ip": h.ssh_ip,
            "ssh_port": h.ssh_port,
            "test_nic1": _nic_doc(h.test_nic1),
            "test_nic2": _nic_doc(h.test_nic2),
            "bmc": h.bmc,
            "isolcpu": h.isolcpu,
            "env_type": h.env_type,
            "arch": h.arch,
            "key_file": h.key_file,
            "host_key": h.host_key,
            "workdir": h.workdir,
            "python": h.python,
            "venv": h.venv,
            "npu": _npu_doc(h.npu),
            "jump_host": h.jump.display if h.jump else None,
        }
    )


def _prune(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Drop ``None`` values, turn paths into strings."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in doc.items() if v is not None}


# --------------------------------------------------------------------------- loading


class _Reporter:
    """Makes ConfigErrors for one file, scrubbing every known secret from the text; collects the
    file's problems (``add``) so that ``raise_problems`` reports all of them at once, a line each."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.secrets: set[str] = set()
        self.problems: list[tuple[str | None, str]] = []

    def add(self, key_path: str | None, problem: str) -> None:
        self.problems.append((key_path, problem))

    def raise_problems(self) -> None:
        """One ConfigError naming the first problem's key path, a line per problem (_MAX_LINES)."""
        if not self.problems:
            return
        (key_path, first), rest = self.problems[0], self.problems[1:_MAX_LINES]
        src = self.source
        lines = [first] + [f"{src}: {p}: {m}" if p else f"{src}: {m}" for p, m in rest]
        if len(self.problems) > _MAX_LINES:
            lines.append(f"{src}: ... and {len(self.problems) - _MAX_LINES} more problem(s)")
        raise self.error(key_path, "\n".join(lines))

    def error(self, key_path: str | None, problem: str) -> ConfigError:
        # Messages are built so as never to quote a secret; this is the second line of defence.
        for secret in sorted(self.secrets, key=len, reverse=True):
            if len(secret) >= 4:
                problem = problem.replace(secret, "***")
                key_path = key_path.replace(secret, "***") if key_path else key_path
        return ConfigError(self.source, key_path or None, problem)


def load(path: str | os.PathLike[str] = DEFAULT_ENV_PATH, environ: Mapping[str, str] | None = None) -> EnvConfig:
    """Load, validate and resolve one environment file.

    Args:
        path: the YAML file; relative paths inside it are resolved against its directory.
        environ: variables for ``${VAR}`` expansion and ``~`` (default: ``os.environ``).

    Raises:
        ConfigError: the file cannot be read or is invalid; one error, naming file and key path.

    Example::

        env = load("env/test_env.yaml")
        for host in env.select(["node1", "node2"]):
            print(host.address, host.npu.describe())
    """
    source = os.fspath(path)
    env_vars: Mapping[str, str] = os.environ if environ is None else environ
    report = _Reporter(source)
    data = parse_yaml(read_text(source, report.error), report.error)
    expanded: set[Loc] = set()
    unexpanded: set[str] = set()
    data = _expand(data, (), _Expansion(env_vars, expanded, unexpanded, [MAX_CHARS]), report)
    report.secrets.update(_secret_values(data, expanded))
    ignored = [f"{source}: {w}" for w in legacy.tolerate(data)]  # harness-only keys: warnings
    for warning in ignored:
        log.warning("%s", warning)
    doc = _validate(data, report, unexpanded)
    env = _resolve(doc, Path(os.path.abspath(source)), env_vars, expanded, report)
    report.raise_problems()
    return dataclasses.replace(env, warnings=(*ignored, *env.warnings)) if ignored else env


@dataclass(frozen=True)
class _Expansion:
    environ: Mapping[str, str]
    expanded: set[Loc]
    failed: set[str]  # key paths whose ${VAR} could not be expanded
    budget: list[int]


def _expand(value: Any, loc: Loc, how: _Expansion, report: _Reporter) -> Any:
    """``${VAR}`` in every value; a value's problem is collected and the value left as written."""
    if isinstance(value, dict):
        return {k: _expand(v, (*loc, k), how, report) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, (*loc, i), how, report) for i, v in enumerate(value)]
    try:
        return expand_vars(value, how.environ, how.expanded, report.error, loc, how.budget)
    except ConfigError as exc:
        if len(report.problems) >= _MAX_LINES:
            report.raise_problems()
        report.add(exc.key_path, exc.problem)
        how.failed.add(schema.dotted(loc))
        return value


def _secret_values(data: dict[str, Any], expanded: set[Loc]) -> set[str]:
    """Every value that will become a Secret (and typos of ``passwd``), to scrub from messages."""
    found = _host_secrets(data.get("host_info")) | _env_secrets(data.get("launch"), expanded)
    return {s for s in found if s}


def _host_secrets(hosts: object) -> set[str]:
    """Every host's ``passwd`` (and its typos) that is text or a number."""
    if not isinstance(hosts, dict):
        return set()
    keys = ("passwd", *schema.KNOWN_TYPOS)
    return {str(host[k]) for host in hosts.values() if isinstance(host, dict)
            for k in keys if isinstance(host.get(k), str | int)}


def _env_secrets(launch: object, expanded: set[Loc]) -> set[str]:
    """The scalar values of ``launch.env`` that become Secrets (by their name, or a ``${VAR}``)."""
    env = launch.get("env") if isinstance(launch, dict) else None
    if not isinstance(env, dict):
        return set()
    return {str(value) for name, value in env.items()
            if _is_secret_env(str(name), ("launch", "env", name), expanded)
            and not isinstance(value, dict | list)}


def _is_secret_env(name: str, loc: Loc, expanded: set[Loc]) -> bool:
    return bool(_SECRET_NAME.search(name)) or loc in expanded


def _validate(data: dict[str, Any], report: _Reporter, unexpanded: set[str]) -> schema.EnvDocument:
    """The document, or every problem so far raised at once (a ${VAR} that failed: that one only)."""
    doc: schema.EnvDocument | None = None
    try:
        doc = schema.validate(data)
    except schema.DocumentInvalid as exc:
        report.problems += [(p, m) for p, m in exc.problems if p not in unexpanded]
    # raised outside the except block so the ValidationError (holding the input) is not chained
    if doc is None:
        report.raise_problems()
        raise AssertionError("an invalid document without problems")  # pragma: no cover
    return doc  # the problems of ${VAR}s so far are raised with the later ones, at the end of load


# --------------------------------------------------------------------------- effective values


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _defaults(d: schema.DefaultsModel, base: Path, environ: Mapping[str, str],
              ssh_config: SshConfigFile | None) -> Defaults:
    """The env's ``defaults``, each unset key at camit's built-in value."""
    dnpu = d.npu or schema.NpuModel()
    return Defaults(
        user=_first(d.user, schema.BUILTIN["user"]),
        key_file=Path(controller_path(d.key_file, base, environ)) if d.key_file is not None else None,
        host_key=d.host_key,
        workdir=_first(d.workdir, schema.BUILTIN["workdir"]),
        python=_first(d.python, schema.BUILTIN["python"]),
        venv=_first(d.venv, schema.BUILTIN["venv"]),
        npu=NpuSpec(
            count=_first(dnpu.count, schema.BUILTIN["npu.count"]),
            soc=_first(dnpu.soc, schema.BUILTIN["npu.soc"]),
            visible=tuple(dnpu.visible) if dnpu.visible is not None else None,
        ),
        known_hosts=Path(controller_path(_first(d.known_hosts, schema.BUILTIN["known_hosts"]), base, environ)),
        host_key_policy=_first(d.host_key_policy, schema.BUILTIN["host_key_policy"]),
        connect_timeout=float(_first(d.connect_timeout, schema.BUILTIN["connect_timeout"])),
        command_timeout=float(_first(d.command_timeout, schema.BUILTIN["command_timeout"])),
        max_parallel=_first(d.max_parallel, schema.BUILTIN["max_parallel"]),
        ssh_config=ssh_config.path if ssh_config else None,
        jump_host=d.jump_host,
    )


def _resolve(
    doc: schema.EnvDocument, path: Path, environ: Mapping[str, str], expanded: set[Loc], report: _Reporter
) -> EnvConfig:
    base = path.parent
    d = doc.defaults or schema.DefaultsModel()

    def local(value: str | None) -> Path | None:
        return Path(controller_path(value, base, environ)) if value is not None else None

    ssh_config, warnings = _ssh_config(d, base, environ, report)
    defaults = _defaults(d, base, environ, ssh_config)
    artifacts = _artifacts(doc.artifacts or schema.ArtifactsModel(), base, environ)
    hosts: dict[str, HostSpec] = {}
    for name, model in doc.host_info.items():
        hosts[name] = _host(name, model, d, defaults, artifacts, local, report, ssh_config)
    _check_addresses(hosts, report)
    launch = doc.launch or schema.LaunchModel()
    _check_rendezvous_nic(hosts, _first(launch.rendezvous_nic, "manage_nic"), report)
    env = _launch_env(launch.env or {}, expanded)
    return EnvConfig(
        path=path,
        source=report.source,
        hosts=MappingProxyType(hosts),
        defaults=defaults,
        cann=_cann(doc.cann),
        artifacts=artifacts,
        launch=LaunchSpec(
            backend=_first(launch.backend, schema.BUILTIN["backend"]),
            master_port=launch.master_port,
            nproc_per_node=launch.nproc_per_node,
            env=MappingProxyType(env),
            rendezvous_nic=_first(launch.rendezvous_nic, "manage_nic"),
        ),
        relay=_first(doc.relay, schema.BUILTIN["relay"]),
        warnings=tuple(warnings + _launch_warnings(launch, env, report)),
    )


def _artifacts(art: schema.ArtifactsModel, base: Path, environ: Mapping[str, str]) -> ArtifactsSpec:
    """The env's ``artifacts``, their controller paths resolved against the env file's folder."""
    def local(value: str | None) -> str | None:
        return controller_path(value, base, environ) if value else None

    return ArtifactsSpec(run_package=local(art.run_package), wheel=local(art.wheel),
                         install_path=art.install_path)


def _launch_env(env: Mapping[str, str], expanded: set[Loc]) -> dict[str, str | Secret]:
    """``launch.env`` with each secret value (by its name, or a ``${VAR}``) held as a Secret."""
    return {k: Secret(v) if _is_secret_env(k, ("launch", "env", k), expanded) else v
            for k, v in env.items()}


def _cann(cann: schema.CannModel | None) -> CannSpec | None:
    if cann is None:
        return None
    return CannSpec(set_env=cann.set_env, extra_set_env=tuple(cann.extra_set_env or ()))


def _launch_warnings(launch: schema.LaunchModel, env: Mapping[str, Any], report: _Reporter) -> list[str]:
    """The timeout order of ``launch.env`` (warnings), its master port against HCCL's ports (an error)."""
    plain = {k: str(v) for k, v in env.items() if not isinstance(v, Secret)}
    clash = _master_port_clash(launch, hccl_host_ports(plain))
    if clash:
        report.add("launch.master_port", clash)
    return _logged([f"{report.source}: {w}" for w in order_problems(plain)])


def _logged(warnings: list[str]) -> list[str]:
    """``warnings``, each logged as it is (the env's warnings are shown once loaded, and logged)."""
    for w in warnings:
        log.warning("%s", w)
    return warnings


def _master_port_clash(launch: schema.LaunchModel, ports: range) -> str | None:
    """On hccl, ``launch.master_port`` may not be one of HCCL's host ports (it would take one)."""
    backend = _first(launch.backend, schema.BUILTIN["backend"])
    if backend != "hccl" or launch.master_port is None or launch.master_port not in ports:
        return None
    return (f"{launch.master_port} is one of HCCL's host ports ({ports.start}-{ports.stop - 1}, "
            "from HCCL_IF_BASE_PORT): pick another, or null to let camit choose")


def _check_rendezvous_nic(hosts: Mapping[str, HostSpec], which: str, report: _Reporter) -> None:
    """Every host needs the address of the NIC role the rendezvous uses."""
    for host in hosts.values():
        nic = getattr(host, which)
        if nic is None or not nic.ip:
            report.add(f"host_info.{host.name}.{which}",
                       f"launch.rendezvous_nic is {which}, but host {host.name!r} has no {which}.ip")


def _ssh_config(d: schema.DefaultsModel, base: Path, environ: Mapping[str, str],
                report: _Reporter) -> tuple[SshConfigFile | None, list[str]]:
    """The ssh_config file to honour (None: none) and the warnings about it."""
    path, named = find_ssh_config(d.ssh_config, base, environ)
    if path is None:
        return None, []
    key, origin = _ssh_config_origin(d, named)
    if named and not path.is_file():
        report.add(key, f"ssh_config {path}{origin} does not exist "
                        "(set defaults.ssh_config: none to read none)")
        return None, []
    try:
        parsed = SshConfigFile(path)
    except ValueError as exc:
        report.add(key, f"{exc}{origin}")
        return None, []
    return parsed, _logged([f"{report.source}: ssh_config {path}: {what} is not followed by camit "
                            "(only this file is read)" for what in parsed.ignored])


def _ssh_config_origin(d: schema.DefaultsModel, named: bool) -> tuple[str | None, str]:
    """(key path, origin note) of the ssh_config file: ``defaults.ssh_config``, else the environment
    variable that named it, else the default file (no key, no note)."""
    if d.ssh_config is not None:
        return "defaults.ssh_config", ""
    return None, f" (from ${SSH_CONFIG_ENV})" if named else ""


def _ssh_lookup(cfg: SshConfigFile | None, name: str, key_path: str, report: _Reporter) -> SshHostConfig:
    if cfg is None:
        return SshHostConfig()
    try:
        found = cfg.lookup(name)
    except ValueError as exc:
        report.add(key_path, str(exc))
        return SshHostConfig()
    if found.hostname is not None and not schema.is_address_or_name(found.hostname):
        report.add(key_path, f"ssh_config {cfg.path} (Host {name}): HostName {found.hostname!r} is not an "
                             "IPv4 address or host name")
        return SshHostConfig()
    return found


def _jump(name: str, h: schema.HostModel, d: schema.DefaultsModel, found: SshHostConfig, lookup: str,
          user: str, key_file: Path | None, cfg: SshConfigFile | None, report: _Reporter) -> JumpSpec | None:
    """The host's jump host: its own ``jump_host``, else ``defaults.jump_host``, else ssh_config's ProxyJump."""
    source = _jump_source(name, h, d, found, lookup, cfg)
    if source is None or source[0].lower() == schema.NO_JUMP:
        return None
    value, key, origin = source
    try:
        juser, jname, jport = schema.parse_jump(value)
    except ValueError as exc:  # only ssh_config's value gets here unchecked
        report.add(key, f"{origin}: {value!r} {exc}")
        return None
    jfound = _ssh_lookup(cfg, jname, key, report)
    if _another_hop(jfound, value, jname):
        assert cfg is not None
        report.add(key, f"jump host {jname!r} (from {origin}) has its own ProxyJump {jfound.proxy_jump!r} "
                        f"in ssh_config {cfg.path}; camit supports one jump host")
        return None
    return JumpSpec(
        address=jfound.hostname or jname,
        port=_first(jport, jfound.port, schema.BUILTIN["ssh_port"]),
        user=_first(juser, jfound.user, user),
        key_file=_first(jfound.identity_file, key_file),
        origin=origin,
    )


def _another_hop(jfound: SshHostConfig, value: str, jname: str) -> bool:
    """The jump host has a ProxyJump of its own (one naming itself does not count)."""
    return jfound.proxy_jump is not None and jfound.proxy_jump not in (value, jname)


def _jump_source(name: str, h: schema.HostModel, d: schema.DefaultsModel, found: SshHostConfig,
                 lookup: str, cfg: SshConfigFile | None) -> tuple[str, str, str] | None:
    """(value, key path, origin) of the jump host that applies to the host (None: none does)."""
    if h.jump_host is not None:
        return h.jump_host, f"host_info.{name}.jump_host", f"host_info.{name}.jump_host"
    if d.jump_host is not None:
        return d.jump_host, "defaults.jump_host", "defaults.jump_host"
    if found.proxy_jump is None:
        return None
    assert cfg is not None
    origin = f"ProxyJump of Host {lookup} in ssh_config {cfg.path}"
    return found.proxy_jump, f"host_info.{name}", origin


def _host_npu(name: str, hnpu: schema.NpuModel, defaults: Defaults, report: _Reporter) -> NpuSpec:
    """A host's NPUs (its keys, else the defaults'); a visible device out of range is a problem on its key."""
    npu = NpuSpec(
        count=_first(hnpu.count, defaults.npu.count),
        soc=_first(hnpu.soc, defaults.npu.soc),
        visible=tuple(hnpu.visible) if hnpu.visible is not None else defaults.npu.visible,
    )
    if npu.count > 0 and npu.visible:
        where = f"host_info.{name}.npu.visible" if hnpu.visible is not None else "defaults.npu.visible"
        _check_visible(name, npu, where, report)
    return npu


def _check_visible(name: str, npu: NpuSpec, where: str, report: _Reporter) -> None:
    """Each visible device past ``npu.count`` is a problem on the key that listed it."""
    for dev in (d for d in npu.visible or () if d >= npu.count):
        report.add(where, f"device {dev} is out of range: host {name!r} has npu.count {npu.count} "
                          f"(devices 0..{npu.count - 1})")


def _test_nic(model: schema.TestNicModel | None) -> TestNicSpec | None:
    return TestNicSpec(**model.model_dump()) if model else None


def _host(
    name: str,
    h: schema.HostModel,
    d: schema.DefaultsModel,
    defaults: Defaults,
    artifacts: ArtifactsSpec,
    local: Callable[[str | None], Path | None],
    report: _Reporter,
    ssh_config: SshConfigFile | None = None,
) -> HostSpec:
    npu = _host_npu(name, h.npu or schema.NpuModel(), defaults, report)
    workdir = _first(h.workdir, defaults.workdir)
    # explicit values (the host's, then defaults:) win over ssh_config's, which win over the built-in ones
    lookup = _first(h.ssh_ip, h.manage_nic.ip)
    found = _ssh_lookup(ssh_config, lookup, f"host_info.{name}", report)
    user = _first(h.user, d.user, found.user, schema.BUILTIN["user"])
    key_file = _first(local(h.key_file), defaults.key_file, found.identity_file)
    return HostSpec(
        name=name,
        user=user,
        password=Secret(h.passwd) if h.passwd is not None else None,
        ssh_ip=found.hostname or lookup,
        ssh_port=_first(h.ssh_port, found.port, schema.BUILTIN["ssh_port"]),
        manage_nic=NicSpec(name=h.manage_nic.name, ip=h.manage_nic.ip, mac=h.manage_nic.mac),
        test_nic1=_test_nic(h.test_nic1),
        test_nic2=_test_nic(h.test_nic2),
        bmc=h.bmc,
        isolcpu=h.isolcpu,
        isolcpu_list=parse_cpu_list(h.isolcpu) if h.isolcpu else (),
        env_type=h.env_type,
        arch=h.arch,
        key_file=key_file,
        host_key=_first(h.host_key, defaults.host_key),
        known_hosts=defaults.known_hosts,
        host_key_policy=defaults.host_key_policy,
        connect_timeout=defaults.connect_timeout,
        command_timeout=defaults.command_timeout,
        workdir=workdir,
        python=_first(h.python, defaults.python),
        venv=_first(h.venv, defaults.venv),
        npu=npu,
        install_path=_first(artifacts.install_path, f"{workdir.rstrip('/')}/opp"),
        jump=_jump(name, h, d, found, lookup, user, key_file, ssh_config, report),
    )


def _check_addresses(hosts: Mapping[str, HostSpec], report: _Reporter) -> None:
    """Two entries reaching the same sshd are one machine counted twice: refuse."""
    seen: dict[tuple[str, int, str], str] = {}
    for host in hosts.values():
        key = (host.ssh_ip.lower().rstrip("."), host.ssh_port, host.jump.display if host.jump else "")
        if key in seen:
            report.add(f"host_info.{host.name}", f"hosts {seen[key]!r} and {host.name!r} have the same SSH "
                                                 f"address {host.route} (ssh_ip defaults to manage_nic.ip)")
            continue
        seen[key] = host.name
