"""What every fake Ascend tool of an emulated host reads: its host file, its fault knobs, the captures, the registry.

Stdlib only: this package is copied into each emulated host's tree (``/usr/local/Ascend/.camit-emu/lib/camit_emu``)
and run by the tools' launchers with whatever ``python3`` the host has. ``emu`` is the host's ``.camit-emu``
directory, which each launcher finds relative to its own path (so a tree outside ``/usr/local/Ascend`` works too).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


class Host:
    """One emulated host as the tools see it: ``host.json`` (static), ``faults.json`` (the knobs now set)."""

    def __init__(self, emu: Path) -> None:
        self.emu = emu
        self.info: dict[str, Any] = json.loads((emu / "host.json").read_text(encoding="utf-8"))
        try:
            faults = json.loads((emu / "faults.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            faults = {}
        self.faults: dict[str, dict[str, Any]] = faults.get("knobs", {}) if isinstance(faults, dict) else {}

    @property
    def count(self) -> int:
        return int(self.info["count"])

    @property
    def chips_per_npu(self) -> int:
        return int(self.info["chips_per_npu"])

    @property
    def npus(self) -> int:
        return int(self.info["npus"])

    def fault(self, knob: str) -> dict[str, Any] | None:
        return self.faults.get(knob)

    def capture(self, name: str) -> list[str]:
        """The lines of a shipped capture without its ``# source:`` line."""
        lines = (self.emu / "data" / name).read_text(encoding="utf-8").splitlines()
        return lines[1:] if lines and lines[0].startswith("# source:") else lines

    def replay(self, tool: str, argv: Sequence[str]) -> int | None:
        """Print a calibration bundle's capture of ``tool argv`` when ``replay.json`` (written by
        ``lab up --calibration``) holds one: the exit status; None when nothing is replayed."""
        try:
            doc = json.loads((self.emu / "replay.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        answer = doc.get(" ".join([tool, *argv])) if isinstance(doc, dict) else None
        if not isinstance(answer, dict):
            return None
        sys.stdout.write(str(answer.get("stdout", "")))
        return int(answer.get("rc", 0))

    def logical(self, npu: int, chip: int) -> int:
        return npu * self.chips_per_npu + chip

    def health(self, logical: int) -> str:
        """The Health column of a die: ``OK`` unless the health-alarm knob names it."""
        knob = self.fault("health-alarm")
        if knob is not None and int(knob.get("device", 0)) == logical:
            return str(knob.get("level", "Alarm"))
        return "OK"

    def occupants(self) -> list[Any]:
        """The registry's occupants (``torch_npu._occupancy.occupants``: alive, or dead within ``linger_s``)."""
        occ = _occupancy(self.emu)
        if os.environ.get("CAMIT_EMU_NPU_DIR") or os.environ.get("CAMIT_EMU_NPU"):
            folder = occ.registry_dir()  # exactly where the writers register (their rule)
        else:
            folder = self.emu / "registry"
        return list(occ.occupants(Path(folder)))


def _occupancy(emu: Path) -> ModuleType:
    """The torch_npu stand-in's registry reader, copied into the tree as text (loaded by path)."""
    name = "camit_emu_occupancy"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, emu / "lib" / "_occupancy.py")
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {emu / 'lib' / '_occupancy.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclass needs the module registered before it runs
    spec.loader.exec_module(module)
    return module


def out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def err(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
