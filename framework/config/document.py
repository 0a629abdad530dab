"""The document model of ``test_env.yaml``: what a well-formed file is, and what to say when
it is not."""

from __future__ import annotations

import argparse
import base64
import binascii
import difflib
import functools
import ipaddress
import json
import posixpath
import re
import struct
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, cast, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, WithJsonSchema
from pydantic_core import PydanticCustomError

from framework.remote.layout import DEFAULT_WORKDIR

SCHEMA_VERSION = 1

#: a key path: mapping keys and list indices from the document root
Loc = tuple[Any, ...]

HOST_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
ISOLCPU_RE = r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$"
#: ``ssh_ip`` may be a name: RFC 1123 labels, the last one not all digits (so 10.0.0.300 is no name)
_HOSTNAME_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_MAC = re.compile(r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}|[0-9A-Fa-f]{2}(-[0-9A-Fa-f]{2}){5}")

HOST_KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
_HOST_KEY_PATTERN = "^(" + "|".join(map(re.escape, HOST_KEY_TYPES)) + ") +[A-Za-z0-9+/]+=*( .*)?$"
Soc = Literal["ascend910b", "ascend910_93", "cpu"]
Backend = Literal["hccl", "nccl", "gloo"]
#: the NIC roles the rendezvous may use (framework.ascend.nic.RENDEZVOUS_NICS)
RendezvousNic = Literal["manage_nic", "test_nic1", "test_nic2"]
HostKeyPolicy = Literal["strict", "accept-new", "insecure"]

#: built-in values used when neither the host nor ``defaults:`` sets a key
BUILTIN: dict[str, Any] = {
    "user": "root",
    "ssh_port": 22,
    "workdir": DEFAULT_WORKDIR,
    "python": "python3",
    "venv": True,
    "npu.count": 0,
    "npu.soc": "cpu",
    "known_hosts": "~/.ssh/known_hosts",
    "host_key_policy": "strict",
    "connect_timeout": 10.0,
    "command_timeout": 600.0,
    "max_parallel": 32,
    "backend": "hccl",
    "relay": True,
}

#: the most NPUs a host may declare, and ranks per node (an Ascend host has 8 or 16)
MAX_DEVICES = 1024
#: the longest timeout, in seconds (a week; Python's waits overflow on much larger ones)
MAX_TIMEOUT = 7 * 24 * 3600.0

#: keys people mistype that difflib would not always catch (the URMA sample itself says ``passed``)
KNOWN_TYPOS = {"passed": "passwd", "password": "passwd"}


# --------------------------------------------------------------------------- value validators


def _wrong_type(expected: str) -> PydanticCustomError:
    # _translate() adds ", got <value>" (it knows whether the value may be shown)
    return PydanticCustomError("wrong_type", "expected {expected}", {"expected": expected})


def _int_not_bool(value: object) -> object:
    if isinstance(value, bool):
        raise _wrong_type("an integer")
    return value


def _float_not_bool(value: object) -> object:
    if isinstance(value, bool):
        raise _wrong_type("a number")
    return value


