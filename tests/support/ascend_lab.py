"""Helpers of the tests on the emulated Ascend lab: the CLI as a subprocess, the lab's lock, env variants and
the suite's artifacts (``python -m framework.artifacts build``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from framework.config.effective import EnvConfig

REPO = Path(__file__).resolve().parents[2]
LOCK = Path("/tmp/camit-npulab.lock")


def run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          stdin=subprocess.DEVNULL)


def run_script_failing(env: Path, host: str, script: Path, tmp_path: Path, *, nproc: int, job_timeout: int,
                       timeout: float) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``camit run`` of ``script`` on ``host`` (report under ``tmp_path/r``, cores ignored), which must fail;
    the process and the run's report folder."""
    proc = run("-m", "framework.cli", "run", "--env", str(env), "--hosts", host, "--nproc-per-node", str(nproc),
               "--timeout", str(job_timeout), "--report-dir", str(tmp_path / "r"), "--core-policy", "ignore", "--",
               str(script), timeout=timeout)
    assert proc.returncode != 0, proc.stdout[-3000:]
    return proc, (tmp_path / "r" / "latest").resolve()


def lab_name(env: EnvConfig) -> str:
    key = env.defaults.key_file
    assert key is not None
    return str(json.loads((key.parent / "lab.json").read_text())["name"])


@contextlib.contextmanager
def npu_lab_lock() -> Iterator[None]:
    with open(LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def check(env_path: Path, *extra: str) -> tuple[int, dict[tuple[str, str], dict[str, Any]]]:
    proc = run("-m", "framework.cli", "check", "--env", str(env_path), "--json", *extra)
    assert proc.stdout.strip(), proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    return proc.returncode, {(r["host"], r["check"]): r for r in data["results"]}


def variant(src: Path, dest: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    doc = yaml.safe_load(src.read_text())
    change(doc)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def suite_env(npu: tuple[Path, Any, str], tmp_path: Path, change: Callable[[dict[str, Any]], None],
              wheel_source: Path | None = None) -> Path:
    """The lab's env with the suite's artifacts built (the stand-in's wheel, or ``wheel_source``'s), then
    ``change`` applied."""
    path, _, _ = npu
    art, built = tmp_path / "art", tmp_path / "suite.yaml"
    source = ("--wheel-source", str(wheel_source)) if wheel_source is not None else ()
    proc = run("-m", "framework.artifacts", "build", "--out", str(art), "--env-in", str(path),
               "--env-out", str(built), *source, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return variant(built, tmp_path / "variant.yaml", change)


#: the second umdk_cam_op_lib, written from upstream's sources alone by an author who never read the suite
CLEANROOM = REPO / "tests" / "cleanroom_cam"
