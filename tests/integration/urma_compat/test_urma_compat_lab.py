"""An URMA harness tree of our own (``mini_umdk/``: root conftest, ``test_framework`` with its own
``ubus_test``/``common`` that must never be imported, an app layer inheriting BaseTest, a
compiled case and a shell-only case, a ``src`` tree) run unmodified as upstream runs it:
``pytest <case> --env FILE``.

The tree is copied under /tmp, which each lab host has of its own: the compiled case works only when
camit ships the tree (and ``src``) to the same path on every host, and it is gone afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from framework.commands import ShellScript, quote
from framework.config.effective import load
from framework.hosts import Cluster

pytestmark = pytest.mark.lab

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CASES = Path("test") / "intergration_test" / "test_suites" / "MINI"


def _pytest(case: Path, env: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(REPO)}
    environ.pop("CAMIT_ENV", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(case),
            "--env",
            str(env),
            "-p",
            "no:cacheprovider",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=case.parent,
        env=environ,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(HERE / "mini_umdk", tmp_path / "mini_umdk")
    return tmp_path / "mini_umdk"


def _present(env: Path, path: Path) -> dict[str, bool]:
    with Cluster.from_env(load(env)) as cluster:
        return {host.name: host.run(["test", "-e", str(path)]).rc == 0 for host in cluster}


def test_compiled_and_shell_cases_run_unmodified(tree: Path, lab_env_path: Path) -> None:
    for case in ("test_mini_compiled", "test_mini_shell"):
        done = _pytest(tree / CASES / case / "test.py", lab_env_path)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert "1 passed" in done.stdout
    present = _present(lab_env_path, tree)
    assert present and not any(present.values()), present  # shipped, then taken away everywhere


def test_failed_compile_shows_gcc_error(tree: Path, lab_env_path: Path) -> None:
    case = tree / CASES / "test_mini_compiled"
    (case / "test_case.c").write_text('#include "no_such_header.h"\nint main(void) { return 0; }\n')
    done = _pytest(case / "test.py", lab_env_path)
    assert done.returncode == 1, done.stdout[-4000:]
    assert "gcc test_case failed!" in done.stdout
    assert (
        "no_such_header.h: No such file or directory" in done.stdout
    )  # the reason, in the failure text
    assert "DEBUG" not in done.stdout  # camit's own DEBUG log stays in camit.log


def test_tree_over_other_content_is_refused(tree: Path, lab_env_path: Path) -> None:
    theirs = tree / "test" / "intergration_test" / "conftest.py"
    with Cluster.from_env(load(lab_env_path)) as cluster:
        host1 = cluster["host1"]
        host1.check(
            ShellScript(
                f"mkdir -p {quote(str(theirs.parent))} && echo theirs > {quote(str(theirs))}"
            )
        )
        try:
            done = _pytest(tree / CASES / "test_mini_shell" / "test.py", lab_env_path)
            kept = host1.check(["cat", str(theirs)]).stdout
        finally:
            host1.check(["rm", "-rf", "--", str(tree.parent)])
    assert done.returncode == 1, done.stdout[-4000:]
    assert f"{theirs} is there with other content" in done.stdout
    assert kept == "theirs\n"  # never overwritten
    present = _present(lab_env_path, tree)
    assert present and not any(present.values()), present  # nothing left on any host
