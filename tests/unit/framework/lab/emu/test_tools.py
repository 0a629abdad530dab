"""The fake Ascend tools of an emulated host (framework/lab/emu/tools), run from a tree under tmp_path.

Three kinds of check: the renderer reproduces each npu-smi capture byte for byte from the capture's own
values (so the layout is the real one, not one our parsers happen to accept); every tool's output, run as
a subprocess, parses with camit's parsers (framework/ascend/parse.py) to the profile's shape; each
fault knob changes exactly the answers it should and nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from framework.ascend import parse as ascend
from framework.lab import emu
from framework.lab.emu import tree as emu_tree
from framework.lab.emu.tools import common, hccn_tool, msnpureport, npu_smi
from tests.support.builders import ASCEND_CAPTURES, CAPTURE_FOLDERS
from tests.support.emu_holders import holder as start_holder
from tests.support.emu_holders import kill

ROOT = Path(__file__).resolve().parents[5]
DATA = ASCEND_CAPTURES
PROFILES = sorted(emu.PROFILES)


def _populate(tmp_path: Path, name: str, index: int = 0, n_hosts: int = 2) -> Path:
    tree = tmp_path / f"{name}-{index}"
    emu.populate(tree, emu.profile(name), host=f"host{index}", index=index, n_hosts=n_hosts)
    return tree


def _env(tree: Path) -> dict[str, str]:
    camit = tree / "Ascend" / ".camit-emu"
    return {**os.environ, "CAMIT_EMU_NPU": str(camit / "npu.json"), "CAMIT_EMU_NPU_DIR": str(camit / "registry")}


def _run(tree: Path, tool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = tree / ("sbin/npu-smi" if tool == "npu-smi" else f"Ascend/driver/tools/{tool}")
    return subprocess.run([str(path), *args], capture_output=True, text=True, env=_env(tree), timeout=30, cwd=cwd)


def _ok(tree: Path, tool: str, *args: str) -> str:
    r = _run(tree, tool, *args)
    assert r.returncode == 0, (tool, args, r.stdout, r.stderr)
    return r.stdout


def _body(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()[1:]


# --------------------------------------------------------------------------- layouts = the captures


def _render_capture(name: str, layout: str, head: list[str], proc_head: list[str]) -> list[str]:
    """Re-render an ``npu-smi info`` capture from the values it shows, with the tools' row functions."""
    text = (DATA / name).read_text(encoding="utf-8")
    info = ascend.parse_npu_smi_info(text)
    chips = emu_tree._capture_chips(text)
    sep, die_sep = npu_smi._separators(layout)
    lines = list(head)
    npus = list(dict.fromkeys(c["npu"] for c in chips))
    for npu in npus:
        dies = [c for c in chips if c["npu"] == npu]
        for i, c in enumerate(dies):
            lines += npu_smi.npu_rows(c, "OK", c["capture_aicore"], c["capture_hbm"], layout)
            if i < len(dies) - 1:
                lines.append(die_sep)
        lines.append(sep)
    rows: dict[int, list[tuple[int, int, str, int]]] = {}
    for p in info.processes:
        rows.setdefault(p.npu, []).append((p.chip, p.pid, p.name, p.memory_mb or 0))
    return lines + proc_head + npu_smi.process_rows(len(npus), rows, layout)


@pytest.mark.parametrize("name", ["npu-smi-info-910b3-a2-busy.txt", "npu-smi-info-a3-busy.txt"])
def test_renderer_reproduces_the_25x_captures(name: str) -> None:
    body = _body(name)
    end = next(i for i, ln in enumerate(body) if ln.startswith("+==="))
    at = next(i for i, ln in enumerate(body) if "Process id" in ln)
    assert _render_capture(name, "25", body[: end + 1], body[at - 1: at + 2]) == body


def test_renderer_reproduces_the_26x_excerpts() -> None:
    head = _body("npu-smi-info-a3-v26-header-excerpt.txt")
    text = "\n".join(head)
    chips = emu_tree._capture_chips(text)
    sep, die_sep = npu_smi._separators("26")
    rendered = head[:6] + npu_smi.npu_rows(chips[0], "OK", chips[0]["aicore"], chips[0]["capture_hbm"], "26")
    rendered += [die_sep] + npu_smi.npu_rows(chips[1], "OK", chips[1]["aicore"], chips[1]["capture_hbm"], "26")
    assert rendered == head
    proc = _body("npu-smi-info-a3-v26-proc-excerpt.txt")
    last = emu_tree._capture_chips("\n".join(proc))[0]
    rendered = [die_sep] + npu_smi.npu_rows(last, "OK", last["aicore"], last["capture_hbm"], "26") + [sep]
    rendered += proc[4:7] + npu_smi.process_rows(2, {0: [(0, 632268, "python3.1", 197)]}, "26")
    assert rendered == proc


