"""Processes that hold an emulated NPU the way a rank does, for unit tests of framework.lab.emu.

A holder registers its devices through the torch_npu stand-in's own stdlib occupancy module (loaded by
path, as the emulated tools load it; what ``torch.npu.set_device`` does), prints ``ready`` and sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OCCUPANCY = ROOT / "standin_npu" / "torch_npu" / "_occupancy.py"
_REGISTER = (
    "import importlib.util, sys, time\n"
    "spec = importlib.util.spec_from_file_location('occ', sys.argv[1])\n"
    "m = importlib.util.module_from_spec(spec); sys.modules['occ'] = m; spec.loader.exec_module(m)\n"
    "for d in sys.argv[2:]:\n    m.register(int(d), int(d))\n"
    "print('ready', flush=True)\ntime.sleep(120)\n"
)


def registry_env(tree: Path) -> dict[str, str]:
    """The environment that points the stand-in at ``tree``'s npu.json and registry."""
    camit = tree / "Ascend" / ".camit-emu"
    return {**os.environ, "CAMIT_EMU_NPU": str(camit / "npu.json"), "CAMIT_EMU_NPU_DIR": str(camit / "registry")}


def holder(tree: Path, *devices: int) -> subprocess.Popen[str]:
    """A process holding ``devices`` of the emulated host in ``tree``, once it said it registered."""
    p = subprocess.Popen([sys.executable, "-c", _REGISTER, str(OCCUPANCY), *map(str, devices)],
                         stdout=subprocess.PIPE, text=True, env=registry_env(tree))
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def kill(p: subprocess.Popen[str]) -> None:
    """SIGKILL, as a rank killed mid-kernel: its registry record stays behind."""
    p.send_signal(signal.SIGKILL)
    p.wait()
    if p.stdout is not None:
        p.stdout.close()
