"""Helpers of the deadline and lease tests: a lab host whose sshd stops answering, one whose login shell
prints noise first, and ``camit`` / pytest controllers started as subprocesses."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.camit_labtools import REPO


def _children(pid: int) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == pid:
            found.append(int(d.name))
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def sshd_tree(lab, host: str) -> list[int]:
    """The host's sshd listener and every sshd process under it (the ones serving open connections)."""
    root = lab.host(host).sshd_pid
    assert root, f"{host}: the lab records no sshd pid"
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if _comm(pid).startswith("sshd"):
            found.append(pid)
            todo += _children(pid)
    return found


@contextlib.contextmanager
def stopped_sshd(lab, host: str) -> Iterator[list[int]]:
    """SIGSTOP the host's sshd (listener and sessions): the host stops reading and answering; SIGCONT after."""
    stopped: list[int] = []
    try:
        for pid in sshd_tree(lab, host):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        yield stopped
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _reload_sshd(lab, host: str) -> None:
    """SIGHUP: sshd re-executes itself with the same pid and reads its config again."""
    h = lab.host(host)
    os.kill(h.sshd_pid, signal.SIGHUP)
    time.sleep(1.0)
    from framework.lab.system import port_open

    end = time.monotonic() + 10
    while not port_open(h.ip) and time.monotonic() < end:
        time.sleep(0.1)


@contextlib.contextmanager
def noisy_login_shell(lab, host: str, noise_env: str = "LC_ALL=xx_XX.UTF-8") -> Iterator[None]:
    """The host's sshd sets ``noise_env`` for every session: bash, the login shell, then prints
    ``bash: warning: setlocale: LC_ALL: cannot change locale`` on stderr before anything of ours."""
    config = lab.host(host).plan.sshd_config
    original = config.read_text()
    try:
        config.write_text(original.rstrip("\n") + f"\nSetEnv {noise_env}\n")
        _reload_sshd(lab, host)
        yield
    finally:
        config.write_text(original)
        _reload_sshd(lab, host)


def camit_popen(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m framework.cli <argv>`` from this checkout, output captured."""
    return subprocess.Popen([sys.executable, "-m", "framework.cli", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def finish(proc: subprocess.Popen[str], within: float) -> tuple[str, str, float]:
    """Wait up to ``within`` seconds for ``proc``: (stdout, stderr, seconds); killed (and the test fails) when over."""
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"still running after {within:g}s:\n{out[-2000:]}\n{err[-3000:]}") from None
    return out, err, time.monotonic() - t0


def kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
