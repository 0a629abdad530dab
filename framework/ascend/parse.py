"""Pure parsers for what Ascend hosts print: ``npu-smi``, ``hccn_tool``, version records, ``df``.

Tables are read by structure, never by column offsets. Design: docs/internals/deploy-ascend.md.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

A2 = "A2"
A3 = "A3"
#: ``npu.soc`` of the env file for each detected platform
SOC_OF_PLATFORM = {A2: "ascend910b", A3: "ascend910_93"}
#: the Health column: OK is the only ready value (Warning/Alarm/Critical/UNKNOWN are not)
HEALTH_OK = "OK"

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_NPU_SMI_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_IDLE = re.compile(r"No running processes found in NPU\s+(\d+)")
# chip-row column headers of the third cell, used when an excerpt starts below the header
_DEFAULT_CHIP_COLS = ("AICore(%)", "Memory-Usage(MB)", "HBM-Usage(MB)")


# --------------------------------------------------------------------------- npu-smi info


@dataclass(frozen=True)
class NpuChip:
    """One chip (die) row pair of ``npu-smi info``; an A2 NPU has one, an A3 NPU two."""

    npu: int
    chip: int
    name: str
    health: str
    bus_id: str
    phy_id: int | None = None
    hbm_used_mb: int | None = None
    hbm_total_mb: int | None = None
    aicore_pct: float | None = None

    @property
    def healthy(self) -> bool:
        return self.health == HEALTH_OK


@dataclass(frozen=True)
class NpuProcess:
    """One row of the process table: a PID holding memory on (NPU, chip)."""

    npu: int
    chip: int
    pid: int
    name: str
    memory_mb: int | None
    container_pid: str | None = None


@dataclass(frozen=True)
class NpuSmiInfo:
    """``npu-smi info`` parsed: chips in output order, the process table and the idle markers."""

    version: str | None
    chips: tuple[NpuChip, ...]
    processes: tuple[NpuProcess, ...]
    idle_npus: frozenset[int]
    has_process_table: bool
    phy_id_column: bool

    @property
    def npus(self) -> list[int]:
        """Distinct NPU ids in output order."""
        return list(dict.fromkeys(c.npu for c in self.chips))

    @property
    def platform(self) -> str:
        """``A3`` when the layout has a Phy-ID column or an NPU with two chips, else ``A2``."""
        if self.phy_id_column or any(c.phy_id is not None for c in self.chips):
            return A3
        chips_per_npu = Counter(c.npu for c in self.chips)
        return A3 if max(chips_per_npu.values(), default=0) >= 2 else A2

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(c.name for c in self.chips))

    @property
    def unhealthy(self) -> list[NpuChip]:
        return [c for c in self.chips if not c.healthy]

    @property
    def busy_npus(self) -> list[int]:
        return list(dict.fromkeys(p.npu for p in self.processes))

    def logical_id(self, chip: NpuChip) -> int:
        """The id torch and ``ASCEND_RT_VISIBLE_DEVICES`` use, from structure alone.

        A3: the Phy-ID; A2: the position of the chip among the chips. ``npu-smi info -m``
        (:func:`parse_npu_smi_mapping`) is authoritative when available.
        """
        if chip.phy_id is not None:
            return chip.phy_id
        return self.chips.index(chip)


def table_cells(line: str) -> list[str] | None:
    """The stripped cells of a ``| a | b |`` row, or None for borders and other lines."""
    s = line.strip()
    if not (s.startswith("|") and s.endswith("|")) or len(s) < 2:
        return None
    return [c.strip() for c in s[1:-1].split("|")]


def _metrics(cell: str, header: Iterable[str]) -> dict[str, str]:
    """Tokens of a metrics cell keyed by header text; ``a / b`` usage pairs become one token."""
    tokens = re.sub(r"\s*/\s*", "/", cell).split()
    cols = list(header)
    return dict(zip(cols, tokens)) if len(tokens) == len(cols) else {}


def _col(metrics: dict[str, str], prefix: str) -> str | None:
    return next((v for k, v in metrics.items() if k.startswith(prefix)), None)


def _usage(value: str | None) -> tuple[int | None, int | None]:
    if not value or "/" not in value:
        return None, None
    used, _, total = value.partition("/")
    return _int(used), _int(total)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Parse plain ``npu-smi info`` (A2, A3, 16-NPU hosts, the 26.x wide layout, excerpts).

    Every chip is a pair of rows (``NPU Name | Health | ...`` then ``Chip [Phy-ID] | Bus-Id | ...``);
    the process table follows with one row per (NPU, chip, PID) or one idle marker per NPU.
    """
    reader = _InfoReader()
    for line in text.splitlines():
        reader.line(line)
    return reader.info()


