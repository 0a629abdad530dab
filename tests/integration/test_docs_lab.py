"""The ``sh lab`` blocks of README.md and the getting-started pages run on the emulated A3 lab.

Each block runs in a scratch folder where ``env/lab.yaml`` is the lab's env file (what ``make demo``
writes) and ``examples/`` is this checkout's, so every relative path in the block is the one a
reader has after ``make demo``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docblocks import ROOT, Block, blocks

LAB_BLOCKS = [b for b in blocks() if b.kind == "lab"]


@pytest.mark.parametrize("block", LAB_BLOCKS, ids=[f"{b.page}:{b.line}" for b in LAB_BLOCKS])
def test_lab_blocks_run_on_the_lab(block: Block, npu_lab_env_path: Path, tmp_path: Path):
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "lab.yaml").symlink_to(npu_lab_env_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    res = subprocess.run(
        ["bash", "-e", "-x", "-c", block.body],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == 0, f"{block.page}:{block.line}:\n{res.stdout}\n{res.stderr}"
    if "hello_ranks.py" in block.body:
        # the tour's launch crosses nodes: ranks on both hosts of the lab
        assert "on 2 nodes passed" in res.stdout, res.stdout
        assert res.stdout.count("host2/rank") == 2, res.stdout
