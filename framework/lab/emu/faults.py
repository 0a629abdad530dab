"""Fault knobs of an emulated Ascend host: each one puts the host in a state a real node can be in.

A knob is a line in the tree's ``Ascend/.camit-emu/faults.json`` the fake tools read at every call
(``no-driver`` and ``held-device`` act otherwise). The knobs and what each does:
docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from framework.errors import LabError
from framework.lab.emu.profiles import NPU_JSON, PYTHON, profile
from framework.lab.emu.tree import EMU, populate, remove_driver

KNOBS: tuple[str, ...] = ("tls-mismatch", "health-alarm", "link-down", "hccn-busy", "held-device", "other-spod",
                          "no-driver")
#: each knob's parameters and their defaults
PARAMS: dict[str, dict[str, Any]] = {
    "tls-mismatch": {"device": 1},
    "health-alarm": {"device": 0, "level": "Alarm"},
    "link-down": {"device": 0},
    "hccn-busy": {"device": 0},
    "held-device": {"device": 0},
    "other-spod": {"spod_id": 1},
    "no-driver": {},
}
#: the Health values that are not OK (ascend-hosts.md §3)
HEALTH_LEVELS = ("Warning", "Alarm", "Critical", "UNKNOWN")


def _emu(tree: Path) -> tuple[Path, dict[str, Any]]:
    emu = Path(tree) / EMU
    try:
        host = json.loads((emu / "host.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LabError(f"{tree} is not an emulated Ascend host's tree (no readable {EMU}/host.json): {exc}") from None
    return emu, host


def _knobs(emu: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((emu / "faults.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    knobs = data.get("knobs", {}) if isinstance(data, dict) else {}
    return knobs if isinstance(knobs, dict) else {}


def _save(emu: Path, knobs: dict[str, dict[str, Any]]) -> None:
    (emu / "faults.json").write_text(json.dumps({"knobs": knobs}, indent=1) + "\n", encoding="utf-8")


def _is_integer(value: object) -> bool:
    """An int (not a bool) or a string of digits."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and value.isdigit())


def _int(knob: str, key: str, value: object, low: int, high: int | None) -> int:
    """``value`` as an integer in ``low..high`` (no upper bound when ``high`` is None)."""
    if not _is_integer(value):
        raise LabError(f"fault knob {knob}: {key} must be an integer, got {value!r}")
    n = int(str(value))
    if n < low or (high is not None and n > high):
        top = "" if high is None else str(high)
        raise LabError(f"fault knob {knob}: {key} {n} outside {low}..{top}")
    return n


def _refuse_unknown(knob: str, params: dict[str, Any]) -> None:
    """LabError for an unknown knob, or a parameter the knob does not take."""
    if knob not in PARAMS:
        raise LabError(f"unknown fault knob {knob!r}: valid knobs are {', '.join(KNOBS)}")
    unknown = sorted(set(params) - set(PARAMS[knob]))
    if unknown:
        valid = ", ".join(PARAMS[knob]) or "none"
        raise LabError(f"fault knob {knob}: unknown parameter {', '.join(unknown)} (valid: {valid})")


def check_params(knob: str, params: dict[str, Any], count: int) -> dict[str, Any]:
    """The knob's parameters with defaults filled in; unknown knobs, keys or values: LabError."""
    _refuse_unknown(knob, params)
    values = {**PARAMS[knob], **params}
    bounds: dict[str, tuple[int, int | None]] = {"device": (0, count - 1), "spod_id": (0, None)}
    for key, (low, high) in bounds.items():
        if key in values:
            values[key] = _int(knob, key, values[key], low, high)
    if knob == "health-alarm" and values["level"] not in HEALTH_LEVELS:
        raise LabError(f"fault knob health-alarm: level {values['level']!r} is not one of {', '.join(HEALTH_LEVELS)}")
    return values


def set_fault(tree: Path, knob: str, **params: Any) -> None:
    """Turn ``knob`` on for the host of ``tree`` (again: with the new parameters)."""
    emu, host = _emu(tree)
    values = check_params(knob, params, int(host["count"]))
    if knob == "other-spod":
        _check_other_spod(values, host)
    knobs = _knobs(emu)
    knobs[knob] = values
    _save(emu, knobs)
    if knob == "no-driver":
        remove_driver(Path(tree))


def _check_other_spod(values: dict[str, Any], host: dict[str, Any]) -> None:
    """other-spod needs an A3 host and a super pod that is not the lab's own."""
    if int(host["chips_per_npu"]) != 2:
        raise LabError(f"fault knob other-spod: an A2 node ({host['profile']}) has no super pod "
                       "(spod-info is A3 only)")
    if values["spod_id"] == host["spod_id"]:
        raise LabError(f"fault knob other-spod: spod_id {values['spod_id']} is this lab's own super pod")


