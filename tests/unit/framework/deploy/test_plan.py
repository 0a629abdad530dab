"""The pure half of deploy: artifact resolution, remote paths, command lines, output parsers."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import shlex
import subprocess
from pathlib import Path

import pytest

from framework import deploy, remote
from framework.deploy.plan import install_wheel_script, interpreter_ok, parse_verify
from framework.errors import ConfigError
from framework.remote.layout import sh_sha_ok, sh_verified
from tests.support.builders import ASCEND_CAPTURES, make_env

DATA = ASCEND_CAPTURES


def env_with(tmp_path: Path, run_package=None, wheel=None):
    return make_env(source="lab.yaml", artifacts={"run_package": run_package, "wheel": wheel})


def test_resolve_exactly_one_match_each(tmp_path):
    (tmp_path / "CAM_cpu_debian_x86_64.run").write_bytes(b"run")
    (tmp_path / "umdk_cam_op_lib-1.0-py3-none-any.whl").write_bytes(b"whl")
    arts = deploy.resolve_artifacts(env_with(tmp_path, str(tmp_path / "CAM_*.run"), str(tmp_path / "umdk*.whl")))
    assert [a.kind for a in arts] == ["run_package", "wheel"]
    assert arts[0].sha256 == hashlib.sha256(b"run").hexdigest() and arts[0].size == 3


def test_resolve_no_match_names_key_and_pattern(tmp_path):
    with pytest.raises(ConfigError) as info:
        deploy.resolve_artifacts(env_with(tmp_path, wheel=str(tmp_path / "nothing*.whl")))
    assert str(info.value).startswith("lab.yaml: artifacts.wheel: ")
    assert "matches no file" in str(info.value)


def test_resolve_ambiguous_lists_matches(tmp_path):
    for v in ("1", "2"):
        (tmp_path / f"CAM_{v}.run").write_bytes(v.encode())
    with pytest.raises(ConfigError, match=r"artifacts.run_package: .* matches 2 files, expected exactly one: "
                                          r"CAM_1.run, CAM_2.run"):
        deploy.resolve_artifacts(env_with(tmp_path, run_package=str(tmp_path / "CAM_*.run")))


def test_resolve_nothing_configured(tmp_path):
    with pytest.raises(ConfigError, match="artifacts: neither run_package nor wheel is set"):
        deploy.resolve_artifacts(env_with(tmp_path))


def test_resolve_wrong_suffix(tmp_path):
    (tmp_path / "x.tar").write_bytes(b"x")
    with pytest.raises(ConfigError, match="is not a .whl file"):
        deploy.resolve_artifacts(env_with(tmp_path, wheel=str(tmp_path / "x.tar")))


PLAN = deploy.HostPlan(host="h1", workdir="/w d", python="/usr/bin/python3", venv=True,
                       install_path="/w d/opp", manage_ip="10.77.0.11",
                       cann_set_env="/usr/local/Ascend/cann/set_env.sh", soc="ascend910_93")
ART = deploy.Artifact("wheel", Path("/x/umdk_cam_op_lib-209.0.0b1-py3-none-any.whl"), "ab" * 32, 10)
RUN = deploy.Artifact("run_package", Path("/x/CAM_ascend910_93_ubuntu_aarch64.run"), "cd" * 32, 20)


def test_plan_paths_are_content_addressed():
    assert PLAN.remote_path(ART) == f"/w d/artifacts/{'ab' * 32}/umdk_cam_op_lib-209.0.0b1-py3-none-any.whl"
    assert PLAN.interpreter == "/w d/venv/bin/python"
    assert PLAN.vendor_set_env() == "/w d/opp/vendors/CAM/bin/set_env.bash"
    assert PLAN.bin_path("relay.py", "0123456789abcdef") == "/w d/bin/relay-0123456789ab.py"


def test_exact_command_lines():
    run_path = PLAN.remote_path(RUN)
    # run only when it still hashes to what was staged (issue 17: nothing reused "because it exists")
    assert deploy.install_run_script(PLAN, RUN) == (
        "umask 077; " + sh_verified(run_path, RUN.sha256, "the staged package") + " && "
        f"chmod 0700 '/w d/artifacts/{'cd' * 32}/CAM_ascend910_93_ubuntu_aarch64.run' && "
        f"'/w d/artifacts/{'cd' * 32}/CAM_ascend910_93_ubuntu_aarch64.run' "
        "'--install-path=/w d/opp' --quiet < /dev/null"
    )
    assert deploy.pip_argv(PLAN, ART) == [
        "/w d/venv/bin/python", "-m", "pip", "install", "--force-reinstall", "--no-deps", "--no-index",
        "--disable-pip-version-check", "-q", PLAN.remote_path(ART)]
    assert deploy.venv_script(PLAN) == (
        "{ [ -x '/w d/venv/bin/python' ] && [ \"$(readlink -f -- '/w d/venv/bin/python')\" = "
        "\"$(/usr/bin/python3 -I -S -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)\" ]; }"
        " || /usr/bin/python3 -m venv --clear --without-pip --system-site-packages '/w d/venv'")
    bash = deploy.verify_argv(PLAN, "CAM")
    assert bash[:2] == ["bash", "-c"]
    assert bash[2].startswith("mkdir -p '/w d/tmp' && export TMPDIR='/w d/tmp' && "
                              ". /usr/local/Ascend/cann/set_env.sh && . '/w d/opp/vendors/CAM/bin/set_env.bash' && "
                              'case ":${LD_LIBRARY_PATH:-}:" in *:\'/w d/opp/vendors/CAM/op_api/lib\':*|')
    assert " ;; esac && '/w d/venv/bin/python' -c " in bash[2]
    assert "import torch_npu\nimport torch, umdk_cam_op_lib" in bash[2]  # torch_npu first on NPU hosts
    code = shlex.split(bash[2].rsplit(" -c ", 1)[1])[0]
    assert "ctypes.CDLL('libcust_opapi.so')" in code  # by bare name, as CAM's GetOpApiFuncAddr


def test_into_a_venv_the_wheel_goes_in_with_the_shipped_installer_checked_and_without_one_with_pip():
    """Issue 18: the venv gets camit's installer, run by the venv's interpreter only when it hashes to the shipped
    file; the user's own interpreter (no venv) keeps pip exactly as before."""
    path, sha = remote.script("wheelinst.py")
    installer = f"/w d/bin/wheelinst-{sha[:12]}.py"
    assert deploy.installer_bin(PLAN) == installer
    check = sh_verified(PLAN.remote_path(ART), ART.sha256, "the staged wheel")
    interp = (f"{{ {interpreter_ok(PLAN)} || {{ echo 'camit: /w d/venv/bin/python is not /usr/bin/python3: not run' "
              ">&2; exit 3; }; }")
    assert install_wheel_script(PLAN, ART) == (  # the installer hashes the staged wheel itself (--sha256)
        f"{interp} && {{ {sh_verified(installer, sha, 'the wheel installer')} && "
        f"'/w d/venv/bin/python' -I '{installer}' --sha256 {ART.sha256} '{PLAN.remote_path(ART)}'; }}")
    verified = sh_verified(installer, sha, "the wheel installer")
    assert "sha256sum" not in install_wheel_script(PLAN, ART).replace(verified, "")
    assert "pip" not in install_wheel_script(PLAN, ART)
    own = dataclasses.replace(PLAN, venv=False)
    assert install_wheel_script(own, ART) == (
        f"{check} && {{ {interpreter_ok(own)} || {{ echo 'camit: /usr/bin/python3 is not /usr/bin/python3: not run' "
        ">&2; exit 3; }; } && { /usr/bin/python3 -m pip install --force-reinstall --no-deps --no-index "
        f"--disable-pip-version-check -q '{PLAN.remote_path(ART)}'; }}")
    assert "wheelinst" not in install_wheel_script(own, ART)
    # the dry run shows the installer shipped beside the venv, only into a venv
    steps = deploy.plan.dry_run_plan(PLAN, [ART])["steps"]
    assert steps[1] == {"step": "ship-installer", "sends": installer,
                        "when": "the probe did not find the wheel installer there with its sha256"}
    assert next(st for st in steps if st["step"] == "install-wheel")["command"] == install_wheel_script(PLAN, ART)
    assert "ship-installer" not in [st["step"] for st in deploy.plan.dry_run_plan(own, [ART])["steps"]]
    assert path.read_bytes().startswith(b"#!/usr/bin/env python3\n")


