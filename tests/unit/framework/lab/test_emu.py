"""framework.lab.emu: profiles, the tree populate writes (CANN layouts, version records), the knob API."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.ascend import parse as ascend
from framework.errors import LabError
from framework.lab import emu
from framework.lab.emu import tree as emu_tree
from framework.preflight.probe import CANN_RECORD, ProbePlan

ROOT = Path(__file__).resolve().parents[4]
ASCEND = "/usr/local/Ascend"


def _populate(tmp_path: Path, name: str, index: int = 0, n_hosts: int = 2) -> Path:
    tree = tmp_path / f"{name}-{index}"
    emu.populate(tree, emu.profile(name), host=f"host{index}", index=index, n_hosts=n_hosts)
    return tree


def _in_tree(tree: Path, host_path: str) -> Path:
    """Where a host path of the Ascend mount lives in the tree."""
    assert host_path.startswith(ASCEND + "/")
    return tree / "Ascend" / host_path[len(ASCEND) + 1:]


def test_profiles() -> None:
    a2, a3 = emu.profile("a2"), emu.profile("a3")
    assert (a2.soc, a2.npus, a2.chips_per_npu, a2.count, a2.cann_layout) == ("ascend910b", 8, 1, 8, "toolkit")
    assert (a3.soc, a3.npus, a3.chips_per_npu, a3.count, a3.cann_layout) == ("ascend910_93", 8, 2, 16, "cann")
    assert a2.set_env == "/usr/local/Ascend/ascend-toolkit/set_env.sh"
    assert a3.set_env == "/usr/local/Ascend/cann/set_env.sh"
    assert emu.profile("a3-26").npu_smi_layout == "26" and emu.profile("a3-26").count == 16
    for p in emu.PROFILES.values():  # the env file's npu.soc values camit accepts
        assert p.soc in ascend.SOC_OF_PLATFORM.values()
    with pytest.raises(LabError, match=r"unknown emulated NPU profile 'a5': valid profiles are a2, a3, a3-26"):
        emu.profile("a5")


def test_mounts_and_host_paths() -> None:
    assert [(m.tree, m.target, m.kind) for m in emu.MOUNTS] == [
        ("sbin", "/usr/local/sbin", "dir"), ("Ascend", "/usr/local/Ascend", "dir"),
        ("etc/ascend_install.info", "/etc/ascend_install.info", "file"), ("ascend-log", "/root/ascend", "dir")]
    assert emu.NPU_JSON == "/usr/local/Ascend/.camit-emu/npu.json"
    assert emu.PYTHON == "/usr/local/Ascend/.camit-emu/python/bin/python"
    assert emu.KNOBS == ("tls-mismatch", "health-alarm", "link-down", "hccn-busy", "held-device", "other-spod",
                         "no-driver")


@pytest.mark.parametrize("name", ["a2", "a3"])
def test_populate_writes_every_mount_and_the_host_files(tmp_path: Path, name: str) -> None:
    prof = emu.profile(name)
    tree = _populate(tmp_path, name)
    for m in emu.MOUNTS:
        assert (tree / m.tree).is_dir() if m.kind == "dir" else (tree / m.tree).is_file(), m
    camit = tree / "Ascend/.camit-emu"
    assert json.loads((camit / "npu.json").read_text()) == {
        "device_count": prof.count, "registry_dir": "/usr/local/Ascend/.camit-emu/registry", "linger_s": 0.0}
    assert (camit / "registry").is_dir() and not list((camit / "registry").iterdir())
    assert json.loads((camit / "faults.json").read_text()) == {"knobs": {}}
    assert json.loads((camit / "host.json").read_text())["profile"] == name
    assert not (camit / "python").exists()  # the lab makes the venv from inside the host
    occ = (camit / "lib" / "_occupancy.py").read_text()
    assert occ == (ROOT / "standin_npu/torch_npu/_occupancy.py").read_text()
    for tool in ("sbin/npu-smi", "Ascend/driver/tools/hccn_tool", "Ascend/driver/tools/msnpureport"):
        assert os.access(tree / tool, os.X_OK), tool


def _digest(tree: Path) -> dict[str, str]:
    out = {}
    for p in sorted(tree.rglob("*")):
        key = str(p.relative_to(tree))
        if p.is_symlink():
            out[key] = "-> " + os.readlink(p)
        elif p.is_file():
            out[key] = hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode)
        else:
            out[key] = "dir"
    return out


def test_populate_is_idempotent_and_keeps_state(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a3")
    emu.set_linger(tree, 7)
    emu.set_fault(tree, "tls-mismatch", device=3)
    (tree / "Ascend/.camit-emu/registry/123.json").write_text("{}")
    first = _digest(tree)
    install = tree / "etc/ascend_install.info"
    inode = install.stat().st_ino
    emu.populate(tree, emu.profile("a3"), host="host0", index=0, n_hosts=2)
    assert _digest(tree) == first
    assert install.stat().st_ino == inode  # a bind-mounted file is written in place, never replaced
    assert emu.active_faults(tree) == ["tls-mismatch"]


def test_populate_rejects_a_bad_index(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="index 2 outside 0..1"):
        emu.populate(tmp_path, emu.profile("a2"), host="h", index=2, n_hosts=2)


# --------------------------------------------------------------------------- CANN trees and version records


@pytest.mark.parametrize("name", ["a2", "a3"])
def test_version_records_parse(tmp_path: Path, name: str) -> None:
    prof = emu.profile(name)
    tree = _populate(tmp_path, name)
    plan = ProbePlan(host="h", workdir="/w", python="python3", venv_python="/w/venv/bin/python", soc=prof.soc,
                     npu_count=prof.count, cann_set_env=prof.set_env)
    # the first toolkit home the probe looks in (the set_env.sh directory, then its latest/) holds the record
    records = [r for home in plan.cann_homes if home.startswith(ASCEND)
               for r in _in_tree(tree, home).glob(f"*-linux/{CANN_RECORD}")]
    assert records, plan.cann_homes
    rec = ascend.parse_toolkit_install_info(records[0].read_text())
    assert rec is not None and rec.version == prof.cann_version
    assert rec.layout == ("ascend-toolkit" if name == "a2" else "cann")
    assert rec.path is not None and rec.path.endswith(f"/{os.uname().machine}-linux")
    assert rec.layout == ascend.cann_layout(prof.set_env)
    cfg = _in_tree(tree, f"{prof.cann_home}/version.cfg")
    if name == "a2":
        assert ascend.cann_version_from_cfg(ascend.parse_version_cfg(cfg.read_text())) == prof.cann_version
        assert os.readlink(tree / "Ascend/ascend-toolkit/latest") == "8.3.RC2"
    else:
        assert not cfg.exists() and os.readlink(tree / "Ascend/cann") == "cann-8.5.0"
        ops = ascend.parse_key_values(records[0].with_name("ascend_ops_install.info").read_text())
        assert ops["package_name"] == "Ascend-cann-ops" and ops["version"] == "8.5.0"
    drv = (tree / "Ascend/driver/version.info").read_text()
    assert ascend.driver_version(drv) == prof.driver_version
    assert ascend.driver_version((tree / "Ascend/firmware/version.info").read_text()) == "7.1.0.11.220"
    etc = ascend.parse_key_values((tree / "etc/ascend_install.info").read_text())
    assert etc["Driver_Install_Path_Param"] == etc["Firmware_Install_Path_Param"] == ASCEND


@pytest.mark.parametrize("name", ["a2", "a3"])
def test_set_env_exports_the_cann_variables(tmp_path: Path, name: str) -> None:
    prof = emu.profile(name)
    tree = _populate(tmp_path, name)
    script = _in_tree(tree, prof.set_env)
    assert script.is_file()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run(["sh", "-c", '. "$1" && env', "-", str(script)], capture_output=True, text=True, env=env,
                       check=True)
    got = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    home = prof.cann_home
    assert got["ASCEND_TOOLKIT_HOME"] == got["ASCEND_HOME_PATH"] == got["ASCEND_AICPU_PATH"] == home
    assert got["ASCEND_OPP_PATH"] == f"{home}/opp"
    lib = got["LD_LIBRARY_PATH"].split(":")
    assert {f"{ASCEND}/driver/lib64/common", f"{ASCEND}/driver/lib64/driver", f"{home}/lib64"} <= set(lib)
    assert "" not in lib  # no empty entry (it would mean the working directory)
    assert got["PATH"].split(":")[0] == f"{home}/bin" and got["PATH"].endswith(":/usr/bin:/bin")
    assert f"{home}/python/site-packages" in got["PYTHONPATH"].split(":")
    for key in ("ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH"):  # the directories exist in the tree
        assert _in_tree(tree, got[key]).is_dir(), key


# --------------------------------------------------------------------------- the knob API


def test_fault_api_errors(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a2")
    with pytest.raises(LabError, match="unknown fault knob 'tls'.*valid knobs are tls-mismatch, health-alarm"):
        emu.set_fault(tree, "tls")
    with pytest.raises(LabError, match=r"link-down: unknown parameter chip \(valid: device\)"):
        emu.set_fault(tree, "link-down", chip=1)
    with pytest.raises(LabError, match="device 8 outside 0..7"):
        emu.set_fault(tree, "held-device", device=8)
    with pytest.raises(LabError, match="device must be an integer"):
        emu.set_fault(tree, "health-alarm", device="x")
    with pytest.raises(LabError, match="level 'Bad' is not one of Warning, Alarm, Critical, UNKNOWN"):
        emu.set_fault(tree, "health-alarm", level="Bad")
    with pytest.raises(LabError, match="other-spod: spod_id 0 is this lab's own super pod"):
        emu.set_fault(_populate(tmp_path, "a3"), "other-spod", spod_id=0)
    with pytest.raises(LabError, match="other-spod: an A2 node"):
        emu.set_fault(tree, "other-spod")
    with pytest.raises(LabError, match="not an emulated Ascend host's tree"):
        emu.set_fault(tmp_path / "nothing", "link-down")
    with pytest.raises(LabError, match="linger must be a number of seconds >= 0"):
        emu.set_linger(tree, -1)
    with pytest.raises(LabError, match="held-device: device must be an integer >= 0"):
        emu.holder_argv(-1)
    assert emu.active_faults(tree) == []


def test_faults_are_listed_in_knob_order_and_cleared(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a3")
    for knob in ("no-driver", "link-down", "tls-mismatch"):
        emu.set_fault(tree, knob)
    assert emu.active_faults(tree) == ["tls-mismatch", "link-down", "no-driver"]
    assert emu.fault_params(tree, "tls-mismatch") == {"device": 1}
    emu.set_fault(tree, "tls-mismatch", device=0)  # setting it again takes the new parameters
    assert emu.fault_params(tree, "tls-mismatch") == {"device": 0}
    emu.clear_faults(tree)
    assert emu.active_faults(tree) == [] and (tree / "sbin/npu-smi").is_file()


def test_clear_resets_linger_and_releases_devices_of_dead_processes_only(tmp_path: Path) -> None:
    """What an operator's reset does: a dead process's lingering record goes, a live holder's stays."""
    tree = _populate(tmp_path, "a3")
    emu.set_linger(tree, 300)
    registry = tree / "Ascend/.camit-emu/registry"
    dead = subprocess.Popen(["true"])
    dead.wait()
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    (registry / f"{dead.pid}.json").write_text(json.dumps({"pid": dead.pid, "start_ticks": 1, "devices": [0],
                                                           "logical": [0], "linger_s": 300}))
    zombie = subprocess.Popen(["true"])  # exited, not reaped yet: its device is free (only the pid is left)
    for _ in range(100):
        stat = Path(f"/proc/{zombie.pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.02)
    zticks = int(stat.rsplit(")", 1)[1].split()[19])
    (registry / f"{zombie.pid}.json").write_text(json.dumps({"pid": zombie.pid, "start_ticks": zticks,
                                                             "devices": [2], "logical": [2], "linger_s": 300}))
    me = os.getpid()
    (registry / f"{me}.json").write_text(json.dumps({"pid": me, "start_ticks": ticks, "devices": [1],
                                                     "logical": [1], "linger_s": 300}))
    emu.clear_faults(tree)
    zombie.wait()
    assert json.loads((tree / "Ascend/.camit-emu/npu.json").read_text())["linger_s"] == 0
    assert sorted(p.name for p in registry.glob("*.json")) == [f"{me}.json"]


def test_nothing_outside_the_lab_imports_the_emulation() -> None:
    pattern = re.compile(r"^\s*(from|import)\s+framework\.lab(\.emu)?\b", re.M)
    for part in ("deploy", "launch", "remote"):
        for path in (ROOT / "framework" / part).rglob("*.py"):
            assert not pattern.search(path.read_text(encoding="utf-8")), path


def test_the_tools_are_stdlib_only() -> None:
    for path in sorted(emu_tree.TOOLS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                assert name.split(".")[0] in sys.stdlib_module_names or name == "__future__", (path.name, name)
