"""Integration tests of the emulated Ascend lab (``python -m framework.lab up --npu a3``) over real SSH.

With CAMIT_NPU_LAB_ENV set they use that emulated lab (fixture ``npu_lab_env``) and leave it up.
Otherwise they bring up their own (name ``camitnpu``, 10.78.0.0/24, 2 hosts, ``--npu a3``, env file in a
tmp dir) holding ``/tmp/camit-npulab.lock`` for the whole module, and the last test takes it down and
checks that nothing it made is left. A ``camitnpu`` lab that is already up is used as it is (not taken down).
Hosts are reached through camit's own Cluster (framework.hosts, paramiko), as every lab test does.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from framework.commands import ShellScript
from framework.config.effective import EnvConfig, load
from framework.errors import LabError
from framework.hosts import Cluster
from framework.lab import emu
from framework.lab.manage import Lab
from framework.lab.system import pid_alive

if os.geteuid() != 0:
    pytest.skip("the lab needs root", allow_module_level=True)

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]
LOCK = Path("/tmp/camit-npulab.lock")
NAME, SUBNET = "camitnpu", "10.78.0.0/24"
EMU_DIR = str(Path(emu.NPU_JSON).parent)


@dataclass
class NpuLab:
    lab: Lab
    env_path: Path
    env: EnvConfig
    own: bool  # brought up by this module (and so taken down by it)


def lab_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.lab", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL)


def _lab_of(env: EnvConfig) -> Lab:
    """The lab whose state dir holds the env file's client key."""
    key = env.defaults.key_file
    assert key is not None, "the emulated lab's env file names no key_file"
    data = json.loads((key.parent / "lab.json").read_text())
    return Lab.load(data["name"], key.parent)


def _lock_held_by_an_ancestor(path: Path) -> bool:
    """True if a flock on ``path`` is held by this process's parent chain (``flock path pytest ...``)."""
    try:
        ino = path.stat().st_ino
        holders = {int(f[4]) for f in (line.split() for line in Path("/proc/locks").read_text().splitlines())
                   if len(f) > 5 and f[1] == "FLOCK" and f[5].rsplit(":", 1)[-1] == str(ino)}
    except (OSError, ValueError, IndexError):
        return False
    pid = os.getppid()
    while pid > 1:
        if pid in holders:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


@pytest.fixture(scope="module")
def npu(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NpuLab]:
    if os.environ.get("CAMIT_NPU_LAB_ENV"):
        env = request.getfixturevalue("npu_lab_env")
        yield NpuLab(_lab_of(env), request.getfixturevalue("npu_lab_env_path"), env, own=False)
        return
    with open(LOCK, "a") as fh:
        if not _lock_held_by_an_ancestor(LOCK):
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            existing: Lab | None = Lab.load(NAME)
        except LabError:
            existing = None
        if existing is not None:
            env_path = existing.env_file.resolve()
            yield NpuLab(existing, env_path, load(env_path), own=False)
            return
        env_path = tmp_path_factory.mktemp("npulab") / "lab-npu.yaml"
        cp = lab_cli("up", "--hosts", "2", "--npu", "a3", "--name", NAME, "--subnet", SUBNET,
                     "--env-out", str(env_path))
        assert cp.returncode == 0, f"up failed: {cp.stdout}{cp.stderr}"
        try:
            yield NpuLab(Lab.load(NAME), env_path, load(env_path), own=True)
        finally:
            lab_cli("down", "--name", NAME)  # a no-op once test_down_... took it down


@pytest.fixture
def cluster(npu: NpuLab) -> Iterator[Cluster]:
    with Cluster.from_env(npu.env) as c:
        yield c


def out(cluster: Cluster, host: str, script: str, **kw: Any) -> str:
    r = cluster[host].run(ShellScript(script), **kw)
    assert r.rc == 0, f"{host}: {script!r} -> {r.rc}: {r.stderr}"
    return r.stdout


