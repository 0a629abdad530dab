"""System-level helpers of the namespace lab: commands, processes, locks, discovery.

Used by ``framework.lab.manage`` (the executor); nothing here knows the lab's layout
beyond the names ``framework.lab.plan`` produces.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from framework.errors import LabError
from framework.lab.plan import SSH_PORT, SSHD, LabPlan, lab_ns_re, lab_veth_re, overlapping_routes

log = logging.getLogger(__name__)

TORCH_REQUIREMENT = "torch==2.13.0"
KILL_GRACE = 3.0
Say = Callable[[str], None]
#: sshd processes this Python process started (kept referenced: no ResourceWarning, reaped when they die)
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0,
        what: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command without a shell; LabError (naming ``what``) when it fails and ``check``."""
    log.debug("run: %s", shlex.join(argv))
    try:
        cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise LabError(f"{argv[0]} not found (needed to {what or 'run the lab'})") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"{shlex.join(argv)} timed out after {timeout:g}s") from None
    if check and cp.returncode != 0:
        raise LabError(_failure(argv, cp, what))
    return cp


def _failure(argv: Sequence[str], cp: subprocess.CompletedProcess[str], what: str | None) -> str:
    """One line: what failed, the command, its exit status and its output."""
    err = (cp.stderr or cp.stdout).strip().replace("\n", "; ")
    prefix = f"{what}: " if what else ""
    return f"{prefix}{shlex.join(argv)} failed (exit {cp.returncode}): {err}"


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def in_netns(pid: int, ns: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{ns}").st_ino
    except OSError:
        return False


def kill_pids(pids: Sequence[int], grace: float = KILL_GRACE) -> None:
    """SIGTERM ``pids``, wait up to ``grace`` s, SIGKILL the rest, reap our own children."""
    pids = [p for p in dict.fromkeys(pids) if _killable(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _signal_and_wait(pids, sig, grace)
        if not pids:
            break
    _reap(pids)
    if any(pid_alive(p) for p in pids):
        raise LabError(f"processes {pids} survived SIGKILL")


def _killable(pid: int) -> bool:
    """A live process that is not this one."""
    return bool(pid) and pid != os.getpid() and pid_alive(pid)


def _signal_and_wait(pids: list[int], sig: int, grace: float) -> list[int]:
    """Send ``sig`` to ``pids`` and wait up to ``grace`` s for them to end; those still alive."""
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pids)
        if not any(pid_alive(p) for p in pids):
            break
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


def _reap(pids: Sequence[int]) -> None:
    for p in pids:
        child = CHILDREN.get(p)
        if child is not None and child.poll() is not None:
            CHILDREN.pop(p, None)


def port_open(ip: str, port: int = SSH_PORT, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


_PORT_PROBE = ("import socket, sys\n"
               "try:\n"
               "    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.5)\n"
               "    s.settimeout(0.5)\n"
               "    sys.exit(0 if s.recv(8).startswith(b'SSH-') else 1)\n"
               "except OSError:\n"
               "    sys.exit(1)\n")


def port_open_in(ns: str, ip: str, port: int = SSH_PORT) -> bool:
    """:func:`port_open`, asked from inside network namespace ``ns`` (a jump lab's hosts: no route from here)."""
    cp = run(["ip", "netns", "exec", ns, sys.executable, "-c", _PORT_PROBE, ip, str(port)], check=False, timeout=10)
    return cp.returncode == 0


def atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """Serialise lab changes (up/down/start/stop) between processes."""
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(state_dir.parent / f".{state_dir.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


#: the tools the lab runs, and the Debian package of each
TOOLS = (("ip", "iproute2"), ("unshare", "util-linux"), ("nsenter", "util-linux"),
         ("mount", "mount"), ("ssh-keygen", "openssh-server"))


def preflight() -> None:
    """LabError naming what is missing: root, a tool, sshd, or a root account sshd accepts."""
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, bridges, mounts): run it as root")
    for tool, pkg in TOOLS:
        if shutil.which(tool) is None:
            raise LabError(f"{tool} not found: apt-get install {pkg}")
    if not os.access(SSHD, os.X_OK):
        raise LabError(f"{SSHD} not found: apt-get install openssh-server")
    if _root_locked():
        raise LabError("root's account is locked ('!' in /etc/shadow); sshd with UsePAM no refuses "
                       "key logins for it: run `usermod -p '*' root`")


def _root_locked() -> bool:
    """Whether /etc/shadow marks root's password locked (False when it cannot be read)."""
    try:
        lines = Path("/etc/shadow").read_text().splitlines()
    except OSError:
        return False
    return any(line.startswith("root:") and line.split(":")[1].startswith("!") for line in lines)


def prepare_torch(python: str, install: bool, say: Say) -> None:
    """Make sure the hosts' interpreter (same root filesystem) imports torch."""
    cp = run([python, "-c", "import torch; print(torch.__version__)"], check=False, timeout=300)
    if cp.returncode == 0:
        say(f"torch {cp.stdout.strip()} already importable by {python}")
        return
    if not install:
        say(f"torch is not importable by {python}; not installing it (--no-torch)")
        return
    say(f"torch is not importable by {python}: running {python} -m pip install {TORCH_REQUIREMENT}")
    run([python, "-m", "pip", "install", TORCH_REQUIREMENT], timeout=3600, what="install torch for the lab hosts")
    say(f"installed {TORCH_REQUIREMENT} for {python}")


# --------------------------------------------------------------------------- discovery


def lab_namespaces(name: str) -> list[str]:
    cp = run(["ip", "netns", "list"], check=False)
    rx = lab_ns_re(name)
    return [tok.split()[0] for tok in cp.stdout.splitlines() if tok.strip() and rx.match(tok.split()[0])]


def lab_veths(name: str) -> list[str]:
    rx = lab_veth_re(name)
    try:
        return sorted(n for n in os.listdir("/sys/class/net") if rx.match(n))
    except OSError:
        return []


def leftovers(name: str, state_dir: Path) -> bool:
    return bool(state_dir.exists() or lab_namespaces(name) or lab_veths(name)
                or any(Path(f"/sys/class/net/{name}{br}").exists() for br in ("br0", "br1")))


def read_pid(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().strip())
    return None


def mac_in_ns(ns: str) -> str | None:
    cp = run(["ip", "-n", ns, "-o", "link", "show", "eth0"], check=False)
    toks = cp.stdout.split()
    return toks[toks.index("link/ether") + 1] if "link/ether" in toks else None


def check_overlap(plan: LabPlan) -> None:
    routes = run(["ip", "-4", "-o", "route", "show"], what="list routes").stdout.splitlines()
    addrs = run(["ip", "-4", "-o", "addr", "show"], what="list addresses").stdout.splitlines()
    hits = overlapping_routes(plan.subnet, routes, addrs, ignore_dev=plan.bridge)
    if hits:
        raise LabError(f"subnet {plan.subnet} overlaps what this machine already uses ({'; '.join(hits)}): "
                       "choose another with --subnet")
    if plan.private_subnet is not None:
        hits = overlapping_routes(plan.private_subnet, routes, addrs, ignore_dev=plan.private_bridge)
        if hits:
            raise LabError(f"--jump subnet {plan.private_subnet} overlaps what this machine already uses "
                           f"({'; '.join(hits)}): choose another")