def test_the_probe_reports_the_installer_only_when_it_hashes_right(tmp_path):
    plan = deploy.HostPlan(host="h", workdir=str(tmp_path / "w"), python="/bin/true", venv=True,
                           install_path=str(tmp_path / "opp"), manage_ip="10.0.0.1")
    installer = Path(deploy.installer_bin(plan))

    def probe() -> deploy.Probe:
        out = subprocess.run(["/bin/sh", "-c", deploy.probe_script(plan, [ART], None, str(installer))],
                             capture_output=True, text=True, check=True).stdout
        return deploy.parse_probe(out)

    assert not probe().installer_ok
    installer.parent.mkdir(parents=True)
    installer.write_bytes(remote.script("wheelinst.py")[0].read_bytes())
    assert probe().installer_ok
    installer.write_bytes(installer.read_bytes() + b"# altered\n")
    assert not probe().installer_ok


def test_verify_on_cpu_skips_torch_npu_and_cann():
    plan = deploy.HostPlan(host="h", workdir="/w", python="python3", venv=False, install_path="/w/opp",
                           manage_ip="10.0.0.1")
    script = deploy.verify_argv(plan, None)[2]
    assert "torch_npu" not in script and "set_env" not in script
    assert script.startswith("mkdir -p /w/tmp && export TMPDIR=/w/tmp && python3 -c ")


