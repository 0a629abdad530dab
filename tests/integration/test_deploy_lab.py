"""Deploy to the lab's hosts: real makeself .run, real wheel, relay and direct, and every fault the issue names."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from framework.config.effective import load
from framework.deploy import Deployer
from framework.deploy.result import DeployResult
from framework.errors import ConfigError, DeployError
from framework.hosts import Cluster
from framework.lab import artifacts
from framework.records.folder import RunDir


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("artifacts")
    return artifacts.build_all(out)


def env_for(env_variant, run_package, wheel, name="deploy.yaml", workdir=None, **extra):
    def change(doc):
        doc["artifacts"] = {k: str(v) for k, v in (("run_package", run_package), ("wheel", wheel)) if v}
        if workdir:
            doc["defaults"]["workdir"] = workdir
        doc.update(extra)
    return load(env_variant(change, name))


def deploy(env, hosts=None, relay=None, tmp=None):
    cluster = Cluster.from_env(env, hosts)
    rundir = RunDir.create(tmp) if tmp else None
    with cluster:
        return Deployer(env, cluster, relay=relay, rundir=rundir).run(), rundir


#: workdirs of this test run only, so a lab reused across runs starts every deploy from nothing
RUN_TAG = secrets.token_hex(3)


def fresh_workdir(lab_env, name: str) -> str:
    return f"/var/tmp/camit/{name}-{RUN_TAG}"


def test_deploy_then_redeploy_unchanged(env_variant, lab_env, built, tmp_path):
    env = env_for(env_variant, built["run"], built["wheel"], workdir=fresh_workdir(lab_env, "d1"))
    result, rundir = deploy(env, tmp=tmp_path / "r1")
    assert result.ok, result.errors
    assert result.relay_used
    for m in result.manifests.values():
        assert m.status == "deployed" and m.installed_version == "209.0.0b1" and m.vendor == "CAM"
        assert {a.via for a in m.artifacts} == {"relay"}
        assert set(m.ops) == {"get_dispatch_layout", "moe_dispatch_prefill", "moe_combine_prefill", "fused_deep_moe"}
    manifest = json.loads((rundir.path / "deploy-manifest.json").read_text())
    assert set(manifest["hosts"]) == set(lab_env.hosts)
    again, _ = deploy(env)
    assert again.ok and not again.relay_used
    for m in again.manifests.values():
        assert m.status == "unchanged" and {a.via for a in m.artifacts} == {"cached"}
        assert set(m.durations) == {"probe"}  # nothing sent, nothing installed


def test_first_deploy_venv_has_no_pip_and_metadata_is_right_on_every_host(env_variant, lab_env, built, tmp_path):
    """Issue 18: the venv is made --without-pip (no ensurepip) and the host python's pip installs into it;
    pip show and importlib.metadata inside the venv see the deployed version and its files; each install step
    reports its CPU on the host."""
    env = env_for(env_variant, None, built["wheel"], workdir=fresh_workdir(lab_env, "d0"))
    result, _ = deploy(env)
    assert result.ok, result.errors
    code = ("import glob, json, sys, importlib.metadata as md; d = md.distribution('umdk_cam_op_lib'); "
            "print(json.dumps([d.version, str(d.locate_file('')), sorted(str(f) for f in d.files), "
            "glob.glob(sys.prefix + '/lib/python*/site-packages/pip')]))")
    with Cluster.from_env(env) as cluster:
        for host in cluster:
            plan = Deployer(env, cluster).plans[host.name]
            m = result.manifests[host.name]
            assert {"venv", "install-wheel", "verify"} <= set(m.cpu_seconds), m.cpu_seconds
            assert m.cpu_seconds["verify"] > 0
            out = host.check([plan.interpreter, "-c", code], timeout=120).stdout
            version, location, files, own_pip = json.loads(out.strip().splitlines()[-1])
            assert version == "209.0.0b1" and location.startswith(plan.venv_dir + "/lib/"), (host.name, location)
            assert own_pip == [], f"{host.name}: ensurepip ran, the venv has its own pip"
            assert "umdk_cam_op_lib/__init__.py" in files
            show = host.check([plan.python, "-m", "pip", "--python", plan.interpreter, "show", "umdk_cam_op_lib"],
                              timeout=120).stdout
            assert "Version: 209.0.0b1" in show and f"Location: {location}" in show, show


#: run on a host by the venv's python: every RECORD row of the op library hashes right, and no file of the package
#: or its dist-info is missing from RECORD
_RECORD_CHECK = """
import base64, csv, hashlib, json, os, importlib.metadata as md
d = md.distribution('umdk_cam_op_lib')
base = str(d.locate_file(''))
bad, listed = [], set()
record = next(str(f) for f in d.files if f.name == 'RECORD' and f.parent.name.endswith('.dist-info'))
with open(os.path.join(base, record), newline='') as f:
    for path, digest, size in (r for r in csv.reader(f) if r):
        full = os.path.normpath(os.path.join(base, path))
        listed.add(full)
        if digest:
            data = open(full, 'rb').read()
            got = 'sha256=' + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
            if got != digest or int(size) != len(data):
                bad.append(path)
