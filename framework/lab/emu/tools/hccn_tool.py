"""Fake ``hccn_tool`` of an emulated Ascend host: ``hccn_tool -i <dev> -<query> -g [address <ip>]``.

Each answer is one device's share of a captured loop over devices
(``framework/lab/emu/data/hccn-*.txt``); the captures and knobs behind each query:
docs/internals/remote-and-lab.md. Stdlib only (copied into the emulated host's tree).
"""

from __future__ import annotations

import fcntl
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from .common import Host, err, out

#: what a concurrent call answers (ascend-hosts.md §5); probe.py retries it 5 times
BUSY = "hccn_tool is busy, please try again"
_QUERIES = ("link", "net_health", "ip", "tls", "ping", "gateway", "lldp", "netdetect", "fec")


class _Usage(Exception):
    pass


def _tls_line(host: Host, dev: int) -> str:
    """Device ``dev``'s ``-tls -g`` switch line: the 8-device capture's line, switch 1 under tls-mismatch
    on its device (the mismatch capture: dev 0 switch 0, dev 1 switch 1)."""
    template = host.capture("hccn-tls-8dev.txt")[0]
    knob = host.fault("tls-mismatch")
    switch = 1 if knob is not None and int(knob.get("device", 1)) == dev else 0
    line = re.sub(r"dev_id:\d+", f"dev_id:{dev}", template)
    return re.sub(r"tls switch\[\d\]", f"tls switch[{switch}]", line)


def _ping(host: Host, dev: int, address: str, count: int) -> list[str]:
    """``device N PING ip``, one ``recv`` line per packet and the summary (hccn-ping-ok-8dev.txt);
    an unreachable peer prints ``recv time out seq=N`` lines (hccn-ping-loss.txt's form)."""
    times = [m.group(1) for ln in host.capture("hccn-ping-ok-8dev.txt")
             if (m := re.search(r"time=([0-9.]+)ms", ln))]
    reachable = _reachable(host, dev, address)
    lines = [f"device {dev} PING {address}"]
    for seq in range(count):
        lines.append(f"recv seq={seq},time={times[seq % len(times)]}ms" if reachable else f"recv time out seq={seq}")
    got = count if reachable else 0
    lines.append(f"{count} packets transmitted, {got} received, {100 * (count - got) / count:.2f}% packet loss")
    return lines


def _reachable(host: Host, dev: int, address: str) -> bool:
    """Whether device ``dev`` reaches ``address``: a lab peer, links up, not its NPU's twin."""
    if address not in host.info["peers"] or _down(host, dev) or address in _peers_down(host):
        return False
    # A3: -ping does not run between the two dies of one NPU (ascend-hosts.md §5)
    return not (host.chips_per_npu == 2 and address == host.info["devices"][dev ^ 1]["ip"])


def _peers_down(host: Host) -> list[str]:
    """Device IPs of other lab hosts whose link is down (``peers-down.json``, kept by the lab's fault command):
    a real device NIC with its link down answers no ping, so pings to it time out too."""
    try:
        return list(json.loads((host.emu / "peers-down.json").read_text(encoding="utf-8")).get("down", []))
    except (OSError, ValueError, AttributeError):
        return []


def _down(host: Host, dev: int) -> bool:
    knob = host.fault("link-down")
    return knob is not None and int(knob.get("device", 0)) == dev


def _link(host: Host, dev: int, d: dict[str, str]) -> list[str]:
    return [f"link status: {'DOWN' if _down(host, dev) else 'UP'}"]


def _net_health(host: Host, dev: int, d: dict[str, str]) -> list[str]:
    return [f"net health status: {'Fault' if _down(host, dev) else 'Success'}"]


def _ip(host: Host, dev: int, d: dict[str, str]) -> list[str]:
    return [f"ipaddr:{d['ip']}", f"netmask:{d['netmask']}"]


def _tls(host: Host, dev: int, d: dict[str, str]) -> list[str]:
    return [_tls_line(host, dev)]


def _gateway(host: Host, dev: int, d: dict[str, str]) -> list[str]:
    return [f"default gateway:{d['gateway']}, Iface:eth{dev}"]