def test_env_file_declares_the_emulated_npus(npu: NpuLab) -> None:
    assert npu.lab.plan.npu is not None
    prof = emu.profile(npu.lab.plan.npu.profile)
    assert npu.env.launch.backend == "hccl"
    assert npu.env.cann is not None and npu.env.cann.set_env == prof.set_env
    for h in npu.env.hosts.values():
        assert (h.npu.soc, h.npu.count, h.python, h.venv) == (prof.soc, prof.count, emu.PYTHON, False)


def test_npu_smi_runs_from_path(npu: NpuLab, cluster: Cluster) -> None:
    for h in npu.env.hosts:
        assert out(cluster, h, "command -v npu-smi").strip() == "/usr/local/sbin/npu-smi"
        assert out(cluster, h, "npu-smi info").strip()


def test_every_session_sees_the_npu_json(npu: NpuLab, cluster: Cluster) -> None:
    for h in npu.env.hosts:
        assert out(cluster, h, 'echo "$CAMIT_EMU_NPU"').strip() == emu.NPU_JSON
        assert npu.lab.plan.npu is not None
        assert json.loads(out(cluster, h, f"cat {emu.NPU_JSON}"))["device_count"] == npu.lab.plan.npu.count


def test_per_host_python_imports_the_torch_npu_standin(npu: NpuLab, cluster: Cluster) -> None:
    probe = f'{emu.PYTHON} -c "import torch, torch_npu; print(torch.npu.device_count())"'
    plan_npu = npu.lab.plan.npu
    assert plan_npu is not None
    visible = plan_npu.visible or (0, 1)
    # the second line: as camit's launch exports npu.visible (framework/launch/plan.py)
    script = f"{probe} && ASCEND_RT_VISIBLE_DEVICES={','.join(map(str, visible))} {probe}"
    results = cluster.run(ShellScript(script))  # all hosts at once
    for h in npu.env.hosts:
        r = results[h]
        assert not isinstance(r, BaseException) and r.rc == 0, f"{h}: {r}"
        assert r.stdout.split() == [str(plan_npu.count), str(len(visible))]


def test_hosts_do_not_see_each_others_trees(npu: NpuLab, cluster: Cluster) -> None:
    first, second = list(npu.env.hosts)[:2]
    marker = f"{EMU_DIR}/marker-{uuid.uuid4().hex}"
    out(cluster, first, f"echo {first} > {marker}")
    try:
        assert out(cluster, first, f"cat {marker}").strip() == first
        assert cluster[second].run(ShellScript(f"test -e {marker}")).rc == 1
        assert not Path(marker).exists()  # nor does the controller
        assert (npu.lab.host(first).plan.emu_dir / "Ascend" / ".camit-emu" / Path(marker).name).exists()
    finally:
        out(cluster, first, f"rm -f {marker}")


def test_fault_knob_is_set_on_that_host_only(npu: NpuLab, cluster: Cluster) -> None:
    first, second = list(npu.env.hosts)[:2]
    cp = lab_cli("fault", second, "health-alarm", "--name", npu.lab.name)
    assert cp.returncode == 0, cp.stderr
    try:
        faults = f"cat {EMU_DIR}/faults.json 2>/dev/null || true"
        assert "health-alarm" in out(cluster, second, faults)
        assert "health-alarm" not in out(cluster, first, faults)
        status = lab_cli("status", "--name", npu.lab.name).stdout
        assert re.search(rf"^  {second} .*faults: health-alarm", status, re.M), status
        assert re.search(rf"^  {first} .*faults: none", status, re.M), status
    finally:
        assert lab_cli("fault", second, "clear", "--name", npu.lab.name).returncode == 0
    assert "health-alarm" not in out(cluster, second, faults)


