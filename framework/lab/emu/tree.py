"""The files of one emulated Ascend host (its "tree"), written by :func:`populate`.

The lab bind-mounts the tree's parts over the host paths of :data:`MOUNTS` inside the host. What
the tree holds and the rules for writing it: docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from framework.ascend import parse as ascend
from framework.errors import LabError
from framework.lab import checkout
from framework.lab.emu.profiles import ASCEND, REGISTRY, Profile

_HERE = Path(__file__).resolve().parent
DATA = _HERE / "data"
TOOLS = _HERE / "tools"
#: the torch_npu stand-in's stdlib-only registry module in the checkout, copied as text into every tree
OCCUPANCY = Path("standin_npu") / "torch_npu" / "_occupancy.py"
EMU = "Ascend/.camit-emu"  # tree-relative (host path profiles.EMU_DIR)
_V26_HEADER = "npu-smi-info-a3-v26-header-excerpt.txt"
_V26_PROC = "npu-smi-info-a3-v26-proc-excerpt.txt"
_INSTALL_INFO = {"toolkit": "ascend-toolkit-install-info-8.3rc2.txt",
                 "cann": "ascend-toolkit-install-info-8.5.0-cann-layout.txt"}


@dataclass(frozen=True)
class Mount:
    """One bind mount of an emulated host: ``tree`` (relative to the tree) over the host path ``target``."""

    tree: str
    target: str
    kind: str  # "dir" | "file"


MOUNTS: tuple[Mount, ...] = (
    Mount("sbin", "/usr/local/sbin", "dir"),  # npu-smi lives in /usr/local/sbin on Ascend hosts (§2)
    Mount("Ascend", ASCEND, "dir"),
    Mount("etc/ascend_install.info", "/etc/ascend_install.info", "file"),
    Mount("ascend-log", "/root/ascend", "dir"),  # $HOME/ascend/log plogs per host (§8)
)

#: the tools in the tree: path -> (module of framework.lab.emu.tools, the tree's .camit-emu relative to it)
LAUNCHERS = {
    "sbin/npu-smi": ("npu_smi", "../Ascend/.camit-emu"),
    "Ascend/driver/tools/hccn_tool": ("hccn_tool", "../../.camit-emu"),
    "Ascend/driver/tools/msnpureport": ("msnpureport", "../../.camit-emu"),
}


_TOOL_NAMES = {"npu_smi": "npu-smi", "hccn_tool": "hccn_tool", "msnpureport": "msnpureport"}


def capture(name: str) -> str:
    """A shipped capture's text (with its ``# source:`` line)."""
    return (DATA / name).read_text(encoding="utf-8")


def _body(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[1:]) if lines and lines[0].startswith("# source:") else text


