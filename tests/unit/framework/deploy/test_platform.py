"""Deploy's platform rules: the .run named for each host (UMDK's compile_ascend_proj.sh naming), the set_env steps
(CANN, cann.extra_set_env, vendor, op_api/lib), the vendor-environment checks of deploy verify."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from framework import deploy
from framework.deploy.platform import Platform, choose, parse_run_name
from framework.deploy.result import DeployResult, HostManifest
from framework.errors import ConfigError
from framework.hosts import Cluster, Host
from framework.launch.plan import plan_nodes
from framework.setenv import OP_ACLNN, aclnn_symbols, env_steps
from framework.testing import FakeTransport
from tests.support.builders import make_env

A3 = Platform("ascend910_93", "openEuler", "aarch64")


@pytest.mark.parametrize(("name", "plat"), [
    ("CAM_ascend910_93_openEuler_aarch64.run", A3),
    ("CAM_ascend910b_ubuntu_x86_64.run", Platform("ascend910b", "ubuntu", "x86_64")),
    ("CAM_cpu_debian_x86_64.run", Platform("cpu", "debian", "x86_64")),
    ("CAM_1.run", None), ("cam_ascend910b_ubuntu_x86_64.run", None), ("CAM_ascend910_93_aarch64.run", None),
])
def test_run_names_follow_umdk_compile_ascend_proj(name, plat):
    assert parse_run_name(name) == plat


def test_a_single_run_for_another_platform_is_refused_naming_file_and_mismatch():
    choice = choose(["CAM_ascend910b_openEuler_x86_64.run"], A3)
    assert choice.index is None
    assert choice.error == (
        "no .run package for this host (soc ascend910_93, os openEuler, arch aarch64; expected "
        "CAM_ascend910_93_openEuler_aarch64.run): CAM_ascend910b_openEuler_x86_64.run: soc ascend910b "
        "(host: ascend910_93), arch x86_64 (host: aarch64)")
    assert choose(["CAM_ascend910_93_openEuler_aarch64.run"], A3) == deploy.platform.Choice(0)


def test_the_matching_run_is_picked_among_several_and_said():
    names = ["CAM_ascend910b_openEuler_aarch64.run", "CAM_ascend910_93_openEuler_aarch64.run",
             "CAM_ascend910_93_ubuntu_aarch64.run"]
    choice = choose(names, A3)
    assert choice.index == 1
    assert choice.note == ("picked CAM_ascend910_93_openEuler_aarch64.run of 3 .run files "
                           "(matches soc ascend910_93, os openEuler, arch aarch64)")


def _runs(tmp_path: Path, *names: str) -> list[Path]:
    for n in names:
        (tmp_path / n).write_bytes(n.encode())
    return [tmp_path / n for n in names]


def test_several_named_runs_resolve_and_unnamed_ones_stay_ambiguous(tmp_path):
    _runs(tmp_path, "CAM_ascend910b_ubuntu_aarch64.run", "CAM_ascend910_93_ubuntu_aarch64.run")
    env = make_env(source="lab.yaml", artifacts={"run_package": str(tmp_path / "CAM_*.run")})
    assert sorted(a.name for a in deploy.resolve_artifacts(env)) == [
        "CAM_ascend910_93_ubuntu_aarch64.run", "CAM_ascend910b_ubuntu_aarch64.run"]
    _runs(tmp_path, "CAM_x.run")
    with pytest.raises(ConfigError, match=r"matches 3 files, expected exactly one: .*CAM_x.run \(several .run files "
                                          r"are allowed when each is named CAM_<soc>_<os>_<arch>.run\)"):
        deploy.resolve_artifacts(env)


def test_heterogeneous_hosts_each_get_their_run_and_a_mismatch_fails_only_its_host(tmp_path):
    """Deployer's pick over probes of two A2 hosts and one A3 host (fake transport: nothing is sent)."""
    _runs(tmp_path, "CAM_ascend910b_debian_x86_64.run", "CAM_ascend910_93_debian_x86_64.run")
    hosts = {"a2": {"npu": {"soc": "ascend910b", "count": 8}}, "a3": {"npu": {"soc": "ascend910_93", "count": 16}},
             "arm": {"npu": {"soc": "ascend910_93", "count": 16}}}
    env = make_env(hosts, source="lab.yaml", cann={"set_env": "/usr/local/Ascend/cann/set_env.sh"},
                   artifacts={"run_package": str(tmp_path / "CAM_*.run")})
    cluster = Cluster([Host(h, FakeTransport(h)) for h in hosts])
    events: list[tuple[str, str]] = []
    dep = deploy.Deployer(env, cluster, on_event=lambda h, m: events.append((h, m)))
    arts = deploy.resolve_artifacts(env)
    probes = {h: deploy.Probe(os_id="debian", arch="aarch64" if h == "arm" else "x86_64") for h in hosts}
    result = DeployResult({h: HostManifest(h) for h in hosts}, {})
    picked = dep._pick(arts, probes, result)
    assert [a.name for a in picked["a2"]] == ["CAM_ascend910b_debian_x86_64.run"]
    assert [a.name for a in picked["a3"]] == ["CAM_ascend910_93_debian_x86_64.run"]
    assert "arm" not in picked
    err = str(result.errors["arm"])
    assert err.startswith("arm: deploy step 'match' failed: no .run package for this host (soc ascend910_93, "
                          "os debian, arch aarch64; expected CAM_ascend910_93_debian_aarch64.run)"), err
    assert "CAM_ascend910_93_debian_x86_64.run: arch x86_64 (host: aarch64)" in err
    assert ("a3", "picked CAM_ascend910_93_debian_x86_64.run of 2 .run files (matches soc ascend910_93, os debian, "
                  "arch x86_64)") in events


