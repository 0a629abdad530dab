"""Fake ``npu-smi`` of an emulated Ascend host: ``info``, ``info -l``, ``info -m``, ``info -t``.

Replays the captures shipped in the tree, re-rendered with the host's state (occupancy registry,
fault knobs); how: docs/internals/remote-and-lab.md. Stdlib only (copied into the emulated host's tree).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .common import Host, err, out

#: MB a process shows per device it holds (real sizes depend on the workload; not modelled)
PROC_MB = 2048
#: column widths of the third cell: (cell, power/aicore, temp/memory-used+total) per layout
#: (npu-smi 25.x: npu-smi-info-910b3-a2-busy.txt, npu-smi-info-a3-busy.txt; 26.x: the v26 excerpts)
_LAYOUTS = {"25": (52, 12, 18, 11), "26": (70, 21, 24, 17)}
#: process-table cells: 25.x has 4, 26.x adds "Process id in container"
_PROC_CELLS = {"25": (27, 15, 26, 25), "26": (27, 15, 20, 23, 25)}
_KV_INDENT = " " * 8
_KV_KEY = 31


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "|" + "|".join((" " + c).ljust(w) for c, w in zip(cells, widths)) + "|"


def _separators(layout: str) -> tuple[str, str]:
    c3 = _LAYOUTS[layout][0]
    return "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * c3 + "+", "+" + "-" * (27 + 15 + c3 + 2) + "+"


def npu_rows(chip: dict[str, Any], health: str, aicore: str, hbm_used: int, layout: str) -> list[str]:
    """The two rows of one die (``NPU Name | Health | ...`` and ``Chip [Phy-ID] | Bus-Id | ...``)."""
    c3, wa, wb, wt = _LAYOUTS[layout]
    first = f"{chip['npu']:<6}{chip['name']}"
    top = f"{chip['power']:<{wa}}{chip['temp']:<{wb}}{chip['hp_used']:<5}/ {chip['hp_total']}"
    where = str(chip["chip"]) if chip.get("phy_id") is None else f"{chip['chip']:<6}{chip['phy_id']}"
    bottom = f"{aicore:<{wa}}{chip['mem_used']:<5}/ {chip['mem_total']:<{wt}}{hbm_used:<5}/ {chip['hbm_total']}"
    return [_row([first, health, top], (27, 15, c3)), _row([where, chip["bus_id"], bottom], (27, 15, c3))]


def process_rows(npus: int, rows: dict[int, list[tuple[int, int, str, int]]], layout: str) -> list[str]:
    """The process table body: per NPU its (chip, pid, name, MB) rows or the idle marker, then ``+===``."""
    widths = _PROC_CELLS[layout]
    total = 27 + 15 + _LAYOUTS[layout][0] + 4
    sep, _ = _separators(layout)
    lines = []
    for npu in range(npus):
        held = rows.get(npu, [])
        for chip, pid, name, mb in held:
            cells = [f"{npu:<8}{chip}", str(pid), name, str(mb)] + (["NA"] if layout == "26" else [])
            lines.append(_row(cells, widths))
        if not held:
            lines.append(f"| No running processes found in NPU {npu}".ljust(total - 1) + "|")
        lines.append(sep)
    return lines


def _headers(host: Host) -> tuple[list[str], list[str]]:
    """The capture's table header (through the first ``+===``) and process-table header (3 lines)."""
    layout = host.info["npu_smi"]["layout"]
    main = host.capture(host.info["npu_smi"]["capture"])
    head_src = host.capture(host.info["npu_smi"]["header_capture"]) if layout == "26" else main
    proc_src = host.capture(host.info["npu_smi"]["proc_capture"]) if layout == "26" else main
    end = next(i for i, ln in enumerate(head_src) if ln.startswith("+==="))
    at = next(i for i, ln in enumerate(proc_src) if "Process id" in ln)
    return head_src[: end + 1], proc_src[at - 1: at + 2]


def _held(host: Host) -> dict[int, list[tuple[int, int, str, int]]]:
    """Registry occupants as process-table rows per NPU: (chip, pid, name, MB)."""
    rows: dict[int, list[tuple[int, int, str, int]]] = {}
    width = _PROC_CELLS[host.info["npu_smi"]["layout"]][2] - 2  # the name cell, less its padding
    for occ in host.occupants():
        for dev in occ.devices:
            if 0 <= dev < host.count:
                npu, chip = divmod(dev, host.chips_per_npu)
                rows.setdefault(npu, []).append((chip, occ.pid, occ.name[:width], PROC_MB))
    for held in rows.values():
        held.sort()
    return rows


def info_table(host: Host) -> list[str]:
    layout = host.info["npu_smi"]["layout"]
    head, proc_head = _headers(host)
    sep, die_sep = _separators(layout)
    held = _held(host)
    lines = list(head)
    for npu in range(host.npus):
        for chip in range(host.chips_per_npu):
            c = host.info["chips"][host.logical(npu, chip)]
            n = sum(1 for row in held.get(npu, []) if row[0] == chip)
            lines += npu_rows(c, host.health(host.logical(npu, chip)), c["aicore"], c["hbm_idle"] + n * PROC_MB,
                              layout)
            if chip < host.chips_per_npu - 1:
                lines.append(die_sep)
        lines.append(sep)
    return lines + proc_head + process_rows(host.npus, held, layout)


