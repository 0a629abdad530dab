"""The ``sh lab`` blocks of README.md and the getting-started pages run on the emulated A3 lab.

They run in a scratch folder where ``env/lab.yaml`` is the lab's env file (what ``make demo`` writes)
and ``examples/`` is this checkout's, so every relative path is the one a reader has after ``make
demo``. A command that several blocks share (the tours overlap) runs once, in page order.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.docblocks import ROOT, blocks


def _commands() -> list[str]:
    lines = [line for b in blocks() if b.kind == "lab" for line in b.commands()]
    return list(dict.fromkeys(lines))


def test_lab_blocks_run_on_the_lab(npu_lab_env_path: Path, tmp_path: Path):
    commands = _commands()
    assert any("hello_ranks.py" in c for c in commands)
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "lab.yaml").symlink_to(npu_lab_env_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run(["bash", "-e", "-x", "-c", "\n".join(commands)], cwd=tmp_path, env=env,
                         text=True, capture_output=True, timeout=300)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    # the tour's launch crosses nodes: ranks on every host of the lab (make test's has 4, make demo's 2)
    nodes = len(yaml.safe_load(npu_lab_env_path.read_text())["host_info"])
    assert f"on {nodes} nodes passed" in res.stdout, res.stdout
    assert res.stdout.count("host2/rank") == 2, res.stdout