def _bash(steps: list[str], tail: str) -> str:
    return subprocess.run(["bash", "-c", " && ".join([*steps, tail])], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin"}).stdout


def _vendor(tmp_path: Path, template: str) -> str:
    vendor = tmp_path / "o p" / "vendors" / "CAM"
    (vendor / "bin").mkdir(parents=True)
    lines = [f"export ASCEND_CUSTOM_OPP_PATH='{vendor}':${{ASCEND_CUSTOM_OPP_PATH}}"]
    if template == "new":
        lines.append(f"export LD_LIBRARY_PATH='{vendor}/op_api/lib/':${{LD_LIBRARY_PATH}}")
    (vendor / "bin" / "set_env.bash").write_text("\n".join(lines) + "\n")
    return str(vendor / "bin" / "set_env.bash")


@pytest.mark.parametrize("template", ["old", "new"])
def test_op_api_lib_is_on_ld_library_path_after_set_env_once(tmp_path, template):
    set_env = _vendor(tmp_path, template)
    cann = tmp_path / "cann.sh"
    cann.write_text("export LD_LIBRARY_PATH=/cann/lib64\nexport ORDER=cann\n")
    extra = tmp_path / "shmem.sh"
    extra.write_text('export ORDER="$ORDER,shmem"\nexport LD_LIBRARY_PATH=/shmem/lib:$LD_LIBRARY_PATH\n')
    out = _bash(env_steps(str(cann), [str(extra)], set_env), 'echo "$ORDER|$LD_LIBRARY_PATH"')
    lib = str(tmp_path / "o p" / "vendors" / "CAM" / "op_api" / "lib")
    order, path = out.strip().split("|")
    assert order == "cann,shmem"  # extra_set_env after CANN's
    entries = path.split(":")
    assert [e.rstrip("/") for e in entries].count(lib) == 1, entries
    assert entries[0].rstrip("/") == lib and entries[1:] == ["/shmem/lib", "/cann/lib64"], entries


def test_extra_set_env_is_an_env_key_sourced_by_every_launch_line(tmp_path):
    env = make_env({"n1": {"npu": {"soc": "ascend910_93", "count": 16}}},
                   cann={"set_env": "/c/set_env.sh", "extra_set_env": ["/s/shmem/set_env.sh", "/a/atb/set_env.sh"]})
    assert env.cann is not None and env.cann.extra_set_env == ("/s/shmem/set_env.sh", "/a/atb/set_env.sh")
    plan = deploy.HostPlan.for_spec(env.hosts["n1"], env)
    text = deploy.verify_argv(plan, "CAM")[2]
    assert ". /c/set_env.sh && . /s/shmem/set_env.sh && . /a/atb/set_env.sh && . " in text
    with pytest.raises(ConfigError, match=r"cann.extra_set_env.0"):
        make_env(cann={"set_env": "/c/set_env.sh", "extra_set_env": ["relative.sh"]})


def test_an_npu_host_without_cann_set_env_is_a_config_error_naming_the_key():
    env = make_env({"n1": {"npu": {"soc": "ascend910b", "count": 8}}}, source="a2.yaml")
    with pytest.raises(ConfigError, match=r"a2.yaml: cann.set_env: host n1 has npu.soc ascend910b but the env file "
                                          r"sets no cann.set_env"):
        deploy.HostPlan.for_spec(env.hosts["n1"], env)
    with pytest.raises(ConfigError, match=r"cann.set_env: host n1"):
        plan_nodes(env, ["n1"], {}, nproc=1, backend="hccl", master_port=1, launch_id="x", extra_env={},
                   timeout=10, core_limit=None)
    deploy.HostPlan.for_spec(make_env().hosts["host1"], make_env())  # cpu hosts need none


def test_aclnn_symbols_are_the_pybind_exec_npu_cmd_names_and_the_lab_library_exports_them():
    from framework.lab.artifacts import ACLNN_APIS, opapi_source

    assert sorted({a for apis in OP_ACLNN.values() for a in apis}) == sorted(ACLNN_APIS)
    src = opapi_source()
    assert all(f"int {s}(void)" in src for s in aclnn_symbols())


PLAN = deploy.HostPlan(host="h", workdir="/w", python="python3", venv=False, install_path="/w/opp",
                       manage_ip="10.0.0.1", soc="ascend910_93", cann_set_env="/c/set_env.sh")


@pytest.mark.parametrize(("stdout", "problems"), [
    ("CAMIT-OPP /w/opp/vendors/CAM:\nCAMIT-OPAPI-MISSING \n", []),
    ("CAMIT-OPP /w/opp/vendors/CAM/\nCAMIT-OPAPI-MISSING \n", []),
    ("CAMIT-OPP /other/vendors/X:/w/opp/vendors/CAM\nCAMIT-OPAPI-MISSING \n",
     ["ASCEND_CUSTOM_OPP_PATH=/other/vendors/X:/w/opp/vendors/CAM does not start with the vendor dir "
      "/w/opp/vendors/CAM"]),
    ("CAMIT-OPP \nCAMIT-OPAPI-ERROR libcust_opapi.so: cannot open shared object file\n",
     ["dlopen(libcust_opapi.so) by bare name failed after sourcing set_env: libcust_opapi.so: cannot open shared "
      "object file", "ASCEND_CUSTOM_OPP_PATH=(empty) does not start with the vendor dir /w/opp/vendors/CAM"]),
    ("CAMIT-OPP /w/opp/vendors/CAM\nCAMIT-OPAPI-MISSING aclnnFusedDeepMoeGetWorkspaceSize,aclnnFusedDeepMoe\n",
     ["libcust_opapi.so lacks aclnnFusedDeepMoeGetWorkspaceSize, aclnnFusedDeepMoe"]),
])
def test_verify_reports_the_vendor_environment_problems(stdout, problems):
    assert deploy.plan.vendor_env_problems(PLAN, "CAM", stdout) == problems


def test_verify_code_dlopens_by_bare_name_in_a_real_interpreter(tmp_path):
    """The verify program's opapi part, run with the real bash/python against a real compiled library."""
    from framework.lab.artifacts import build_opapi_library

    set_env = _vendor(tmp_path, "old")
    build_opapi_library(Path(set_env).parents[1] / "op_api" / "lib")
    plan = deploy.HostPlan(host="h", workdir=str(tmp_path / "w"), python="python3", venv=False,
                           install_path=str(tmp_path / "o p"), manage_ip="10.0.0.1")
    argv = deploy.verify_argv(plan, "CAM")
    # stop before the op library import: only the environment part
    script = argv[2].replace("import torch, umdk_cam_op_lib as m", "raise SystemExit(0)")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert deploy.plan.vendor_env_problems(plan, "CAM", out) == []