def kv(key: str, value: object) -> str:
    """``        Key                            : value`` (npu-smi's key/value line)."""
    return f"{_KV_INDENT}{key:<{_KV_KEY}}: {value}"


def info_list(npus: int, chips_per_npu: int) -> list[str]:
    """``npu-smi info -l`` (npu-smi-info-l-910b4.txt; A3's ``Chip Count : 2`` per ascend-hosts.md §1)."""
    lines = [kv("Total Count", npus)]
    for npu in range(npus):
        lines += ["", kv("NPU ID", npu), kv("Chip Count", chips_per_npu)]
    return lines


def info_mapping(npus: int, chips_per_npu: int, chip_name: str) -> list[str]:
    """``npu-smi info -m`` (npu-smi-info-m-910b4.txt: A2 lists the MCU as chip 1, padded like the header).

    Not captured for A3 (ascend-hosts.md §12): there each NPU lists its two dies with their logic ids;
    no MCU row is invented.
    """
    cols = ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")
    lines = [_KV_INDENT + "".join(f"{c:<31}" for c in cols[:3]) + f"{cols[3]:<30}"]
    for npu in range(npus):
        for chip in range(chips_per_npu):
            lines.append(_KV_INDENT + f"{npu:<31}{chip:<31}{npu * chips_per_npu + chip:<31}" + chip_name)
        if chips_per_npu == 1:
            lines.append(_KV_INDENT + f"{npu:<31}{1:<31}{'-':<31}" + f"{'Mcu':<30}")
    return lines


def health_card(host: Host, npu: int) -> list[str]:
    """``-t health -i N`` (npu-smi-info-t-health-card.txt: chip blocks, then the MCU's)."""
    lines = [kv("NPU ID", npu), kv("Chip Count", host.chips_per_npu)]
    for chip in range(host.chips_per_npu):
        lines += ["  " if chip == 0 else "", kv("Chip ID", chip), kv("Health", host.health(host.logical(npu, chip)))]
    return lines + ["", kv("Health", "OK"), kv("Chip Name", "MCU")]


def health_chip(host: Host, npu: int, chip: int) -> list[str]:
    """``-t health -i N -c C`` (npu-smi-info-t-health-chip.txt). The alarm's code and text are not a
    capture (no real Warning/Alarm sample exists yet, ascend-hosts.md §12): they come from the knob."""
    logical = host.logical(npu, chip)
    state = host.health(logical)
    knob = host.fault("health-alarm") or {}
    code = "NA" if state == "OK" else str(knob.get("code", "80E01801"))
    text = "NA" if state == "OK" else str(knob.get("text", "emulated alarm (camit lab health-alarm knob)"))
    return [kv("Health Status", state), kv("Error Code", code), kv("Error Information", text)]


def usages(host: Host, npu: int) -> list[str]:
    """``-t usages -i N`` (npu-smi-info-t-usages-doc.txt; A2/A3 show DDR 0 and HBM 65536; one block per chip)."""
    held = _held(host).get(npu, [])
    lines = [kv("NPU ID", npu), kv("Chip Count", host.chips_per_npu)]
    for chip in range(host.chips_per_npu):
        c = host.info["chips"][host.logical(npu, chip)]
        used = c["hbm_idle"] + PROC_MB * sum(1 for row in held if row[0] == chip)
        busy = any(row[0] == chip for row in held)
        lines += ["", kv("DDR Capacity(MB)", 0), kv("DDR Usage Rate(%)", 0), kv("DDR Hugepages Total(page)", 0),
                  kv("DDR Hugepages Usage Rate(%)", 0), kv("HBM Capacity(MB)", c["hbm_total"]),
                  kv("HBM Usage Rate(%)", round(100 * used / int(c["hbm_total"]))),
                  kv("Aicore Usage Rate(%)", 0), kv("Aicpu Usage Rate(%)", 0),
                  kv("Ctrlcpu Usage Rate(%)", 1 if busy else 0), kv("DDR Bandwidth Usage Rate(%)", 0),
                  kv("HBM Bandwidth Usage Rate(%)", 0), kv("Chip ID", chip)]
    return lines


