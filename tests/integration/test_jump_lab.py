"""Hosts only a jump host reaches (``python -m framework.lab up --jump SUBNET``): direct fails, through the jump works.

Needs a jump lab named by CAMIT_JUMP_LAB_ENV (its env file) and CAMIT_JUMP_LAB_NAME (its name); skipped without:
``python -m framework.lab up --hosts 2 --name camitj --subnet 10.76.0.0/24 --jump 10.176.0.0/24
--env-out env/lab-jump.yaml``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from framework.commands import ShellScript
from framework.config.effective import EnvConfig, load
from framework.errors import AuthenticationFailed, HostKeyError, HostUnreachable
from framework.hosts import Cluster, Host
from framework.result import Result
from framework.transport import ssh
from tests.support.camit_labtools import lab_env_or_skip

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / "tests" / "data" / "targets" / "alltoall.py"


@pytest.fixture(scope="module")
def jump_env_path() -> Path:
    return lab_env_or_skip("CAMIT_JUMP_LAB_ENV", "jump lab",
                           "python -m framework.lab up --hosts 2 --name camitj --subnet 10.76.0.0/24 "
                           "--jump 10.176.0.0/24 --env-out env/lab-jump.yaml")


@pytest.fixture(scope="module")
def jump_lab(jump_env_path: Path) -> Any:
    from framework.lab.manage import Lab

    lab = Lab.load(name=os.environ.get("CAMIT_JUMP_LAB_NAME", "camitj"))
    assert lab.jump is not None and lab.plan.jump is not None, "CAMIT_JUMP_LAB_NAME names a lab without --jump"
    return lab


@pytest.fixture(scope="module")
def jump_env(jump_env_path: Path) -> EnvConfig:
    return load(jump_env_path)


def camit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def variant(jump_env_path: Path, tmp_path: Path, change: Any, name: str = "variant.yaml") -> Path:
    doc = yaml.safe_load(jump_env_path.read_text())
    change(doc)
    out = tmp_path / name
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def rows(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {r["host"]: r for r in json.loads(proc.stdout)}


def test_direct_connection_fails_and_the_jump_reaches_both_hosts(jump_env_path: Path, tmp_path: Path) -> None:
    direct = variant(jump_env_path, tmp_path, lambda d: d["defaults"].pop("jump_host"))
    proc = camit("exec", "--env", str(direct), "--json", "--", "hostname")
    assert proc.returncode != 0
    for host, row in rows(proc).items():
        assert "No route to host" in row["error"], (host, row)
    proc = camit("exec", "--env", str(jump_env_path), "--json", "--", "hostname")
    assert proc.returncode == 0, proc.stderr
    assert {h: r["stdout"].strip() for h, r in rows(proc).items()} == {"host1": "host1", "host2": "host2"}


def _jump_sessions(lab: Any) -> list[int]:
    """sshd session processes on the jump host (children of its listener): our connections to it."""
    listener = lab.jump.sshd_pid
    out = subprocess.run(["ip", "netns", "pids", lab.jump.ns], capture_output=True, text=True).stdout.split()
    pids = []
    for pid in map(int, out):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm == "sshd" and int(stat.rsplit(")", 1)[1].split()[1]) == listener:
            pids.append(pid)
    return pids


def test_hosts_share_one_jump_connection_under_parallel_fan_out_and_close_closes_it(jump_lab: Any,
                                                                                    jump_env: EnvConfig) -> None:
    before = len(_jump_sessions(jump_lab))
    cluster = Cluster.from_env(jump_env)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                group = cluster.run(ShellScript("hostname"), timeout=30)
                names = [group[h] for h in group]
                assert sorted(r.stdout.strip() for r in names if isinstance(r, Result)) == ["host1", "host2"], names
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        shared = [e for e in ssh._jumps.values() if e.transport.address == jump_lab.jump.ip]
        assert len(shared) == 1 and shared[0].users == 2
        jump_transport = shared[0].transport
        assert len(_jump_sessions(jump_lab)) == before + 1  # one SSH connection to the jump for both hosts
    finally:
        cluster.close()
    assert not [e for e in ssh._jumps.values() if e.transport.address == jump_lab.jump.ip]
    assert jump_transport._client is None  # the last host closed it


def _known_hosts_with(jump_lab: Any, tmp_path: Path, jump_line: str | None) -> Path:
    """The lab's known_hosts with the jump's line replaced (None: left out)."""
    lines = [line for line in jump_lab.known_hosts.read_text().splitlines()
             if not line.startswith(jump_lab.jump.ip + " ")]
    if jump_line is not None:
        lines.append(jump_line)
    out = tmp_path / "known_hosts"
    out.write_text("\n".join(lines) + "\n")
    return out


def test_a_changed_jump_host_key_is_refused_naming_the_jump(jump_lab: Any, jump_env_path: Path,
                                                             tmp_path: Path) -> None:
    other = jump_lab.hosts[0].plan.host_key_pub.read_text().split()  # a real key, but not the jump's
    kh = _known_hosts_with(jump_lab, tmp_path, f"{jump_lab.jump.ip} {other[0]} {other[1]}")
    env = variant(jump_env_path, tmp_path, lambda d: d["defaults"].update(known_hosts=str(kh)))
    proc = camit("exec", "--env", str(env), "--json", "--", "true")
    assert proc.returncode != 0
    jump = f"jump host root@{jump_lab.jump.ip}:22 (defaults.jump_host)"
    for row in rows(proc).values():
        assert f"{jump}: HOST KEY CHANGED for {jump_lab.jump.ip}" in row["error"], row
    # in-process: the error type, for both hosts
    for spec in load(env).hosts.values():
        with pytest.raises(HostKeyError, match="HOST KEY CHANGED"):
            Host.from_spec(spec).run(ShellScript("true"), timeout=10)


def test_an_unknown_jump_key_is_refused_when_strict_and_recorded_with_accept_new(
        jump_lab: Any, jump_env_path: Path, tmp_path: Path) -> None:
    kh = _known_hosts_with(jump_lab, tmp_path, None)
    strict = variant(jump_env_path, tmp_path, lambda d: d["defaults"].update(known_hosts=str(kh)), "strict.yaml")
    spec = load(strict).hosts["host1"]
    host = Host.from_spec(spec)
    with pytest.raises(HostKeyError, match=rf"jump host root@{jump_lab.jump.ip}:22 .*unknown host key"):
        host.run(ShellScript("true"), timeout=10)
    host.close()
    new = variant(jump_env_path, tmp_path, lambda d: d["defaults"].update(known_hosts=str(kh),
                                                                          host_key_policy="accept-new"), "new.yaml")
    host = Host.from_spec(load(new).hosts["host1"])
    try:
        assert host.run(ShellScript("hostname"), timeout=10).stdout.strip() == "host1"
    finally:
        host.close()
    jump_key = jump_lab.jump.plan.host_key_pub.read_text().split()[1]
    assert f"{jump_lab.jump.ip} ssh-ed25519 {jump_key}" in kh.read_text()


def test_the_target_host_key_is_still_checked_through_the_jump(jump_env_path: Path, jump_lab: Any,
                                                               tmp_path: Path) -> None:
    wrong = jump_lab.hosts[1].plan.host_key_pub.read_text().split()
    env = variant(jump_env_path, tmp_path,
                  lambda d: d["host_info"]["host1"].update(host_key=f"{wrong[0]} {wrong[1]}"))
    host = Host.from_spec(load(env).hosts["host1"])
    with pytest.raises(HostKeyError, match=rf"HOST KEY CHANGED for {jump_lab.hosts[0].ip} via jump host"):
        host.run(ShellScript("true"), timeout=10)
    host.close()


def _ssh_config_env(jump_lab: Any, tmp_path: Path, node1_extra: str = "") -> Path:
    key = jump_lab.key_file
    (tmp_path / "ssh_config").write_text(
        "Host node1\n"
        f"  HostName {jump_lab.hosts[0].ip}\n"
        f"{node1_extra}"
        "  User root\n"
        "  Port 22\n"
        f"  IdentityFile {key}\n"
        "  ProxyJump bastion\n"
        "Host node2\n"
        f"  HostName {jump_lab.hosts[1].ip}\n"
        f"  IdentityFile {key}\n"
        "  ProxyJump bastion\n"
        "Host bastion\n"
        f"  HostName {jump_lab.jump.ip}\n"
        "  User root\n"
        f"  IdentityFile {key}\n")
    doc = {
        "defaults": {"ssh_config": "ssh_config", "known_hosts": str(jump_lab.known_hosts), "connect_timeout": 5},
        "host_info": {h.name: {"manage_nic": {"name": "eth0", "ip": h.ip}, "ssh_ip": f"node{h.plan.index}"}
                      for h in jump_lab.hosts},
    }
    out = tmp_path / "test_env.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def test_ssh_config_hostname_user_port_identityfile_and_proxyjump_are_used(jump_lab: Any, tmp_path: Path) -> None:
    env_path = _ssh_config_env(jump_lab, tmp_path)
    env = load(env_path, environ={"HOME": str(tmp_path / "home")})  # no ~/.ssh: the key comes from IdentityFile
    h1 = env.hosts["host1"]
    assert (h1.ssh_ip, h1.user, h1.key_file) == (jump_lab.hosts[0].ip, "root", jump_lab.key_file)
    assert h1.jump is not None and h1.jump.display == f"root@{jump_lab.jump.ip}:22"
    proc = camit("exec", "--env", str(env_path), "--json", "--", "hostname")
    assert proc.returncode == 0, proc.stderr
    assert {h: r["stdout"].strip() for h, r in rows(proc).items()} == {"host1": "host1", "host2": "host2"}
    # each key is really the one used: a wrong Port, User or IdentityFile fails, naming it
    port = _ssh_config_env(jump_lab, tmp_path, "  Port 2222\n")
    with pytest.raises(HostUnreachable, match=rf"{jump_lab.hosts[0].ip}:2222 via jump host .*Connect failed"):
        Host.from_spec(load(port).hosts["host1"]).run(ShellScript("true"), timeout=10)
    user = _ssh_config_env(jump_lab, tmp_path, "  User nobody\n")
    with pytest.raises(AuthenticationFailed, match="as 'nobody'"):
        Host.from_spec(load(user).hosts["host1"]).run(ShellScript("true"), timeout=10)
    stray = tmp_path / "stray_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stray)], check=True)
    ident = _ssh_config_env(jump_lab, tmp_path, f"  IdentityFile {stray}\n")
    with pytest.raises(AuthenticationFailed, match=f"key {stray}"):
        Host.from_spec(load(ident).hosts["host1"]).run(ShellScript("true"), timeout=10)


def test_check_and_a_launch_through_the_jump(jump_env_path: Path, jump_env: EnvConfig, tmp_path: Path) -> None:
    proc = camit("check", "--env", str(jump_env_path), "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 0, data
    ssh_cells = {r["host"]: r for r in data["results"] if r["check"] == "ssh"}
    assert set(ssh_cells) == {"host1", "host2"} and all(c["status"] == "ok" for c in ssh_cells.values())
    # torchrun's rendezvous is between the hosts (the private network); the controller only talks SSH
    from framework.launch import Launcher, Target
    from framework.records.folder import RunDir

    cluster = Cluster.from_env(jump_env)
    try:
        result = Launcher(jump_env, cluster, rundir=RunDir.create(tmp_path / "reports"), nproc_per_node=1).run(
            Target(script=str(TARGET)), timeout=120)
    finally:
        cluster.close()
    assert result.ok, result
