"""Keys the URMA harness accepts and never uses: dropped from an env file with a warning naming
each."""

from __future__ import annotations

import difflib
import ipaddress
import re
import socket
from collections.abc import Callable
from typing import Any

from framework.config.document import EnvDocument, is_hostname

_EXTRA_NIC = re.compile(r"^test_nic([3-9]|[1-9][0-9]+)$")


def _resolve(name: str) -> str | None:
    try:
        return socket.gethostbyname(name)
    except OSError:
        return None


def _is_ipv4(value: object) -> bool:
    try:
        ipaddress.IPv4Address(str(value))
    except ValueError:
        return False
    return True


def _host(name: str, host: dict[str, Any], resolve: Callable[[str], str | None]) -> list[str]:
    """Drop or rewrite one host's harness-only keys in place; the warnings."""
    warned = _drop_extra_nics(name, host) + _drop_bmc(name, host)
    return warned + _named_manage_nic(name, host, resolve)


def _drop_extra_nics(name: str, host: dict[str, Any]) -> list[str]:
    """NICs past test_nic2 (``test_nic3``...): the harness reads none of them."""
    extra = [k for k in host if isinstance(k, str) and _EXTRA_NIC.match(k)]
    for key in extra:
        del host[key]
    return [f"host_info.{name}.{key}: ignored (the URMA harness reads only test_nic1 and test_nic2)"
            for key in extra]


def _drop_bmc(name: str, host: dict[str, Any]) -> list[str]:
    """A ``bmc`` mapping: the harness stores it and never uses it."""
    if not isinstance(host.get("bmc"), dict):
        return []
    del host["bmc"]
    return [f"host_info.{name}.bmc: a mapping, ignored (the URMA harness stores bmc, never uses "
            "it)"]


def _named_manage_nic(name: str, host: dict[str, Any],
                      resolve: Callable[[str], str | None]) -> list[str]:
    """A host name as ``manage_nic.ip``: the harness connects to it; camit takes it as ``ssh_ip``
    and its address as the NIC's."""
    ip = _named_ip(host)
    if ip is None:
        return []
    address = resolve(ip)
    if address is None or not _is_ipv4(address):
        return []
    host.setdefault("ssh_ip", ip)
    host["manage_nic"]["ip"] = address
    return [f"host_info.{name}.manage_nic.ip: host name {ip!r} used as ssh_ip (as the URMA "
            f"harness does), manage_nic.ip is its address {address}"]


def _named_ip(host: dict[str, Any]) -> str | None:
    """``manage_nic.ip`` when it is a host name rather than an IPv4 address, else None."""
    nic = host.get("manage_nic")
    ip = nic.get("ip") if isinstance(nic, dict) else None
    if not isinstance(ip, str) or _is_ipv4(ip) or not is_hostname(ip):
        return None
    return ip


def tolerate(data: Any, resolve: Callable[[str], str | None] | None = None) -> list[str]:
    """Drop or rewrite, in place, what the harness accepts and ignores (see the module docstring);
    the warnings. ``resolve`` (name -> IPv4 text or None) defaults to the controller's resolver."""
    if not isinstance(data, dict):
        return []
    warned = _drop_unknown_top(data)
    hosts = data.get("host_info")
    for name, host in hosts.items() if isinstance(hosts, dict) else ():
        if isinstance(host, dict):
            warned += _host(str(name), host, resolve or _resolve)
    return warned


def _drop_unknown_top(data: dict[Any, Any]) -> list[str]:
    """Top-level keys the harness ignores, unless one looks like a misspelt camit key (then the
    usual error, with its hint)."""
    known = list(EnvDocument.model_fields)
    dropped = [k for k in data if _ignored_by_harness(k, known)]
    for key in dropped:
        del data[key]
    return [f"{key}: unknown top-level key, ignored (the URMA harness reads only host_info)"
            for key in dropped]


def _ignored_by_harness(key: object, known: list[str]) -> bool:
    """A top-level key camit does not know, which does not look like a misspelt camit key."""
    if not isinstance(key, str) or key in known:
        return False
    return not difflib.get_close_matches(key, known, n=1, cutoff=0.6)


