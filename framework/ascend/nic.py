"""Which host NIC the rendezvous and HCCL's root-info exchange use, and which device names may be
pinned (pure).

The rule and its sources: docs/internals/deploy-ascend.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from framework.remote.sections import Record


class ManageNic(Protocol):
    """A host's management NIC as the env file gives it (``framework.config.effective.NicSpec``)."""

    @property
    def ip(self) -> str: ...


class HostNics(Protocol):
    """What the NIC choice reads of a host (``framework.config.effective.HostSpec``); the other roles
    (``test_nic1``, ``test_nic2``) are read by name, each with an ``ip`` that may be unset."""

    @property
    def manage_nic(self) -> ManageNic: ...

#: the NIC roles ``launch.rendezvous_nic`` may name (HostSpec attributes)
RENDEZVOUS_NICS = ("manage_nic", "test_nic1", "test_nic2")
DEFAULT_NIC = "manage_nic"
#: the prepare probe's records (net_script): one per device, one per address, then the end mark
LINK_TAG, ADDR_TAG, NET_TAG = "link", "addr", "net"
#: CANN's default HCCL_IF_BASE_PORT and the ports HCCL takes from it (see hccl_host_ports)
HCCL_BASE_PORT = 60000
HCCL_HOST_PORTS = 32


@dataclass(frozen=True)
class HostNet:
    """A host's network devices (``ip -o link``) and its addresses → device (``ip -o addr``)."""

    links: frozenset[str] = frozenset()
    addrs: Mapping[str, str] = field(default_factory=dict)


def parse_links(text: str) -> frozenset[str]:
    """Device names of ``ip -o link`` (``2: eth0@if5: <...>`` → ``eth0``)."""
    out = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].rstrip(":").isdigit():
            out.add(words[1].rstrip(":").split("@")[0])
    return frozenset(out)


def parse_addrs(text: str) -> dict[str, str]:
    """address → device of ``ip -o addr`` (``2: eth0    inet 10.0.0.1/24 ...``)."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0].rstrip(":").isdigit() and words[2] in ("inet", "inet6"):
            out[words[3].split("/")[0]] = words[1].split("@")[0]
    return out


def net_script() -> str:
    """sh printing one ``@@link <device>`` record per ``ip -o link`` line, one ``@@addr <device> <address>``
    per ``ip -o addr`` line (none where ``ip`` is missing), then ``@@net`` (the probe ran)."""
    return ("{ ip -o link 2>/dev/null | while read -r _i _n _r; do printf '@@link %s\\n' \"${_n%:}\"; done; "
            "ip -o addr 2>/dev/null | while read -r _i _d _f _a _r; do printf '@@addr %s %s\\n' \"$_d\" \"${_a%%/*}\"; "
            "done; printf '@@net\\n'; }")


def net_from_records(records: Sequence[Record]) -> HostNet | None:
    """The :class:`HostNet` of :func:`net_script`'s records; None when it did not run."""
    if not any(r.tag == NET_TAG for r in records):
        return None
    return HostNet(_links(records), _addrs(records))


def _links(records: Sequence[Record]) -> frozenset[str]:
    """The device names of the ``@@link`` records (``eth0@if5`` → ``eth0``)."""
    return frozenset(r.value.split("@")[0] for r in records if r.tag == LINK_TAG and r.value)


def _addrs(records: Sequence[Record]) -> dict[str, str]:
    """address → device of the well-formed ``@@addr <device> <address>`` records."""
    pairs = (r.value.split() for r in records if r.tag == ADDR_TAG)
    return {words[1]: words[0].split("@")[0] for words in pairs if len(words) == 2}


def rendezvous_ip(spec: HostNics, which: str = DEFAULT_NIC) -> str:
    """The address of ``spec``'s NIC role ``which`` (the env loader made sure it is set)."""
    nic = getattr(spec, which, None)
    ip = getattr(nic, "ip", None)
    return ip or spec.manage_nic.ip


def socket_ifname(spec: HostNics, which: str, net: HostNet | None) -> str | None:
    """The device to pin ``*_SOCKET_IFNAME`` to, only ever one ``ip -o link`` listed; None when none fits."""
    if net is None:
        return None
    held = net.addrs.get(rendezvous_ip(spec, which))
    if held and held in net.links:
        return held
    nic = getattr(spec, which, None)
    for name in (getattr(nic, "name", None), getattr(nic, "dev", None)):
        if isinstance(name, str) and name in net.links:
            return name
    return None


def hccl_host_ports(variables: Mapping[str, Any]) -> range:
    """HCCL's host ports: ``HCCL_IF_BASE_PORT`` (default 60000) and the ports after it.

    CANN's environment variable reference (HCCL_IF_BASE_PORT): HCCL takes 16 ports from the base up
    to CANN 8.0 and 32 from 8.2.RC1 (60000-60015, then 60000-60031 by default); camit keeps clear of
    the 32.
    """
    raw = str(variables.get("HCCL_IF_BASE_PORT", "")).strip()
    base = int(raw) if raw.isdigit() else HCCL_BASE_PORT
    return range(base, base + HCCL_HOST_PORTS)
