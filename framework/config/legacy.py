"""Keys the URMA harness accepts and never uses: dropped from an env file with a warning naming
each.

The harness (``test_framework/common/host.py`` ``UBUSHost.__init__``, ``constants.py``) reads
``host_info.<host>.{manage_nic, ssh_ip, ssh_port, user, passwd, bmc, isolcpu, env_type, arch,
test_nic1, test_nic2}`` and nothing else, stores ``bmc`` whatever it is, and uses a host name in
``manage_nic.ip`` as the SSH target. So an env file it accepts may hold:

- ``test_nic3`` and beyond (never read) -> dropped;
- ``bmc`` as a mapping (stored, never used) -> dropped;
- a top-level key camit does not know (the harness reads only ``host_info``) -> dropped, unless it
  looks like a misspelt camit key (then it stays an error with the hint);
- a host name as ``manage_nic.ip`` -> the name becomes ``ssh_ip`` (when unset), ``manage_nic.ip``
  the name's IPv4 address as the controller resolves it (unresolvable: left, so the usual error
  names it).

Everything else camit reads keeps its strict check. :func:`tolerate` is pure except for the
resolver.
"""

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
    warned = []
    for key in [k for k in host if isinstance(k, str) and _EXTRA_NIC.match(k)]:
        del host[key]
        warned.append(
            f"host_info.{name}.{key}: ignored (the URMA harness reads only test_nic1 and test_nic2)"
        )
    if isinstance(host.get("bmc"), dict):
        del host["bmc"]
        warned.append(
            f"host_info.{name}.bmc: a mapping, ignored (the URMA harness stores bmc, never uses it)"
        )
    nic = host.get("manage_nic")
    ip = nic.get("ip") if isinstance(nic, dict) else None
    if isinstance(nic, dict) and isinstance(ip, str) and not _is_ipv4(ip) and is_hostname(ip):
        address = resolve(ip)
        if address is not None and _is_ipv4(address):
            host.setdefault("ssh_ip", ip)
            nic["ip"] = address
            warned.append(
                f"host_info.{name}.manage_nic.ip: host name {ip!r} used as ssh_ip (as the URMA "
                f"harness does), manage_nic.ip is its address {address}"
            )
    return warned


def tolerate(data: Any, resolve: Callable[[str], str | None] | None = None) -> list[str]:
    """Drop or rewrite, in place, what the harness accepts and ignores (see the module docstring);
    the
    warnings.
    ``resolve`` (name -> IPv4 text or None) defaults to the controller's resolver."""
    if resolve is None:
        resolve = _resolve
    if not isinstance(data, dict):
        return []
    known = list(EnvDocument.model_fields)
    warned = []
    for key in [k for k in data if k not in known]:
        if not isinstance(key, str) or difflib.get_close_matches(key, known, n=1, cutoff=0.6):
            continue  # looks like a misspelt camit key: the usual error with its hint
        del data[key]
        warned.append(
            f"{key}: unknown top-level key, ignored (the URMA harness reads only host_info)"
        )
    hosts = data.get("host_info")
    for name, host in hosts.items() if isinstance(hosts, dict) else ():
        if isinstance(host, dict):
            warned += _host(str(name), host, resolve)
    return warned