@pytest.mark.parametrize("metadata", [True, False])
def test_verify_reads_the_version_from_the_distribution_metadata(tmp_path, metadata):
    """The real wheel is a bare extension module without ``__version__`` (npu-fidelity.md §1): the deployed
    version is the distribution's. A module-level __version__ is never read."""
    import sys

    site = tmp_path / "site"
    pkg = site / "umdk_cam_op_lib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = 'module-says-so'\n")
    if metadata:
        info = site / "umdk_cam_op_lib-209.0.0b1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: umdk_cam_op_lib\nVersion: 209.0.0b1\n")
    plan = deploy.HostPlan(host="h", workdir=str(tmp_path / "w"), python=sys.executable, venv=False,
                           install_path=str(tmp_path / "opp"), manage_ip="10.0.0.1")
    res = subprocess.run(deploy.verify_argv(plan, None), capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
    assert res.returncode == 0, res.stderr
    version, ops = parse_verify(res.stdout)
    assert version == ("209.0.0b1" if metadata else "unknown")
    assert ops == []


def test_probe_script_runs_in_a_real_shell_and_parses(tmp_path):
    work = tmp_path / "w d"
    plan = deploy.HostPlan(host="h", workdir=str(work), python="/bin/true", venv=False,
                           install_path=str(work / "opp"), manage_ip="10.0.0.1")
    art = deploy.Artifact("wheel", Path("/x/a.whl"), hashlib.sha256(b"x").hexdigest(), 1)
    stage = Path(plan.stage(art))
    stage.mkdir(parents=True)
    (stage / "a.whl").write_bytes(b"x")
    (stage / ".ok").write_text("ok")
    (work / "deploy-state.json").write_text('{"version": 1,\n "x": "y"}\n')
    tree = work / "opp" / "vendors" / "CAM" / "bin"
    tree.mkdir(parents=True)
    (tree / "set_env.bash").write_text("")
    out = subprocess.run(["/bin/sh", "-c", deploy.probe_script(plan, [art, RUN], str(work / "bin" / "relay.py"))],
                         capture_output=True, text=True, check=True).stdout
    probe = deploy.parse_probe(out)
    assert probe.have == {art.sha256}
    (stage / "a.whl").write_bytes(b"y")  # changed on the host: not staged any more (replaced, never run)
    out2 = subprocess.run(["/bin/sh", "-c", deploy.probe_script(plan, [art], None)], capture_output=True,
                          text=True, check=True).stdout
    assert deploy.parse_probe(out2).have == set()
    assert probe.state == {"version": 1, "x": "y"}
    assert probe.free and probe.free > 0
    assert probe.vendor_trees == [str(tree / "set_env.bash")]
    assert probe.interpreter_ok and not probe.relay_ok
    assert deploy.vendor_of(probe.vendor_trees, plan.install_path) == "CAM"


@pytest.mark.parametrize("fixture", ["custom-opp-install-a3-cann9.txt", "custom-opp-install-default-path.txt"])
def test_run_output_success_from_captured_cann_installs(fixture):
    text = (DATA / fixture).read_text().split("\n", 1)[1]
    assert deploy.parse_run_output(text) == (True, None)


def test_run_output_failures():
    assert deploy.parse_run_output("Verifying archive integrity... All good.\nERROR: use absolute path\n") == (
        False, "ERROR: use absolute path")
    assert deploy.parse_run_output("[ops_custom] [INFO] copy\n")[0] is False
    assert deploy.parse_run_output("the word SUCCESS inside a line\n")[0] is False


def test_vendor_choice():
    base = "/o"
    assert deploy.vendor_of([f"{base}/vendors/customize/bin/set_env.bash"], base) == "customize"
    set_envs = [f"{base}/vendors/a/bin/set_env.bash", f"{base}/vendors/CAM/bin/set_env.bash"]
    assert deploy.vendor_of(set_envs, base) == "CAM"
    assert deploy.vendor_of([f"{base}/vendors/a/bin/set_env.bash", f"{base}/vendors/b/bin/set_env.bash"], base) is None
    assert deploy.vendor_of([], base) is None


def test_state_script_writes_atomically(tmp_path):
    plan = deploy.HostPlan(host="h", workdir=str(tmp_path), python="p", venv=False, install_path="/o",
                           manage_ip="1.2.3.4")
    state = {"a": "it's $(x)"}
    subprocess.run(["/bin/sh", "-c", deploy.state_script(plan, state)], check=True)
    import json

    assert json.loads((tmp_path / "deploy-state.json").read_text()) == state
    assert not (tmp_path / "deploy-state.json.tmp").exists()


def test_upload_progress_reports_bytes_and_rate_throttled():
    events = []
    d = object.__new__(deploy.Deployer)
    d.on_event = lambda host, msg: events.append((host, msg))
    report = d._progress("h1", ART, every=3600)
    for sent in (1, 2, 3):
        report(sent * 1024 * 1024, 4 * 1024 * 1024)
    report(4 * 1024 * 1024, 4 * 1024 * 1024)  # the end is always reported
    assert len(events) == 1
    host, msg = events[0]
    assert host == "h1" and msg.startswith(f"upload {ART.name}: 4.0 MiB of 4.0 MiB, ") and msg.endswith(" MiB/s")


def test_host_put_passes_progress(tmp_path):
    from framework.hosts import Host
    from framework.testing import FakeTransport

    src = tmp_path / "x"
    src.write_bytes(b"abc")
    seen = []
    Host("h", FakeTransport("h"), command_timeout=5).put(src, "/w/x", progress=lambda s, t: seen.append((s, t)))
    assert seen == [(3, 3)]


def test_deploy_manifests_of_one_run_merge_instead_of_the_last_one_winning(tmp_path):
    """Two xdist workers deploy their own host shares into one run folder (concurrently)."""
    import json
    import multiprocessing

    from framework.records.folder import RunDir

    def manifest(hosts, duration, notes, relay):
        return {"duration": duration, "relay_used": relay, "notes": notes,
                "hosts": {h: {"host": h, "status": "deployed"} for h in hosts}}

    assert deploy.merge_manifest(None, manifest(["a"], 1.0, [], False)) == manifest(["a"], 1.0, [], False)
    merged = deploy.merge_manifest(manifest(["a", "b"], 2.0, ["x"], True), manifest(["c"], 1.5, ["x", "y"], False))
    assert merged == {"duration": 2.0, "relay_used": True, "notes": ["x", "y"],
                      "hosts": {h: {"host": h, "status": "deployed"} for h in "abc"}}

    rundir = RunDir.create(tmp_path / "reports")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_merge_many, args=(rundir.path, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    hosts = json.loads((rundir.path / "deploy-manifest.json").read_text())["hosts"]
    assert sorted(hosts) == sorted(f"w{w}h{i}" for w in range(4) for i in range(20))


def _merge_many(path, worker):
    from framework.records.folder import RunDir

    rundir = RunDir(path, path.name)
    for i in range(20):
        new = {"duration": 0.1, "relay_used": False, "notes": [],
               "hosts": {f"w{worker}h{i}": {"host": f"w{worker}h{i}", "status": "deployed"}}}
        rundir.update_json("deploy-manifest.json", functools.partial(deploy.merge_manifest, new=new))


def test_a_big_staged_artifact_is_hashed_by_the_hosts_python_and_a_small_one_by_sha256sum():
    """Issue 18: the probe's and the install steps' hash checks of an artifact of BIG_FILE or more run the host's
    python (OpenSSL's SHA-256), below it ``sha256sum`` (no interpreter start-up)."""
    from framework.remote.layout import BIG_FILE

    big_run = dataclasses.replace(RUN, size=BIG_FILE)
    big_wheel = dataclasses.replace(ART, size=BIG_FILE + 1)
    own = dataclasses.replace(PLAN, venv=False)
    hashes_with_python = "hashlib.sha256()"
    probe = deploy.probe_script(PLAN, [big_run, ART])
    assert probe.count(hashes_with_python) == 1 and sh_sha_ok(PLAN.remote_path(big_run), RUN.sha256,
                                                             "/usr/bin/python3") in probe
    assert sh_sha_ok(PLAN.remote_path(ART), ART.sha256) in probe
    assert hashes_with_python in deploy.install_run_script(PLAN, big_run)
    assert hashes_with_python not in deploy.install_run_script(PLAN, RUN)
    assert hashes_with_python in install_wheel_script(own, big_wheel)  # pip's path: checked before pip
    assert hashes_with_python not in install_wheel_script(own, ART)
    assert hashes_with_python not in install_wheel_script(PLAN, big_wheel)  # the installer hashes it itself


def test_the_dry_run_says_how_the_run_is_picked_only_among_several():
    runs = [deploy.Artifact("run_package", Path(f"/x/CAM_ascend910b_{os_id}_aarch64.run"),
                            c * 64, 10) for os_id, c in (("ubuntu", "a"), ("openeuler", "b"))]
    one = deploy.plan.dry_run_plan(PLAN, [runs[0], ART])
    assert one["run_package_choice"] is None
    remote = [a["remote"] for a in one["artifacts"]]
    assert remote == [PLAN.remote_path(runs[0]), PLAN.remote_path(ART)]
    both = deploy.plan.dry_run_plan(PLAN, [*runs, ART])
    choice = "one of 2 .run files, picked on the host's platform"
    assert both["run_package_choice"].startswith(choice)
    assert [st["when"] for st in both["steps"] if st["step"] == "install-run"] == [
        f"{r.name} is the .run for the host's platform" for r in runs]