def _start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (the process's start time), None when no such process or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def release_dead(tree: Path) -> list[int]:
    """Drop the registry records of processes that are gone (what an operator's device reset does).

    The lab's hosts share the controller's pid namespace, so a record's ``pid`` + ``start_ticks`` (as the
    torch_npu stand-in writes them, standin_npu/torch_npu/_occupancy.py) say here whether it still runs.
    Returns the pids released.
    """
    gone = []
    for path in sorted((Path(tree) / EMU / "registry").glob("*.json")):
        rec = _registry_record(path)
        if rec is not None and _is_gone(*rec):
            path.unlink(missing_ok=True)
            gone.append(rec[0])
    return gone


def _registry_record(path: Path) -> tuple[int, Any] | None:
    """(pid, start ticks or None) of a registry record; None when it cannot be read."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        return int(rec["pid"]), rec.get("start_ticks")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _is_gone(pid: int, ticks: Any) -> bool:
    """No such process any more, or ``pid`` is another process now (another start time)."""
    now = _start_ticks(pid)
    return now is None or (ticks is not None and int(ticks) != now)


def clear_faults(tree: Path) -> None:
    """Every knob off, linger back to 0 and dead holders' devices released; a removed driver is put back."""
    emu, host = _emu(tree)
    had_driver_fault = "no-driver" in _knobs(emu)
    _save(emu, {})
    set_linger(tree, 0)
    release_dead(tree)
    if had_driver_fault:
        populate(Path(tree), profile(host["profile"]), host=host["host"], index=int(host["index"]),
                 n_hosts=int(host["n_hosts"]))


def active_faults(tree: Path) -> list[str]:
    """The knobs now on, in :data:`KNOBS` order."""
    emu, _ = _emu(tree)
    knobs = _knobs(emu)
    return [k for k in KNOBS if k in knobs]


def fault_params(tree: Path, knob: str) -> dict[str, Any] | None:
    """The parameters ``knob`` was set with (None when it is off), e.g. ``held-device``'s device."""
    emu, _ = _emu(tree)
    return _knobs(emu).get(knob)


def set_linger(tree: Path, seconds: float) -> None:
    """Seconds a device stays listed after its holder died without exiting (``linger_s`` in ``npu.json``).

    The torch_npu stand-in copies it into a process's registry record when the process registers, so it
    applies to processes that set a device afterwards (as a real NPU's release time is per process).
    """
    emu, _ = _emu(tree)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise LabError(f"linger must be a number of seconds >= 0, got {seconds!r}")
    path = emu / "npu.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["linger_s"] = float(seconds)
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")


#: run by the holder: set the device as any rank does (torch_npu registers it), then sleep until killed
_HOLDER = (
    "import os, sys, time\n"
    "os.environ.setdefault('CAMIT_EMU_NPU', {npu_json!r})\n"
    "os.environ.pop('ASCEND_RT_VISIBLE_DEVICES', None)\n"
    "import torch, torch_npu\n"
    "torch.npu.set_device({device})\n"
    "sys.stdout.write('holding npu %d pid %d\\n' % ({device}, os.getpid())); sys.stdout.flush()\n"
    "while True:\n"
    "    time.sleep(3600)\n"
)


def holder_argv(device: int) -> list[str]:
    """A host-side command (the host's :data:`PYTHON`) that holds logical ``device`` until it is killed.

    It imports torch_npu and calls ``torch.npu.set_device`` (so it is in the registry exactly as a rank
    is), prints ``holding npu <device> pid <pid>`` once registered, then sleeps. Killed by a signal it
    leaves its record behind, listed for ``linger_s`` more seconds.
    """
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise LabError(f"held-device: device must be an integer >= 0, got {device!r}")
    return [PYTHON, "-c", _HOLDER.format(npu_json=NPU_JSON, device=device)]


#: per host tree: the device IPs of *other* hosts whose link is down (written by :func:`sync_peer_links`)
PEERS_DOWN = "peers-down.json"


def _down_ips(tree: Path) -> list[str]:
    """The IP of the host's device whose link is down ([] when none is)."""
    emu, host = _emu(tree)
    knob = _knobs(emu).get("link-down")
    if knob is None:
        return []
    return [host["devices"][int(knob.get("device", 0))]["ip"]]


def sync_peer_links(trees: list[Path]) -> None:
    """Tell every host of a lab which peer device IPs have ``link-down``: a real device NIC whose link is down
    answers no ping, so a ping *to* it times out as well as one *from* it (``hccn-ping-loss.txt``'s
    ``recv time out`` lines). Each tree gets :data:`PEERS_DOWN`, the down devices' IPs of the other trees."""
    down = {tree: _down_ips(tree) for tree in trees}
    for tree in trees:
        others = sorted(ip for t, ips in down.items() if t != tree for ip in ips)
        (Path(tree) / EMU / PEERS_DOWN).write_text(json.dumps({"down": others}) + "\n", encoding="utf-8")