@dataclass
class _InfoReader:
    """The state of one read of ``npu-smi info``: what has been seen so far, line by line."""

    version: str | None = None
    chips: list[NpuChip] = field(default_factory=list)
    procs: list[NpuProcess] = field(default_factory=list)
    idle: set[int] = field(default_factory=set)
    chip_cols: tuple[str, ...] = _DEFAULT_CHIP_COLS
    proc_cols: list[str] | None = None
    phy_col: bool = False
    pending: tuple[int, str, str] | None = None

    def line(self, line: str) -> None:
        """Take one line: the version banner, an idle marker or a table row."""
        if self.version is None and (m := _NPU_SMI_VERSION.search(line)):
            self.version = m.group(2)
        elif m := _IDLE.search(line):
            self.idle.add(int(m.group(1)))
        elif (cells := table_cells(line)) and cells[0]:
            self._row(cells, cells[0].split())

    def _row(self, cells: list[str], first: list[str]) -> None:
        """A header row sets the columns; a data row is a process, an NPU or a chip row."""
        header = _header_kind(cells, first)
        if header == "process":
            self.proc_cols = cells
        elif header == "Chip":
            self.phy_col = "Phy-ID" in cells[0]
            self.chip_cols = tuple(cells[2].split())
        elif header or not first[0].isdigit():
            return  # the NPU header row: the columns are read by structure
        elif self.proc_cols is not None:
            self.procs.extend(_process_row(cells, self.proc_cols))
        elif len(cells) >= 3:
            self.pending = _npu_or_chip_row(cells, first, self.chip_cols, self.pending, self.chips)

    def info(self) -> NpuSmiInfo:
        return NpuSmiInfo(self.version, tuple(self.chips), tuple(self.procs), frozenset(self.idle),
                          self.proc_cols is not None, self.phy_col)


def _header_kind(cells: list[str], first: list[str]) -> str | None:
    """Which header row of ``npu-smi info`` this is: ``process``, ``NPU``, ``Chip`` or None (a data row)."""
    if "Process id" in cells:
        return "process"
    if first[0] in ("NPU", "Chip") and len(cells) >= 3:
        return first[0]
    return None


def _chip(pending: tuple[int, str, str], cells: list[str], first: list[str],
          chip_cols: tuple[str, ...]) -> NpuChip:
    """A chip from its ``Chip [Phy-ID] | Bus-Id | metrics`` row and its NPU row's (npu, name, health)."""
    npu, name, health = pending
    m2 = _metrics(cells[2], chip_cols)
    used, total = _usage(_col(m2, "HBM-Usage"))
    phy_id = int(first[1]) if len(first) > 1 and first[1].isdigit() else None
    return NpuChip(npu=npu, chip=int(first[0]), name=name, health=health, bus_id=cells[1], phy_id=phy_id,
                   hbm_used_mb=used, hbm_total_mb=total, aicore_pct=_float(_col(m2, "AICore")))


