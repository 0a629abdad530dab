"""After a launch on NPU hosts: are the devices free again, and what a failure leaves
for the report."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from framework.ascend.parse import NpuSmiInfo, parse_npu_smi_info
from framework.ascend.tools import STATE_DIR, npu_smi_script, state_script
from framework.commands import ShellScript
from framework.errors import FrameworkError, HostError
from framework.records.folder import update_json

log = logging.getLogger("camit.launch")

#: how long a device may take to be released after its process ended, and how often to look
RELEASE_TIMEOUT = 10.0
RELEASE_INTERVAL = 0.5

DIRTY_FILE = "dirty-hosts.json"


@dataclass(frozen=True)
class HeldDevice:
    """A device (``npu`` card, ``chip`` die, as ``npu-smi info`` numbers them) a pid of a launch still holds."""

    host: str
    npu: int
    chip: int
    pid: int
    name: str = ""
    launch_id: str = ""

    def reset_command(self) -> str:
        """The operator's reset of this device (npu-fidelity.md / ascend-hosts.md §4); never run by camit."""
        return f"npu-smi set -t reset -i {self.npu} -c {self.chip}"

    def describe(self) -> str:
        what = f" ({self.name})" if self.name else ""
        by = f" after launch {self.launch_id}" if self.launch_id else ""
        return (f"{self.host}: NPU {self.npu} chip {self.chip} still held by pid {self.pid}{what}{by}; "
                f"an operator may reset it: {self.reset_command()}")


def held_by(host: str, info: NpuSmiInfo, pids: Iterable[int], launch_id: str = "") -> list[HeldDevice]:
    """The process-table rows of ``info`` whose pid is one of ``pids``."""
    ours = set(pids)
    return [HeldDevice(host, p.npu, p.chip, p.pid, p.name, launch_id) for p in info.processes if p.pid in ours]


def wait_released(run: Callable[[ShellScript], tuple[int, str]], host: str, pids: Iterable[int], *,
                  launch_id: str = "", timeout: float = RELEASE_TIMEOUT, interval: float = RELEASE_INTERVAL,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> list[HeldDevice]:
    """Poll ``npu-smi info`` (``run`` returns its rc and stdout) until no pid of ``pids`` holds a device.

    Returns what is still held when ``timeout`` ran out ([] once free, or when npu-smi cannot be run:
    that is preflight's finding, not this launch's).
    """
    ours = set(pids)
    if not ours:
        return []
    end = clock() + timeout
    while True:
        rc, out = run(npu_smi_script())
        if rc != 0:
            log.info("%s: npu-smi info failed (rc %s): device release not checked", host, rc)
            return []
        held = held_by(host, parse_npu_smi_info(out), ours, launch_id)
        if not held or clock() + interval > end:
            return held
        sleep(interval)


class HostDirty(HostError):
    """A launch on a host where a device is still held by an earlier launch's process."""

    def __init__(self, host: str, held: Sequence[HeldDevice]) -> None:
        self.held = list(held)
        lines = "; ".join(f"NPU {h.npu} chip {h.chip} held by pid {h.pid}" + (f" ({h.name})" if h.name else "")
                          for h in held)
        resets = "; ".join(dict.fromkeys(h.reset_command() for h in held))
        super().__init__(host, f"dirty since launch {held[0].launch_id}: {lines} — not launching here "
                               f"(HCCL init would fail and blame this test); an operator may reset: {resets}")


class DirtyHosts:
    """The session's hosts with a device still held by one of its launches (first finding per device kept)."""

    def __init__(self) -> None:
        self.held: dict[str, list[HeldDevice]] = {}

    def mark(self, held: Iterable[HeldDevice]) -> None:
        for h in held:
            known = self.held.setdefault(h.host, [])
            if not any((k.npu, k.chip, k.pid) == (h.npu, h.chip, h.pid) for k in known):
                known.append(h)

    def check(self, names: Iterable[str]) -> None:
        """Raise :class:`HostDirty` for the first of ``names`` that is dirty."""
        for name in names:
            if self.held.get(name):
                raise HostDirty(name, self.held[name])

    def to_json(self) -> dict[str, list[dict[str, object]]]:
        return {host: [dict(asdict(h), reset=h.reset_command()) for h in held] for host, held in self.held.items()}

    def write(self, report: Path) -> Path | None:
        """Merge into ``<report>/dirty-hosts.json`` (xdist workers share the folder, not the hosts); None when clean."""
        if not self.held:
            return None
        mine = self.to_json()
        path = report / DIRTY_FILE
        update_json(path, lambda known: {**(known if isinstance(known, dict) else {}), **mine})
        return path


def read_dirty(report: Path) -> dict[str, list[dict[str, object]]]:
    """The run folder's dirty hosts (``{}`` when there are none or the file is unreadable)."""
    try:
        doc = json.loads((report / DIRTY_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(h): [e for e in v if isinstance(e, dict)]
            for h, v in doc.items() if isinstance(v, list)}


def reset_lines(dirty: dict[str, list[dict[str, object]]]) -> list[str]:
    """One line per held device: host, device, pid and the reset command (for the summary and ``camit run``)."""
    return [f"{host}: NPU {e.get('npu')} chip {e.get('chip')} held by pid {e.get('pid')} — reset (operator): "
            f"{e.get('reset')}" for host, held in dirty.items() for e in held]


def host_result(host_run: Callable[..., object]) -> Callable[[ShellScript], tuple[int, str]]:
    """``run`` for :func:`wait_released` over a ``Host.run`` (a transport error counts as "not checked")."""

    def run(script: ShellScript) -> tuple[int, str]:
        try:
            res = host_run(script, timeout=30)
        except FrameworkError as exc:
            return -1, str(exc)
        return int(getattr(res, "rc", -1)), str(getattr(res, "stdout", ""))

    return run


__all__ = ["DIRTY_FILE", "RELEASE_INTERVAL", "RELEASE_TIMEOUT", "STATE_DIR", "DirtyHosts", "HeldDevice", "HostDirty",
           "held_by", "read_dirty", "reset_lines", "state_script", "wait_released"]
