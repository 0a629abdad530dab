"""Artifacts that are not what they claim: a wheel that is not a zip, bytes that change between
resolve and upload, and a wheel replaced on the controller after deploy.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from framework import deploy
from framework.config.effective import load
from framework.deploy import Deployer
from framework.hosts import Cluster, sha256_file
from framework.lab import artifacts
from tests.support.camit_labtools import REPO, Footprint

pytestmark = pytest.mark.lab
HOSTS = ["host1", "host2"]
PROBE = """\
import umdk_cam_op_lib
print("MARKER", getattr(umdk_cam_op_lib, "CAMIT_MARKER", None), flush=True)
"""


def camit(*argv: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def wheel_env(env_variant: Callable[..., Path], workdir_name):
    def make(wheel: Path, name: str = "wheel.yaml") -> Path:
        def change(doc):
            doc["defaults"]["workdir"] = f"/var/tmp/camit/{workdir_name}"
            doc["artifacts"] = {"wheel": str(wheel)}
        return env_variant(change, name)
    return make


def marked_wheel(tmp: Path, marker: str) -> Path:
    src = tmp / f"standin-{marker}"
    shutil.copytree(REPO / "standin", src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    init = src / "umdk_cam_op_lib" / "__init__.py"
    init.write_text(init.read_text() + f"\nCAMIT_MARKER = {marker!r}\n")
    return artifacts.build_wheel(tmp / f"wheel-{marker}", source=src)


def test_a_wheel_that_is_not_a_zip_fails_install_on_every_host_by_name(lab, wheel_env, workdir_name, tmp_path):
    bogus = tmp_path / "umdk_cam_op_lib-1.0.0-py3-none-any.whl"
    bogus.write_bytes(b"this is not a zip file\n" * 100)
    env = wheel_env(bogus)
    fp = Footprint(lab, HOSTS, workdir_name)
    t0 = time.monotonic()
    proc = camit("deploy", "--env", str(env), "--hosts", ",".join(HOSTS), "--report-dir", str(tmp_path / "r"))
    assert time.monotonic() - t0 < 300
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    folder = (tmp_path / "r" / "latest").resolve()
    manifest = json.loads((folder / "deploy-manifest.json").read_text())
    hosts = manifest["hosts"]
    for h in HOSTS:
        m = hosts[h]
        assert m["status"] == "failed" and m["step"] == "install-wheel", m
        assert f"{h}" in proc.stdout and "install-wheel" in proc.stdout
    assert fp.strays() == {}


def test_bytes_changed_between_resolve_and_upload_are_refused(lab, lab_env_path, wheel_env, workdir_name,
                                                              tmp_path, monkeypatch):
    wheel = artifacts.build_wheel(tmp_path / "w")
    env = load(wheel_env(wheel))
    real = deploy.resolve_artifacts

    def resolve_then_tamper(*a, **kw):
        found = real(*a, **kw)
        data = bytearray(wheel.read_bytes())
        data[-10] ^= 0xFF  # the file on disk no longer matches the digest just taken
        wheel.write_bytes(bytes(data))
        return found

    monkeypatch.setattr(deploy, "resolve_artifacts", resolve_then_tamper)
    fp = Footprint(lab, HOSTS, workdir_name)
    t0 = time.monotonic()
    with Cluster.from_env(env, HOSTS) as cluster:
        result = Deployer(env, cluster, relay=False, on_event=lambda h, m: None).run()
    assert time.monotonic() - t0 < 300
    assert not result.ok
    for h in HOSTS:
        m = result.manifests[h]
        assert m.status == "failed" and m.step == "upload", (h, m.step, m.error)
        assert "sha256 mismatch" in (m.error or "")
    parts = [p for h in HOSTS for p in (lab.host(h).work_dir / workdir_name).rglob("*.camit-part-*")]
    assert parts == []
    assert fp.strays() == {}


def test_wheel_replaced_after_deploy_changes_nothing_until_redeploy(lab, wheel_env, workdir_name, tmp_path):
    a, b = marked_wheel(tmp_path, "A"), marked_wheel(tmp_path, "B")
    assert a.name == b.name
    local = tmp_path / "art" / a.name
    local.parent.mkdir()
    shutil.copy(a, local)
    env = wheel_env(local)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    fp = Footprint(lab, HOSTS, workdir_name)

    def deploy_() -> dict:
        proc = camit("deploy", "--env", str(env), "--hosts", ",".join(HOSTS), "--report-dir", str(tmp_path / "r"),
                     "--json")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        summary = json.loads(proc.stdout)
        assert isinstance(summary, dict), summary
        return summary

    def marker() -> set[str]:
        proc = camit("run", "--env", str(env), "--hosts", ",".join(HOSTS), "--nproc-per-node", "1",
                     "--report-dir", str(tmp_path / "r"), "--timeout", "180", "--", str(probe), timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        folder = (tmp_path / "r" / "latest").resolve()
        return {ln.split()[1] for h in HOSTS for ln in (folder / h / f"rank{HOSTS.index(h)}.log").read_text()
                .splitlines() if ln.startswith("MARKER ")}

    first = deploy_()
    assert marker() == {"A"}
    shutil.copy(b, local)  # replaced on the controller, same name
    assert marker() == {"A"}, "ranks must run what was deployed, not what is on the controller now"
    second = deploy_()
    assert {m["status"] for m in second["hosts"].values()} == {"deployed"}
    assert artifacts_sha(second) == {sha256_file(b)} and artifacts_sha(first) == {sha256_file(a)}
    assert marker() == {"B"}
    assert fp.strays() == {}


def artifacts_sha(manifest: dict) -> set[str]:
    return {a["sha256"] for m in manifest["hosts"].values() for a in m["artifacts"]}
