"""The lab: a real multi-host cluster on one machine, built from network namespaces.

Executes the plan of :mod:`framework.lab.plan` (``up``, ``down``, ``status``, ``fault``) and
holds the :class:`Lab` API the tests use. What each command does to the machine, and why:
docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.console import printable
from framework.errors import EXIT_USAGE, FrameworkError, LabError, UsageError
from framework.lab import checkout
from framework.lab.plan import (
    CORE_PATTERN_FILE,
    DEFAULT_NAME,
    DEFAULT_SUBNET,
    ENV_HEADER,
    HOST_COREDIR,
    HOST_WORKDIR,
    LAB_CORE_PATTERN,
    MASKED_RC,
    SSH_PORT,
    STATE_ROOT,
    HostPlan,
    LabPlan,
    MountKind,
    NpuPlan,
    build_commands,
    core_pattern_on_down,
    core_pattern_on_up,
    default_state_dir,
    env_document,
    in_host_argv,
    iptables_forward_rule,
    known_hosts_text,
    mount_points,
    mount_points_on_down,
    mount_points_on_up,
    mount_points_to_create,
    npu_shape,
    nsenter_argv,
    plan_lab,
    private_route_argv,
    public_key_of,
    render_env_yaml,
    small_workdir_size,
    sshd_argv,
    sshd_config_text,
    teardown_commands,
    tmpfs_mount_argv,
    tree_path,
)
from framework.lab.system import (
    CHILDREN,
    Say,
    atomic_write,
    check_overlap,
    cmdline,
    in_netns,
    kill_pids,
    lab_namespaces,
    lab_veths,
    leftovers,
    locked,
    mac_in_ns,
    pid_alive,
    port_open,
    port_open_in,
    preflight,
    prepare_torch,
    read_pid,
    run,
)
from framework.lab.wheelwrite import WheelError, write_wheel

__all__ = ["DEFAULT_ENV_FILE", "Lab", "LabHost", "main"]

log = logging.getLogger(__name__)

#: the checkout's env/lab.yaml (camit installed from a wheel with no checkout: ./env/lab.yaml)
DEFAULT_ENV_FILE = (checkout.find() or Path.cwd()) / "env" / "lab.yaml"
SSHD_READY_TIMEOUT = 15.0
#: the torch_npu stand-in's source (distribution torch-npu-standin) in the checkout, for emulated hosts only
STANDIN_NPU = "standin_npu"
#: seconds ``fault HOST held-device`` waits for the holder to register its device
HOLDER_READY_TIMEOUT = 60.0


# --------------------------------------------------------------------------- the lab


def _present(names: Iterable[str]) -> list[str]:
    """The network devices among ``names`` that exist (in the root namespace)."""
    return [n for n in names if Path(f"/sys/class/net/{n}").exists()]


def _is_empty_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink() and not any(p.iterdir())


def _is_empty_file(p: Path) -> bool:
    return p.is_file() and not p.is_symlink() and p.stat().st_size == 0


#: mount point kind -> (still what ``up`` made and empty?, how to remove it)
_EMPTY_MOUNT_POINT: dict[str, tuple[Callable[[Path], bool], Callable[[Path], None]]] = {
    "dir": (_is_empty_dir, Path.rmdir),
    "file": (_is_empty_file, Path.unlink),
}


def _remove_if_empty(p: Path, kind: str) -> None:
    """Remove a mount point ``up`` made (``dir`` or ``file``) when it is still that, not a link, and empty."""
    if kind not in _EMPTY_MOUNT_POINT:
        return
    is_empty, remove = _EMPTY_MOUNT_POINT[kind]
    if is_empty(p):
        remove(p)


def _our_sshd(candidates: Iterable[int | None], config: str, ns: str) -> list[int]:
    """The recorded sshd pids still alive and still ours (running our config, or in our namespace)."""
    return [pid for pid in candidates if pid and pid_alive(pid) and (config in cmdline(pid) or in_netns(pid, ns))]


def _wait_registered(h: LabHost, proc: subprocess.Popen[bytes], registry: Path,
                     log_file: Path) -> int:
    """The holder's pid once it registered (or after the timeout); LabError if it exited first."""
    deadline = time.monotonic() + HOLDER_READY_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        if (registry / f"{proc.pid}.json").exists():
            return proc.pid
        time.sleep(0.1)
    if proc.poll() is not None:
        tail = " | ".join(log_file.read_text(errors="replace").strip().splitlines()[-5:])
        raise LabError(f"{h.name}: the held-device holder exited ({proc.returncode}): "
                       f"{tail or 'no output'}")
    log.warning("%s: holder pid %d has not registered in %s after %gs", h.name, proc.pid, registry,
                HOLDER_READY_TIMEOUT)
    return proc.pid


def _check_device(knob: str, dev: object, npu: NpuPlan) -> None:
    """LabError for a device number past the profile's devices."""
    if isinstance(dev, int) and not 0 <= dev < npu.count:
        raise LabError(f"{knob}: device {dev} is past the {npu.profile} profile's {npu.count} "
                       f"devices (valid ids 0-{npu.count - 1})")


def _make_host_dirs(hp: HostPlan) -> None:
    """A host's tmp, work and core folders (with their modes) and its stand-in shell rc file."""
    for d, mode in ((hp.tmp_dir, 0o1777), (hp.work_dir, 0o755), (hp.core_dir, 0o1777)):
        d.mkdir(exist_ok=True)
        d.chmod(mode)
    hp.shell_rc.write_text(f"# camit lab host {hp.name}: stands in for {MASKED_RC} "
                           "(see framework/lab_plan.py)\n")


def _sshd_log_tail(h: LabHost) -> str:
    """The last lines of the host's sshd output and log, on one line."""
    tail = ""
    for f in (h.plan.sshd_out, h.sshd_log):
        with contextlib.suppress(OSError):
            tail += " | ".join(f.read_text().strip().splitlines()[-5:])
    return tail


def _host_pids(h: LabHost) -> list[int]:
    """A host's recorded sshd (and its pid file's) and holders, while still ours."""
    pids = _our_sshd((h.sshd_pid, read_pid(h.plan.sshd_pid_file)), str(h.plan.sshd_config), h.ns)
    return pids + [pid for pid in h.holders if pid_alive(pid) and in_netns(pid, h.ns)]


