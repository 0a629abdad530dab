"""Evidence helpers for tests on the lab: processes of a run, processes by command line, host file footprints,
``pytest suites/cam`` run as a Jenkins stage runs it (``jenkins_pytest``).

The lab's hosts share this machine's PID namespace, so scanning /proc here sees every host's
processes; each host has private /tmp, workdir and core dir (``Footprint``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[2]


def tagged(prefix: str) -> list[int]:
    """Live processes anywhere on this machine (every lab host) tagged ``CAMIT_RUN_ID=<prefix>…``."""
    want = f"CAMIT_RUN_ID={prefix}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(e.startswith(want) for e in env):
            found.append(int(d.name))
    return found


def wait_none_left(prefix: str, within: float) -> list[int]:
    end = time.monotonic() + within
    left = tagged(prefix)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = tagged(prefix)
    return left

T = TypeVar("T")


def wait_for(what: Callable[[], T | None], within: float, step: float = 0.2) -> T | None:
    """``what()``'s first truthy value within ``within`` seconds, polled every ``step``; else None."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(step)
    return None


def wait_ranks_up(prefix: str, count: int, within: float = 120, script: str = "alltoall.py") -> bool:
    """Wait until ``count`` rank processes of ``script`` tagged ``prefix`` run (not their wrappers).

    Tests that act on a running job wait for this instead of sleeping a fixed time: on a loaded machine
    torch's import and the rendezvous take what they take.
    """
    return wait_for(lambda: len([p for p in tagged(prefix) if _is_rank(p, script)]) >= count, within) is not None


def _is_rank(pid: int, script: str) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return script.encode() in cmd and b"rankwrap" not in cmd


def pids_with_cmdline(needle: str) -> list[int]:
    """Live processes whose command line contains ``needle`` (a path unique to one test)."""
    want = needle.encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and want in cmd:
            found.append(int(d.name))
    return found


class Footprint:
    """Files under each lab host's private directories (/tmp, /var/tmp/camit, the core dir), before vs after.

    The lab's hosts share the rest of the file system with this machine, so these are the
    places a host-side write can be attributed to a host. ``strays()`` lists new paths that
    are not under the run's workdir (``/var/tmp/camit/<workdir_name>``).
    """

    def __init__(self, lab, hosts: list[str], workdir_name: str) -> None:
        self.lab = lab
        self.hosts = hosts
        self.allowed = workdir_name
        self.before = {h: self._files(h) for h in hosts}

    def _roots(self, host: str) -> dict[str, Path]:
        h = self.lab.host(host)
        return {"/tmp": h.tmp_dir, "/var/tmp/camit": h.work_dir, "core": h.core_dir}

    def _files(self, host: str) -> set[str]:
        out = set()
        for label, root in self._roots(host).items():
            if not root.exists():
                continue
            for p in root.rglob("*"):
                out.add(f"{label}/{p.relative_to(root)}")
        return out

    def strays(self, *, known: tuple[str, ...] = ()) -> dict[str, list[str]]:
        """New paths outside the run's workdir (``known`` prefixes aside)."""
        found = {}
        for h in self.hosts:
            new = self._files(h) - self.before[h]
            bad = sorted(p for p in new if not p.startswith(f"/var/tmp/camit/{self.allowed}")
                         and not p.startswith(known))
            if bad:
                found[h] = bad
        return found

    def in_workdir(self, host: str) -> list[str]:
        root = self.lab.host(host).work_dir / self.allowed
        return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []




@contextlib.contextmanager
def core_pattern(value: str) -> Iterator[None]:
    """Switch the machine-global ``kernel.core_pattern`` for the block, holding the labs' core-pattern lock;
    restored in a finally."""
    from framework.lab.plan import CORE_PATTERN_FILE, STATE_ROOT
    from framework.lab.system import locked

    with locked(STATE_ROOT / "core-pattern"):
        old = CORE_PATTERN_FILE.read_text().strip()
        CORE_PATTERN_FILE.write_text(value)
        try:
            yield
        finally:
            CORE_PATTERN_FILE.write_text(old)


def assert_complete(run: Path, status: str) -> dict:
    """junit.xml and cluster.xml valid, manifest.json and index.html there; the manifest (returned) says ``status``."""
    import json

    from framework.report.junit import validate_junit

    for xml in ("junit.xml", "cluster.xml"):
        assert validate_junit(run / xml) == [], xml
    assert (run / "index.html").is_file()
    manifest = json.loads((run / "manifest.json").read_text())
    assert isinstance(manifest, dict), manifest
    assert manifest["status"] == status, manifest
    return manifest


@contextlib.contextmanager
def jenkins_pytest(env: Path, reports: Path, *args: str, extra_env: dict[str, str] | None = None,
                   verbosity: str | None = "-q") -> Iterator[subprocess.Popen[str]]:
    """``pytest suites/cam`` in its own process group (as Jenkins' ``sh`` step); killed if left running.

    ``verbosity``: the flag given (``-q``, as a Jenkins stage runs it; ``-v``; None: pytest's default).
    """
    flags = [verbosity] if verbosity else []
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "suites/cam", "--env", str(env), "--report-dir",
                             str(reports), "-o", "junit_family=xunit2", "-p", "no:cacheprovider", *flags, *args],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO), **(extra_env or {})})
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def lab_env_or_skip(variable: str, what: str, bring_up: str) -> Path:
    """The absolute env file that ``variable`` names, or a skip saying which lab is missing and how to bring it up
    (``what``: "emulated Ascend lab"; ``bring_up``: the command)."""
    import pytest

    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"{variable} is not set (no {what} named); run '{bring_up}'")
    path = Path(value).resolve()
    if not path.exists():
        pytest.skip(f"{variable}={value}: {path} missing; bring the {what} up")
    return path


def verdicts(junit: Path) -> dict[str, str]:
    """``classname::name`` → passed, failure, error or skipped, for every test case of a JUnit file."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        out[f"{case.get('classname')}::{case.get('name')}"] = kind
    return out


def launches(folder: Path) -> list[dict]:
    """A run folder's launch records (``launch-*.json``), in name order."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("launch-*.json"))]