def _loose_str(value: object) -> object:
    """Legacy files write ``gid: 3`` or ``passwd: 123456``: accept integers as their text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise _wrong_type("a string (quote the value)")
    return value


def _ipv4(value: str) -> str:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        raise PydanticCustomError("ipv4", "{value} is not an IPv4 address", {"value": _describe(value)}) from None
    return value


def _ipv6(value: str) -> str:
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        raise PydanticCustomError("ipv6", "{value} is not an IPv6 address", {"value": _describe(value)}) from None
    return value


def is_hostname(value: str) -> bool:
    """True for an RFC 1123 host name (``node-1.lab``); an all-numeric last label is not a name."""
    name = value[:-1] if value.endswith(".") else value
    labels = name.split(".")
    if not name or len(name) > 253 or labels[-1].isdigit():
        return False
    return all(_HOSTNAME_LABEL.fullmatch(label) for label in labels)


def is_address_or_name(value: str) -> bool:
    """True for an IPv4 address or an RFC 1123 host name (what ssh connects to)."""
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return is_hostname(value)
    return True


def _ssh_target(value: str) -> str:
    if not is_address_or_name(value):
        raise PydanticCustomError(
            "ssh_target", "{value} is not an IPv4 address or host name", {"value": _describe(value)}
        )
    return value


#: ``jump_host:``: ``[user@]host[:port]`` (host an IPv4 address or a name, e.g. an ssh_config alias), or ``none``
JUMP_HOST_RE = r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?[A-Za-z0-9.-]+(?::[0-9]{1,5})?$"
NO_JUMP = "none"


def parse_jump(value: str) -> tuple[str | None, str, int | None]:
    """``"ci@bastion:2222"`` -> ``("ci", "bastion", 2222)``; user and port ``None`` when not given.

    Raises:
        ValueError: not ``[user@]host[:port]`` (the message says what is wrong).
    """
    if not re.fullmatch(JUMP_HOST_RE, value):
        raise ValueError("is not a jump host like 'bastion', 'ci@10.0.0.1' or 'ci@bastion:2222'")
    user, _, rest = value.rpartition("@")
    host, _, port = rest.partition(":")
    if not is_address_or_name(host):
        raise ValueError(f"names {host!r}, which is not an IPv4 address or host name")
    return user or None, host, _jump_port(port)


def _jump_port(port: str) -> int | None:
    """The port after a jump host's ``:`` (None when not given); ValueError outside 1-65535."""
    if not port:
        return None
    number = int(port)
    if not 1 <= number <= 65535:
        raise ValueError(f"has port {number}, which is not between 1 and 65535")
    return number


def _jump_host(value: str) -> str:
    if value.lower() == NO_JUMP:
        return NO_JUMP
    try:
        parse_jump(value)
    except ValueError as exc:
        raise PydanticCustomError("jump_host", "{value} {why}", {"value": _describe(value), "why": str(exc)}) from None
    return value


def _mac(value: str) -> str:
    if not _MAC.fullmatch(value):
        raise PydanticCustomError(
            "mac", "{value} is not a MAC address like 52:54:00:12:34:56", {"value": _describe(value)}
        )
    return value


def _abs_posix(value: str) -> str:
    if not value.startswith("/") or "\0" in value or "\n" in value:
        raise PydanticCustomError(
            "abs_path", "{value} is not an absolute path on the host", {"value": _describe(value)}
        )
    return "/" + posixpath.normpath(value).lstrip("/")  # normpath keeps POSIX's "//"


#: what a workdir may not be, exactly: the root, the FHS system directories, the shared scratch roots (anyone
#: may create camit's folder in them first) and the home roots; a folder below them (``/var/tmp/camit``,
#: ``/home/ci/camit``, ``/opt/camit``) is fine
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found", "/media",
    "/mnt", "/opt", "/root", "/run", "/run/lock", "/run/shm", "/run/user", "/sbin", "/snap", "/srv", "/tmp",
    "/usr", "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/libx32",
    "/usr/local", "/usr/local/bin", "/usr/local/etc", "/usr/local/include", "/usr/local/lib",
    "/usr/local/sbin", "/usr/local/share", "/usr/local/src", "/usr/sbin", "/usr/share", "/usr/src",
    "/var", "/var/backups", "/var/cache", "/var/crash", "/var/lib", "/var/local", "/var/lock", "/var/log",
    "/var/mail", "/var/opt", "/var/run", "/var/spool", "/var/tmp",
})
#: trees a workdir may not be in at all: the kernel's and the devices' file systems
SYSTEM_TREES = ("/dev", "/proc", "/sys")


def _workdir(value: str) -> str:
    if value in SYSTEM_DIRS or any(value == tree or value.startswith(tree + "/") for tree in SYSTEM_TREES):
        raise PydanticCustomError(
            "system_dir",
            "{value} is a system, shared or home root directory, not a workdir: use a folder of camit's own "
            "below it, such as /var/tmp/camit",
            {"value": _describe(value)},
        )
    return value


def _local_path(value: str) -> str:
    if not value or "\0" in value:
        raise PydanticCustomError("path", "must be a non-empty path", {})
    return value


#: the highest CPU number an ``isolcpu`` list may name (Linux's NR_CPUS is at most 4096 on arm64 and 8192 on x86)
MAX_CPU = 8191


class CpuOutOfRange(ValueError):
    """A CPU number of an ``isolcpu`` list is above :data:`MAX_CPU`."""


