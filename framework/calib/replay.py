"""Replaying a calibration bundle on emulated hosts (``python -m framework.lab up --npu a3
--calibration BUNDLE``).

What is replayed and what is not: docs/internals/calibration.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: fact key → the tool command line it captured (the emulated tools look the line up verbatim)
REPLAYED = {
    "host.npu_smi_info": "npu-smi info",
    "host.npu_smi_list": "npu-smi info -l",
    "host.npu_smi_board": "npu-smi info -t board -i 0",
    "host.hccn_link": "hccn_tool -i 0 -link -g",
    "host.hccn_net_health": "hccn_tool -i 0 -net_health -g",
}
#: fact key → the tree file it recorded (only when the probe read it: a failed read is not replayed)
RECORDS = {
    "host.driver_version": "Ascend/driver/version.info",
    "host.firmware_version": "Ascend/firmware/version.info",
    "host.ascend_install_info": "etc/ascend_install.info",
}
REPLAY_FILE = "Ascend/.camit-emu/replay.json"
#: torch_npu facts the stand-in replays (standin_npu/torch_npu/_replay.py: REPLAYED, kept equal by
#: tests/unit/framework/test_calib.py) and the file it reads them from (beside its host file npu.json)
TORCH_REPLAYED = ("torch_npu.mix_device_error", "torch_npu.numpy_error")
TORCH_FILE = "Ascend/.camit-emu/torch-facts.json"
_EXIT = re.compile(r"\n\[exit (-?\d+)\]\Z")


def answer(value: str) -> dict[str, Any] | None:
    """A fact value as the tool's answer: stdout and exit status (None: the probe got no answer)."""
    if value.startswith("[not answered"):
        return None
    m = _EXIT.search(value)
    return (
        {"stdout": value[: m.start()], "rc": int(m.group(1))} if m else {"stdout": value, "rc": 0}
    )


def host_replay(doc: dict[str, Any], index: int) -> dict[str, dict[str, Any]]:
    """The replay table of lab host ``index`` (0-based) from bundle ``doc``."""
    names = sorted(doc["hosts"])
    if not names:
        return {}
    facts = doc["hosts"][names[index % len(names)]]
    table = {}
    for key, line in REPLAYED.items():
        fact = facts.get(key)
        got = answer(str(fact["value"])) if isinstance(fact, dict) and "value" in fact else None
        if got is not None:
            table[line] = got
    return table


def apply(trees: Sequence[Path], doc: dict[str, Any] | None) -> None:
    """Write (``doc``) or remove (None) the replay table of each emulated host tree, in order."""
    for index, tree in enumerate(trees):
        path, torch_path = Path(tree) / REPLAY_FILE, Path(tree) / TORCH_FILE
        if doc is None:
            path.unlink(missing_ok=True)
            torch_path.unlink(missing_ok=True)
            continue
        path.write_text(json.dumps(host_replay(doc, index), indent=1) + "\n", encoding="utf-8")
        torch_path.write_text(json.dumps(torch_replay(doc), indent=1) + "\n", encoding="utf-8")
        for rel, text in host_records(doc, index).items():
            if (
                Path(tree) / rel
            ).is_file():  # a tree without its driver (no-driver knob) stays without
                (Path(tree) / rel).write_text(
                    text, encoding="utf-8"
                )  # in place: may be bind-mounted


def host_records(doc: dict[str, Any], index: int) -> dict[str, str]:
    """Tree file → text of the version records lab host ``index`` replays (read whole)."""
    names = sorted(doc["hosts"])
    facts = doc["hosts"][names[index % len(names)]] if names else {}
    out = {}
    for key, rel in RECORDS.items():
        fact = facts.get(key)
        got = answer(str(fact["value"])) if isinstance(fact, dict) and "value" in fact else None
        if got is not None and got["rc"] == 0:
            out[rel] = got["stdout"]
    return out


def torch_replay(doc: dict[str, Any]) -> dict[str, str]:
    """Fact key → recorded value of the :data:`TORCH_REPLAYED` facts the bundle holds."""
    facts = doc["facts"]
    return {
        key: str(facts[key]["value"])
        for key in TORCH_REPLAYED
        if isinstance(facts.get(key), dict) and "value" in facts[key]
    }