ours = [os.path.join(root, n) for top in ('umdk_cam_op_lib', os.path.dirname(record))
        for root, _, names in os.walk(os.path.join(base, top)) for n in names]
print(json.dumps([d.read_text('INSTALLER'), bad, sorted(set(ours) - listed), len(listed)]))
"""


def test_first_deploy_wheel_is_installed_as_pip_would_and_pip_uninstalls_it(env_variant, lab_env, built, tmp_path):
    """Issue 18 item 1: the wheel goes into camit's venv with the shipped installer, not pip; on every deployed host
    the venv's own ``python -m pip show`` sees the right name, version and location, and the installed files are
    exactly what RECORD lists, each with its hash; ``pip uninstall -y`` removes it."""
    env = env_for(env_variant, None, built["wheel"], workdir=fresh_workdir(lab_env, "d3"))
    result, _ = deploy(env)
    assert result.ok, result.errors
    with Cluster.from_env(env) as cluster:
        plans = Deployer(env, cluster).plans
        for host in cluster:
            plan = plans[host.name]
            assert "ship-installer" in result.manifests[host.name].durations  # a fresh workdir: shipped
            show = host.check([plan.interpreter, "-m", "pip", "show", "-f", "umdk_cam_op_lib"], timeout=120).stdout
            site = f"{plan.venv_dir}/lib/"
            assert "Name: umdk_cam_op_lib\n" in show and "Version: 209.0.0b1\n" in show, show
            assert f"Location: {site}" in show and "/site-packages\n" in show, show
            out = host.check([plan.interpreter, "-c", _RECORD_CHECK], timeout=120).stdout
            installer, bad, unlisted, n = json.loads(out.strip().splitlines()[-1])
            assert installer == "camit\n" and bad == [] and unlisted == [] and n > 10, (host.name, out)
        host = next(iter(cluster))
        plan = plans[host.name]
        host.check([plan.interpreter, "-m", "pip", "uninstall", "-y", "umdk_cam_op_lib"], timeout=120)
        left = host.run([plan.interpreter, "-c", "import umdk_cam_op_lib"], timeout=120)
        assert left.rc != 0 and "ModuleNotFoundError" in left.stderr


def test_no_relay_pushes_directly_and_a_changed_wheel_reinstalls(env_variant, lab_env, built, tmp_path):
    env = env_for(env_variant, built["run"], built["wheel"], workdir=fresh_workdir(lab_env, "d2"),
                  relay=False)
    result, _ = deploy(env)
    assert result.ok and not result.relay_used
    assert {a.via for m in result.manifests.values() for a in m.artifacts} == {"direct"}
    # a different wheel: only it travels, the host is reinstalled
    other = artifacts.build_wheel(tmp_path / "w2", broken_import=False)
    padded = pad_wheel(other, tmp_path / "w3", 1024)
    env2 = env_for(env_variant, built["run"], padded, "deploy2.yaml", workdir=fresh_workdir(lab_env, "d2"),
                   relay=False)
    result2, _ = deploy(env2)
    assert result2.ok, result2.errors
    for m in result2.manifests.values():
        vias = {a.kind: a.via for a in m.artifacts}
        assert vias == {"run_package": "cached", "wheel": "direct"} and m.status == "deployed"


def test_missing_and_ambiguous_artifacts_fail_before_anything_starts(env_variant, lab_env, built, tmp_path):
    env = env_for(env_variant, None, tmp_path / "nope-*.whl")
    with pytest.raises(ConfigError, match=r"artifacts.wheel: .*matches no file"):
        deploy(env)
    for v in ("1", "2"):
        (tmp_path / f"CAM_{v}.run").write_bytes(b"x")
    proc = subprocess.run([sys.executable, "-m", "framework.cli", "deploy", "--env",
                           str(env_variant(lambda d: d.update(artifacts={"run_package": str(tmp_path / "CAM_*.run")}),
                                           "amb.yaml")), "--report-dir", str(tmp_path / "rep")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "artifacts.run_package" in proc.stderr and "matches 2 files" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("fault", "expect"), [("fail", "exit status"), ("nosuccess", "printed no SUCCESS line")])
def test_bad_run_package_is_an_install_error_per_host(env_variant, lab_env, tmp_path, fault, expect):
    bad = artifacts.build_run_package(tmp_path, fault=fault)
    env = env_for(env_variant, bad, None, workdir=fresh_workdir(lab_env, f"bad-{fault}"))
    result, _ = deploy(env)
    assert set(result.errors) == set(lab_env.hosts)
    for host, err in result.errors.items():
        assert err.step == "install-run" and expect in str(err) and str(err).startswith(f"{host}: ")
        assert result.manifests[host].status == "failed"
    # never reported as deployed: no state file
    host = next(iter(lab_env.hosts))
    cl = Cluster.from_env(env, [host])
    assert cl[host].run(["test", "-e", f"{fresh_workdir(lab_env, f'bad-{fault}')}/deploy-state.json"]).rc == 1


def test_wheel_that_fails_to_import_is_not_deployed(env_variant, lab_env, built, tmp_path):
    broken = artifacts.build_wheel(tmp_path, broken_import=True)
    env = env_for(env_variant, built["run"], broken, workdir=fresh_workdir(lab_env, "broken"))
    result, _ = deploy(env)
    assert set(result.errors) == set(lab_env.hosts)
    assert {e.step for e in result.errors.values()} == {"verify"}
    assert all("ImportError" in str(e) for e in result.errors.values())


def test_full_disk_on_one_host_fails_only_that_host(lab, env_variant, lab_env, built, tmp_path):
    victim = list(lab_env.hosts)[1]
    big = pad_wheel(built["wheel"], tmp_path, 12 * 1024 * 1024)
    env = env_for(env_variant, None, big, workdir="/var/tmp/camit", relay=False)
    lab.set_small_workdir(victim, "8m")
    try:
        result, _ = deploy(env)
    finally:
        lab.reset_workdir(victim)
    assert set(result.errors) == {victim}
    err = result.errors[victim]
    assert err.step == "upload" and "not enough space" in str(err)
    others = [h for h in lab_env.hosts if h != victim]
    assert all(result.manifests[h].status == "deployed" for h in others)


def test_host_lost_mid_upload(lab, env_variant, lab_env, built, tmp_path):
    victim = list(lab_env.hosts)[2]
    big = pad_wheel(built["wheel"], tmp_path, 96 * 1024 * 1024)
    env = env_for(env_variant, None, big, workdir=fresh_workdir(lab_env, "lost"), relay=False)
    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.setdefault("r", deploy(env)[0]))
    t.start()
    # wait until the upload to the victim is under way, then cut its SSH sessions and listener
    part_glob = f"{fresh_workdir(lab_env, 'lost')}/artifacts/*/*.camit-part-*"
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if lab.host_exec(victim, ["sh", "-c", f"ls {part_glob} 2>/dev/null"]).stdout.strip():
            break
        time.sleep(0.05)
    listener = lab.host(victim).sshd_pid
    lab.stop_sshd(victim)
    for pid in lab.host_pids(victim):
        if pid != listener and Path(f"/proc/{pid}/comm").exists() and \
                Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
            os.kill(pid, signal.SIGKILL)
    try:
        t.join(120)
        result = box["r"]
    finally:
        lab.start_sshd(victim)
    assert isinstance(result, DeployResult), result
    assert victim in result.errors
    err = result.errors[victim]
    assert isinstance(err, DeployError), err
    assert err.step in ("upload", "install-wheel") and victim in str(err)
    assert all(result.manifests[h].status == "deployed" for h in lab_env.hosts if h != victim)


def test_a_big_staged_artifact_is_hashed_on_the_host_and_a_changed_byte_is_sent_again(lab, env_variant, lab_env,
                                                                                       built, tmp_path):
    """An artifact of BIG_FILE or more is hash-checked by the host's python (the probe of every redeploy): the
    same verdicts as sha256sum on the real hosts — unchanged when intact, sent again and reinstalled on the one
    host where one byte of the staged copy changed."""
    from framework.remote.layout import BIG_FILE

    big = pad_wheel(built["wheel"], tmp_path / "big", BIG_FILE + 1024)
    workdir = fresh_workdir(lab_env, "bighash")
    env = env_for(env_variant, None, big, workdir=workdir)
    first, _ = deploy(env)
    assert first.ok, first.errors
    again, _ = deploy(env)
    assert again.ok and {m.status for m in again.manifests.values()} == {"unchanged"}
    victim = list(lab_env.hosts)[1]
    sha = hashlib.sha256(big.read_bytes()).hexdigest()
    staged = f"{workdir}/artifacts/{sha}/{big.name}"
    flip = lab.host_exec(victim, ["sh", "-c", f"printf x | dd of={staged} bs=1 seek={BIG_FILE // 2} conv=notrunc"])
    assert flip.returncode == 0, flip.stderr
    third, _ = deploy(env)
    assert third.ok, third.errors
    assert third.manifests[victim].status == "deployed"
    assert {a.via for a in third.manifests[victim].artifacts} == {"direct"}
    assert all(third.manifests[h].status == "unchanged" for h in lab_env.hosts if h != victim)
    check = lab.host_exec(victim, ["sha256sum", staged])
    assert check.stdout.split()[0] == sha
    # it is the host's python that answers there: with a sha256sum that always lies first on PATH, the same check
    # still tells the intact file from a changed one
    from framework.remote.layout import sh_sha_ok

    python = env.hosts[victim].python
    fake = f"{workdir}/fakebin"
    lie = f"mkdir -p {fake} && printf '#!/bin/sh\\necho 0000\\n' > {fake}/sha256sum && chmod +x {fake}/sha256sum"
    assert lab.host_exec(victim, ["sh", "-c", lie]).returncode == 0
    assert lab.host_exec(victim, ["sh", "-c", f"PATH={fake}:$PATH; {sh_sha_ok(staged, sha, python)}"]).returncode == 0
    assert lab.host_exec(victim, ["sh", "-c", f"PATH={fake}:$PATH; {sh_sha_ok(staged, '0' * 64, python)}"]).returncode
    assert lab.host_exec(victim, ["sh", "-c", f"PATH={fake}:$PATH; {sh_sha_ok(staged, sha)}"]).returncode  # the liar


def pad_wheel(wheel: Path, out_dir: Path, pad: int) -> Path:
    """A copy of ``wheel`` with a ``pad``-byte data file (listed in RECORD), same name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / wheel.name
    data = os.urandom(pad)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            content = zin.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                content += f"umdk_cam_op_lib/_pad.bin,sha256={digest},{pad}\n".encode()
            zout.writestr(item, content)
        zout.writestr("umdk_cam_op_lib/_pad.bin", data)
    return out


def test_relay_hop_that_cannot_listen_falls_back_to_direct_push(env_variant, lab_env, built, caplog):
    names = list(lab_env.hosts)
    victim, other = names[2], names[3]

    def change(doc):
        # the victim's management address is another host's: its relay cannot bind there
        doc["host_info"][victim]["manage_nic"]["ip"] = lab_env.hosts[other].manage_nic.ip
    env = load(env_variant(lambda d: (d.update(artifacts={"run_package": str(built["run"]),
                                                          "wheel": str(built["wheel"])}),
                                      d["defaults"].__setitem__("workdir", fresh_workdir(lab_env, "fb")),
                                      change(d)), "fallback2.yaml"))
    import logging

    with caplog.at_level(logging.WARNING, logger="camit.deploy"):
        result, _ = deploy(env)
    assert result.ok, result.errors
    assert {a.via for a in result.manifests[victim].artifacts} == {"direct"}
    assert {a.via for h in names if h != victim for a in result.manifests[h].artifacts} == {"relay"}
    assert any(victim in n and "did not listen" in n for n in result.notes)
    assert any("direct push" in r.getMessage() and victim in r.getMessage() for r in caplog.records)