@dataclass
class LabHost:
    """One lab host as it is now; names, addresses and paths come from its plan."""

    plan: HostPlan = field(repr=False)
    sshd_pid: int | None = None
    small_workdir: str | None = None
    #: pids of the ``held-device`` holders started in this (emulated) host
    holders: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def ns(self) -> str:
        return self.plan.ns

    @property
    def ip(self) -> str:
        return self.plan.ip

    @property
    def mac(self) -> str:
        return self.plan.mac

    @property
    def veth(self) -> str:
        return self.plan.veth

    @property
    def dir(self) -> Path:
        """``<state>/hosts/<host>``; ``tmp_dir``/``work_dir``/``core_dir`` are its mounted subdirs."""
        return self.plan.dir

    @property
    def tmp_dir(self) -> Path:
        return self.plan.tmp_dir

    @property
    def work_dir(self) -> Path:
        return self.plan.work_dir

    @property
    def core_dir(self) -> Path:
        return self.plan.core_dir

    @property
    def sshd_log(self) -> Path:
        return self.plan.sshd_log

    @property
    def sshd_running(self) -> bool:
        pid = self.sshd_pid
        return pid is not None and pid_alive(pid) and str(self.plan.sshd_config) in cmdline(pid)


#: how a mount point of each kind is created (none exists there yet)
_MAKE_MOUNT_POINT: dict[str, Callable[[Path], None]] = {
    "dir": lambda path: path.mkdir(mode=0o755),
    "file": lambda path: path.touch(mode=0o644, exist_ok=False),
}


def _read_state(path: Path, name: str) -> dict[str, Any]:
    """The state document at ``path``; LabError naming the lab when there is none."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise LabError(
            f"no lab {name!r} is up ({path} does not exist); "
            "run `python -m framework.lab up --hosts 4`"
        ) from None
    except (OSError, ValueError) as exc:
        raise LabError(f"cannot read {path}: {exc}") from None
    return data


def _plan_of(data: dict[str, Any]) -> LabPlan:
    """The plan of the lab a state document records."""
    npu = data.get("npu") or {}
    return plan_lab(len(data["hosts"]), name=data["name"], subnet=data["subnet"],
                    state_dir=Path(data["state_dir"]), env_file=Path(data["env_file"]),
                    python=data["python"], npu=npu.get("profile"), visible=npu.get("visible"),
                    jump=data.get("jump_subnet"))


def _host_of(hp: HostPlan, rec: dict[str, Any]) -> LabHost:
    """A host as its state record has it."""
    holders = [int(p) for p in rec.get("holders") or []]
    return LabHost(hp, rec.get("sshd_pid"), rec.get("small_workdir"), holders)


def _jump_of(plan: LabPlan, data: dict[str, Any]) -> LabHost | None:
    """The jump host as the state document has it (None in a lab without one)."""
    if plan.jump is None:
        return None
    return LabHost(plan.jump, (data.get("jump") or {}).get("sshd_pid"))


def _npu_json(npu: NpuPlan | None) -> dict[str, Any] | None:
    """The emulated hosts' profile and visible devices (None on a CPU lab)."""
    if npu is None:
        return None
    visible = list(npu.visible) if npu.visible is not None else None
    return {"profile": npu.profile, "visible": visible}


def _host_json(h: LabHost) -> dict[str, Any]:
    return {"name": h.name, "ns": h.ns, "ip": h.ip, "mac": h.mac, "veth": h.veth,
            "sshd_pid": h.sshd_pid, "small_workdir": h.small_workdir, "dir": str(h.dir),
            "holders": h.holders}


def _where(plan: LabPlan) -> str:
    """The network the hosts are on, for the ``up`` line."""
    if plan.jump is None:
        return f"{plan.bridge} {plan.subnet}"
    return (f"{plan.private_bridge} {plan.private_subnet} behind jump host {plan.jump.ip} "
            f"on {plan.bridge}")


def _shape_changes(old: LabPlan, new: LabPlan) -> list[str]:
    """How the lab that is up differs in shape from the one asked for."""
    out = []
    if len(old.hosts) != len(new.hosts) or old.subnet != new.subnet:
        out.append(f"it has {len(old.hosts)} hosts on {old.subnet}, "
                   f"asked for {len(new.hosts)} on {new.subnet}")
    if old.npu != new.npu:
        out.append(f"it is {npu_shape(old)}, asked for {npu_shape(new)}")
    if old.private_subnet != new.private_subnet:
        out.append(f"its jump subnet is {old.private_subnet}, asked for {new.private_subnet}")
    return out


