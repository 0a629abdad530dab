"""A first deploy's non-transfer steps (issue 18): the venv without ensurepip, the wheel installed into it by the
shipped installer (``framework/remote/wheelinst.py``, its sha256 checked before it runs), the CPU of each step
measured on the host, and the venv and the installer made ready while the artifacts upload. Real ``sh``/``bash``,
a real venv and pip on this machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from framework import deploy, remote
from framework.deploy.plan import install_wheel_script, installer_bin, parse_cpu, with_cpu
from framework.hosts import Cluster, Host, sha256_file
from framework.transport.local import LocalTransport
from tests.support.builders import make_env, make_wheel, record_digest

#: an upload's progress callback (Transport.put)
OnBytes = Callable[[int, int], None] | None

VERSION = "209.0.0b1"


def tiny_wheel(out: Path) -> Path:
    """A pure-Python ``umdk_cam_op_lib`` wheel with a correct RECORD (what the installer and pip check)."""
    return make_wheel(out, {"umdk_cam_op_lib/__init__.py": b"OPS = ()\n", "umdk_cam_op_lib/_data.txt": b"payload\n"},
                      "umdk_cam_op_lib", VERSION)


def _plan(work: Path, python: str = sys.executable) -> deploy.HostPlan:
    return deploy.HostPlan(host="h", workdir=str(work), python=python, venv=True, install_path=str(work / "opp"),
                           manage_ip="10.0.0.1")


def _stage(plan: deploy.HostPlan, wheel: Path) -> deploy.Artifact:
    art = deploy.Artifact("wheel", wheel, sha256_file(wheel), wheel.stat().st_size)
    dest = Path(plan.remote_path(art))
    dest.parent.mkdir(parents=True)
    dest.write_bytes(wheel.read_bytes())
    return art


def _sh(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=600,
                          env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **env})


def _ship(plan: deploy.HostPlan) -> Path:
    """The wheel installer where deploy ships it (what :meth:`HostInstall.ship_installer` does over the transport)."""
    dest = Path(installer_bin(plan))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(remote.script("wheelinst.py")[0].read_bytes())
    return dest


def test_venv_has_no_pip_and_the_shipped_installer_installs_with_correct_metadata(tmp_path):
    plan = _plan(tmp_path / "w d")
    art = _stage(plan, tiny_wheel(tmp_path / "dist"))
    assert "--without-pip" in deploy.venv_script(plan)
    assert _sh(deploy.venv_script(plan)).returncode == 0
    venv = Path(plan.venv_dir)
    assert not list(venv.glob("lib/python*/site-packages/pip")), "ensurepip ran: the venv has its own pip"
    _ship(plan)
    res = _sh(install_wheel_script(plan, art))
    assert res.returncode == 0, res.stderr
    site = next(venv.glob("lib/python*/site-packages"))
    assert (site / "umdk_cam_op_lib" / "_data.txt").read_bytes() == b"payload\n"  # into the venv, not the host
    code = ("import json, importlib.metadata as md; d = md.distribution('umdk_cam_op_lib'); "
            "print(json.dumps([d.version, str(d.locate_file('')), sorted(str(f) for f in d.files), "
            "d.read_text('INSTALLER')]))")
    out = subprocess.run([plan.interpreter, "-c", code], capture_output=True, text=True, check=True).stdout
    version, location, files, installer = json.loads(out)
    assert version == VERSION and Path(location) == site and installer.strip() == "camit"  # not pip
    assert {"umdk_cam_op_lib/__init__.py", "umdk_cam_op_lib/_data.txt",
            f"umdk_cam_op_lib-{VERSION}.dist-info/RECORD"} <= set(files)
    show = subprocess.run([sys.executable, "-m", "pip", "--python", plan.interpreter, "show", "-f", "umdk_cam_op_lib"],
                          capture_output=True, text=True, check=True).stdout
    assert f"Version: {VERSION}" in show and f"Location: {site}" in show and "umdk_cam_op_lib/_data.txt" in show
    # a reinstall (the next changed wheel) replaces, and still leaves no pip in the venv
    assert _sh(install_wheel_script(plan, art)).returncode == 0
    assert not list(venv.glob("lib/python*/site-packages/pip"))


def test_an_installer_on_the_host_that_does_not_hash_right_is_never_run(tmp_path):
    plan = _plan(tmp_path / "w")
    art = _stage(plan, tiny_wheel(tmp_path / "dist"))
    assert _sh(deploy.venv_script(plan)).returncode == 0
    missing = _sh(install_wheel_script(plan, art))
    assert missing.returncode == 3 and "the wheel installer" in missing.stderr
    planted = _ship(plan)
    mark = tmp_path / "ran"
    planted.write_text(f"open({str(mark)!r}, 'w').close()\n")
    res = _sh(install_wheel_script(plan, art))
    assert res.returncode == 3 and not mark.exists()
    assert f"camit: the wheel installer {planted} does not match its sha256" in res.stderr


def test_a_staged_wheel_changed_after_staging_fails_the_step_naming_it_and_is_not_installed(tmp_path):
    """The step's hash check of the staged wheel (done by the installer itself on the file it installs from):
    a wheel replaced after it was staged, even by another valid wheel, is not installed; exit 3, one line."""
    plan = _plan(tmp_path / "w")
    art = _stage(plan, tiny_wheel(tmp_path / "dist"))
    assert _sh(deploy.venv_script(plan)).returncode == 0
    _ship(plan)
    staged = Path(plan.remote_path(art))
    other = make_wheel(tmp_path / "other", {"umdk_cam_op_lib/__init__.py": b"X = 1\n"}, name="umdk_cam_op_lib",
                       version=VERSION)
    staged.write_bytes(other.read_bytes())
    res = _sh(install_wheel_script(plan, art))
    assert res.returncode == 3, res
    assert res.stderr.strip().splitlines() == [
        f"wheelinst: {staged} does not match its sha256 {art.sha256[:12]}: not installed"]
    assert not list(Path(plan.venv_dir).glob("lib/python*/site-packages/umdk_cam_op_lib*"))


def test_a_tampered_staged_wheel_fails_the_step_and_is_not_installed(tmp_path):
    """A wheel whose member does not match its RECORD: the installer's one line, no fallback to pip."""
    plan = _plan(tmp_path / "w")
    wheel = tiny_wheel(tmp_path / "dist")
    bad = tmp_path / "bad" / wheel.name
    bad.parent.mkdir()
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item, b"tampered\n" if item.filename.endswith("_data.txt") else zin.read(item.filename))
    art = _stage(plan, bad)
    assert _sh(deploy.venv_script(plan)).returncode == 0
    _ship(plan)
    res = _sh(install_wheel_script(plan, art))
    assert res.returncode == 2, res
    assert res.stderr.strip().splitlines() == [
        f"wheelinst: {wheel.name} refused, nothing installed: umdk_cam_op_lib/_data.txt: sha256 does not match RECORD"]
    assert not list(Path(plan.venv_dir).glob("lib/python*/site-packages/umdk_cam_op_lib*"))


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_cpu_of_a_step_is_measured_on_the_host_and_the_exit_status_kept(shell):
    busy = f"{sys.executable} -c 'import time; t = time.process_time() + 0.3\nwhile time.process_time() < t: pass'"
    res = subprocess.run([shell, "-c", with_cpu(f"{busy} && echo out")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("out\n")
    cpu = parse_cpu(res.stdout)
    assert cpu is not None and cpu >= 0.3, res.stdout  # the child's CPU, not the shell's own
    failed = subprocess.run([shell, "-c", with_cpu(f"{busy}; exit 7")], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 7
    assert parse_cpu("no record\n") is None


class _SlowUpload(LocalTransport):
    """A host whose upload waits until its venv exists (or gives up after ``wait`` seconds): the deploy must make
    the venv while the artifacts are still on the way, not after."""

    def __init__(self, name: str, venv: Path, wait: float) -> None:
        super().__init__(name)
        self.venv, self.wait, self.venv_before_upload_end = venv, wait, threading.Event()

    def put(self, local: Path, remote: str, progress: OnBytes = None) -> None:
        for _ in range(int(self.wait * 20)):
            if (self.venv / "pyvenv.cfg").exists():
                self.venv_before_upload_end.set()
                break
            threading.Event().wait(0.05)
        return super().put(local, remote, progress)


def test_the_venv_is_made_while_the_artifacts_upload(tmp_path, monkeypatch):
    wheel = tiny_wheel(tmp_path / "dist")
    work = tmp_path / "w"
    env = make_env({"h1": {"workdir": str(work)}}, defaults={"python": sys.executable, "venv": True},
                   artifacts={"wheel": str(wheel)}, relay=False)
    transport = _SlowUpload("h1", work / "venv", wait=20)
    with Cluster([Host("h1", transport, spec=env.hosts["h1"], command_timeout=120)]) as cluster:
        dep = deploy.Deployer(env, cluster, on_event=lambda h, m: None)
        monkeypatch.setattr(dep, "_install", lambda *a: None)  # the order up to the install is what is tested
        result = dep.run()
    assert result.ok, result.errors
    assert transport.venv_before_upload_end.is_set(), "the venv was made only after the upload"
    m = result.manifests["h1"]
    assert "venv" in m.durations and m.cpu_seconds.get("venv", -1) >= 0


def _warm_pids(work: Path) -> list[int]:
    """Processes on this machine whose argv names a warm import check's go file under ``work``."""
    mark = f"{work}/tmp/verify-".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


class _UploadAfterWarm(LocalTransport):
    """A host whose upload waits until the import check's interpreter is running (or ``wait`` seconds), then
    ``fail``s or goes on: the deploy must start the check while the artifacts are still on the way."""

    def __init__(self, name: str, work: Path, wait: float, fail: bool = False) -> None:
        super().__init__(name)
        self.work, self.wait, self.fail, self.warm_during_upload = work, wait, fail, threading.Event()

    def put(self, local: Path, remote: str, progress: OnBytes = None) -> None:
        if Path(local).name == "wheelinst.py":  # the installer, shipped beside the upload: not an artifact
            return super().put(local, remote, progress)
        for _ in range(int(self.wait * 20)):
            if _warm_pids(self.work):
                self.warm_during_upload.set()
                break
            threading.Event().wait(0.05)
        if self.fail:
            from framework.errors import TransferError
            raise TransferError(self.name, "link down (test)")
        return super().put(local, remote, progress)


def _counting_wheel(out: Path, log: Path, broken: bool = False) -> Path:
    """:func:`tiny_wheel` whose import appends its pid to ``log`` (or raises, ``broken``)."""
    wheel = tiny_wheel(out / "plain")
    body = ("raise ImportError('broken build (test)')\n" if broken else
            f"import os\nwith open({str(log)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\nOPS = ()\n").encode()
    path = out / wheel.name
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(path, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "umdk_cam_op_lib/__init__.py":
                data = body
            elif item.filename.endswith("RECORD"):
                data = b"\n".join(f"umdk_cam_op_lib/__init__.py,{record_digest(body)},{len(body)}".encode()
                                  if line.startswith(b"umdk_cam_op_lib/__init__.py,") else line
                                  for line in data.split(b"\n"))
            zout.writestr(item, data)
    return path


def _deploy_one(tmp_path: Path, wheel: Path, transport_of, venv: bool = True):
    work = tmp_path / "w"
    env = make_env({"h1": {"workdir": str(work)}}, defaults={"python": sys.executable, "venv": venv},
                   artifacts={"wheel": str(wheel)}, relay=False)
    transport = transport_of(work)
    with Cluster([Host("h1", transport, spec=env.hosts["h1"], command_timeout=120)]) as cluster:
        result = deploy.Deployer(env, cluster, on_event=lambda h, m: None).run()
    return result, transport, work


@pytest.mark.parametrize("venv", [True, False])
def test_the_import_check_imports_torch_during_the_upload_and_the_op_library_once_after(tmp_path, venv, monkeypatch):
    """Issue 18: the verify's interpreter (torch imported) runs while the artifacts upload; once the wheel is in,
    it imports the op library — one import per host — and reports its version; its CPU counts as the verify's."""
    log = tmp_path / "imports"
    wheel = _counting_wheel(tmp_path / "dist", log)
    if not venv:  # into a python of its own (a venv made here, used as "the host's python")
        base = tmp_path / "py"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(base)],
                       check=True)
        monkeypatch.setattr(sys, "executable", str(base / "bin" / "python"))
    result, transport, work = _deploy_one(tmp_path, wheel, lambda w: _UploadAfterWarm("h1", w, wait=60), venv=venv)
    assert result.ok, result.errors
    assert transport.warm_during_upload.is_set(), "the import check started only after the upload"
    m = result.manifests["h1"]
    assert m.installed_version == VERSION and m.status == "deployed"
    assert len(log.read_text().split()) == 1, "the op library was imported more than once on the host"
    assert m.cpu_seconds["verify"] > 0.1  # torch's import, done before the wheel was there, is counted
    assert _warm_pids(work) == [] and not list((work / "tmp").glob("verify-*"))


def test_a_host_lost_at_the_upload_leaves_no_import_check_running(tmp_path):
    wheel = _counting_wheel(tmp_path / "dist", tmp_path / "imports")
    result, transport, work = _deploy_one(tmp_path, wheel,
                                          lambda w: _UploadAfterWarm("h1", w, wait=60, fail=True))
    assert not result.ok and result.manifests["h1"].step == "upload"
    assert transport.warm_during_upload.is_set()
    assert _warm_pids(work) == [], "the import check was left waiting"
    assert not (tmp_path / "imports").exists()


def test_a_broken_op_library_fails_the_verify_step(tmp_path):
    wheel = _counting_wheel(tmp_path / "dist", tmp_path / "imports", broken=True)
    result, transport, work = _deploy_one(tmp_path, wheel, lambda w: _UploadAfterWarm("h1", w, wait=60))
    m = result.manifests["h1"]
    assert not result.ok and m.step == "verify" and "broken build (test)" in (m.error or ""), m.error
    assert transport.warm_during_upload.is_set() and _warm_pids(work) == []


def test_an_import_check_that_gave_up_waiting_is_run_again(tmp_path, monkeypatch):
    """The warm check waits WARM_WAIT for the wheel; an upload slower than that gets a fresh check."""
    monkeypatch.setattr("framework.deploy.plan.WARM_WAIT", 1)
    log = tmp_path / "imports"
    wheel = _counting_wheel(tmp_path / "dist", log)

    class _Slow(_UploadAfterWarm):
        def put(self, local: Path, remote: str, progress: OnBytes = None) -> None:
            super().put(local, remote, progress)
            for _ in range(200):  # until the check gave up
                if not _warm_pids(self.work):
                    break
                threading.Event().wait(0.05)

    result, transport, work = _deploy_one(tmp_path, wheel, lambda w: _Slow("h1", w, wait=60))
    assert result.ok, result.errors
    assert result.manifests["h1"].installed_version == VERSION
    assert len(log.read_text().split()) == 1


class _PipAfterWarm(LocalTransport):
    """A host whose wheel install waits until the import check's interpreter is running (or ``wait`` seconds)."""

    def __init__(self, name: str, work: Path, wait: float) -> None:
        super().__init__(name)
        self.work, self.wait, self.warm_during_pip = work, wait, threading.Event()

    def run(self, line, **kwargs):
        # the install-wheel step: the installer run on the wheel (the probe and the ship name the installer too)
        if re.search(r" -I \S*/wheelinst-\w+\.py (--\S+ \S+ )*\S+\.whl", line):
            for _ in range(int(self.wait * 20)):
                if _warm_pids(self.work):
                    self.warm_during_pip.set()
                    break
                threading.Event().wait(0.05)
        return super().run(line, **kwargs)


def test_with_a_run_package_the_import_check_starts_in_the_vendor_env_beside_the_wheel_install(tmp_path):
    """With a ``.run`` the check needs the vendor ``set_env`` the ``.run`` makes: it starts right after that
    install, runs while the wheel is installed, and still checks the op API and ASCEND_CUSTOM_OPP_PATH."""
    from framework.lab import artifacts

    run = artifacts.build_run_package(tmp_path / "run")
    log = tmp_path / "imports"
    wheel = _counting_wheel(tmp_path / "dist", log)
    work = tmp_path / "w"
    env = make_env({"h1": {"workdir": str(work), "install_path": str(tmp_path / "opp")}},
                   defaults={"python": sys.executable, "venv": True},
                   artifacts={"wheel": str(wheel), "run_package": str(run)}, relay=False)
    transport = _PipAfterWarm("h1", work, wait=60)
    with Cluster([Host("h1", transport, spec=env.hosts["h1"], command_timeout=120)]) as cluster:
        result = deploy.Deployer(env, cluster, on_event=lambda h, m: None).run()
    assert result.ok, result.errors
    assert transport.warm_during_pip.is_set(), "the import check started only after the wheel's install"
    m = result.manifests["h1"]
    assert m.installed_version == VERSION and m.vendor and len(log.read_text().split()) == 1
    assert _warm_pids(work) == []


class _Counting(LocalTransport):
    """A host that records what is put on it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.puts: list[str] = []

    def put(self, local: Path, remote: str, progress: OnBytes = None) -> None:
        self.puts.append(str(local))
        return super().put(local, remote, progress)


def test_the_installer_is_shipped_once_and_again_when_it_changed_on_the_host(tmp_path):
    """The probe finds the installer by its sha256: shipped on the first deploy (beside the upload), not on the next
    one with a changed wheel, again when the copy on the host was altered."""
    local = str(remote.script("wheelinst.py")[0])
    transport = _Counting("h1")
    first, _, work = _deploy_one(tmp_path / "a", tiny_wheel(tmp_path / "dist1"), lambda w: transport)
    assert first.ok, first.errors
    assert transport.puts.count(local) == 1 and "ship-installer" in first.manifests["h1"].durations
    assert first.manifests["h1"].installed_version == VERSION
    other = _counting_wheel(tmp_path / "dist2", tmp_path / "imports")  # a changed wheel, the same installer
    again, _, _ = _deploy_one(tmp_path / "a", other, lambda w: transport)
    assert again.ok, again.errors
    assert transport.puts.count(local) == 1 and "ship-installer" not in again.manifests["h1"].durations
    plan = _plan(work)
    Path(installer_bin(plan)).write_text("print('altered')\n")
    third, _, _ = _deploy_one(tmp_path / "a", tiny_wheel(tmp_path / "dist1"), lambda w: transport)
    assert third.ok, third.errors
    assert transport.puts.count(local) == 2
    assert Path(installer_bin(plan)).read_bytes() == Path(local).read_bytes()


class _NoInstaller(LocalTransport):
    """A host where putting the wheel installer fails (the artifacts go through)."""

    def put(self, local: Path, remote: str, progress: OnBytes = None) -> None:
        if Path(local).name == "wheelinst.py":
            from framework.errors import TransferError
            raise TransferError(self.name, "disk quota exceeded (test)")
        return super().put(local, remote, progress)


def test_an_installer_that_cannot_be_shipped_fails_the_wheel_install_naming_it(tmp_path):
    result, _, work = _deploy_one(tmp_path, tiny_wheel(tmp_path / "dist"), lambda w: _NoInstaller("h1"))
    m = result.manifests["h1"]
    assert not result.ok and m.step == "install-wheel", (m.step, m.error)
    assert "cannot ship the wheel installer: disk quota exceeded (test)" in (m.error or "")
    assert not (work / "deploy-state.json").exists() and _warm_pids(work) == []


def _deploy(env, name: str = "h1"):
    with Cluster([Host(name, LocalTransport(name), spec=env.hosts[name], command_timeout=300)]) as cluster:
        return deploy.Deployer(env, cluster, on_event=lambda h, m: None).run()


def test_without_a_venv_another_workdirs_install_into_the_shared_python_is_seen_and_reinstalled(tmp_path):
    """venv false: the wheel goes into the configured python, which every workdir (and any user's pip) shares.
    Workdir A deploys library 1, workdir B library 2 into the same python; A's next deploy must not say
    "unchanged" from its own state file: it judges what the python holds by its installed RECORD's hash."""
    host_python = tmp_path / "hostpy"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(host_python)],
                   check=True, timeout=120)
    python = str(host_python / "bin" / "python")
    one = tiny_wheel(tmp_path / "one")
    two = make_wheel(tmp_path / "two", {"umdk_cam_op_lib/__init__.py": b"OPS = ('other',)\n"}, "umdk_cam_op_lib",
                     "0.1.0")

    def env_of(work: str, wheel: Path):
        return make_env({"h1": {"workdir": str(tmp_path / work)}}, defaults={"python": python, "venv": False},
                        artifacts={"wheel": str(wheel)}, relay=False)

    def installed() -> str:
        code = "from importlib import metadata as md; print(md.version('umdk_cam_op_lib'))"
        return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()

    first = _deploy(env_of("a", one))
    assert first.ok and first.manifests["h1"].status == "deployed", first.errors
    again = _deploy(env_of("a", one))
    assert again.ok and again.manifests["h1"].status == "unchanged", again.errors   # nothing else installed
    other = _deploy(env_of("b", two))
    assert other.ok and installed() == "0.1.0", other.errors
    back = _deploy(env_of("a", one))
    assert back.ok and back.manifests["h1"].status == "deployed", back.errors
    assert installed() == VERSION
