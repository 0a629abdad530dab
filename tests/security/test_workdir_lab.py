"""Issue 17, items 1 and 9 (relay) on the lab: a host's workdir is trusted only when it is safe, nothing camit
runs from it is reused because it exists, and the relay writes and listens as if other users were there.

Every planted thing (a symlink, a foreign-owned directory, a tampered program) is made from the controller in
the host's private /var/tmp/camit (the lab bind-mounts it); a tampered program would write a marker file when
run, and the marker must never appear.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework import remote
from framework.commands import ShellScript
from framework.config.effective import load
from framework.deploy import Deployer
from framework.deploy.plan import Artifact, HostPlan, install_run_script
from framework.deploy.relay import relay_command
from framework.errors import EXIT_INFRA, FrameworkError
from framework.hosts import Cluster
from framework.lab import artifacts
from framework.lab.manage import Lab
from framework.launch import Launcher, Target
from framework.records.folder import RunDir
from framework.remote import protocol
from framework.remote.layout import HostLayout
from tests.support.camit_labtools import REPO

pytestmark = pytest.mark.lab
TARGET = REPO / "tests" / "data" / "targets" / "alltoall.py"


@pytest.fixture
def name() -> str:
    return f"sec-{secrets.token_hex(4)}"


@pytest.fixture
def shared():
    """A directory the controller and every lab host see alike (the hosts' /tmp is private to each)."""
    path = Path("/var/tmp") / f"camit-sec-{secrets.token_hex(4)}"
    path.mkdir(mode=0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def marker(shared: Path) -> Path:
    """A path a tampered program would create (visible from the controller)."""
    path = shared / "RAN-TAMPERED"
    assert not path.exists()
    return path


def variant(env_variant, workdir: str, **artifacts_: Path):
    def change(doc):
        doc["defaults"]["workdir"] = workdir
        if artifacts_:
            doc["artifacts"] = {k: str(v) for k, v in artifacts_.items()}
    return env_variant(change, f"{secrets.token_hex(3)}.yaml")


def host_dir(lab: Lab, host: str, name: str) -> Path:
    """``/var/tmp/camit/<name>`` of ``host``, seen from the controller."""
    return lab.host(host).work_dir / name


def camit(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def tampered_python(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('ran')\n"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return artifacts.build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def run_package(tmp_path_factory) -> Path:
    return artifacts.build_run_package(tmp_path_factory.mktemp("run"))


# -- item 1: the workdir ---------------------------------------------------------------------------------------

def test_a_symlinked_workdir_is_refused_naming_host_and_path_and_nothing_goes_through_it(
        lab, env_variant, name, wheel, tmp_path, shared):
    victim = shared / "victim"
    victim.mkdir()
    link = host_dir(lab, "host1", name)
    link.symlink_to(victim)
    workdir = f"/var/tmp/camit/{name}"
    try:
        env = variant(env_variant, workdir, wheel=wheel)
        proc = camit("deploy", "--env", str(env), "--hosts", "host1", "--report-dir", str(tmp_path / "r"))
        assert proc.returncode != 0
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out
        assert "host1" in out and workdir in out and "symlink" in out, out
        # a launch is refused the same way, before anything is shipped
        with Cluster.from_env(load(env), ["host1"]) as cluster:
            with pytest.raises(FrameworkError) as err:
                Launcher(load(env), cluster).run(Target(script=str(TARGET)), timeout=60)
        assert "host1" in str(err.value) and workdir in str(err.value) and "symlink" in str(err.value)
        assert list(victim.iterdir()) == []
    finally:
        link.unlink()


@pytest.mark.parametrize("how", ["foreign", "world-writable"])
def test_a_foreign_or_writable_workdir_is_refused_and_nothing_is_written_in_it(
        lab, env_variant, name, wheel, tmp_path, how):
    planted = host_dir(lab, "host1", name)
    planted.mkdir()
    try:
        if how == "foreign":
            os.chown(planted, 65534, 65534)  # nobody: another user made it first
        os.chmod(planted, 0o777)
        workdir = f"/var/tmp/camit/{name}"
        env = variant(env_variant, workdir, wheel=wheel)
        proc = camit("deploy", "--env", str(env), "--hosts", "host1", "--report-dir", str(tmp_path / "r"))
        assert proc.returncode != 0
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out
        why = "owned by uid 65534" if how == "foreign" else "writable by group/others"
        assert "host1" in out and workdir in out and why in out, out
        with Cluster.from_env(load(env), ["host1"]) as cluster:
            with pytest.raises(FrameworkError) as err:
                Launcher(load(env), cluster).run(Target(script=str(TARGET)), timeout=60)
        assert "host1" in str(err.value) and workdir in str(err.value)
        # `camit collect --logs` puts its archive in the workdir, and the hosts' lease (taken first, as by
        # every verb that changes hosts) lives there: refused the same way, before anything else is done
        proc = camit("collect", "--env", str(env), "--hosts", "host1", "--logs", "--json",
                     "--report-dir", str(tmp_path / "c"))
        assert proc.returncode == EXIT_INFRA and "Traceback" not in proc.stderr, proc.stderr
        assert f"host1: lease file {workdir}/camit-lease.json: refusing the workdir: {workdir}" in proc.stderr
        assert why in proc.stderr, proc.stderr
        assert list(planted.iterdir()) == []
        assert (planted.stat().st_mode & 0o777) == 0o777  # left as it was, not "fixed" by camit
    finally:
        for p in sorted(planted.rglob("*"), reverse=True):
            p.unlink() if not p.is_dir() else p.rmdir()
        planted.rmdir()


def test_a_foreign_parent_of_the_workdir_is_refused(lab, env_variant, name, wheel, tmp_path):
    parent = host_dir(lab, "host1", name)
    parent.mkdir()
    os.chown(parent, 65534, 65534)
    try:
        workdir = f"/var/tmp/camit/{name}/work"
        env = variant(env_variant, workdir, wheel=wheel)
        proc = camit("deploy", "--env", str(env), "--hosts", "host1", "--report-dir", str(tmp_path / "r"))
        assert proc.returncode != 0
        out = proc.stdout + proc.stderr
        assert "host1" in out and f"/var/tmp/camit/{name}" in out and "owned by uid 65534" in out, out
        assert list(parent.iterdir()) == []  # not even the workdir was made inside it
    finally:
        parent.rmdir()


def test_a_fresh_workdir_and_run_folder_are_private(lab, lab_env_path, env_variant, name, tmp_path):
    env = load(variant(env_variant, f"/var/tmp/camit/{name}/deep/work"))
    with Cluster.from_env(env, ["host1", "host2"]) as cluster:
        result = Launcher(env, cluster, rundir=RunDir.create(tmp_path / "r"), nproc_per_node=1,
                          keep_remote=True).run(Target(script=str(TARGET)), timeout=120)
    assert result.ok, result
    root = host_dir(lab, "host1", name)
    for d in (root, root / "deep", root / "deep" / "work", root / "deep" / "work" / "runs"):
        assert d.stat().st_mode & 0o777 == 0o700, d
    runs = list((root / "deep" / "work" / "runs").iterdir())
    assert runs and all(r.stat().st_mode & 0o777 == 0o700 for r in runs)


# -- item 1: nothing reused because it exists ----------------------------------------------------------------

def test_tampered_supervisor_rank_wrapper_and_target_are_replaced_not_run(lab, env_variant, name, marker, tmp_path):
    env = load(variant(env_variant, f"/var/tmp/camit/{name}"))
    layout = HostLayout(f"/var/tmp/camit/{name}")
    target_sha = hashlib.sha256(TARGET.read_bytes()).hexdigest()
    planted = []
    for host in ("host1", "host2"):
        for prog in ("supervisor.py", "rankwrap.py"):
            bin_path = layout.bin(prog, remote.script(prog)[1])
            planted.append(Path(str(lab.host(host).work_dir) + bin_path[len("/var/tmp/camit"):]))
        target_path = layout.target(target_sha, TARGET.name)
        planted.append(Path(str(lab.host(host).work_dir) + target_path[len("/var/tmp/camit"):]))
    for p in planted:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(tampered_python(marker))
    with Cluster.from_env(env, ["host1", "host2"]) as cluster:
        result = Launcher(env, cluster, rundir=RunDir.create(tmp_path / "r"), nproc_per_node=1).run(
            Target(script=str(TARGET)), timeout=120)
    assert result.ok, result
    assert not marker.exists()
    for p in planted:
        assert p.read_bytes() != tampered_python(marker).encode(), p


def test_a_program_changed_after_it_was_shipped_is_not_run_by_the_node_command(lab, env_variant, name, marker,
                                                                               tmp_path, monkeypatch):
    """The node's command checks the hashes itself, right before it starts (not only the prepare probe)."""
    from framework.launch import plan as launch_plan

    env = load(variant(env_variant, f"/var/tmp/camit/{name}"))
    real = launch_plan.plan_nodes

    def tamper_then_plan(*a, **kw):
        plans = real(*a, **kw)
        for p in plans.values():
            local = Path(str(lab.host(p.host).work_dir) + p.supervisor[len("/var/tmp/camit"):])
            local.write_text(tampered_python(marker))
        return plans

    monkeypatch.setattr("framework.launch.runner.plan_nodes", tamper_then_plan)
    with Cluster.from_env(env, ["host1"]) as cluster:
        launcher = Launcher(env, cluster, rundir=RunDir.create(tmp_path / "r"), nproc_per_node=1)
        result = launcher.run(Target(script=str(TARGET)), timeout=60)
    assert not result.ok
    assert not marker.exists()


def test_a_tampered_staged_run_package_is_restaged_and_never_run(lab, env_variant, name, marker, run_package,
                                                                 tmp_path):
    sha = hashlib.sha256(run_package.read_bytes()).hexdigest()
    stage = host_dir(lab, "host1", name) / "artifacts" / sha
    stage.mkdir(parents=True)
    evil = f"#!/bin/sh\ntouch {marker}\necho SUCCESS\n"
    (stage / run_package.name).write_text(evil)
    (stage / ".ok").write_text("ok\n")
    env = load(variant(env_variant, f"/var/tmp/camit/{name}", run_package=run_package))
    with Cluster.from_env(env, ["host1"]) as cluster:
        result = Deployer(env, cluster, relay=False).run()
        assert not result.errors, result.errors
        assert result.manifests["host1"].artifacts[0].via == "direct"  # re-sent, not "cached"
        assert not marker.exists()
        # changed again between probe and install: the install step refuses it, naming host and file
        (stage / run_package.name).write_text(evil)
        plan = HostPlan.for_spec(env.hosts["host1"], env)
        art = Artifact("run_package", run_package, sha, run_package.stat().st_size)
        res = cluster["host1"].run(install_run_script(plan, art), timeout=60)
    assert res.rc == 3 and plan.remote_path(art) in res.stderr and "not run" in res.stderr
    assert not marker.exists()


def test_a_tampered_relay_program_is_reshipped_and_never_run(lab, env_variant, name, marker, wheel, tmp_path):
    hosts = ["host1", "host2", "host3"]
    layout = HostLayout(f"/var/tmp/camit/{name}")
    relay_bin = layout.bin("relay.py", remote.script("relay.py")[1])
    for h in hosts:
        p = host_dir(lab, h, name) / relay_bin[len(layout.workdir) + 1:]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(tampered_python(marker))
    env = load(variant(env_variant, layout.workdir, wheel=wheel))
    with Cluster.from_env(env, hosts) as cluster:
        result = Deployer(env, cluster, relay=True).run()
        assert not result.errors, result.errors
        assert {result.manifests[h].artifacts[0].via for h in hosts} == {"relay"}
        assert not marker.exists()
        # and a relay program changed after the probe is refused by the command that runs it
        p = host_dir(lab, "host2", name) / relay_bin[len(layout.workdir) + 1:]
        p.write_text(tampered_python(marker))
        plan = HostPlan.for_spec(env.hosts["host2"], env)
        art = Artifact("wheel", wheel, hashlib.sha256(wheel.read_bytes()).hexdigest(), wheel.stat().st_size)
        res = cluster["host2"].run(relay_command(plan, relay_bin, art, 30, False), timeout=60)
    assert res.rc == 3 and f"{protocol.ERR} the relay program {relay_bin}" in res.stdout
    assert not marker.exists()


# -- item 9: the relay -------------------------------------------------------------------------------------------

def test_a_symlink_at_the_relays_part_path_does_not_overwrite_its_target(lab, env_variant, name, wheel, tmp_path,
                                                                          shared):
    hosts = ["host1", "host2"]
    victim = shared / "victim.txt"
    victim.write_text("precious\n")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    for h in hosts:
        stage = host_dir(lab, h, name) / "artifacts" / sha
        stage.mkdir(parents=True)
        (stage / f"{wheel.name}.part").symlink_to(victim)
    env = load(variant(env_variant, f"/var/tmp/camit/{name}", wheel=wheel))
    with Cluster.from_env(env, hosts) as cluster:
        result = Deployer(env, cluster, relay=True).run()
    assert not result.errors, result.errors
    assert {result.manifests[h].artifacts[0].via for h in hosts} == {"relay"}  # not a fallback to direct push
    assert victim.read_bytes() == b"precious\n"  # not overwritten through the planted link
    for h in hosts:
        staged = host_dir(lab, h, name) / "artifacts" / sha / wheel.name
        assert not staged.is_symlink() and hashlib.sha256(staged.read_bytes()).hexdigest() == sha


def test_a_stray_connection_to_the_relay_listener_neither_breaks_the_hop_nor_gets_data(
        lab, env_variant, name, wheel, tmp_path):
    env = load(variant(env_variant, f"/var/tmp/camit/{name}", wheel=wheel))
    data = os.urandom(2 * 1024 * 1024 + 3)
    art_path = tmp_path / "blob.whl"
    art_path.write_bytes(data)
    art = Artifact("wheel", art_path, hashlib.sha256(data).hexdigest(), len(data))
    script, relay_sha = remote.script("relay.py")
    with Cluster.from_env(env, ["host1", "host2"]) as cluster:
        plans = {h: HostPlan.for_spec(env.hosts[h], env) for h in ("host1", "host2")}
        relay_bin = plans["host1"].bin_path("relay.py", relay_sha)
        for h in plans:
            cluster[h].check(ShellScript(HostLayout(plans[h].workdir).guard_script()), timeout=30)
            cluster[h].put(script, relay_bin)
        listener = cluster["host2"].spawn(relay_command(plans["host2"], relay_bin, art, 60, True))
        head = None
        try:
            port = protocol.parse_port(listener.readline(timeout=20) or "")
            assert port is not None
            ip = plans["host2"].manage_ip
            token = secrets.token_hex(16)
            listener.write(protocol.next_line() + protocol.token_line(token))
            listener.close_stdin()
            # before the real upstream connects, a local user gets there first
            silent = socket.create_connection((ip, port), timeout=5)  # connects, says nothing
            stray = socket.create_connection((ip, port), timeout=5)
            stray.sendall(b"not-the-token\n" + b"junk" * 1000)
            try:
                got = stray.recv(4096)
            except ConnectionResetError:
                got = b""
            assert got == b""  # dropped, nothing sent to it
            stray.close()
            head = cluster["host1"].spawn(relay_command(plans["host1"], relay_bin, art, 60, False))
            head.write(protocol.next_line(ip, port, token))
            head.write(data)
            head.close_stdin()
            t0 = time.monotonic()
            res_head, res_listener = head.wait(60), listener.wait(60)
            assert time.monotonic() - t0 < 60
            silent.close()
        finally:
            for p in (listener, head):
                if p is not None:
                    p.kill()
                    p.close()
    assert res_head is not None and f"{protocol.OK} {art.sha256}" in res_head.stdout, res_head
    assert res_listener is not None and f"{protocol.OK} {art.sha256}" in res_listener.stdout, res_listener
    staged = host_dir(lab, "host2", name) / plans["host2"].remote_path(art)[len(plans["host2"].workdir) + 1:]
    assert staged.read_bytes() == data


def test_an_upload_never_writes_through_a_planted_symlink_or_into_an_existing_file(lab, lab_env, name, shared,
                                                                                  tmp_path):
    """The SFTP upload creates its file new (O_EXCL) and private: a symlink or a file already at the path is
    refused by the server, and the file it targets keeps its bytes."""
    from framework.errors import TransferError

    folder = host_dir(lab, "host1", name)
    folder.mkdir(mode=0o700)
    victim = shared / "victim"
    victim.write_text("keep me\n")
    (folder / "link").symlink_to(victim)
    (folder / "there").write_text("mine\n")
    local = tmp_path / "payload"
    local.write_bytes(b"payload\n" * 1000)
    remote = f"/var/tmp/camit/{name}"
    try:
        with Cluster.from_env(lab_env, ["host1"]) as cluster:
            transport = cluster["host1"].transport
            for target in ("link", "there"):
                with pytest.raises(TransferError) as err:
                    transport.put(local, f"{remote}/{target}")
                assert "host1" in str(err.value), err.value
            transport.put(local, f"{remote}/fresh")
        assert victim.read_text() == "keep me\n" and (folder / "there").read_text() == "mine\n"
        assert (folder / "fresh").read_bytes() == local.read_bytes()
        assert (folder / "fresh").stat().st_mode & 0o777 == 0o600
    finally:
        shutil.rmtree(folder, ignore_errors=True)