class Lab:
    """A lab that is up (or half up); obtain one with :meth:`load` or :meth:`up`."""

    def __init__(self, plan: LabPlan, hosts: list[LabHost], *, created: str, iptables_rule: bool = False,
                 core_pattern: dict[str, Any] | None = None,
                 mount_points: list[tuple[str, MountKind]] | None = None, jump: LabHost | None = None) -> None:
        self.plan = plan
        self.hosts = hosts
        self.created = created
        self.iptables_rule = iptables_rule
        #: ``{"saved": <original core_pattern or None>}`` once this lab set (or shares) the lab's pattern
        self.core_pattern = core_pattern
        #: controller paths created as mount points of emulated hosts (by this lab or another one still up)
        self.mount_points: list[tuple[str, MountKind]] = list(mount_points or [])
        #: a jump lab's jump host (the only way to the hosts), else None
        self.jump: LabHost | None = jump if jump is not None else (LabHost(plan.jump) if plan.jump else None)

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def state_dir(self) -> Path:
        return self.plan.state_dir

    @property
    def env_file(self) -> Path:
        return self.plan.env_file

    @property
    def key_file(self) -> Path:
        """The client private key authorised on every host."""
        return self.plan.client_key

    @property
    def known_hosts(self) -> Path:
        return self.plan.known_hosts

    def host(self, name: str) -> LabHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise LabError(f"lab {self.name!r} has no host {name!r} (hosts: {', '.join(h.name for h in self.hosts)})")

    # ---- persistence
    @classmethod
    def load(cls, name: str = DEFAULT_NAME, state_dir: Path | str | None = None) -> Lab:
        """Read ``<state>/lab.json``; LabError if no lab of that name is up."""
        path = (Path(state_dir) if state_dir else default_state_dir(name)) / "lab.json"
        data = _read_state(path, name)
        try:
            return cls._from_json(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise LabError(f"{path} is not a lab state file (missing {exc})") from None

    @classmethod
    def _from_json(cls, data: dict[str, Any]) -> Lab:
        """The lab a state document records (its plan made again from the recorded shape)."""
        plan = _plan_of(data)
        by_name = {h["name"]: h for h in data["hosts"]}
        hosts = [_host_of(hp, by_name[hp.name]) for hp in plan.hosts]
        core = data.get("core_pattern")
        mps = [(str(p), k) for p, k in data.get("mount_points") or []]
        return cls(plan, hosts, created=data.get("created", ""),
                   iptables_rule=bool(data.get("iptables_rule")),
                   core_pattern=dict(core) if isinstance(core, dict) else None, mount_points=mps,
                   jump=_jump_of(plan, data))

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        return {
            "name": p.name, "subnet": str(p.subnet), "bridge": p.bridge, "bridge_ip": p.bridge_ip,
            "state_dir": str(p.state_dir), "env_file": str(p.env_file), "python": p.python,
            "key_file": str(p.client_key), "known_hosts": str(p.known_hosts), "created": self.created,
            "iptables_rule": self.iptables_rule, "core_pattern": self.core_pattern,
            "npu": _npu_json(p.npu),
            "mount_points": [list(mp) for mp in self.mount_points],
            "jump_subnet": str(p.private_subnet) if p.private_subnet else None,
            "jump": self._jump_json(),
            "hosts": [_host_json(h) for h in self.hosts],
        }

    def _jump_json(self) -> dict[str, Any] | None:
        """The jump host's record (None without one)."""
        if self.jump is None or self.plan.jump is None:
            return None
        return {"name": self.jump.name, "ns": self.jump.ns, "ip": self.jump.ip,
                "private_ip": self.plan.jump.private_ip, "sshd_pid": self.jump.sshd_pid}

    def save(self) -> None:
        atomic_write(self.plan.state_file, json.dumps(self.to_json(), indent=2) + "\n")

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """Lock, re-read the per-host runtime state others may have changed, then save."""
        with locked(self.state_dir):
            if not self.plan.state_file.exists():
                raise LabError(f"lab {self.name!r} is not up any more ({self.plan.state_file} is gone)")
            fresh = Lab.load(self.name, self.state_dir)
            for mine, theirs in zip(self.hosts, fresh.hosts):
                mine.sshd_pid, mine.small_workdir, mine.holders = theirs.sshd_pid, theirs.small_workdir, theirs.holders
            if self.jump is not None and fresh.jump is not None:
                self.jump.sshd_pid = fresh.jump.sshd_pid
            yield
            self.save()

    # ---- bring up
    @classmethod
    def up(cls, n_hosts: int, *, name: str = DEFAULT_NAME, subnet: str = DEFAULT_SUBNET,
           state_dir: Path | str | None = None, env_out: Path | str | None = None, python: str | None = None,
           torch: bool = True, npu: str | None = None, visible: str | Sequence[int] | None = None,
           jump: str | None = None, say: Say | None = None) -> Lab:
        """Bring up (or reuse, if healthy and of the same shape) the lab; write the env file.

        ``npu`` (a2, a3) makes every host an emulated Ascend host; ``visible`` is the device set the env declares;
        ``jump`` (a private subnet) puts the hosts behind a jump host.
        """
        say = say or log.info
        plan = plan_lab(n_hosts, name=name, subnet=subnet,
                        state_dir=Path(state_dir) if state_dir else default_state_dir(name),
                        env_file=Path(env_out) if env_out else DEFAULT_ENV_FILE, python=python or sys.executable,
                        npu=npu, visible=visible, jump=jump)
        preflight()
        with locked(plan.state_dir):
            lab = cls._reuse(plan, say)
            if lab is None:
                lab = cls._make(plan, say)
            lab._claim_core_pattern(say)
            lab.save()
        prepare_torch(plan.python, torch, say)
        return lab

    @classmethod
    def _make(cls, plan: LabPlan, say: Say) -> Lab:
        """Build a new lab; what was made is torn down again when that fails."""
        check_overlap(plan)
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        lab = cls(plan, [LabHost(h) for h in plan.hosts], created=now)
        t0 = time.monotonic()
        try:
            lab._build(say)
        except BaseException:
            log.error("building lab %r failed; tearing down what was made", plan.name)
            with contextlib.suppress(Exception):
                lab._teardown(lambda m: log.info("%s", m))
            raise
        took = time.monotonic() - t0
        kind = f"emulated Ascend {plan.npu.profile} " if plan.npu else ""
        say(f"lab {plan.name!r} is up: {len(plan.hosts)} {kind}hosts on {_where(plan)} "
            f"in {took:.1f}s")
        return lab

    @classmethod
    def _reuse(cls, plan: LabPlan, say: Say) -> Lab | None:
        """A healthy lab of the same shape is reused (env rewritten); anything else is torn down."""
        try:
            old = cls.load(plan.name, plan.state_dir)
        except LabError:
            if leftovers(plan.name, plan.state_dir):
                say(f"found leftovers of a half-made lab {plan.name!r}: tearing them down first")
                cls(plan, [LabHost(h) for h in plan.hosts], created="")._teardown(say)
            return None
        problems = old.problems() + _shape_changes(old.plan, plan)
        if not problems:
            return cls._adopt(old, plan, say)
        say(f"lab {plan.name!r} exists but is not usable ({'; '.join(problems)}): "
            "tearing it down first")
        old._teardown(say)
        return None

    @classmethod
    def _adopt(cls, old: Lab, plan: LabPlan, say: Say) -> Lab:
        """The healthy lab ``old`` under ``plan``: forwarding, emulation and env file refreshed."""
        lab = cls(plan, old.hosts, created=old.created, iptables_rule=old.iptables_rule,
                  core_pattern=old.core_pattern, mount_points=old.mount_points, jump=old.jump)
        lab._open_forwarding(say)  # the firewall may have changed since
        lab.save()
        if plan.npu is not None:  # the emulation and the stand-in may have changed: refresh them
            lab._populate_trees()
            lab._install_emu_python(say)
        lab._write_env()
        say(f"lab {plan.name!r} is already up and healthy ({len(plan.hosts)} hosts); "
            f"rewrote {plan.env_file}")
        return lab

    def _build(self, say: Say) -> None:
        """Make the lab: folders, keys, network, sshds, the emulation; saved as it goes."""
        self._make_dirs()
        self.save()  # from here on `down` finds what we made
        self._populate_emu(say)
        self._make_client_key()
        self._make_network()
        self._open_forwarding(say)
        for h in self._sshd_hosts():
            self._configure_sshd(h)
            self._spawn_sshd(h)
        self.save()
        for h in self._sshd_hosts():
            self._wait_ready(h)
        self._install_emu_python(say)
        self._write_env()
        self.save()

    def _make_dirs(self) -> None:
        """The state folder, each host's folders and rc file, and the shared mount points."""
        p = self.plan
        every = (*p.hosts, *((p.jump,) if p.jump else ()))
        for d in (p.state_dir, *(h.dir for h in every)):
            d.mkdir(parents=True, exist_ok=True)
        p.state_dir.chmod(0o700)
        for hp in every:
            _make_host_dirs(hp)
        for d in (Path(HOST_WORKDIR), Path(HOST_COREDIR)):  # mount points, in the shared root filesystem
            d.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory

    def _make_client_key(self) -> None:
        """The client key (kept when it exists), authorised on every host."""
        p = self.plan
        if not p.client_key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"camit-lab-{p.name}", "-f", str(p.client_key)],
                what="generate the lab's client key")
        atomic_write(p.authorized_keys, p.client_key.with_suffix(".pub").read_text(), 0o600)

    def _make_network(self) -> None:
        """Namespaces, bridge, links and addresses (:func:`build_commands`)."""
        for argv in build_commands(self.plan):
            netns = argv[:3] == ["ip", "netns", "add"]
            what = "cannot create network namespaces" if netns else "cannot build the lab network"
            cp = run(argv, check=False)
            if cp.returncode != 0:
                raise LabError(f"{what}: {shlex.join(argv)}: {cp.stderr.strip()}")

    def _configure_sshd(self, h: LabHost) -> None:
        """A host key (kept when it exists) and the sshd config of ``h``."""
        if not h.plan.host_key.exists():
            comment = f"{h.name}@{self.plan.name}-lab"
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                 "-f", str(h.plan.host_key)], what=f"generate {h.name}'s host key")
        atomic_write(h.plan.sshd_config, sshd_config_text(self.plan, h.plan))

    # ---- emulated Ascend hosts
    def _populate_emu(self, say: Say) -> None:
        """Write every emulated host's tree and create the mount points its bind mounts need."""
        npu = self.plan.npu
        if npu is None:
            return
        self._populate_trees()
        with locked(STATE_ROOT / "emu-mounts"):
            create = mount_points_to_create(mount_points(npu), os.path.lexists)
            for path, kind in create:
                _MAKE_MOUNT_POINT[kind](Path(path))
            self.mount_points = mount_points_on_up(create, self._others_mount_points())
            self.save()
        if create:
            say(f"created mount point(s) {', '.join(p for p, _ in create)} (removed by the last emulated lab's down)")

    def _populate_trees(self) -> None:
        """(Re)write every emulated host's tree; keeps its knobs, registry and linger (emu.populate)."""
        from framework.lab import emu

        assert self.plan.npu is not None
        prof = emu.profile(self.plan.npu.profile)
        for h in self.plan.hosts:  # emu's host index is 0-based
            emu.populate(h.emu_dir, prof, host=h.name, index=h.index - 1, n_hosts=len(self.plan.hosts))

    def _others_mount_points(self) -> list[list[tuple[str, MountKind]]]:
        """The mount points each other emulated lab that is up recorded."""
        others = [r["mount_points"] for r in self._other_records()
                  if r.get("npu") and r.get("mount_points")]
        return [[(str(p), k) for p, k in o] for o in others]

    def _release_mount_points(self, say: Say) -> None:
        """Remove the recorded mount points (if still empty) unless another emulated lab is up."""
        if not self.mount_points:
            return
        with locked(STATE_ROOT / "emu-mounts"):
            others = [r for r in self._other_records() if r.get("npu")]
            for path, kind in mount_points_on_down(self.mount_points, len(others)):
                with contextlib.suppress(OSError):
                    _remove_if_empty(Path(path), kind)
            if others:
                say(f"mount point(s) {', '.join(p for p, _ in self.mount_points)} stay: "
                    f"{len(others)} other emulated lab(s) still up")
            self.mount_points = []

    def _build_standin_wheel(self) -> Path:
        """Build the torch_npu stand-in's wheel once (from a copy: the build writes next to its sources)."""
        out = self.state_dir / "emu-wheels"
        src = out / "src"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(checkout.require("the torch_npu stand-in") / STANDIN_NPU, src,
                        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"))
        try:  # written with the standard library: a fresh venv's setuptools is too old or absent
            return write_wheel(src, out)
        except WheelError as exc:
            raise LabError(f"building the torch_npu stand-in's wheel: {exc}") from None

    def _install_emu_python(self, say: Say) -> None:
        """Each emulated host's Python: a venv made inside the host (host paths) with the stand-in installed."""
        npu = self.plan.npu
        if npu is None:
            return
        wheel = self._build_standin_wheel()
        venv = str(Path(npu.python).parents[1])
        for h in self.hosts:
            if not tree_path(h.plan, npu, npu.python).exists():
                self.host_exec(h.name, [self.plan.python, "-m", "venv", "--system-site-packages", "--without-pip",
                                        "--clear", venv], check=True, timeout=300)
            # pip of the base python (seen through --system-site-packages) installs into the venv
            self.host_exec(h.name, [npu.python, "-m", "pip", "install", "--no-deps", "--no-index",
                                    "--no-build-isolation", "--force-reinstall", "--disable-pip-version-check",
                                    "-q", str(wheel)], check=True, timeout=600)
        say(f"per-host Python {npu.python} with {wheel.name} on {len(self.hosts)} host(s)")

    def _emu_tree(self, host: str) -> tuple[LabHost, Path]:
        """The host and its emulated tree; LabError for a CPU lab host."""
        h = self.host(host)
        if self.plan.npu is None:
            raise LabError(f"{host} of lab {self.name!r} is a CPU lab host: fault knobs need an emulated Ascend "
                           "lab (`python -m framework.lab up --npu a2|a3`)")
        return h, h.plan.emu_dir

    def active_faults(self, host: str) -> list[str]:
        """The fault knobs set on an emulated host."""
        from framework.lab import emu

        _, tree = self._emu_tree(host)
        return list(emu.active_faults(tree))

    def check_fault(self, host: str, knob: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Validate a knob and its parameters for that host (LabError: CPU host, unknown host/knob/parameter)."""
        from framework.lab import emu
        from framework.lab.emu.faults import check_params

        self._emu_tree(host)
        npu = self.plan.npu
        assert npu is not None
        if knob not in emu.KNOBS:
            raise LabError(f"unknown fault knob {knob!r} (knobs: {', '.join(emu.KNOBS)}, or clear)")
        given = dict(params or {})
        _check_device(knob, given.get("device"), npu)
        return check_params(knob, given, npu.count)

    def set_fault(self, host: str, knob: str, *, linger: float | None = None, **params: Any) -> None:
        """Set a fault knob on an emulated host (``params``: the knob's, e.g. ``device``, ``level``, ``spod_id``).

        ``held-device`` starts a process holding ``device`` inside the host (its pid recorded in lab.json);
        ``linger`` (seconds) keeps a killed holder's device listed that long, as a real NPU does.
        """
        from framework.lab import emu

        values = self.check_fault(host, knob, params)
        _, tree = self._emu_tree(host)
        if knob != "held-device":
            emu.set_fault(tree, knob, **params)
            emu.sync_peer_links([h.emu_dir for h in self.plan.hosts])
            return
        with self._changing():
            h = self.host(host)
            if linger is not None:
                emu.set_linger(tree, linger)
            emu.set_fault(tree, knob, **params)
            h.holders.append(self._start_holder(h, int(values["device"])))

    def _start_holder(self, h: LabHost, device: int) -> int:
        """Start ``emu.holder_argv(device)`` inside the host, detached; wait until it holds the device."""
        from framework.lab import emu

        npu = self.plan.npu
        assert npu is not None
        if not h.sshd_running or h.sshd_pid is None:
            raise LabError(f"{h.name}: sshd is stopped; start it before setting held-device")
        log_file = h.dir / f"holder-{device}.log"
        env = {**os.environ, "CAMIT_EMU_NPU": npu.npu_json}
        with open(log_file, "ab") as out:
            proc = subprocess.Popen(nsenter_argv(h.sshd_pid, emu.holder_argv(device)), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        CHILDREN[proc.pid] = proc
        registry = tree_path(h.plan, npu, str(Path(npu.npu_json).parent / "registry"))
        return _wait_registered(h, proc, registry, log_file)

    def clear_faults(self, host: str) -> None:
        """Clear every fault knob of an emulated host and kill its held-device holders."""
        from framework.lab import emu

        _, tree = self._emu_tree(host)
        with self._changing():
            h = self.host(host)
            self._kill_holders(h)
            emu.clear_faults(tree)
            emu.sync_peer_links([h.emu_dir for h in self.plan.hosts])

    def _kill_holders(self, h: LabHost) -> None:
        ours = [p for p in h.holders if pid_alive(p) and in_netns(p, h.ns)]
        if ours:
            kill_pids(ours)
        h.holders = []

    def _open_forwarding(self, say: Say) -> None:
        """With br_netfilter active, bridged frames traverse iptables FORWARD: let ours pass."""
        try:
            bridged = Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() == "1"
        except OSError:
            bridged = False
        if not bridged or shutil.which("iptables") is None:
            return
        for br in self.plan.bridges:
            rule = iptables_forward_rule(br)
            if run(["iptables", "-C", *rule], check=False).returncode != 0:
                run(["iptables", "-I", *rule], what="allow host-to-host traffic on the lab bridge")
                self.iptables_rule = True
                say(f"added iptables rule: -I {' '.join(rule)} (removed by down)")

    def _spawn_sshd(self, h: LabHost) -> None:
        with open(h.plan.sshd_out, "ab") as out:  # sshd holds its own copy of the descriptor
            proc = subprocess.Popen(sshd_argv(h.plan, h.small_workdir), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        CHILDREN[proc.pid] = proc
        h.sshd_pid = proc.pid
        log.info("%s: sshd pid %d in netns %s", h.name, proc.pid, h.ns)

    def _sshd_hosts(self) -> list[LabHost]:
        """The hosts and, in a jump lab, the jump host: everything that runs an sshd."""
        return [*self.hosts, *((self.jump,) if self.jump else ())]

    def _answers(self, h: LabHost) -> bool:
        """Does that sshd answer? A jump lab's hosts are asked from inside their own namespace (no route here)."""
        if self.plan.jump is not None and h is not self.jump:
            return port_open_in(h.ns, h.ip)
        return port_open(h.ip)

    def _wait_ready(self, h: LabHost, timeout: float = SSHD_READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not pid_alive(h.sshd_pid):
                break
            if self._answers(h):
                return
            time.sleep(0.05)
        state = "exited" if not pid_alive(h.sshd_pid) else f"not answering on {h.ip}:{SSH_PORT} after {timeout:g}s"
        tail = _sshd_log_tail(h) or "no log output"
        raise LabError(f"{h.name}: sshd (pid {h.sshd_pid}) {state}: {tail}")

    def _write_env(self) -> None:
        keys = {h.name: public_key_of(h.plan.host_key_pub.read_text()) for h in self._sshd_hosts()}
        macs = {h.name: mac_in_ns(h.ns) or h.mac for h in self.hosts}
        atomic_write(self.known_hosts, known_hosts_text((h.ip, keys[h.name]) for h in self._sshd_hosts()))
        atomic_write(self.env_file, render_env_yaml(env_document(self.plan, keys, macs, platform.machine())))

    # ---- kernel.core_pattern (machine-global, shared by every lab that is up)
    def _other_records(self) -> list[dict[str, Any]]:
        """The lab.json documents of the other labs that are up."""
        mine = self.plan.state_file.resolve()
        files = set(STATE_ROOT.glob("*/lab.json")) | set(self.state_dir.parent.glob("*/lab.json"))
        out = []
        for f in sorted(files):
            if f.resolve() == mine:
                continue
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(f.read_text())
                if isinstance(record, dict):
                    out.append(record)
        return out

    def _other_core_pattern_records(self) -> list[dict[str, Any]]:
        """The ``core_pattern`` records of the other labs that are up (their lab.json files)."""
        return [r["core_pattern"] for r in self._other_records() if isinstance(r.get("core_pattern"), dict)]

    def _claim_core_pattern(self, say: Say) -> None:
        """Point kernel.core_pattern at each host's own core dir, remembering the original.

        The original is recorded only when the pattern is not the lab's yet (else it
        comes from another lab's record); a machine that refuses the write keeps its
        pattern (camit's core watch reads any pattern), with a warning.
        """
        with locked(STATE_ROOT / "core-pattern"):
            try:
                current = CORE_PATTERN_FILE.read_text().strip()
            except OSError as exc:
                say(f"warning: cannot read {CORE_PATTERN_FILE}: {exc}; core_pattern left alone")
                return
            recorded = [(self.core_pattern or {}).get("saved")]
            recorded += [r.get("saved") for r in self._other_core_pattern_records()]
            original, write = core_pattern_on_up(current, recorded)
            if write:
                try:
                    CORE_PATTERN_FILE.write_text(LAB_CORE_PATTERN)
                except OSError as exc:
                    say(f"warning: cannot set kernel.core_pattern ({exc}); it stays {current!r}")
                    return
                say(f"kernel.core_pattern = {LAB_CORE_PATTERN} (was {current!r}; restored when the last lab is down)")
            elif original is None:
                log.warning("kernel.core_pattern is already the lab's and no lab knows the original: "
                            "it will not be restored")
            self.core_pattern = {"saved": original}

    def _release_core_pattern(self, say: Say) -> None:
        """Restore the original core_pattern if this is the last lab that set it."""
        if self.core_pattern is None:
            return
        with locked(STATE_ROOT / "core-pattern"):
            try:
                current = CORE_PATTERN_FILE.read_text().strip()
            except OSError:
                return
            others = self._other_core_pattern_records()
            value = core_pattern_on_down(current, self.core_pattern.get("saved"), len(others))
            if value is not None:
                try:
                    CORE_PATTERN_FILE.write_text(value)
                    say(f"kernel.core_pattern restored to {value!r}")
                except OSError as exc:
                    say(f"warning: cannot restore kernel.core_pattern to {value!r}: {exc}")
            elif others:
                log.info("kernel.core_pattern stays %r: %d other lab(s) still up", current, len(others))
            self.core_pattern = None

    # ---- health
    def problems(self) -> list[str]:
        """Why the lab is not usable right now (empty when healthy)."""
        out = self._missing_bridges()
        out += [why for why in map(self._sshd_problem, self._sshd_hosts()) if why]
        files = (self.key_file, self.known_hosts, self.plan.authorized_keys)
        out += [f"{f} is missing" for f in files if not f.exists()]
        return out + self._emu_problems()

    def _missing_bridges(self) -> list[str]:
        bridges = [b for b in (self.plan.bridge, self.plan.private_bridge) if b]
        present = _present(bridges)
        return [f"bridge {b} is missing" for b in bridges if b not in present]

    def _sshd_problem(self, h: LabHost) -> str:
        """What is wrong with the host's namespace or sshd ("" when nothing)."""
        if not Path(f"/run/netns/{h.ns}").exists():
            return f"{h.name}: netns {h.ns} is missing"
        if not h.sshd_running:
            return f"{h.name}: sshd is not running"
        if not self._answers(h):
            return f"{h.name}: sshd does not answer on {h.ip}:{SSH_PORT}"
        return ""

    def _emu_problems(self) -> list[str]:
        """The emulated hosts whose Python is missing."""
        npu = self.plan.npu
        if npu is None:
            return []
        return [f"{h.name}: the emulated host's Python {npu.python} is missing"
                for h in self.hosts if not tree_path(h.plan, npu, npu.python).exists()]

    # ---- tear down
    def down(self, say: Say | None = None) -> None:
        """Kill the lab's processes and remove everything ``up`` made."""
        with locked(self.state_dir):
            self._teardown(say or log.info)

    def _teardown(self, say: Say) -> None:
        p = self.plan
        namespaces = sorted({h.ns for h in self._sshd_hosts()} | set(lab_namespaces(p.name)))
        pids = self._our_pids(namespaces)
        if pids:
            uniq = sorted(set(pids))
            say(f"killing {len(uniq)} process(es) in lab {p.name!r}: {' '.join(map(str, uniq))}")
            kill_pids(pids)
        self._remove_links(namespaces)
        self._remove_routes_and_rules(say)
        self._release_core_pattern(say)
        self._release_mount_points(say)  # our hosts (their mount namespaces) are gone by now
        self._remove_env_file()
        shutil.rmtree(p.state_dir, ignore_errors=True)
        left = [*lab_namespaces(p.name), *lab_veths(p.name)]
        left += _present((p.bridge, f"{p.name}br1"))
        if left:
            raise LabError(f"lab {p.name!r}: could not remove {', '.join(left)}")
        say(f"lab {p.name!r} is down ({len(namespaces)} namespaces removed)")

    def _remove_env_file(self) -> None:
        """Remove the env file, only when it is one we generated for this very lab."""
        p = self.plan
        with contextlib.suppress(OSError):
            text = p.env_file.read_text()
            if text.startswith(ENV_HEADER) and f"key_file: {p.client_key}\n" in text:
                p.env_file.unlink()

    def _our_pids(self, namespaces: Sequence[str]) -> list[int]:
        """The lab's processes: recorded sshds (and their pid files) and holders while still ours, and
        everything inside the lab's namespaces."""
        pids = [pid for h in self._sshd_hosts() for pid in _host_pids(h)]
        for ns in namespaces:  # everything still inside our namespaces is ours
            cp = run(["ip", "netns", "pids", ns], check=False)
            pids += [int(x) for x in cp.stdout.split() if x.isdigit()]
        return pids

    def _remove_links(self, namespaces: Sequence[str]) -> None:
        """The lab's namespaces, veths and bridges (a jump lab's second bridge too, also when this record
        lost it: a half-made lab's; it is ours by name)."""
        p = self.plan
        veths = sorted({h.veth for h in self._sshd_hosts()} | set(lab_veths(p.name)))
        bridge = p.bridge if _present([p.bridge]) else None
        more = _present({p.private_bridge or f"{p.name}br1", f"{p.name}br1"})
        veths = _present(veths)
        for argv in teardown_commands(list(namespaces), veths, bridge, more):
            run(argv, check=False)

    def _remove_routes_and_rules(self, say: Say) -> None:
        """A jump lab's route to its private subnet, and the FORWARD rules ``up`` added."""
        p = self.plan
        if p.private_subnet is not None:
            while run(private_route_argv("del", p.private_subnet), check=False).returncode == 0:
                pass
        if not (self.iptables_rule and shutil.which("iptables")):
            return
        for br in p.bridges:
            rule = iptables_forward_rule(br)
            while run(["iptables", "-C", *rule], check=False).returncode == 0:
                run(["iptables", "-D", *rule])
            say("removed the iptables FORWARD rule for " + br)

    # ---- per-host operations (for tests)
    def stop_sshd(self, host: str) -> None:
        """Kill that host's sshd (new connections are refused); its sessions and files stay."""
        with self._changing():
            h = self.host(host)
            if h.sshd_running:
                assert h.sshd_pid is not None
                kill_pids([h.sshd_pid])
            h.sshd_pid = None
        deadline = time.monotonic() + 5
        while self._answers(h) and time.monotonic() < deadline:
            time.sleep(0.05)
        log.info("%s: sshd stopped", host)

    def start_sshd(self, host: str) -> int:
        """Start that host's sshd again (same host key, same namespaces); return its pid."""
        with self._changing():
            h = self.host(host)
            if not h.sshd_running:
                self._spawn_sshd(h)
                self._wait_ready(h)
        log.info("%s: sshd started, pid %s", host, h.sshd_pid)
        assert h.sshd_pid is not None
        return h.sshd_pid

    def host_exec(self, host: str, argv: Sequence[str], *, check: bool = False, input: str | None = None,
                  timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside that host's net+mount+UTS namespaces, without SSH.

        Enters the namespaces of the host's sshd (``nsenter -t <pid> -n -m -u``);
        while sshd is stopped, runs in fresh namespaces set up the same way (same
        directories, same hostname). ``check=True`` raises LabError on non-zero exit.
        """
        h = self.host(host)
        with contextlib.suppress(LabError):  # another process may have restarted that sshd
            fresh = Lab.load(self.name, self.state_dir).host(host)
            h.sshd_pid, h.small_workdir = fresh.sshd_pid, fresh.small_workdir
        if h.sshd_running and h.sshd_pid:
            full = nsenter_argv(h.sshd_pid, argv)
        else:
            full = in_host_argv(h.plan, argv, h.small_workdir)
        try:
            cp = subprocess.run(full, capture_output=True, text=True, input=input, timeout=timeout,
                                stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise LabError(f"{host}: {shlex.join(argv)} timed out after {timeout:g}s") from None
        if check and cp.returncode != 0:
            raise LabError(f"{host}: {shlex.join(argv)} failed (exit {cp.returncode}): {cp.stderr.strip()}")
        return cp

    def host_pids(self, host: str) -> list[int]:
        """Pids of every process inside that host's network namespace."""
        cp = run(["ip", "netns", "pids", self.host(host).ns], check=False)
        return sorted(int(x) for x in cp.stdout.split() if x.isdigit())

    def set_small_workdir(self, host: str, size: str = "8m") -> None:
        """Mount a tmpfs of ``size`` over the host's workdir (hides its normal content until reset)."""
        size = small_workdir_size(size)
        with self._changing():
            h = self.host(host)
            if not h.sshd_running or h.sshd_pid is None:
                raise LabError(f"{host}: sshd is stopped; start it before set_small_workdir")
            if h.small_workdir:
                run(nsenter_argv(h.sshd_pid, ["umount", HOST_WORKDIR], net=False, uts=False),
                    what=f"{host}: reset workdir")
            run(nsenter_argv(h.sshd_pid, tmpfs_mount_argv(size), net=False, uts=False), what=f"{host}: small workdir")
            h.small_workdir = size

    def reset_workdir(self, host: str) -> None:
        """Undo :meth:`set_small_workdir` (the tmpfs and what was written to it disappear)."""
        with self._changing():
            h = self.host(host)
            if h.small_workdir and h.sshd_running and h.sshd_pid:
                run(nsenter_argv(h.sshd_pid, ["umount", HOST_WORKDIR], net=False, uts=False),
                    what=f"{host}: reset workdir")
            h.small_workdir = None


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m framework.lab", description=__doc__.split("\n")[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="log every command")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="bring the lab up (or reuse a healthy one) and write the env file")
    up.add_argument("--hosts", type=int, required=True, help="number of hosts")
    up.add_argument("--subnet", default=DEFAULT_SUBNET, help=f"private IPv4 subnet (default {DEFAULT_SUBNET})")
    up.add_argument("--env-out", type=Path, default=None, help=f"env file to write (default {DEFAULT_ENV_FILE})")
    up.add_argument("--python", default=None, help="interpreter the hosts use (default: this one)")
    up.add_argument("--no-torch", action="store_true", help="do not pip-install torch if it is missing")
    up.add_argument("--npu", default=None, metavar="PROFILE",
                    help="emulated Ascend hosts of that profile: a2 (8 x 910B) or a3 (16 logical devices)")
    up.add_argument("--calibration", default=None, metavar="BUNDLE",
                    help="emulated hosts replay this camit calibrate bundle's npu-smi/hccn_tool "
                         "captures, version records and torch_npu error texts (needs --npu)")
    up.add_argument("--visible", default=None, metavar="IDS",
                    help="device ids the env declares as npu.visible, e.g. 0,1 (needs --npu)")
    up.add_argument("--jump", default=None, metavar="SUBNET",
                    help="put the hosts on this private subnet, which only a jump host (on both networks) reaches; "
                         "the env file names it as defaults.jump_host")
    fault = sub.add_parser("fault", help="set (or clear) a fault knob on an emulated host")
    fault.add_argument("host", help="lab host, e.g. host1")
    fault.add_argument("knob", help="tls-mismatch, health-alarm, link-down, hccn-busy, held-device, other-spod, "
                                    "no-driver; linger (with --linger S); or clear")
    fault.add_argument("--device", type=int, default=None,
                       help="the knob's logical device (tls-mismatch 1, the others 0 by default)")
    fault.add_argument("--level", default=None, help="health-alarm: Warning, Alarm (default), Critical or UNKNOWN")
    fault.add_argument("--spod-id", type=int, default=None, help="other-spod: the super pod id shown (default 1)")
    fault.add_argument("--linger", type=float, default=None,
                       help="held-device: seconds the device stays listed after the holder is killed")
    for p in (up, sub.add_parser("down", help="tear the lab down"), sub.add_parser("status", help="show the lab"),
              fault):
        p.add_argument("--name", default=DEFAULT_NAME, help=f"lab name (default {DEFAULT_NAME})")
        p.add_argument("--state-dir", type=Path, default=None,
                       help="state dir (default $CAMIT_LAB_DIR or /run/camit-lab/<name>)")
    return ap


def _usage_error(exc: LabError) -> int:
    print(printable(f"lab: error: {exc}".replace("\n", "; ")), file=sys.stderr)
    return EXIT_USAGE


def _cmd_up(args: argparse.Namespace, say: Say) -> int:
    try:
        plan_lab(args.hosts, name=args.name, subnet=args.subnet,
                 state_dir=args.state_dir or default_state_dir(args.name),
                 env_file=args.env_out or DEFAULT_ENV_FILE, python=args.python or sys.executable,
                 npu=args.npu, visible=args.visible, jump=args.jump)
    except LabError as exc:
        return _usage_error(exc)
    replay = _calibration(args.calibration, args.npu)
    if isinstance(replay, int):
        return replay
    t0 = time.monotonic()
    lab = Lab.up(args.hosts, name=args.name, subnet=args.subnet, state_dir=args.state_dir, env_out=args.env_out,
                 python=args.python, torch=not args.no_torch, npu=args.npu, visible=args.visible, jump=args.jump,
                 say=say)
    if lab.plan.npu is not None:
        _replay(lab, replay, args.calibration, say)
    say(f"env file: {lab.env_file}  (up took {time.monotonic() - t0:.1f}s)")
    return 0


def _replay(lab: Lab, replay: dict[str, Any] | None, path: str | None, say: Say) -> None:
    """The emulated hosts replay the calibration bundle's captures (their own without one)."""
    from framework.calib.replay import apply

    apply([h.emu_dir for h in lab.plan.hosts], replay)
    if replay is not None:
        say(f"emulated hosts replay the captures of {path}")


def _calibration(path: str | None, npu: str | None) -> dict[str, Any] | None | int:
    """The bundle of ``up --calibration`` (None without one), or a usage error's exit status."""
    if path is None:
        return None
    if npu is None:
        return _usage_error(
            LabError("--calibration needs --npu (only emulated hosts replay a bundle)"))
    from framework.calib.bundle import load

    try:
        return load(Path(path))
    except UsageError as exc:
        return _usage_error(LabError(str(exc)))


def _cmd_down(args: argparse.Namespace, say: Say) -> int:
    preflight()
    sd = args.state_dir or default_state_dir(args.name)
    try:
        lab = Lab.load(args.name, sd)
    except LabError:
        if not leftovers(args.name, sd):
            say(f"no lab {args.name!r} is up; nothing to do")
            return 0
        plan = plan_lab(1, name=args.name, state_dir=sd, env_file=DEFAULT_ENV_FILE, python=sys.executable)
        lab = Lab(plan, [], created="")
    t0 = time.monotonic()
    lab.down(say)
    say(f"(down took {time.monotonic() - t0:.1f}s)")
    return 0


def _sshd_state(h: LabHost) -> str:
    return f"sshd pid {h.sshd_pid}" if h.sshd_running else "sshd STOPPED"


def _emu_status(lab: Lab, h: LabHost, npu: NpuPlan) -> str:
    """An emulated host's profile, faults and live holders, for its status line."""
    faults = lab.active_faults(h.name)
    text = f", {npu.profile}, faults: {', '.join(faults) or 'none'}"
    holders = [p for p in h.holders if pid_alive(p)]
    return text + (f", holder pid(s) {' '.join(map(str, holders))}" if holders else "")


def _host_status(lab: Lab, h: LabHost) -> str:
    """One host's line of ``lab status``: namespace, address, sshd, and on an emulated lab its faults."""
    extra = f", small workdir {h.small_workdir}" if h.small_workdir else ""
    if lab.plan.npu is not None:
        extra += _emu_status(lab, h, lab.plan.npu)
    return f"  {h.name:<8} {h.ns:<16} {h.ip:<15} {_sshd_state(h)}{extra}"


def _cmd_status(args: argparse.Namespace, say: Say) -> int:
    lab = Lab.load(args.name, args.state_dir)
    say(f"lab {lab.name!r}: {npu_shape(lab.plan)}, bridge {lab.plan.bridge} {lab.plan.bridge_ip}/"
        f"{lab.plan.prefixlen}, created {lab.created}, env {lab.env_file}")
    if lab.jump is not None and lab.plan.jump is not None:
        say(f"  {'jump':<8} {lab.jump.ns:<16} {lab.jump.ip:<15} {_sshd_state(lab.jump)}, "
            f"hosts' network {lab.plan.private_bridge} {lab.plan.private_subnet} "
            f"(jump leg {lab.plan.jump.private_ip})")
    for h in lab.hosts:
        say(_host_status(lab, h))
    problems = lab.problems()
    say("healthy" if not problems else "NOT healthy: " + "; ".join(problems))
    return 0 if not problems else 1


#: ``fault HOST linger --linger S``: the one setting next to the knobs (a dead process's device stays listed S s)
LINGER = "linger"


def _set_linger(lab: Lab, args: argparse.Namespace, params: Mapping[str, Any], say: Say) -> int:
    """``fault HOST linger``, not a knob: how long a device stays listed after its process died (all later
    processes)."""
    from framework.lab import emu

    if args.linger is None or args.linger < 0 or params:
        raise LabError("fault HOST linger takes --linger SECONDS (>= 0) and nothing else")
    emu.set_linger(lab._emu_tree(args.host)[1], args.linger)
    say(f"{args.host}: a device stays listed {args.linger:g} s after its process died")
    return 0


def _check_fault_args(lab: Lab, args: argparse.Namespace, params: dict[str, Any]) -> None:
    """A knob's parameters are valid for it; ``--linger`` only with held-device."""
    lab.check_fault(args.host, args.knob, params)
    if args.linger is not None and (args.knob != "held-device" or args.linger < 0):
        raise LabError("--linger is a number of seconds >= 0, for held-device (or linger) only")


def _clear_faults(lab: Lab, args: argparse.Namespace, params: Mapping[str, Any], say: Say) -> int:
    lab.clear_faults(args.host)
    say(f"{args.host}: fault knobs cleared")
    return 0


def _hold_device(lab: Lab, args: argparse.Namespace, params: Mapping[str, Any], say: Say) -> int:
    """Start a holder (it can fail for other reasons than the input: not a usage error)."""
    lab.set_fault(args.host, args.knob, linger=args.linger, **params)
    say(f"{args.host}: {args.knob} set (holder pid {lab.host(args.host).holders[-1]})")
    return 0


def _knob_set(lab: Lab, args: argparse.Namespace, params: Mapping[str, Any], say: Say) -> int:
    say(f"{args.host}: {args.knob} set")
    return 0


#: what ``fault`` does once the input is checked, by knob (any other knob was set as a file already)
_FAULT_DONE = {"clear": _clear_faults, "held-device": _hold_device}


def _cmd_fault(args: argparse.Namespace, say: Say) -> int:
    params = {k: v for k, v in (("device", args.device), ("level", args.level), ("spod_id", args.spod_id))
              if v is not None}
    try:
        lab = Lab.load(args.name, args.state_dir)
        lab._emu_tree(args.host)  # unknown host, CPU lab host
        if args.knob == LINGER:
            return _set_linger(lab, args, params, say)
        if args.knob != "clear":
            _check_fault_args(lab, args, params)
        if args.knob not in _FAULT_DONE:  # a file in the tree: what fails is the input
            lab.set_fault(args.host, args.knob, **params)
    except LabError as exc:
        return _usage_error(exc)
    return _FAULT_DONE.get(args.knob, _knob_set)(lab, args, params, say)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    say: Say = lambda m: print(m, flush=True)  # noqa: E731
    commands = {"up": _cmd_up, "down": _cmd_down, "status": _cmd_status, "fault": _cmd_fault}
    try:
        return commands[args.cmd](args, say)
    except FrameworkError as exc:
        print(printable(f"lab: error: {exc}".replace("\n", "; ")), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("lab: interrupted", file=sys.stderr)
        return 130
