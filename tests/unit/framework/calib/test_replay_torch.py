"""Replaying a bundle's torch_npu facts: ``lab up --calibration`` writes ``torch-facts.json`` beside
the emulated host file (and an up without a bundle removes it); the torch_npu stand-in, run by a
real python, raises the recorded texts where it produces those errors, keeps its own without a
file, and never replays a value that is not an error."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from framework.calib import replay

REPO = Path(__file__).resolve().parents[4]
STANDIN_REPLAY = REPO / "standin_npu" / "torch_npu" / "_replay.py"

PROBE = """
import torch, torch_npu
a = torch.ones(2).npu(1)
for f in (lambda: a.numpy(), lambda: a + torch.ones(2)):
    try:
        f()
    except Exception as e:
        print(type(e).__name__ + ": " + str(e))
"""


def test_the_lab_writes_what_the_stand_in_replays() -> None:
    tree = ast.parse(STANDIN_REPLAY.read_text(encoding="utf-8"))
    stand_in = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                    and getattr(n.targets[0], "id", "") == "REPLAYED")
    assert stand_in == replay.TORCH_REPLAYED
    assert Path(replay.TORCH_FILE).name == "torch-facts.json"
    assert Path(replay.TORCH_FILE).parent == Path(replay.REPLAY_FILE).parent  # beside npu.json


def test_apply_writes_the_torch_facts_and_a_plain_up_removes_them(tmp_path: Path) -> None:
    tree = tmp_path / "emu"
    (tree / "Ascend" / ".camit-emu").mkdir(parents=True)
    doc = {"hosts": {}, "facts": {
        "torch_npu.numpy_error": {"value": "TypeError: other"},
        "torch_npu.cpu_allreduce_error": {"value": "RuntimeError: c10d's, not the stand-in's"},
        "host.npu_smi_info": {"value": "x"},
    }}
    replay.apply([tree], doc)
    path = tree / replay.TORCH_FILE
    assert json.loads(path.read_text()) == {"torch_npu.numpy_error": "TypeError: other"}
    replay.apply([tree], None)
    assert not path.exists()


def _run(tmp_path: Path, facts: dict[str, str] | None) -> list[str]:
    host_file = tmp_path / "npu.json"
    host_file.write_text("{}")
    if facts is not None:
        (tmp_path / "torch-facts.json").write_text(json.dumps(facts))
    env = {**os.environ, "PYTHONPATH": str(REPO / "standin_npu"), "CAMIT_EMU_NPU": str(host_file)}
    cp = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                        env=env, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.splitlines()


def test_the_stand_in_raises_the_recorded_texts(tmp_path: Path) -> None:
    lines = _run(tmp_path, {
        "torch_npu.numpy_error": "RuntimeError: numpy() on npu:0 is not for you",
        "torch_npu.mix_device_error": "RuntimeError: npu:0 meets cpu",
    })
    assert lines == [
        "RuntimeError: numpy() on npu:1 is not for you", "RuntimeError: npu:1 meets cpu"]


def test_without_a_bundle_or_an_error_value_the_stand_in_keeps_its_texts(tmp_path: Path) -> None:
    builtin = _run(tmp_path, None)
    assert builtin[0].startswith("TypeError: can't convert npu:1 device type tensor to numpy")
    assert builtin[1].startswith("RuntimeError: Expected all tensors to be on the same device")
    assert _run(tmp_path, {"torch_npu.numpy_error": "no error: [1.0, 1.0]"}) == builtin