@functools.lru_cache(maxsize=256)
def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``"1-3,8"`` -> ``(1, 2, 3, 8)`` (sorted, without repeats); ValueError on bad syntax.

    Raises:
        CpuOutOfRange: a number above :data:`MAX_CPU` (checked before any range is built).
        ValueError: not a CPU list, or a range whose start is above its end.
    """
    if not re.fullmatch(ISOLCPU_RE, text):
        raise ValueError(text)
    # every part is checked before any range is built
    bounds = [_cpu_range(part) for part in text.split(",")]
    return tuple(sorted({cpu for first, last in bounds for cpu in range(first, last + 1)}))


def _cpu_range(part: str) -> tuple[int, int]:
    """One part of a CPU list (``8`` or ``1-3``) as its first and last CPU."""
    lo, _, hi = part.partition("-")
    for number in (lo, hi):
        if _above_max_cpu(number):
            raise CpuOutOfRange(number)
    first, last = int(lo), int(hi or lo)
    if first > last:
        raise ValueError(part)
    return first, last


def _above_max_cpu(number: str) -> bool:
    """Whether the digits ``number`` name a CPU above :data:`MAX_CPU` (judged by length first: no
    huge int is built)."""
    return len(number) > len(str(MAX_CPU)) or (bool(number) and int(number) > MAX_CPU)


def _isolcpu(value: str) -> str:
    try:
        parse_cpu_list(value)
    except CpuOutOfRange as exc:
        shown = str(exc) if len(str(exc)) <= 20 else f"{str(exc)[:12]}... ({len(str(exc))} digits)"
        raise PydanticCustomError(
            "isolcpu", "CPU {cpu} is out of range: CPU numbers go up to {top}", {"cpu": shown, "top": MAX_CPU}
        ) from None
    except ValueError:
        raise PydanticCustomError(
            "isolcpu", "{value} is not a CPU list like '1-10,20,30'", {"value": _describe(value)}
        ) from None
    return value


def _host_key(value: str) -> str:
    """Accept ``<type> <base64> [comment]``; return ``<type> <base64>``.

    The blob is decoded and its embedded key type must match the declared one, which catches
    truncated pastes and keys copied from the wrong line.
    """
    parts = value.split()
    if len(parts) < 2 or parts[0] not in HOST_KEY_TYPES:
        raise PydanticCustomError(
            "host_key",
            "expected a public key line like 'ssh-ed25519 AAAA...' (key types: {types})",
            {"types": ", ".join(HOST_KEY_TYPES)},
        )
    kind, blob = parts[0], parts[1]
    embedded, has_key = _key_type_of(kind, blob)
    if embedded != kind or not has_key:
        raise PydanticCustomError(
            "host_key", "the key data does not match {kind}: it holds {held}",
            {"kind": repr(kind), "held": _held_key_type(embedded)}
        )
    return f"{kind} {blob}"


def _held_key_type(embedded: str) -> str:
    """The key type a blob holds, for a message (``no key type`` when empty or not printable)."""
    return _describe(embedded) if embedded.isprintable() and embedded else "no key type"


def _key_type_of(kind: str, blob: str) -> tuple[str, bool]:
    """The key type a public key's base64 data names, and whether key data follows it."""
    try:
        raw = base64.b64decode(blob, validate=True)
        (length,) = struct.unpack(">I", raw[:4])
        return raw[4 : 4 + length].decode("ascii"), len(raw) > 4 + length
    except (binascii.Error, struct.error, UnicodeDecodeError, ValueError):
        raise PydanticCustomError("host_key", "the key data after {kind} is not valid base64",
                                  {"kind": repr(kind)}) from None


