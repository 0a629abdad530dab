"""Host output is data (issue 31, security-review-3 §1, §2, §4), played on the lab's real hosts.

The co-tenant is uid 65534 (``nobody``, ``setpriv``) on a lab host; it writes only where every user may
(the 1777 crash directory ``/var/crash/camit`` of the lab's pattern, a shared 1777 plog root). The victim
is a root-only file. Tests that need the lab's file pattern hold the labs' core-pattern lock.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework import commands
from framework.commands import ShellScript
from framework.cores.watch import CoreWatch
from framework.hosts import Cluster, Host
from tests.support.camit_labtools import core_pattern

LAB_PATTERN = "/var/crash/camit/core.%e.%p.%t.%s"
CRASH_DIR = "/var/crash/camit"
SECRET = b"ROOT-ONLY-SECRET-31"


def as_nobody(host: Host, script: str, *args: str) -> None:
    """Run ``script`` (sh, with ``args`` as $1...) as uid 65534 on ``host``."""
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "sh", "-c", script, "sh", *args]
    host.check(ShellScript(commands.join(argv)), timeout=30)


def report_bytes(root: Path) -> bytes:
    import gzip

    blobs = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            blobs.append(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    return b"".join(blobs)


@pytest.fixture
def host1(lab_env) -> Iterator[tuple[Cluster, Host]]:
    with Cluster.from_env(lab_env, ["host1"]) as cluster:
        yield cluster, cluster["host1"]


@pytest.fixture
def secret(host1: tuple[Cluster, Host]) -> Iterator[str]:
    """A root-only (0600) file in the SSH user's home, the review's ``.bash_history``."""
    _, host = host1
    name = f".camit-secret-{os.getpid()}"
    host.check(ShellScript(f"umask 077; printf '%s\\n' {SECRET.decode()} > \"$HOME\"/{name}"), timeout=30)
    try:
        yield name
    finally:
        host.run(ShellScript(f"rm -f -- \"$HOME\"/{name}"), timeout=30)


def test_a_cotenants_file_name_cannot_inject_core_scan_records(host1, secret: str, lab_env, tmp_path) -> None:
    """review §1: ``core.x\\n@@pattern %e\\nF 60 99999999999 1 <file>`` made the scan 'find' a core at a file
    of the SSH user's $HOME, gzip it as root and fetch it. Now the name is one listed name, refused for its
    newlines: no core, nothing fetched, one note."""
    cluster, host = host1
    name = f"core.x\n@@pattern %e\nF 60 99999999999 1 {secret}"
    with core_pattern(LAB_PATTERN):
        watch = CoreWatch(cluster, lab_env, policy="fail")
        baseline = watch.snapshot()
        as_nobody(host, 'printf junk > "$1/$2"', CRASH_DIR, name)
        try:
            cores = watch.collect(baseline, rundir=tmp_path)
        finally:
            host.run(commands.join(["rm", "-f", "--", f"{CRASH_DIR}/{name}"]), timeout=30)
    assert cores == [], [c.describe() for c in cores]
    assert SECRET not in report_bytes(tmp_path)
    assert any("1 file name(s) with control characters" in n for n in watch.notes), watch.notes


def crafted_core() -> bytes:
    """A minimal ELF core whose notes say uid 0, pid 4242 (tests/unit/framework/test_cores.py's builder)."""
    from tests.unit.framework.test_cores import synth_core

    return synth_core(pid=4242, ppid=1, sig=11, comm="python3", env=[])


def test_a_cotenants_crafted_core_is_not_the_runs(host1, lab_env, tmp_path) -> None:
    """review §2: a planted ELF core whose notes say uid 0 passed as root's (the file's owner was never
    read) and failed the run at will. Now the file is judged by its descriptor: owned by uid 65534, refused."""
    cluster, host = host1
    name = f"core.python3.4242.{int(time.time()) + 5}.11"
    blob = base64.b64encode(crafted_core()).decode()
    with core_pattern(LAB_PATTERN):
        watch = CoreWatch(cluster, lab_env, policy="fail")
        baseline = watch.snapshot()
        as_nobody(host, 'printf %s "$1" | base64 -d > "$2/$3"', blob, CRASH_DIR, name)
        try:
            cores = watch.collect(baseline, rundir=tmp_path)
        finally:
            host.run(commands.join(["rm", "-f", "--", f"{CRASH_DIR}/{name}"]), timeout=30)
    assert cores == [], [(c.describe(), c.notes) for c in cores]
    assert watch.verdict(cores) == (False, "")
    assert not list(tmp_path.rglob("*.gz"))


def test_a_core_swapped_for_a_symlink_is_refused_not_followed(host1, secret: str, lab_env, tmp_path,
                                                             monkeypatch) -> None:
    """review §2: a listed core replaced by a symlink to a root-only file (the review's trigger: gdb's argv
    in ps) made root gzip that file into the report. Now the one open is O_NOFOLLOW: refused, nothing read."""
    cluster, host = host1
    name = f"core.python3.4242.{int(time.time()) + 5}.11"
    target = f"/root/{secret}"
    real_inspect = CoreWatch._inspect

    def swap_then_inspect(self, h, cands, cores, tmp, procs):
        as_nobody(host, 'ln -sf -- "$1" "$2/$3.new" && mv -f -- "$2/$3.new" "$2/$3"', target, CRASH_DIR, name)
        return real_inspect(self, h, cands, cores, tmp, procs)

    monkeypatch.setattr(CoreWatch, "_inspect", swap_then_inspect)
    with core_pattern(LAB_PATTERN):
        watch = CoreWatch(cluster, lab_env, policy="fail")
        baseline = watch.snapshot()
        as_nobody(host, 'printf %s "$1" | base64 -d > "$2/$3"', base64.b64encode(crafted_core()).decode(),
                  CRASH_DIR, name)
        try:
            cores = watch.collect(baseline, rundir=tmp_path)
        finally:
            host.run(commands.join(["rm", "-f", "--", f"{CRASH_DIR}/{name}"]), timeout=30)
    assert cores == [], [(c.describe(), c.notes) for c in cores]
    assert SECRET not in report_bytes(tmp_path)


def test_a_plog_name_cannot_add_files_to_roots_tar(host1, secret: str, lab_env, tmp_path) -> None:
    """review §4: in a shared (1777) plog root, nobody's file ``x\\n9999999992 1 <file>`` put a line naming
    a root-only file of $HOME (tar's cwd) into root's ``tar -T`` list: it came back in the report. Now no
    list reaches tar: the host program walks the folders by descriptor and packs only the SSH user's own
    single-link files, each name encoded by the tar format."""
    cluster, host = host1
    root = f"/tmp/camit-plog-{os.getpid()}"
    host.check(f"mkdir -p {root}/debug/plog && chmod 1777 {root} {root}/debug {root}/debug/plog "
               f"&& printf 'EI0006 ours\\n' > {root}/debug/plog/plog-1.log", timeout=30)
    try:
        watch = CoreWatch(cluster, lab_env, ascend_log_dirs=[root])
        baseline = watch.snapshot()
        time.sleep(1.1)  # the logs are those changed after the snapshot's second
        as_nobody(host, 'printf x > "$1/x"; printf x > "$1/$2"',
                  f"{root}/debug/plog", f"x\n9999999992 1 {secret}")
        host.check(f"touch {root}/debug/plog/plog-1.log", timeout=30)
        files = watch.collect_logs(tmp_path, baseline)
    finally:
        host.run(f"rm -rf -- {root}", timeout=30)
    got = sorted(p.name for p in files["host1"] if p.parent.name != "host1")
    assert got == ["plog-1.log"], files
    assert SECRET not in report_bytes(tmp_path)


# the co-tenant's watcher (stdlib, ctypes inotify): the moment root opens the folder ``$1``, swap it for a
# symlink to ``$2`` (rename away, then symlink in its place), so a later open *by path* lands in ``$2``
_SWAP_ON_OPEN = r"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
folder, target = sys.argv[1], sys.argv[2]
assert libc.inotify_add_watch(fd, folder.encode(), 0x20) >= 0  # IN_OPEN
open(folder + ".armed", "w").close()
os.read(fd, 4096)
os.rename(folder, folder + ".old")
os.symlink(target, folder)
"""


def test_a_plog_folder_swapped_for_a_symlink_mid_collection_is_not_followed(host1, lab_env,
                                                                           tmp_path) -> None:
    """review §4 (the rest of it): a co-tenant's folder in a shared plog root holds root's plog; the
    moment root's collection opens that folder the co-tenant swaps it for a symlink to a root-only folder
    holding a file of the same name. ``tar`` re-opened the listed path and packed the root-only file. Now
    the folder is walked by its descriptor (``O_NOFOLLOW``): root's own plog comes back, nothing of the
    target does."""
    cluster, host = host1
    root = f"/tmp/camit-plog-swap-{os.getpid()}"
    hidden = f"/root/.camit-rootonly-{os.getpid()}"
    plog = f"{root}/debug/plog"
    host.check(f"mkdir -p {root}/debug && chmod 1777 {root} {root}/debug && umask 077 && mkdir -p {hidden} "
               f"&& printf '%s\\n' {SECRET.decode()} > {hidden}/plog-1.log", timeout=30)
    as_nobody(host, 'mkdir -m 0777 "$1"', plog)
    host.check(f"printf 'EI0006 ours\\n' > {plog}/plog-1.log", timeout=30)
    try:
        watch = CoreWatch(cluster, lab_env, ascend_log_dirs=[root])
        baseline = watch.snapshot()
        time.sleep(1.1)  # the logs are those changed after the snapshot's second
        host.check(f"touch {plog}/plog-1.log", timeout=30)
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                "python3", "-c", _SWAP_ON_OPEN, plog, hidden]
        host.check(f"nohup {commands.join(argv)} >/dev/null 2>&1 & "
                   f"for i in $(seq 100); do [ -e {plog}.armed ] && break; sleep 0.05; done", timeout=30)
        files = watch.collect_logs(tmp_path, baseline)
        swapped = host.run(f"[ -L {plog} ] && echo swapped", timeout=30).stdout
    finally:
        host.run(f"rm -rf -- {root} {hidden}", timeout=30)
    assert swapped.strip() == "swapped"  # the co-tenant did swap the folder during the collection
    assert SECRET not in report_bytes(tmp_path)
    got = [p for p in files["host1"] if p.name == "plog-1.log"]
    assert len(got) == 1 and got[0].read_text() == "EI0006 ours\n", files
