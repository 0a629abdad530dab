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
    facts = _host_facts(doc, index)
    table = {}
    for key, line in REPLAYED.items():
        got = _answer_of(facts.get(key))
        if got is not None:
            table[line] = got
    return table


def _host_facts(doc: dict[str, Any], index: int) -> dict[str, Any]:
    """The facts of the bundle host lab host ``index`` replays (sorted names, wrapping)."""
    names = sorted(doc["hosts"])
    if not names:
        return {}
    return dict(doc["hosts"][names[index % len(names)]])


def _answer_of(fact: object) -> dict[str, Any] | None:
    """A bundle fact as the tool's answer (:func:`answer`); None: no such fact, or no answer."""
    if not isinstance(fact, dict) or "value" not in fact:
        return None
    return answer(str(fact["value"]))


def apply(trees: Sequence[Path], doc: dict[str, Any] | None) -> None:
    """Write (``doc``) or remove (None) the replay table of each emulated host tree, in order."""
    for index, tree in enumerate(trees):
        if doc is None:
            _remove(Path(tree))
        else:
            _write(Path(tree), doc, index)


def _remove(tree: Path) -> None:
    """An ``up`` without a bundle: the tree's replay tables go."""
    (tree / REPLAY_FILE).unlink(missing_ok=True)
    (tree / TORCH_FILE).unlink(missing_ok=True)


def _write(tree: Path, doc: dict[str, Any], index: int) -> None:
    """The replay tables of lab host ``index`` and its version records, written into its tree."""
    (tree / REPLAY_FILE).write_text(json.dumps(host_replay(doc, index), indent=1) + "\n",
                                    encoding="utf-8")
    (tree / TORCH_FILE).write_text(json.dumps(torch_replay(doc), indent=1) + "\n", encoding="utf-8")
    for rel, text in host_records(doc, index).items():
        record = tree / rel
        if record.is_file():  # a tree without its driver (no-driver knob) stays without
            record.write_text(text, encoding="utf-8")  # in place: may be bind-mounted


def host_records(doc: dict[str, Any], index: int) -> dict[str, str]:
    """Tree file → text of the version records lab host ``index`` replays (read whole)."""
    facts = _host_facts(doc, index)
    out = {}
    for key, rel in RECORDS.items():
        got = _answer_of(facts.get(key))
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