def _write(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` in place (truncate, never replace: ``path`` may be a bind-mounted file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    if mode is not None:
        os.chmod(path, mode)


def _symlink(path: Path, target: str) -> None:
    if path.is_symlink() and os.readlink(path) == target:
        return
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _interpreter() -> str:
    """The tools' interpreter: the system python3 every lab host sees (stdlib only), else this one."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else os.path.realpath(sys.executable)


def _launcher(module: str, rel: str) -> str:
    return (
        f"#!{_interpreter()} -sE\n"
        f'"""{_TOOL_NAMES[module]} of a camit emulated Ascend host (lab-only test scaffolding: framework/lab/emu)."""\n'
        "import os\nimport sys\n"
        f"_EMU = os.path.normpath(os.path.join(os.path.dirname(os.path.realpath(__file__)), {rel!r}))\n"
        "sys.path.insert(0, os.path.join(_EMU, 'lib'))\n"
        f"from camit_emu import {module}  # noqa: E402\n"
        "from pathlib import Path  # noqa: E402\n"
        f"sys.exit({module}.main(sys.argv[1:], Path(_EMU)))\n"
    )


# --------------------------------------------------------------------------- host.json


def _is_chip_row(cells: list[str] | None) -> TypeGuard[list[str]]:
    """A table row of three cells whose first starts with a device number."""
    if not cells or len(cells) != 3:
        return False
    words = cells[0].split()
    return bool(words) and words[0].isdigit()


def _chip_cells(text: str) -> tuple[list[list[str]], list[list[str]]]:
    """Each die's two rows' last cells, split (``a / b`` pairs as one): (top rows, bottom rows).

    The bottom row is the one whose second cell is a bus id.
    """
    tops: list[list[str]] = []
    bottoms: list[list[str]] = []
    for line in text.splitlines():
        cells = ascend.table_cells(line)
        if not _is_chip_row(cells):
            continue
        tokens = re.sub(r"\s*/\s*", "/", cells[2]).split()
        (bottoms if re.match(r"^[0-9A-Fa-f]{4,8}:", cells[1]) else tops).append(tokens)
    return tops, bottoms


def _idle_hbm(info: ascend.NpuSmiInfo, busy: set[tuple[int, int]]) -> dict[int, list[int]]:
    """chip index -> the HBM used of each idle die with that index."""
    idle: dict[int, list[int]] = {}
    for c in info.chips:
        if (c.npu, c.chip) not in busy and c.hbm_used_mb is not None:
            idle.setdefault(c.chip, []).append(c.hbm_used_mb)
    return idle


def _capture_chips(text: str) -> list[dict[str, Any]]:
    """Per-die values of an ``npu-smi info`` capture, in output order, for the tools to re-render.

    The structure comes from camit's own parser; the cells it does not keep (power, temperature,
    hugepages, memory) are split as it splits them (``|`` then whitespace, ``a / b`` pairs as one).
    """
    info = ascend.parse_npu_smi_info(text)
    tops, bottoms = _chip_cells(text)
    busy = {(p.npu, p.chip) for p in info.processes}
    idle_hbm = _idle_hbm(info, busy)
    chips = []
    for c, top, bottom in zip(info.chips, tops, bottoms, strict=True):
        hp_used, _, hp_total = top[2].partition("/")
        mem_used, _, mem_total = bottom[1].partition("/")
        busy_chip = (c.npu, c.chip) in busy
        chips.append({
            "npu": c.npu, "chip": c.chip, "phy_id": c.phy_id, "name": c.name, "bus_id": c.bus_id,
            "power": top[0], "temp": top[1], "hp_used": hp_used, "hp_total": hp_total,
            "aicore": "0" if busy_chip else bottom[0], "capture_aicore": bottom[0],
            "mem_used": mem_used, "mem_total": mem_total,
            # an idle die's HBM as the capture shows it (busy dies: the median idle die of that index)
            "hbm_idle": statistics.median_low(idle_hbm[c.chip]) if busy_chip else c.hbm_used_mb,
            "capture_hbm": c.hbm_used_mb, "hbm_total": c.hbm_total_mb,
        })
    return chips


def device_ip(index: int, dev: int) -> str:
    """Device ``dev`` of host ``index``: one /24 per host, ``.80 + dev`` as hccn-ip-8dev.txt numbers them."""
    return f"192.168.{100 + index}.{80 + dev}"


def host_info(profile: Profile, *, host: str, index: int, n_hosts: int) -> dict[str, Any]:
    """``host.json``: everything static the tools read."""
    chips = _capture_chips(capture(profile.capture))
    if len(chips) != profile.count:
        raise LabError(f"capture {profile.capture} shows {len(chips)} dies, profile {profile.name} has {profile.count}")
    firmware = ascend.driver_version(capture("firmware-version-info.txt"))
    devices = [{"ip": device_ip(index, d), "netmask": "255.255.255.0", "gateway": f"192.168.{100 + index}.1",
                # hccn-lldp-ifname-8dev.txt numbers host 0's ports; other hosts sit on other switch slots
                "switch_port": f"400GE1/{d // 2 + 1}/{5 + index}:{d % 2 + 1}"} for d in range(profile.count)]
    return {
        "profile": profile.name, "host": host, "index": index, "n_hosts": n_hosts,
        "npus": profile.npus, "chips_per_npu": profile.chips_per_npu, "count": profile.count,
        "driver_version": profile.driver_version, "firmware_version": firmware, "chip_name": profile.chip_name,
        "spod_id": 0,
        "npu_smi": {"layout": profile.npu_smi_layout, "capture": profile.capture,
                    "header_capture": _V26_HEADER, "proc_capture": _V26_PROC},
        "chips": chips, "devices": devices,
        "peers": [device_ip(i, d) for i in range(n_hosts) for d in range(profile.count)],
    }


# --------------------------------------------------------------------------- CANN, driver, firmware


def _arch() -> str:
    return platform.machine() or "x86_64"


def _install_info(profile: Profile) -> str:
    """The profile's toolkit record: the capture's keys and versions, the machine's arch in ``arch``/``path``."""
    text = _body(capture(_INSTALL_INFO[profile.cann_layout]))
    arch = _arch()
    text = re.sub(r"^arch=.*$", f"arch={arch}", text, flags=re.M)
    return re.sub(r"/[a-z0-9_]+-linux$", f"/{arch}-linux", text, flags=re.M)


def _version_cfg(profile: Profile, inner: str) -> str:
    """``version.cfg`` in the capture's key format (ascend-toolkit-version-cfg.txt, a 6.0.1 toolkit's):
    each component's running/upgrade/installed version, here ``[<toolkit innerversion>:<CANN version>]``."""
    out = []
    for line in _body(capture("ascend-toolkit-version-cfg.txt")).splitlines():
        key, sep, _ = line.partition("=")
        if sep:
            out.append(f"{key}=[{inner}:{profile.cann_version}]")
    return "\n".join(out) + "\n"


def set_env_text(profile: Profile) -> str:
    """CANN's ``set_env.sh`` for the profile: the variables the toolkit's script exports (ascend-hosts.md §6,
    its ``ASCEND_TOOLKIT_HOME`` / ``ASCEND_HOME_PATH`` / ``ASCEND_OPP_PATH=<home>/opp`` / ``ASCEND_AICPU_PATH``,
    ``LD_LIBRARY_PATH`` with ``driver/lib64/{common,driver}``), POSIX sh, no empty path entries."""
    home = profile.cann_home
    lib = ":".join([f"{ASCEND}/driver/lib64", f"{ASCEND}/driver/lib64/common", f"{ASCEND}/driver/lib64/driver",
                    "${ASCEND_TOOLKIT_HOME}/lib64", "${ASCEND_TOOLKIT_HOME}/lib64/plugin/opskernel",
                    "${ASCEND_TOOLKIT_HOME}/lib64/plugin/nnengine",
                    "${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe/op_tiling/lib/linux/$(uname -m)"])
    py = "${ASCEND_TOOLKIT_HOME}/python/site-packages:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe"
    path = "${ASCEND_TOOLKIT_HOME}/bin:${ASCEND_TOOLKIT_HOME}/compiler/ccec_compiler/bin"
    return (
        f"# CANN {profile.cann_version} environment of a camit emulated Ascend host (lab-only; framework/lab/emu).\n"
        "# The variables of the toolkit's own set_env.sh; its directories exist and are empty.\n"
        f"export ASCEND_TOOLKIT_HOME={home}\n"
        f"export LD_LIBRARY_PATH={lib}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\n"
        f"export PYTHONPATH={py}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f"export PATH={path}${{PATH:+:$PATH}}\n"
        "export ASCEND_AICPU_PATH=${ASCEND_TOOLKIT_HOME}\n"
        "export ASCEND_OPP_PATH=${ASCEND_TOOLKIT_HOME}/opp\n"
        "export TOOLCHAIN_HOME=${ASCEND_TOOLKIT_HOME}/toolkit\n"
        "export ASCEND_HOME_PATH=${ASCEND_TOOLKIT_HOME}\n"
    )


def _cann(tree: Path, profile: Profile) -> None:
    asc = tree / "Ascend"
    if profile.cann_layout == "toolkit":
        real = asc / "ascend-toolkit" / profile.cann_version
        _symlink(asc / "ascend-toolkit" / "latest", profile.cann_version)
        set_env = asc / "ascend-toolkit" / "set_env.sh"
    else:
        real = asc / f"cann-{profile.cann_version}"
        _symlink(asc / "cann", real.name)
        set_env = real / "set_env.sh"
    for sub in ("bin", "lib64", "opp/vendors", "python/site-packages", "toolkit", "compiler/ccec_compiler/bin"):
        (real / sub).mkdir(parents=True, exist_ok=True)
    info = _install_info(profile)
    _write(real / f"{_arch()}-linux" / "ascend_toolkit_install.info", info)
    inner = ascend.parse_key_values(info).get("innerversion", "")
    if profile.cann_layout == "toolkit":
        _write(real / "version.cfg", _version_cfg(profile, inner))
    else:
        # >= 8.5 installs the operators as a separate package with its own record (ascend-hosts.md §6);
        # not a capture: the toolkit record's keys with the ops package's name
        _write(real / f"{_arch()}-linux" / "ascend_ops_install.info",
               re.sub(r"^package_name=.*$", "package_name=Ascend-cann-ops", info, flags=re.M))
    _write(set_env, set_env_text(profile), 0o755)


def write_driver(tree: Path, profile: Profile) -> None:
    """The driver package: ``driver/version.info`` (its ``Version`` = npu-smi's), libraries, the tools."""
    text = _body(capture("driver-version-info.txt"))
    _write(tree / "Ascend/driver/version.info",
           re.sub(r"^Version=.*$", f"Version={profile.driver_version}", text, count=1, flags=re.M))
    for sub in ("lib64/common", "lib64/driver"):
        (tree / "Ascend/driver" / sub).mkdir(parents=True, exist_ok=True)
    for rel, (module, up) in LAUNCHERS.items():
        _write(tree / rel, _launcher(module, up), 0o755)


def install_info_text(driver: bool = True) -> str:
    """``/etc/ascend_install.info`` (etc-ascend-install-info.txt); without the driver its ``Driver_*`` lines go."""
    lines = _body(capture("etc-ascend-install-info.txt")).splitlines()
    return "\n".join(ln for ln in lines if driver or not ln.startswith("Driver_")) + "\n"


# --------------------------------------------------------------------------- populate


def _linger(emu: Path) -> float:
    """The linger setting an earlier npu.json kept (0 without one)."""
    try:
        old = json.loads((emu / "npu.json").read_text(encoding="utf-8"))
        return float(old.get("linger_s", 0))
    except (OSError, ValueError, AttributeError, TypeError):
        return 0.0


def _emu_dir(tree: Path, info: dict[str, Any], profile: Profile) -> None:
    emu = tree / EMU
    lib = emu / "lib" / "camit_emu"
    lib.mkdir(parents=True, exist_ok=True)
    (emu / "registry").mkdir(parents=True, exist_ok=True)
    for src in sorted(TOOLS.glob("*.py")):
        _write(lib / src.name, src.read_text(encoding="utf-8"))
    occupancy = checkout.require("the emulated tools' device registry") / OCCUPANCY
    if not occupancy.is_file():
        raise LabError(f"{occupancy} not found: the emulated tools read the torch_npu stand-in's registry "
                       "with it")
    _write(emu / "lib" / "_occupancy.py", occupancy.read_text(encoding="utf-8"))
    for src in sorted(DATA.glob("*.txt")):
        _write(emu / "data" / src.name, src.read_text(encoding="utf-8"))
    _write(emu / "host.json", json.dumps(info, indent=1) + "\n")
    _write(emu / "npu.json", json.dumps({"device_count": profile.count, "registry_dir": REGISTRY,
                                         "linger_s": _linger(emu)}) + "\n")
    (emu / "hccn.lock").touch()  # hccn_tool's one-call-at-a-time lock
    if not (emu / "faults.json").is_file():
        _write(emu / "faults.json", json.dumps({"knobs": {}}, indent=1) + "\n")


def populate(tree: Path, profile: Profile, *, host: str, index: int, n_hosts: int) -> None:
    """Write the whole tree of one emulated host (all but ``Ascend/.camit-emu/python``). Idempotent:
    a second call rewrites what differs and keeps ``npu.json``'s linger, the knobs and the registry."""
    if not 0 <= index < n_hosts:
        raise LabError(f"emulated host {host}: index {index} outside 0..{n_hosts - 1}")
    tree = Path(tree)
    info = host_info(profile, host=host, index=index, n_hosts=n_hosts)
    for m in MOUNTS:
        if m.kind == "dir":
            (tree / m.tree).mkdir(parents=True, exist_ok=True)
    _emu_dir(tree, info, profile)
    _cann(tree, profile)
    _write(tree / "Ascend/firmware/version.info", _body(capture("firmware-version-info.txt")))
    knobs = json.loads((tree / EMU / "faults.json").read_text(encoding="utf-8")).get("knobs", {})
    if "no-driver" in knobs:
        remove_driver(tree)
    else:
        write_driver(tree, profile)
        _write(tree / "etc/ascend_install.info", install_info_text())
    (tree / "ascend-log" / "log").mkdir(parents=True, exist_ok=True)


def remove_driver(tree: Path) -> None:
    """A host without the driver package: no ``npu-smi``, no ``driver/`` (hccn_tool with it), no Driver_ lines."""
    (tree / "sbin" / "npu-smi").unlink(missing_ok=True)
    shutil.rmtree(tree / "Ascend" / "driver", ignore_errors=True)
    _write(tree / "etc/ascend_install.info", install_info_text(driver=False))

