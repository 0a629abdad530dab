"""camit installed as users install it: a fresh venv, ``pip install <checkout>``, then the lab
commands.

Before, ``python -m framework.lab up --npu a3`` from such a venv failed twice: the lab built the
torch_npu stand-in's wheel with the venv's own setuptools (65 on Python 3.11, none from 3.12; the
stand-in needs >= 68), and the wheel lacked the emulated tools' captures (``lab/emu/data``). Now the
lab writes the stand-in wheels with the standard library, finds the checkout through pip's
``direct_url.json``, and the captures are package data.

The venv gets no setuptools at all (as on Python 3.12) and no torch: the lab commands need neither
(``lab up --no-torch`` is the lab's own option; torch is what the ranks import). Installing the CPU
torch would cost minutes and bring a current setuptools with it (torch requires setuptools), hiding
the very problem this test is about. The venv lives under /var/tmp, not /tmp: a lab host has its own
/tmp and runs the controller's interpreter. Lab name and subnet are this test's own (the Makefile's
labs use 10.76-10.79 and 10.176); $CAMIT_VENV_LAB and $CAMIT_VENV_SUBNET override them (a second
checkout testing beside a running make test).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB, SUBNET = (
    os.environ.get("CAMIT_VENV_LAB", "camitv"),
    os.environ.get("CAMIT_VENV_SUBNET", "10.74.0.0/24"),
)
#: the commands whose --help must work from the installed package
HELPS = (
    ["-m", "framework.lab", "--help"],
    ["-m", "framework.lab", "up", "--help"],
    ["-m", "framework.lab", "down", "--help"],
    ["-m", "framework.lab", "status", "--help"],
    ["-m", "framework.lab", "fault", "--help"],
    ["-m", "framework.artifacts", "build", "--help"],
    ["-m", "framework.cli", "lab", "--help"],
    ["-m", "framework.cli", "--help"],
)


def _run(argv: list[str], timeout: float, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, (
        f"{argv}: rc={res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    )
    return res


@pytest.fixture
def venv() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    home = Path(tempfile.mkdtemp(prefix="camit-venv-", dir="/var/tmp"))
    try:
        t0 = time.monotonic()
        _run([sys.executable, "-m", "venv", str(home / "venv")], 120, home)
        py = home / "venv" / "bin" / "python"
        _run([str(py), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], 120, home)
        _run([str(py), "-m", "pip", "install", "-q", str(ROOT)], 600, home)
        print(f"venv + pip install: {time.monotonic() - t0:.1f}s")
        yield py
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_fresh_venv_runs_the_lab_commands(venv: Path):
    """A lab test (``_lab.py``: run one at a time, as root), bringing up its own one-host lab."""
    work = venv.parents[2]
    assert (
        subprocess.run([str(venv), "-c", "import setuptools"], capture_output=True).returncode != 0
    )
    for argv in HELPS:
        assert "usage:" in _run([str(venv), *argv], 60, work).stdout
    built = _run(
        [str(venv), "-m", "framework.artifacts", "build", "--out", str(work / "art")], 300, work
    )
    assert "umdk_cam_op_lib-" in built.stdout
    env_out = work / "lab.yaml"
    try:
        up = _run(
            [
                str(venv),
                "-m",
                "framework.lab",
                "up",
                "--npu",
                "a3",
                "--hosts",
                "1",
                "--no-torch",
                "--name",
                LAB,
                "--subnet",
                SUBNET,
                "--env-out",
                str(env_out),
            ],
            300,
            work,
        )
        assert "torch_npu_standin-" in up.stdout and env_out.is_file()
        _run([str(venv), "-m", "framework.cli", "env", "validate", str(env_out)], 60, work)
        assert (
            LAB
            in _run([str(venv), "-m", "framework.lab", "status", "--name", LAB], 60, work).stdout
        )
    finally:
        down = subprocess.run(
            [str(venv), "-m", "framework.lab", "down", "--name", LAB],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stdout + down.stderr