def test_key_value_layouts_reproduce_the_captures(tmp_path: Path) -> None:
    assert npu_smi.info_list(8, 1) == _body("npu-smi-info-l-910b4.txt")
    assert npu_smi.info_mapping(8, 1, "Ascend 910B4") == _body("npu-smi-info-m-910b4.txt")
    host = common.Host(_populate(tmp_path, "a2") / "Ascend/.camit-emu")
    assert npu_smi.health_card(host, 0) == _body("npu-smi-info-t-health-card.txt")
    assert npu_smi.health_chip(host, 0, 0) == _body("npu-smi-info-t-health-chip.txt")
    keys = [list(b) for b in ascend.parse_kv_blocks("\n".join(_body("npu-smi-info-t-usages-doc.txt")))]
    assert [list(b) for b in ascend.parse_kv_blocks("\n".join(npu_smi.usages(host, 0)))] == keys


def test_each_capture_has_one_copy() -> None:
    """The captures the emulated tools replay ship in the package (framework/lab/emu/data), each with its
    ``# source:`` line; tests/data/ascend holds only the others (tests read both through ASCEND_CAPTURES)."""
    shipped = sorted(emu_tree.DATA.glob("*.txt"))
    assert len(shipped) >= 20
    for path in shipped:
        assert path.read_text(encoding="utf-8").startswith("# source: "), path.name
    tests_own = {p.name for p in CAPTURE_FOLDERS[1].glob("*.txt")}
    assert not tests_own & {p.name for p in shipped}, "a capture kept twice"


# --------------------------------------------------------------------------- every tool parses to the shape