def _visible_before(value: object) -> object:
    """``"0,1,2"`` or ``3`` -> a list; the list itself is checked by the field type."""
    if isinstance(value, str):
        return _device_list(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return value


def _device_list(value: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``; only ASCII digits (``int()`` takes ``'²'`` too)."""
    items = [item.strip() for item in value.split(",")]
    if not all(re.fullmatch(r"[0-9]{1,9}", item) for item in items):
        raise PydanticCustomError(
            "visible", "{value} is not a device list like '0,1,2'", {"value": _describe(value)}
        )
    return [int(item) for item in items]


def _visible_after(value: list[int]) -> list[int]:
    if not value:
        raise PydanticCustomError("visible", "must list at least one device", {})
    seen: set[int] = set()
    for dev in value:
        if dev in seen:
            raise PydanticCustomError("visible", "device {dev} is listed twice", {"dev": dev})
        seen.add(dev)
    return value


def _env_value(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if not isinstance(value, str):
        raise _wrong_type("a string, number or boolean")
    return value


def _none_is_empty(value: object) -> object:
    return {} if value is None else value


def _some_hosts(value: dict[str, Any]) -> dict[str, Any]:
    if not value:
        raise PydanticCustomError("no_hosts", "no hosts defined (expected host1: {{...}}, ...)", {})
    return value


def _s(**schema: Any) -> WithJsonSchema:
    """The JSON Schema of a string field whose check is a Python function."""
    return WithJsonSchema({"type": "string", **schema})


LooseStr = Annotated[str, BeforeValidator(_loose_str, json_schema_input_type=str | int)]
NonEmptyStr = Annotated[LooseStr, Field(min_length=1)]
Port = Annotated[int, Field(ge=1, le=65535), BeforeValidator(_int_not_bool)]
DeviceCount = Annotated[int, Field(ge=0, le=MAX_DEVICES), BeforeValidator(_int_not_bool)]
DeviceId = Annotated[int, Field(ge=0, lt=MAX_DEVICES), BeforeValidator(_int_not_bool)]
Nproc = Annotated[int, Field(ge=1, le=MAX_DEVICES), BeforeValidator(_int_not_bool)]
Parallel = Annotated[int, Field(ge=1, le=1024), BeforeValidator(_int_not_bool)]
Timeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT, allow_inf_nan=False), BeforeValidator(_float_not_bool)]
IPv4 = Annotated[str, AfterValidator(_ipv4), _s(format="ipv4")]
IPv6 = Annotated[str, AfterValidator(_ipv6), _s(format="ipv6")]
SshTarget = Annotated[str, AfterValidator(_ssh_target), _s(anyOf=[{"format": "ipv4"}, {"format": "hostname"}])]
Mac = Annotated[str, AfterValidator(_mac), _s(pattern=f"^({_MAC.pattern})$")]
AbsPath = Annotated[str, AfterValidator(_abs_posix), _s(pattern="^/")]
Workdir = Annotated[str, AfterValidator(_abs_posix), AfterValidator(_workdir), _s(pattern="^/")]
LocalPath = Annotated[str, AfterValidator(_local_path), _s(minLength=1)]
HostKey = Annotated[str, AfterValidator(_host_key), _s(pattern=_HOST_KEY_PATTERN)]
JumpHost = Annotated[str, AfterValidator(_jump_host), _s(pattern=JUMP_HOST_RE)]
IsolCpu = Annotated[LooseStr, AfterValidator(_isolcpu),
                    WithJsonSchema({"type": ["string", "integer"], "pattern": ISOLCPU_RE})]
Visible = Annotated[
    list[DeviceId],
    BeforeValidator(_visible_before,
                    json_schema_input_type=list[Annotated[int, Field(ge=0, lt=MAX_DEVICES)]]
                    | Annotated[str, Field(pattern=r"^ *[0-9]+ *(, *[0-9]+ *)*$")]),
    AfterValidator(_visible_after),
]
HostName = Annotated[str, Field(pattern=HOST_NAME_RE)]
EnvName = Annotated[str, Field(pattern=ENV_NAME_RE)]
EnvValue = Annotated[str, BeforeValidator(_env_value, json_schema_input_type=str | int | float | bool)]


def _opt(description: str, default: Any = None) -> Any:
    """An optional field: ``None`` in the model (= inherit), the effective default in the schema."""
    extra = {"default": default} if default is not None else None
    return Field(default=None, description=description, json_schema_extra=extra)


# --------------------------------------------------------------------------- document sections


class _Section(BaseModel):
    """Base of every mapping in the file: frozen, and unknown keys are an error with a hint."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        known = list(cls.model_fields)
        problems = [unknown_key_message(key, known) for key in data if key not in cls.model_fields]
        if problems:
            raise PydanticCustomError("unknown_key", "{problems}", {"problems": "; ".join(problems)})
        return data


def unknown_key_message(key: object, known: list[str]) -> str:
    """``unknown key 'passed' (did you mean 'passwd'?)``, else the list of allowed keys."""
    guess = _meant(key, known) if isinstance(key, str) else None
    if guess:
        return f"unknown key {key!r} (did you mean {guess!r}?)"
    return f"unknown key {key!r} (allowed: {', '.join(known)})"


def _meant(key: str, known: list[str]) -> str | None:
    """The known key meant by ``key``: a known typo's fix, else the closest one, else None."""
    fix = KNOWN_TYPOS.get(key)
    if fix in known:
        return fix
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return close[0] if close else None


class ManageNicModel(_Section):
    """The management NIC: log identity of the host and default SSH target."""

    name: NonEmptyStr = Field(description="Management NIC name, e.g. enp1s0 (required).")
    ip: IPv4 = Field(description="Management IPv4 address (required); default for ssh_ip.")
    mac: Mac | None = _opt("MAC address (stored only).")


class TestNicModel(_Section):
    """A data-plane NIC (URMA ``test_nic1``/``test_nic2``); all stored, none required."""

    __test__ = False  # not a pytest class, despite the name

    name: LooseStr | None = _opt("Device name as shown by `urma_admin show`.")
    dev: LooseStr | None = _opt("Device name.")
    gid: LooseStr | None = _opt("GID index or value.")
    ip: IPv4 | None = _opt("IPv4 address of the NIC.")
    ipv6: IPv6 | None = _opt("IPv6 address of the NIC.")
    eid: LooseStr | None = _opt("EID as shown by `urma_admin show`.")


class NpuModel(_Section):
    """NPUs on a host; each key falls back to ``defaults.npu`` and then the built-in value."""

    count: DeviceCount | None = _opt("Number of NPUs (0 = none declared).", 0)
    soc: Soc | None = _opt("SoC family.", "cpu")
    visible: Visible | None = _opt("Device ids to use: a list or a '0,1,2' string; each < count when count > 0.")


class _HostKeys(_Section):
    """Keys a host may set and ``defaults:`` may set for every host."""

    user: NonEmptyStr | None = _opt("SSH user.", BUILTIN["user"])
    key_file: LocalPath | None = _opt("Private key on the controller; relative to this file's directory; ~ expanded.")
    host_key: HostKey | None = _opt("Pinned public host key, e.g. 'ssh-ed25519 AAAA...'.")
    workdir: Workdir | None = _opt(
        "Absolute working directory on the host; not / nor a system, shared (/tmp, /var/tmp) or home root "
        "(/home, /root) directory itself.", BUILTIN["workdir"])
    python: Annotated[str, Field(min_length=1, pattern=r"^\S+$")] | None = _opt(
        "Base Python interpreter on the host.", BUILTIN["python"]
    )
    venv: bool | None = _opt("Create a virtualenv under workdir.", BUILTIN["venv"])
    npu: NpuModel | None = _opt("NPU inventory.")
    jump_host: JumpHost | None = _opt(
        "Reach the host through this SSH jump host: '[user@]host[:port]' (host may be an ssh_config alias; user "
        "defaults to ssh_config's, then the host's user; port to ssh_config's, then 22), or 'none' (direct, "
        "overriding defaults.jump_host and ssh_config's ProxyJump). Its host key is checked against known_hosts "
        "with host_key_policy.")


class HostModel(_HostKeys):
    """One entry of ``host_info``: the URMA harness keys plus the camit extensions."""

    passwd: Annotated[str, BeforeValidator(_loose_str, json_schema_input_type=str | int)] | None = Field(
        default=None,
        repr=False,
        description="SSH password (prefer key_file; use ${VAR} to keep it out of the file).",
        json_schema_extra={"format": "password", "writeOnly": True},
    )
    manage_nic: ManageNicModel = Field(description="Management NIC (required).")
    ssh_ip: SshTarget | None = _opt("SSH target (IPv4 or host name); defaults to manage_nic.ip.")
    ssh_port: Port | None = _opt("SSH port.", BUILTIN["ssh_port"])
    test_nic1: TestNicModel | None = _opt("First test NIC.")
    test_nic2: TestNicModel | None = _opt("Second test NIC.")
    bmc: LooseStr | None = _opt("BMC address (stored only).")
    isolcpu: IsolCpu | None = _opt("Isolated CPU list like '1-10,20,30'.")
    env_type: LooseStr | None = _opt("Environment type (stored only).")
    arch: LooseStr | None = _opt("CPU architecture (stored only).")


class DefaultsModel(_HostKeys):
    """``defaults:``: per-host keys inherited by every host, plus cluster-wide connection settings."""

    known_hosts: LocalPath | None = _opt(
        "known_hosts file on the controller; relative to this file's directory.", BUILTIN["known_hosts"]
    )
    host_key_policy: HostKeyPolicy | None = _opt("Unknown host keys: reject, record, or ignore.",
                                                 BUILTIN["host_key_policy"])
    connect_timeout: Timeout | None = _opt("SSH connect timeout in seconds.", BUILTIN["connect_timeout"])
    command_timeout: Timeout | None = _opt("Default per-command timeout in seconds.", BUILTIN["command_timeout"])
    max_parallel: Parallel | None = _opt("Hosts contacted at once.", BUILTIN["max_parallel"])
    ssh_config: LocalPath | None = _opt(
        "OpenSSH client config read for HostName, User, Port, IdentityFile and ProxyJump (looked up by each "
        "host's ssh_ip; values set in this file win); relative to this file's directory; 'none' reads none. "
        "Default: $CAMIT_SSH_CONFIG, else ~/.ssh/config when it exists.")


class CannModel(_Section):
    """The CANN toolkit on the hosts."""

    set_env: AbsPath = Field(description="Absolute path of CANN's set_env.sh on the hosts.")
    extra_set_env: list[AbsPath] | None = _opt(
        "More set_env scripts on the hosts (SHMEM, ATB), sourced in order after CANN's and before the vendor's.")


class ArtifactsModel(_Section):
    """What deploy copies; globs are resolved at deploy time, not at load."""

    run_package: LocalPath | None = _opt("Operator .run package: local path or glob, relative to this file.")
    wheel: LocalPath | None = _opt("Python wheel: local path or glob, relative to this file.")
    install_path: AbsPath | None = _opt("Absolute install path on the hosts (default <workdir>/opp).")


class LaunchModel(_Section):
    """How torchrun is started on every node."""

    backend: Backend | None = _opt("torch.distributed backend.", BUILTIN["backend"])
    master_port: Port | None = _opt("Rendezvous port; null = chosen at launch (outside HCCL's host ports, "
                                    "HCCL_IF_BASE_PORT and the 31 after it).")
    rendezvous_nic: RendezvousNic | None = _opt(
        "The NIC of each host whose address the rendezvous (node 0's) and HCCL_IF_IP use: a NIC that carries "
        "TCP. Every host needs that NIC's ip.", "manage_nic")
    nproc_per_node: Nproc | None = _opt("Processes per node; null = from npu.count.")
    env: Annotated[dict[EnvName, EnvValue], Field(json_schema_extra={"additionalProperties": False})] | None = Field(
        default=None, repr=False, description="Extra environment for every rank; values become strings."
    )


class EnvDocument(_Section):
    """The whole ``test_env.yaml``."""

    schema_version: Literal[1] | None = _opt("Version of this format.", SCHEMA_VERSION)
    host_info: Annotated[
        dict[HostName, HostModel],
        BeforeValidator(_none_is_empty, json_schema_input_type=dict[HostName, HostModel]),
        AfterValidator(_some_hosts),
        Field(json_schema_extra={"minProperties": 1, "additionalProperties": False}),
    ] = Field(description="Hosts by name, in order (required, at least one).")
    defaults: DefaultsModel | None = _opt("Values every host inherits, and cluster-wide settings.")
    cann: CannModel | None = _opt("CANN toolkit location on the hosts.")
    artifacts: ArtifactsModel | None = _opt("Packages to deploy.")
    launch: LaunchModel | None = _opt("torchrun settings.")
    relay: bool | None = _opt(
        "Deploy artifacts through the relay chain (controller -> host1 -> host2 -> ..., each host writing "
        "while forwarding) when two or more hosts need one; false pushes directly from the controller to "
        "every host (as `camit deploy --no-relay`).", BUILTIN["relay"])


# --------------------------------------------------------------------------- validation


class DocumentInvalid(Exception):
    """Raised by :func:`validate`; ``problems`` lists (dotted key path, problem) in file order."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(f"{len(problems)} problem(s)")
        self.problems = problems


def validate(data: dict[str, Any]) -> EnvDocument:
    """Validate one parsed document; pydantic's errors are reworded without its jargon.

    A bad value is quoted in the problem text unless it sits under a secret key (``passwd``,
    ``launch.env``); mappings and lists are never quoted.

    Raises:
        DocumentInvalid: one or more problems.
    """
    unknown: list[tuple[Loc, str]] = []
    known = _without_unknown_keys(EnvDocument, data, (), unknown)
    found = [(loc, (dotted(loc), problem)) for loc, problem in unknown]
    try:
        doc = EnvDocument.model_validate(known)
    except ValidationError as exc:
        found += [(tuple(e["loc"]), _translate(e)) for e in exc.errors(include_url=False)]
    else:
        if not found:
            return doc
    # unknown keys no longer hide the other mistakes of their section: every problem, in file order
    found.sort(key=lambda item: _file_order(data, item[0]))
    raise DocumentInvalid([problem for _, problem in found])


def _section_in(annotation: Any) -> tuple[type[_Section], bool] | None:
    """The section model a field holds, and whether as the values of a mapping (``host_info``)."""
    if isinstance(annotation, type) and issubclass(annotation, _Section):
        return annotation, False
    args = get_args(annotation)
    if get_origin(annotation) is dict and len(args) == 2:
        inner = _section_in(args[1])
        return (inner[0], True) if inner else None
    return next((found for found in map(_section_in, args) if found), None)


def _without_unknown_keys(model: type[_Section], data: Any, loc: Loc,
                          unknown: list[tuple[Loc, str]]) -> Any:
    """``data`` without the keys its section does not know (each noted in ``unknown``), recursively."""
    if not isinstance(data, dict):
        return data
    # the section's own check (pydantic's decorator proxy is the classmethod at run time)
    known_keys = cast("Callable[[Any], Any]", model._known_keys)
    try:
        data = known_keys(data)
    except PydanticCustomError as exc:
        unknown.append((loc, exc.message()))
        data = {k: v for k, v in data.items() if k in model.model_fields}
    fields = model.model_fields
    return {key: _known_value(fields.get(key), value, loc, key, unknown)
            for key, value in data.items()}


def _known_value(field: FieldInfo | None, value: Any, loc: Loc, key: str,
                 unknown: list[tuple[Loc, str]]) -> Any:
    """``key``'s value without the keys unknown to the section it holds (when it holds one)."""
    section = _section_in(field.annotation) if field is not None else None
    if section is None or not isinstance(value, dict):
        return value
    model, is_mapping = section
    if is_mapping:
        return {k: _without_unknown_keys(model, v, (*loc, key, k), unknown)
                for k, v in value.items()}
    return _without_unknown_keys(model, value, (*loc, key), unknown)


def dotted(loc: Loc) -> str:
    """``("host_info", "h1", "npu", "visible", 2)`` -> ``host_info.h1.npu.visible[2]``."""
    text = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _file_order(data: Any, loc: Loc) -> tuple[int, ...]:
    """Where ``loc`` sits in the document, so problems are listed in file order."""
    order = []
    for part in loc:
        at = _position(data, part)
        if at is None:  # a missing key, or pydantic's "[key]" marker: after what is there
            order.append(len(data) if isinstance(data, dict | list) else 0)
            data = None
        else:
            order.append(at)
            data = data[part]
    return tuple(order)


def _position(data: Any, part: Any) -> int | None:
    """Where ``part`` is in ``data``: a mapping's key by its place, a list's index; None: not there."""
    if isinstance(data, dict) and part in data:
        return list(data).index(part)
    if isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
        return part
    return None


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
}
_PATTERN_WORDS = {
    HOST_NAME_RE: "host name {value} is not a safe identifier (letters, digits, '_', '.', '-'; "
    "starting with a letter or '_')",
    ENV_NAME_RE: "{value} is not a valid environment variable name (letters, digits, '_'; "
    "not starting with a digit)",
    r"^\S+$": "{value} must be one word without spaces",
}
_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


def _translate(err: Mapping[str, Any]) -> tuple[str, str]:
    """One pydantic error -> (dotted key path, problem in plain words)."""
    loc, value, secret = _located(err)
    kind: str = err["type"]
    if kind == "missing":
        return dotted(loc[:-1]), f"missing required key {loc[-1]!r}"
    wording = _WORDING.get(kind)
    if wording is None:
        # our validators' messages are already worded for people
        return dotted(loc), str(err["msg"])
    return dotted(loc), wording(kind, err.get("ctx", {}), _describe(value, secret))


def _located(err: Mapping[str, Any]) -> tuple[Loc, object, bool]:
    """An error's key path, the value to show and whether it is secret (a wrong mapping key, a host
    or variable name, is shown: never secret)."""
    loc: Loc = tuple(err["loc"])
    if loc and loc[-1] == "[key]":
        return loc[:-2], loc[-2], False
    return loc, err.get("input"), _is_secret_loc(loc)


def _expected(kind: str, ctx: Mapping[str, Any], shown: str) -> str:
    return f"expected {ctx.get('expected') or _EXPECTED[kind]}, got {shown}"


def _bound(kind: str, ctx: Mapping[str, Any], shown: str) -> str:
    return f"must be {_BOUNDS[kind]} {next(iter(ctx.values())):g}, got {shown}"


def _pattern(kind: str, ctx: Mapping[str, Any], shown: str) -> str:
    pattern: str = ctx["pattern"]
    words = _PATTERN_WORDS.get(pattern, "{value} does not match the pattern " + pattern)
    return words.format(value=shown)


def _empty(kind: str, ctx: Mapping[str, Any], shown: str) -> str:
    return "must not be empty"


#: how each kind of pydantic error is worded: (kind, its context, the value as shown) -> problem
_WORDING: dict[str, Callable[[str, Mapping[str, Any], str], str]] = {
    **dict.fromkeys([*_EXPECTED, "wrong_type"], _expected),
    **dict.fromkeys(_BOUNDS, _bound),
    "unknown_key": lambda kind, ctx, shown: str(ctx["problems"]),
    "literal_error": lambda kind, ctx, shown:
        f"{shown} is not allowed (expected {ctx['expected']})",
    "string_too_short": _empty,
    "too_short": _empty,
    "finite_number": lambda kind, ctx, shown: f"must be a finite number, got {shown}",
    "string_pattern_mismatch": _pattern,
}


def _is_secret_loc(loc: Loc) -> bool:
    return bool(loc) and (loc[-1] in ("passwd", *KNOWN_TYPOS) or loc[:2] == ("launch", "env"))


def _describe(value: object, secret: bool = False) -> str:
    """How a bad value is shown in a message (never the value itself when ``secret``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if secret:
        return f"a {type(value).__name__} (hidden)"
    return _clipped(value)


def _clipped(value: object) -> str:
    """A value as it is shown: a string's repr to 60 characters, a number's to its first digits."""
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 60 else text[:56] + "...'"
    if isinstance(value, int | float):
        text = repr(value)
        return text if len(text) <= 30 else f"{text[:12]}... ({len(text)} digits)"
    return f"a {type(value).__name__}"


# --------------------------------------------------------------------------- JSON Schema


class _NoFieldTitles(GenerateJsonSchema):
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``test_env.yaml`` before ``${VAR}`` expansion."""
    body = EnvDocument.model_json_schema(schema_generator=_NoFieldTitles)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "camit test_env.yaml",
        "description": (
            f"camit environment file, schema version {SCHEMA_VERSION}. Accepts the URMA harness "
            "keys unchanged. Strings may contain ${VAR} (expanded from the environment at load)."
        ),
        **{k: v for k, v in body.items() if k not in ("title", "description")},
    }


def schema_json() -> str:
    """``json_schema()`` as the text committed in ``env/test_env.json``."""
    return json.dumps(json_schema(), indent=2) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m framework.config schema``: print the JSON Schema of test_env.yaml."""
    parser = argparse.ArgumentParser(prog="python -m framework.config",
                                     description="Print the JSON Schema of test_env.yaml.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("schema", help="print the JSON Schema (commit it as env/test_env.schema.json)")
    parser.parse_args(argv)
    sys.stdout.write(schema_json())
    return 0