def _npu_or_chip_row(cells: list[str], first: list[str], chip_cols: tuple[str, ...],
                     pending: tuple[int, str, str] | None, chips: list[NpuChip]) -> tuple[int, str, str] | None:
    """Read one row of the chip table: a ``Chip`` row completes the pending NPU row into a chip
    (appended to ``chips``); an NPU row becomes the pending one. Returns the new pending NPU row."""
    if _BUS_ID.match(cells[1]):
        if pending is not None:
            chips.append(_chip(pending, cells, first, chip_cols))
        return None
    if cells[1]:
        return (int(first[0]), " ".join(first[1:]), cells[1])
    return pending


def _process_row(cells: list[str], header: list[str]) -> list[NpuProcess]:
    if len(cells) != len(header):
        return []
    row = dict(zip(header, cells))
    where = row.get(header[0], "").split()
    pid = _int(row.get("Process id"))
    if len(where) < 2 or pid is None:
        return []
    mem = next((v for k, v in row.items() if k.startswith("Process memory")), None)
    container = row.get("Process id in container")
    return [NpuProcess(npu=int(where[0]), chip=int(where[1]), pid=pid, name=row.get("Process name", ""),
                       memory_mb=_int(mem), container_pid=container)]


# --------------------------------------------------------------------------- key : value blocks


def parse_kv_blocks(text: str, sep: str = ":") -> list[dict[str, str]]:
    """``Key   : value`` lines grouped into blocks (a blank line or a repeated key starts a new one).

    Used for ``npu-smi info -l``, ``-t health``, ``-t usages`` and ``hccn_tool -optical``.
    """
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        if not line.strip():
            blocks.append({})
        elif pair := _kv_pair(line, sep):
            key, value = pair
            if key in blocks[-1]:
                blocks.append({})
            blocks[-1][key] = value
    return [block for block in blocks if block]


def _kv_pair(line: str, sep: str) -> tuple[str, str] | None:
    """The stripped (key, value) of a ``Key : value`` line; None for comments and other lines."""
    key, found, value = line.partition(sep)
    if line.startswith("#") or not found or not key.strip():
        return None
    return key.strip(), value.strip()


@dataclass(frozen=True)
class NpuList:
    """``npu-smi info -l``: ``Total Count`` and the chip count of each NPU (1 on A2, 2 on A3)."""

    total: int | None
    chips: dict[int, int]

    @property
    def platform(self) -> str:
        return A3 if any(n >= 2 for n in self.chips.values()) else A2


def parse_npu_smi_list(text: str) -> NpuList:
    total = None
    chips: dict[int, int] = {}
    for block in parse_kv_blocks(text):
        if "Total Count" in block:
            total = _int(block["Total Count"])
        npu = _int(block.get("NPU ID"))
        count = _int(block.get("Chip Count"))
        if npu is not None and count is not None:
            chips[npu] = count
    return NpuList(total, chips)


@dataclass(frozen=True)
class ChipMapping:
    """One row of ``npu-smi info -m``; ``logic_id`` is None for the MCU (``-``)."""

    npu: int
    chip: int
    logic_id: int | None
    name: str


def parse_npu_smi_mapping(text: str) -> list[ChipMapping]:
    """``npu-smi info -m``: NPU ID, Chip ID, Chip Logic ID (the id torch uses), Chip Name."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
            logic = int(parts[2]) if parts[2].isdigit() else None
            out.append(ChipMapping(int(parts[0]), int(parts[1]), logic, " ".join(parts[3:])))
    return out


def parse_health(text: str) -> list[str]:
    """Every health value in ``npu-smi info -t health`` output, chip (``Health Status``) or card (``Health``)."""
    values = []
    for block in parse_kv_blocks(text):
        for key in ("Health Status", "Health"):
            if key in block:
                values.append(block[key])
    return values


@dataclass(frozen=True)
class SpodInfo:
    """``npu-smi info -t spod-info -i N -c C`` (A3 only): the die's SDID and its Super Pod ID."""

    sdid: int | None
    super_pod_id: int | None


