"""Helpers of the cores/fetch-bounds scenarios (issue 17, items 2 and 4): the machine-global core_pattern
switched under the labs' lock and restored, ``camit run`` from this worktree, a report folder's cores."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]




def camit_run(env_path: Path, reports: Path, target: Path, *, hosts: str = "host1,host2", nproc: int = 2,
              extra_env: Mapping[str, str] | None = None, timeout: float = 600,
              args: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess[str], int]:
    """``camit run`` of this worktree's code; (completed process, its peak RSS in KiB via /usr/bin/time)."""
    rss_file = reports.parent / f".rss-{os.getpid()}-{reports.name}"
    argv = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), sys.executable, "-m", "framework.cli", "run",
            "--env", str(env_path), "--hosts", hosts, "--nproc-per-node", str(nproc), "--report-dir", str(reports),
            "--timeout", "180", *args, "--", str(target)]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                        env={**os.environ, **(extra_env or {})})
    rss = int(rss_file.read_text().split()[-1]) if rss_file.exists() else -1
    return cp, rss


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)