@pytest.mark.parametrize("name", PROFILES)
def test_npu_smi_outputs_parse_to_the_profile(tmp_path: Path, name: str) -> None:
    prof = emu.profile(name)
    tree = _populate(tmp_path, name)
    info = ascend.parse_npu_smi_info(_ok(tree, "npu-smi", "info"))
    assert len(info.chips) == prof.count and len(info.npus) == prof.npus
    assert info.platform == ("A3" if prof.a3 else "A2")
    assert ascend.SOC_OF_PLATFORM[info.platform] == prof.soc
    assert info.version == prof.driver_version and not info.unhealthy
    assert info.has_process_table and not info.processes and info.idle_npus == set(range(prof.npus))
    assert [info.logical_id(c) for c in info.chips] == list(range(prof.count))
    listing = ascend.parse_npu_smi_list(_ok(tree, "npu-smi", "info", "-l"))
    assert listing.total == prof.npus and listing.platform == info.platform
    mapping = [m for m in ascend.parse_npu_smi_mapping(_ok(tree, "npu-smi", "info", "-m")) if m.logic_id is not None]
    assert [(m.npu, m.chip, m.logic_id) for m in mapping] == [
        (d // prof.chips_per_npu, d % prof.chips_per_npu, d) for d in range(prof.count)]
    assert ascend.parse_health(_ok(tree, "npu-smi", "info", "-t", "health", "-i", "7")) == ["OK"] * (
        prof.chips_per_npu + 1)
    assert ascend.parse_health(_ok(tree, "npu-smi", "info", "-t", "health", "-i", "7", "-c", "0")) == ["OK"]
    usage = ascend.parse_kv_blocks(_ok(tree, "npu-smi", "info", "-t", "usages", "-i", "1"))
    assert [b["Chip ID"] for b in usage[1:]] == [str(c) for c in range(prof.chips_per_npu)]
    board = ascend.parse_kv_blocks(_ok(tree, "npu-smi", "info", "-t", "board", "-i", "2"))[0]
    assert board["Software Version"] == prof.driver_version and board["PCIe Bus Info"] == info.chips[
        2 * prof.chips_per_npu].bus_id
    spod = _run(tree, "npu-smi", "info", "-t", "spod-info", "-i", "1", "-c", "1")
    if prof.a3:
        assert ascend.parse_kv_blocks(spod.stdout) == [{"SDID": "3", "Super Pod ID": "0"}]
    else:
        assert spod.returncode != 0 and "spod-info" in spod.stderr


@pytest.mark.parametrize("name", ["a2", "a3"])
def test_hccn_tool_outputs_parse_to_the_profile(tmp_path: Path, name: str) -> None:
    prof = emu.profile(name)
    tree = _populate(tmp_path, name, index=1)
    peer = emu_tree.device_ip(0, 2)  # a device of the other lab host
    camit = tree / "Ascend/.camit-emu"
    for dev in range(prof.count):  # the first and last device as subprocesses, every one in-process
        run = _ok if dev in (0, prof.count - 1) else lambda _t, _tool, *a: _call(hccn_tool, camit, *a)[5:]
        assert ascend.parse_link(run(tree, "hccn_tool", "-i", str(dev), "-link", "-g")) == "UP"
        assert ascend.parse_net_health(run(tree, "hccn_tool", "-i", str(dev), "-net_health", "-g")) == ["Success"]
        (ip,) = ascend.parse_ip(run(tree, "hccn_tool", "-i", str(dev), "-ip", "-g"))
        assert ip.configured and ip.ip == emu_tree.device_ip(1, dev) and ip.netmask == "255.255.255.0"
        (tls,) = ascend.parse_tls(run(tree, "hccn_tool", "-i", str(dev), "-tls", "-g"))
        assert (tls.dev, tls.switch, tls.preconfigured) == (dev, 0, 1)
    (ping,) = ascend.parse_ping(_ok(tree, "hccn_tool", "-i", "3", "-ping", "-g", "address", peer))
    assert ping.ok and (ping.device, ping.address, ping.transmitted, ping.loss_pct) == (3, peer, 3, 0.0)
    (lost,) = ascend.parse_ping(_ok(tree, "hccn_tool", "-i", "3", "-ping", "-g", "address", "10.9.9.9", "pkt", "2"))
    assert not lost.ok and (lost.transmitted, lost.received, lost.timeouts, lost.loss_pct) == (2, 0, 2, 100.0)
    assert _ok(tree, "hccn_tool", "-i", "1", "-gateway", "-g") == "default gateway:192.168.101.1, Iface:eth1\n"
    assert _ok(tree, "hccn_tool", "-i", "1", "-lldp", "-g").startswith("\tIfname: 400GE1/1/6:2")
    assert _ok(tree, "hccn_tool", "-i", "0", "-netdetect", "-g") == "netdetect address: 192.168.101.1\n"


def test_a_second_concurrent_hccn_call_answers_busy(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a2")
    with open(tree / "Ascend/.camit-emu/hccn.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # a call in progress
        r = _run(tree, "hccn_tool", "-i", "0", "-link", "-g")
        assert (r.returncode, r.stdout) == (1, hccn_tool.BUSY + "\n")
    assert _ok(tree, "hccn_tool", "-i", "0", "-link", "-g") == "link status: UP\n"


def test_a3_dies_of_one_npu_do_not_ping_each_other(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a3")
    (same_npu,) = ascend.parse_ping(_ok(tree, "hccn_tool", "-i", "4", "-ping", "-g", "address",
                                        emu_tree.device_ip(0, 5)))
    (other_npu,) = ascend.parse_ping(_ok(tree, "hccn_tool", "-i", "4", "-ping", "-g", "address",
                                         emu_tree.device_ip(0, 6)))
    assert not same_npu.ok and other_npu.ok


@pytest.mark.parametrize(("tool", "args"), [
    ("npu-smi", []), ("npu-smi", ["list"]), ("npu-smi", ["info", "-x"]), ("npu-smi", ["info", "-t", "health"]),
    ("npu-smi", ["info", "-t", "health", "-i", "8"]), ("npu-smi", ["info", "-t", "health", "-i", "0", "-c", "1"]),
    ("npu-smi", ["info", "-t", "power", "-i", "0"]), ("hccn_tool", []), ("hccn_tool", ["-i", "8", "-link", "-g"]),
    ("hccn_tool", ["-i", "0", "-optics", "-g"]), ("hccn_tool", ["-i", "0", "-tls", "-s", "enable", "0"]),
    ("hccn_tool", ["-i", "0", "-ping", "-g"]), ("hccn_tool", ["-i", "x", "-link", "-g"]), ("msnpureport", ["-x"]),
])
def test_unknown_commands_and_options_fail(tmp_path: Path, tool: str, args: list[str]) -> None:
    r = _run(_populate(tmp_path, "a2"), tool, *args)
    assert r.returncode != 0 and not r.stdout and "Usage: " in r.stderr


def test_msnpureport_exports_a_directory_per_device(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a3")
    work = tmp_path / "work"
    work.mkdir()
    r = _run(tree, "msnpureport", cwd=work)
    assert r.returncode == 0, r.stderr
    (stamp,) = work.iterdir()
    assert sorted(p.name for p in (stamp / "host0").iterdir()) == sorted(f"device-{d}" for d in range(16))


# --------------------------------------------------------------------------- the registry in the process table

def _procs(tree: Path) -> list[ascend.NpuProcess]:
    return list(ascend.parse_npu_smi_info(_ok(tree, "npu-smi", "info")).processes)


def test_registered_process_is_listed_until_it_dies(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a3")
    p = start_holder(tree, 3, 12)
    try:
        info = ascend.parse_npu_smi_info(_ok(tree, "npu-smi", "info"))
        assert [(q.npu, q.chip, q.pid) for q in info.processes] == [(1, 1, p.pid), (6, 0, p.pid)]
        assert info.idle_npus == {0, 2, 3, 4, 5, 7} and info.busy_npus == [1, 6]
        hbm = {(c.npu, c.chip): c.hbm_used_mb for c in info.chips}
        idle_mb = hbm[(0, 1)]
        assert idle_mb is not None and hbm[(1, 1)] == idle_mb + npu_smi.PROC_MB
        rate = ascend.parse_kv_blocks(_ok(tree, "npu-smi", "info", "-t", "usages", "-i", "1"))
        assert int(rate[2]["HBM Usage Rate(%)"]) > int(rate[1]["HBM Usage Rate(%)"])
    finally:
        kill(p)
    deadline = time.monotonic() + 10
    while _procs(tree) and time.monotonic() < deadline:  # linger 0: gone a heartbeat after the kill
        time.sleep(0.3)
    assert _procs(tree) == []


def test_linger_keeps_a_killed_holder_listed(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a2")
    emu.set_linger(tree, 30)
    assert json.loads((tree / "Ascend/.camit-emu/npu.json").read_text())["linger_s"] == 30
    p = start_holder(tree, 5)
    kill(p)
    time.sleep(2.5)  # past the heartbeat slack a linger of 0 allows
    assert [(q.npu, q.chip, q.pid) for q in _procs(tree)] == [(5, 0, p.pid)]


def test_holder_argv_holds_a_device_through_torch_npu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    tree = _populate(tmp_path, "a2")
    argv = emu.holder_argv(6)
    assert argv[0] == emu.PYTHON == "/usr/local/Ascend/.camit-emu/python/bin/python"
    env = {**_env(tree), "PYTHONPATH": str(ROOT / "standin_npu")}
    p = subprocess.Popen([sys.executable, *argv[1:]], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == f"holding npu 6 pid {p.pid}"
        assert [(q.npu, q.chip, q.pid) for q in _procs(tree)] == [(6, 0, p.pid)]
    finally:
        kill(p)


# --------------------------------------------------------------------------- knobs: exactly their change


def _call(mod: ModuleType, camit: Path, *args: str) -> str:
    """One tool call in-process (the same code the tree's launchers run): rc and stdout+stderr."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = mod.main(list(args), camit)
    return f"rc={rc}\n{buf.getvalue()}"


def _snapshot(tree: Path) -> dict[tuple[object, ...], str]:
    """Every answer the tools give on this host, keyed by the query."""
    camit = tree / "Ascend/.camit-emu"
    host = common.Host(camit)
    snap: dict[tuple[object, ...], str] = {("info",): _call(npu_smi, camit, "info")}
    for extra in (["-l"], ["-m"]):
        key = ("info", *extra)
        snap[key] = _call(npu_smi, camit, "info", *extra)
    for npu in range(host.npus):
        for kind in ("health", "usages", "board"):
            snap[(kind, npu)] = _call(npu_smi, camit, "info", "-t", kind, "-i", str(npu))
        for chip in range(host.chips_per_npu):
            for kind in ("health", "spod-info"):
                snap[(kind, npu, chip)] = _call(npu_smi, camit, "info", "-t", kind, "-i", str(npu), "-c", str(chip))
    peer = emu_tree.device_ip(1, 0)
    for dev in range(host.count):
        for q in ("link", "net_health", "ip", "tls", "gateway", "lldp", "netdetect", "fec"):
            snap[("hccn", dev, q)] = _call(hccn_tool, camit, "-i", str(dev), f"-{q}", "-g")
        snap[("hccn", dev, "ping")] = _call(hccn_tool, camit, "-i", str(dev), "-ping", "-g", "address", peer)
    snap[("msnpureport", "-h")] = _call(msnpureport, camit, "-h")
    return snap


def _changed(tree: Path, knob: str, **params: object) -> tuple[set[tuple[object, ...]], dict[tuple[object, ...], str]]:
    before = _snapshot(tree)
    emu.set_fault(tree, knob, **params)
    after = _snapshot(tree)
    emu.clear_faults(tree)
    assert _snapshot(tree) == before, f"clear_faults did not restore the answers after {knob}"
    return {k for k in before if before[k] != after[k]}, after


def test_knob_tls_mismatch(tmp_path: Path) -> None:
    changed, after = _changed(_populate(tmp_path, "a2"), "tls-mismatch")
    assert changed == {("hccn", 1, "tls")}
    assert ascend.parse_tls(after[("hccn", 1, "tls")].split("\n", 1)[1])[0].switch == 1
    assert after[("hccn", 1, "tls")].split("\n", 1)[1] == _body("hccn-tls-mismatch.txt")[1] + "\n"


@pytest.mark.parametrize(("name", "device", "npu", "chip"), [("a2", 4, 4, 0), ("a3", 3, 1, 1)])
def test_knob_health_alarm(tmp_path: Path, name: str, device: int, npu: int, chip: int) -> None:
    changed, after = _changed(_populate(tmp_path, name), "health-alarm", device=device)
    assert changed == {("info",), ("health", npu), ("health", npu, chip)}
    info = ascend.parse_npu_smi_info(after[("info",)])
    assert [(c.npu, c.chip, c.health) for c in info.unhealthy] == [(npu, chip, "Alarm")]
    assert "Alarm" in ascend.parse_health(after[("health", npu)])
    assert ascend.parse_health(after[("health", npu, chip)]) == ["Alarm"]


def test_knob_link_down(tmp_path: Path) -> None:
    changed, after = _changed(_populate(tmp_path, "a2"), "link-down", device=2)
    assert changed == {("hccn", 2, "link"), ("hccn", 2, "net_health"), ("hccn", 2, "ping")}
    assert ascend.parse_link(after[("hccn", 2, "link")]) == "DOWN"
    assert ascend.parse_net_health(after[("hccn", 2, "net_health")]) == ["Fault"]


def test_knob_hccn_busy(tmp_path: Path) -> None:
    changed, after = _changed(_populate(tmp_path, "a3"), "hccn-busy", device=5)
    assert changed == {k for k in after if k[:2] == ("hccn", 5)}
    assert all(after[k] == f"rc=1\n{hccn_tool.BUSY}\n" for k in changed)


def test_knob_other_spod(tmp_path: Path) -> None:
    changed, after = _changed(_populate(tmp_path, "a3"), "other-spod")
    assert changed == {k for k in after if k[0] == "spod-info"}
    assert ascend.parse_kv_blocks(after[("spod-info", 0, 0)].split("\n", 1)[1])[0]["Super Pod ID"] == "1"


def test_knob_held_device_only_records_its_device(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a3")
    changed, _ = _changed(tree, "held-device", device=9)
    assert changed == set()  # the holder process (holder_argv, run by the lab) is the effect
    emu.set_fault(tree, "held-device", device=9)
    assert emu.active_faults(tree) == ["held-device"] and emu.fault_params(tree, "held-device") == {"device": 9}


def _files(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): (os.readlink(p) if p.is_symlink() else p.read_text() if p.is_file() else "/")
            for p in sorted(tree.rglob("*"))}


def test_knob_no_driver(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a2")
    before = _files(tree)
    emu.set_fault(tree, "no-driver")
    assert not (tree / "sbin/npu-smi").exists() and not (tree / "Ascend/driver").exists()
    install = ascend.parse_key_values((tree / "etc/ascend_install.info").read_text())
    assert "Driver_Install_Path_Param" not in install and install["Firmware_Install_Path_Param"] == "/usr/local/Ascend"
    assert (tree / "Ascend/firmware/version.info").is_file() and (tree / "Ascend/.camit-emu/npu.json").is_file()
    emu.populate(tree, emu.profile("a2"), host="host0", index=0, n_hosts=2)  # the knob survives a re-populate
    assert not (tree / "Ascend/driver").exists()
    emu.clear_faults(tree)
    assert _files(tree) == before