def board(host: Host, npu: int, chip: int | None) -> list[str]:
    """``-t board -i N [-c C]``: NOT a capture (none exists, ascend-hosts.md §12); the keys follow the
    npu-smi reference's board query (board, PCI and firmware data), the values are the host's."""
    c = host.info["chips"][host.logical(npu, chip or 0)]
    lines = [kv("NPU ID", npu), kv("Software Version", host.info["driver_version"]),
             kv("Firmware Version", host.info["firmware_version"]), kv("Compatibility", "OK"),
             kv("Board ID", "0x2e" if host.chips_per_npu == 2 else "0x22"), kv("PCB ID", "A"), kv("BOM ID", 1),
             kv("Slot ID", npu), kv("PCIe Bus Info", c["bus_id"]), kv("PCI Vendor ID", "0x19E5"),
             kv("PCI Device ID", "0xD803" if host.chips_per_npu == 2 else "0xD802"),
             kv("Chip Count", host.chips_per_npu)]
    if chip is not None:
        lines += [kv("Chip ID", chip), kv("Chip Name", host.info["chip_name"])]
    return lines


def spod_info(host: Host, npu: int, chip: int | None) -> list[str] | None:
    """``-t spod-info -i N -c C``: A3 only (ascend-hosts.md §1: ``SDID`` and ``Super Pod ID``). NOT a
    capture: the key names are documented, the layout is npu-smi's key/value form, SDID is the host's
    index times 16 plus the die's logic id. The ``other-spod`` knob changes the Super Pod ID."""
    if host.chips_per_npu != 2:
        return None
    knob = host.fault("other-spod")
    spod = int(knob.get("spod_id", host.info["spod_id"] + 1)) if knob else int(host.info["spod_id"])
    lines: list[str] = []
    for c in [chip] if chip is not None else range(host.chips_per_npu):
        if lines:
            lines.append("")
        lines += [kv("SDID", int(host.info["index"]) * 16 + host.logical(npu, c)), kv("Super Pod ID", spod)]
    return lines


class _Usage(Exception):
    pass


def _options(args: Sequence[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    it = iter(args)
    for a in it:
        if a not in ("-t", "-i", "-c") or a in opts:
            raise _Usage(f"invalid parameter: {a}")
        value = next(it, None)
        if value is None:
            raise _Usage(f"parameter {a} needs a value")
        opts[a] = value
    return opts


def _device(host: Host, opts: dict[str, str]) -> tuple[int, int | None]:
    try:
        npu = int(opts["-i"])
        chip = int(opts["-c"]) if "-c" in opts else None
    except KeyError:
        raise _Usage("parameter -i is required") from None
    except ValueError:
        raise _Usage("invalid device id") from None
    if not 0 <= npu < host.npus:
        raise _Usage(f"the device id {npu} is invalid")
    if chip is not None and not 0 <= chip < host.chips_per_npu:
        raise _Usage(f"the chip id {chip} is invalid")
    return npu, chip


def _health(host: Host, npu: int, chip: int | None) -> list[str]:
    """A card's health, or one chip's with ``-c``."""
    return health_card(host, npu) if chip is None else health_chip(host, npu, chip)


def _usages(host: Host, npu: int, chip: int | None) -> list[str]:
    return usages(host, npu)


def _spod_info(host: Host, npu: int, chip: int | None) -> list[str]:
    """spod-info, which only an A3 device answers."""
    lines = spod_info(host, npu, chip)
    if lines is None:
        raise _Usage("this device does not support querying spod-info")
    return lines


#: ``-t <type>`` -> its table for (host, npu, chip)
_TYPES: dict[str, Callable[[Host, int, int | None], list[str]]] = {
    "health": _health, "usages": _usages, "board": board, "spod-info": _spod_info,
}


def _typed(host: Host, opts: dict[str, str]) -> list[str]:
    kind = opts.get("-t")
    npu, chip = _device(host, opts)
    table = _TYPES.get(str(kind))
    if table is None:
        raise _Usage(f"invalid type: {kind}")
    return table(host, npu, chip)


def run(host: Host, args: Sequence[str]) -> list[str]:
    if not args or args[0] != "info":
        raise _Usage(f"invalid command: {' '.join(args) or '(none)'}")
    rest = tuple(args[1:])
    if rest in _PLAIN:
        return _PLAIN[rest](host)
    return _typed(host, _options(rest))


#: ``npu-smi info`` with these words (no options with values): what it prints
_PLAIN: dict[tuple[str, ...], Callable[[Host], list[str]]] = {
    (): info_table,
    ("-l",): lambda host: info_list(host.npus, host.chips_per_npu),
    ("-m",): lambda host: info_mapping(host.npus, host.chips_per_npu, host.info["chip_name"]),
}


def main(argv: Sequence[str], emu: Path) -> int:
    host = Host(emu)
    replayed = host.replay("npu-smi", argv)
    if replayed is not None:
        return replayed
    try:
        lines = run(host, argv)
    except _Usage as exc:
        # NOT a capture: npu-smi's own error wording for bad parameters was never recorded
        err(f"Error: {exc}")
        err("Usage: npu-smi info [-l | -m | -t <health|usages|board|spod-info> -i <npu id> [-c <chip id>]]")
        return 1
    out("\n".join(lines))
    return 0


if __name__ == "__main__":  # pragma: no cover - the tree's launcher calls main
    sys.exit(main(sys.argv[1:], Path(__file__).resolve().parents[2]))