def _lldp(host: Host, dev: int, d: dict[str, str]) -> list[str]:
    return [f"\tIfname: {d['switch_port']}"]  # only the Ifname line of -lldp -g was ever captured


def _netdetect(host: Host, dev: int, d: dict[str, str]) -> list[str]:
    return [f"netdetect address: {d['gateway']}"]


def _fec(host: Host, dev: int, d: dict[str, str]) -> list[str]:
    return ["fec mode: rs FEC mode"]


#: every query but ping: its answer from the host, the device and the device's host.json record
_ANSWERS: dict[str, Callable[[Host, int, dict[str, str]], list[str]]] = {
    "link": _link, "net_health": _net_health, "ip": _ip, "tls": _tls, "gateway": _gateway,
    "lldp": _lldp, "netdetect": _netdetect, "fec": _fec,
}


def answer(host: Host, dev: int, query: str, extra: Sequence[str]) -> list[str]:
    if query in _ANSWERS:
        return _ANSWERS[query](host, dev, host.info["devices"][dev])
    # ping: -ping -g address <ip> [pkt <n>]
    opts = dict(zip(extra[::2], extra[1::2]))
    if "address" not in opts:
        raise _Usage("-ping -g needs address <ip>")
    try:
        count = int(opts.get("pkt", "3"))
    except ValueError:
        raise _Usage("pkt needs a number") from None
    return _ping(host, dev, opts["address"], max(1, count))


def run(host: Host, args: Sequence[str]) -> list[str]:
    if len(args) < 4 or args[0] != "-i":
        raise _Usage("expected -i <device id> -<command> -g")
    return answer(host, _device_id(host, args[1]), _query(args), args[4:])


def _device_id(host: Host, word: str) -> int:
    """The device of ``-i <id>``: a number below the host's device count."""
    try:
        dev = int(word)
    except ValueError:
        raise _Usage(f"invalid device id: {word}") from None
    if not 0 <= dev < host.count:
        raise _Usage(f"invalid device id: {dev}")
    return dev


def _query(args: Sequence[str]) -> str:
    """The query of ``-<query> -g``: a known one, asked with -g, with parameters only for ping."""
    query = args[2][1:] if args[2].startswith("-") else ""
    if query not in _QUERIES:
        raise _Usage(f"invalid command: {args[2]}")
    if args[3] != "-g":
        raise _Usage(f"{args[2]} {args[3]}: only queries (-g) are emulated")
    if query != "ping" and len(args) > 4:
        raise _Usage(f"unexpected parameter: {args[4]}")
    return query


def _lock(emu: Path) -> tuple[bool, IO[str] | None]:
    """Take the host's hccn_tool lock: (got it, the file holding it). A tree the caller cannot write
    (a non-root user) takes no lock."""
    try:
        fh = open(emu / "hccn.lock", "a", encoding="utf-8")  # noqa: SIM115 - held until the call ends
    except OSError:
        return True, None
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return False, None
    return True, fh


def main(argv: Sequence[str], emu: Path) -> int:
    host = Host(emu)
    busy = host.fault("hccn-busy")
    if busy is not None and (len(argv) < 2 or argv[1] == str(busy.get("device", 0))):
        out(BUSY)  # persistently busy for that device's queries: probe.py's retries give up
        return 1
    free, fh = _lock(emu)
    if not free:
        out(BUSY)  # another call is running on this host
        return 1
    try:
        return _answer(host, argv)
    finally:
        if fh is not None:
            fh.close()


def _answer(host: Host, argv: Sequence[str]) -> int:
    replayed = host.replay("hccn_tool", argv)
    if replayed is not None:
        return replayed
    try:
        lines = run(host, argv)
    except _Usage as exc:
        # NOT a capture: hccn_tool's wording for bad parameters was never recorded
        err(f"Error: {exc}")
        err("Usage: hccn_tool -i <device id> -<link|net_health|ip|tls|ping|gateway|lldp|netdetect|fec> -g "
            "[address <ip> [pkt <n>]]")
        return 1
    out("\n".join(lines))
    return 0


if __name__ == "__main__":  # pragma: no cover - the tree's launcher calls main
    sys.exit(main(sys.argv[1:], Path(__file__).resolve().parents[2]))