def test_held_device_shows_its_holder_and_clear_kills_it(npu: NpuLab, cluster: Cluster) -> None:
    host = list(npu.env.hosts)[0]
    cp = lab_cli("fault", host, "held-device", "--name", npu.lab.name)
    assert cp.returncode == 0, cp.stderr
    m = re.search(r"holder pid (\d+)", cp.stdout)
    assert m, cp.stdout
    pid = int(m.group(1))
    try:
        assert pid_alive(pid)
        assert pid in Lab.load(npu.lab.name, npu.lab.state_dir).host(host).holders
        assert str(pid) in out(cluster, host, "npu-smi info")
    finally:
        assert lab_cli("fault", host, "clear", "--name", npu.lab.name).returncode == 0
    assert not pid_alive(pid)
    assert Lab.load(npu.lab.name, npu.lab.state_dir).host(host).holders == []
    linger = json.loads(out(cluster, host, f"cat {emu.NPU_JSON}")).get("linger_s", 0)
    deadline = time.monotonic() + float(linger) + 10
    while str(pid) in out(cluster, host, "npu-smi info") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert str(pid) not in out(cluster, host, "npu-smi info")


def camit_check(env_path: Path, *hosts: str) -> dict[str, str]:
    """``camit check --json`` (this worktree's camit): check -> status (the worst over ``hosts``)."""
    argv = [sys.executable, "-m", "framework.cli", "check", "--env", str(env_path), "--json"]
    argv += ["--hosts", ",".join(hosts)] if hosts else []
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO, stdin=subprocess.DEVNULL)
    data = json.loads(cp.stdout)
    order = {"ok": 0, "skip": 1, "warn": 2, "fail": 3}
    out: dict[str, str] = {}
    for r in data["results"]:
        prev = out.get(r["check"])
        if prev is None or order.get(r["status"], 3) > order.get(prev, 3):
            out[r["check"]] = r["status"]
    return out


def test_preflight_passes_every_npu_check(npu: NpuLab) -> None:
    statuses = camit_check(npu.env_path)
    assert {"torch_npu", "cann", "driver", "npu", "idle", "hccn", "tls"} <= set(statuses)
    assert set(statuses.values()) == {"ok"}, statuses


# what camit's preflight reports for each knob (other-spod: no preflight check reads spod-info yet)
KNOB_REPORTS = {
    "tls-mismatch": ("tls", "fail"),
    "health-alarm": ("npu", "fail"),
    "link-down": ("hccn", "warn"),
    "hccn-busy": ("tls", "fail"),
    "held-device": ("idle", "fail"),
    "no-driver": ("driver", "fail"),
}


@pytest.mark.parametrize("knob", sorted(KNOB_REPORTS))
def test_preflight_reports_the_knob(npu: NpuLab, knob: str) -> None:
    host = list(npu.env.hosts)[-1]
    cp = lab_cli("fault", host, knob, "--name", npu.lab.name)
    assert cp.returncode == 0, cp.stderr
    try:
        check, status = KNOB_REPORTS[knob]
        got = camit_check(npu.env_path, host)
        assert got[check] == status, got
    finally:
        assert lab_cli("fault", host, "clear", "--name", npu.lab.name).returncode == 0


def test_preflight_passes_again_after_clear(npu: NpuLab) -> None:
    statuses = camit_check(npu.env_path)
    assert set(statuses.values()) == {"ok"}, statuses


def test_down_leaves_no_mount_point_and_no_process(npu: NpuLab) -> None:
    """Last: takes the module's own lab down (a shared lab is left alone)."""
    if not npu.own:
        pytest.skip(f"lab {npu.lab.name!r} was not brought up by this module; not taking it down")
    lab = Lab.load(npu.lab.name, npu.lab.state_dir)
    cp = lab_cli("fault", "host1", "held-device", "--name", lab.name)  # down must kill it too
    assert cp.returncode == 0, cp.stderr
    lab = Lab.load(lab.name, lab.state_dir)
    holder = lab.host("host1").holders[-1]
    pids = [p for h in lab.hosts for p in lab.host_pids(h.name)]
    assert holder in pids
    others_up = any(json.loads(f.read_text()).get("npu") for f in Path("/run/camit-lab").glob("*/lab.json")
                    if f.parent != lab.state_dir)
    cp = lab_cli("down", "--name", lab.name)
    assert cp.returncode == 0, cp.stderr
    assert not [p for p in pids if pid_alive(p)]
    assert not lab.state_dir.exists() and not npu.env_path.exists()
    if not others_up:
        left = [p for p, _ in lab.mount_points if os.path.lexists(p)]
        assert not left, f"down left mount points it created: {left}"