def parse_spod_info(text: str) -> SpodInfo | None:
    """The first block with a ``Super Pod ID`` (ascend-hosts.md §1: ``SDID`` and ``Super Pod ID``), or None."""
    for block in parse_kv_blocks(text):
        if "Super Pod ID" in block:
            return SpodInfo(_int(block.get("SDID")), _int(block.get("Super Pod ID")))
    return None


# --------------------------------------------------------------------------- hccn_tool


def parse_link(text: str) -> str | None:
    """``link status: UP`` → ``"UP"`` (None when absent)."""
    m = re.search(r"link status:\s*(\S+)", text)
    return m.group(1).upper() if m else None


def parse_net_health(text: str) -> list[str]:
    """``net health status: Success`` lines → their values (one per device in a loop's output)."""
    return re.findall(r"net health status:\s*(.+?)\s*$", text, re.MULTILINE)


@dataclass(frozen=True)
class DeviceIp:
    ip: str | None
    netmask: str | None

    @property
    def configured(self) -> bool:
        return bool(self.ip)


def parse_ip(text: str) -> list[DeviceIp]:
    """``hccn_tool -ip -g``: one entry per ``ipaddr:``, or an unconfigured entry per ``Get ipconf failed``."""
    out: list[DeviceIp] = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("ipaddr:"):
            out.append(DeviceIp(_after_colon(s), None))
        elif s.startswith("netmask:") and _awaits_netmask(out):
            out[-1] = DeviceIp(out[-1].ip, _after_colon(s))
        elif "no ip was preset" in s or s.startswith("Get ipconf failed"):
            out.append(DeviceIp(None, None))
    return out


def _after_colon(line: str) -> str | None:
    """The stripped value after the first ``:`` (None when empty)."""
    return line.split(":", 1)[1].strip() or None


def _awaits_netmask(ips: list[DeviceIp]) -> bool:
    """Whether the last entry read has an address line but no netmask line yet."""
    return bool(ips) and ips[-1].netmask is None


@dataclass(frozen=True)
class TlsState:
    dev: int
    switch: int
    preconfigured: int | None = None


def parse_tls(text: str) -> list[TlsState]:
    """``dev_id:N, tls switch[S](...), tls preconfigured[P](...)`` lines (``-tls -g | grep switch``)."""
    out = []
    for m in re.finditer(r"dev_id:\s*(\d+),\s*tls switch\[(\d+)\](?:.*?tls preconfigured\[(\d+)\])?", text):
        out.append(TlsState(int(m.group(1)), int(m.group(2)), _int(m.group(3))))
    return out


@dataclass(frozen=True)
class PingResult:
    """One ``hccn_tool -ping`` run: ``device`` and ``address`` come from its ``device N PING ip`` line."""

    device: int | None
    address: str | None
    transmitted: int
    received: int
    loss_pct: float
    times_ms: tuple[float, ...] = ()
    timeouts: int = 0

    @property
    def ok(self) -> bool:
        return self.transmitted > 0 and self.received == self.transmitted


def parse_ping(text: str) -> list[PingResult]:
    """Ping blocks, each ending in ``N packets transmitted, M received, X% packet loss``.

    Tolerates the captured quirks: ``time-0.049000ms`` (dash for equals) and ``seq=O`` (letter O).
    """
    out: list[PingResult] = []
    device = address = None
    times: list[float] = []
    timeouts = 0
    for line in text.splitlines():
        if m := re.match(r"\s*device\s+(\d+)\s+PING\s+(\S+)", line):
            device, address, times, timeouts = int(m.group(1)), m.group(2), [], 0
        elif m := re.search(r"recv seq=\w+,\s*time[=-]\s*([0-9.]+)\s*ms", line):
            times.append(float(m.group(1)))
        elif "recv time out" in line:
            timeouts += 1
        elif m := re.search(r"(\d+) packets transmitted,\s*(\d+) received,\s*([0-9.]+)% packet loss", line):
            out.append(PingResult(device, address, int(m.group(1)), int(m.group(2)), float(m.group(3)),
                                  tuple(times), timeouts))
            device = address = None
            times, timeouts = [], 0
    return out


