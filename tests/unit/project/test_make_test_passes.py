"""``make test`` runs the tests that reach no lab on xdist workers first (``-m "not lab"``), then the lab tests in
one process: a lab test left without the ``lab`` marker would run beside another one and share its lab hosts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def collected(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_the_pass_without_a_lab_collects_no_lab_test():
    folders = ("tests/integration", "tests/faults", "tests/security")
    rest = collected(*folders, "-m", "not lab")
    assert rest, "nothing collected"
    assert not [n for n in rest if n.split("::")[0].endswith("_lab.py")], rest
    # what is left there asks for no lab fixture: it runs (and passes) with no lab up, as under xdist
    assert {n.split("::")[0] for n in rest} <= {
        "tests/faults/test_bad_envs.py", "tests/integration/test_standin_multiproc.py",
        "tests/security/test_env_loader_bombs.py", "tests/security/test_env_loader_cost.py",
        "tests/security/test_env_loader_secrets.py",
        "tests/security/test_env_workdir_roots.py", "tests/security/test_terminal_text.py"}, sorted(set(rest))