# --------------------------------------------------------------------------- version records


def parse_key_values(text: str) -> dict[str, str]:
    """``key=value`` lines (toolkit ``*_install.info``, driver/firmware ``version.info``, ``/etc/ascend_install.info``).

    Comments and lines without ``=`` are skipped; the first occurrence of a key wins.
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#") or "=" not in s:
            continue
        key, _, value = s.partition("=")
        out.setdefault(key.strip(), value.strip())
    return out


@dataclass(frozen=True)
class CannInstall:
    """A toolkit install record; ``layout`` is ``cann`` (>= 8.5: ``cann-<ver>``) or ``ascend-toolkit``."""

    version: str
    innerversion: str | None
    arch: str | None
    path: str | None
    layout: str | None


def cann_layout(path: str | None) -> str | None:
    """``cann`` for ``…/cann[-<ver>]/…``, ``ascend-toolkit`` for ``…/ascend-toolkit/…``."""
    if not path:
        return None
    parts = path.split("/")
    if any(p == "cann" or p.startswith("cann-") for p in parts):
        return "cann"
    if "ascend-toolkit" in parts:
        return "ascend-toolkit"
    return None


def parse_toolkit_install_info(text: str) -> CannInstall | None:
    """``ascend_toolkit_install.info`` → CannInstall (None without a ``version=`` key)."""
    kv = parse_key_values(text)
    if not kv.get("version"):
        return None
    path = kv.get("path")
    return CannInstall(kv["version"], kv.get("innerversion"), kv.get("arch"), path, cann_layout(path))


def parse_version_cfg(text: str) -> dict[str, dict[str, tuple[str, str]]]:
    """Old ``version.cfg``: component → {running|upgrade|installed: (inner version, CANN version)}."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for key, value in parse_key_values(text).items():
        m = re.fullmatch(r"(\w+?)_(running|upgrade|installed)_version", key)
        v = re.fullmatch(r"\[([^:\]]*):([^\]]*)\]", value)
        if m and v:
            out.setdefault(m.group(1), {})[m.group(2)] = (v.group(1), v.group(2))
    return out


def cann_version_from_cfg(cfg: dict[str, dict[str, tuple[str, str]]]) -> str | None:
    """The running CANN version of the toolkit (else of any component) in a parsed ``version.cfg``."""
    for comp in ("toolkit", *cfg):
        running = cfg.get(comp, {}).get("running")
        if running and running[1]:
            return running[1]
    return None


def driver_version(text: str) -> str | None:
    """``Version=`` of a driver or firmware ``version.info`` (newer drivers: ``package_version=`` as fallback)."""
    kv = parse_key_values(text)
    return kv.get("Version") or kv.get("package_version")


# --------------------------------------------------------------------------- misc


def parse_lspci_npus(text: str) -> dict[str, int]:
    """Count Huawei accelerator functions by device id: ``{"d802": 8}`` (A2), ``d803`` treated as A3."""
    out: dict[str, int] = {}
    for m in re.finditer(r"Device\s+(d80[0-9a-f])\b", text):
        out[m.group(1)] = out.get(m.group(1), 0) + 1
    return out


@dataclass(frozen=True)
class DiskFree:
    filesystem: str
    total_kb: int
    available_kb: int
    mount: str


def parse_df(text: str) -> DiskFree | None:
    """The last data line of ``df -Pk PATH``."""
    for line in reversed(text.strip().splitlines()):
        parts = line.split()
        if len(parts) >= 6 and parts[1].isdigit() and parts[3].isdigit():
            return DiskFree(parts[0], int(parts[1]), int(parts[3]), " ".join(parts[5:]))
    return None
