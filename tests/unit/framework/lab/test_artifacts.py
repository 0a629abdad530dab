"""framework.lab.artifacts: the real wheel and makeself .run, built into tmp dirs and exercised for real
(the .run installed with CANN's command line, set_env.bash sourced in bash, the wheel pip-installed
into a fresh venv and imported with and without the vendor environment)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from framework.lab import artifacts
from framework.lab.artifacts import ArtifactError

REPO = Path(__file__).resolve().parents[4]
needs_makeself = pytest.mark.skipif(shutil.which("makeself") is None, reason="makeself not installed")
SUCCESS = "SUCCESS"
#: a line of the msOpGen installer (tests/data/ascend/custom-opp-install-*.txt)
LOG_RE = re.compile(r"^\[ops_custom\] \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] \[(INFO|ERROR|WARNING)\] ")


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("timeout", 120)
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, **kw)


def bash(script: str, *args: str, **kw) -> subprocess.CompletedProcess:
    """Run `script` in bash; `args` become $0, $1, …"""
    return run(["bash", "-c", script, *args], **kw)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    if shutil.which("makeself") is None:
        pytest.skip("makeself not installed")
    return artifacts.build_all(tmp_path_factory.mktemp("art"))


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The good .run installed once (quiet) into '<tmp>/opp dir' (a space in the path on purpose)."""
    root = tmp_path_factory.mktemp("inst") / "opp dir"
    res = run([str(built["run"]), f"--install-path={root}", "--quiet"])
    assert res.returncode == 0, res.stdout + res.stderr
    return root


@pytest.fixture(scope="module")
def venv(built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (system site-packages: torch visible) with the built wheel pip-installed."""
    path = tmp_path_factory.mktemp("venv") / "v"
    res = run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)])
    assert res.returncode == 0, res.stderr
    py = path / "bin" / "python"
    res = run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check", "-q",
               str(built["wheel"])])
    assert res.returncode == 0, res.stdout + res.stderr
    return py


# --------------------------------------------------------------------------- names and CLI
def test_artifact_names(built):
    assert built["wheel"].name == "umdk_cam_op_lib-209.0.0b1-py3-none-any.whl"
    assert built["run"].name == f"CAM_cpu_{artifacts.os_id()}_{platform.machine()}.run"
    assert os.access(built["run"], os.X_OK)


def test_os_id_reads_os_release(tmp_path):
    (tmp_path / "os-release").write_text('NAME="openEuler"\nID="openEuler"\nVERSION_ID="22.03"\n')
    assert artifacts.os_id(tmp_path / "os-release") == "openEuler"
    assert artifacts.os_id(tmp_path / "missing") == "linux"


@needs_makeself
def test_the_run_is_named_for_the_soc_the_env_declares(tmp_path):
    """--env-in an A3 env: CAM_ascend910_93_<os>_<arch>.run, as the real package for those hosts is named."""
    from tests.support.builders import env_document

    env_in = tmp_path / "a3.yaml"
    env_in.write_text(json.dumps(env_document(["h1", "h2"], npu={"soc": "ascend910_93", "count": 16})))
    res = run([sys.executable, "-m", "framework.artifacts", "build", "--out", str(tmp_path / "o"), "--only", "run",
               "--env-in", str(env_in), "--env-out", str(tmp_path / "out.yaml")], cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()).name == f"CAM_ascend910_93_{artifacts.os_id()}_{platform.machine()}.run"
    mixed = env_document({"h1": {"npu": {"soc": "ascend910b", "count": 8}},
                          "h2": {"npu": {"soc": "ascend910_93", "count": 16}}})
    env_in.write_text(json.dumps(mixed))
    res = run([sys.executable, "-m", "framework.artifacts", "build", "--out", str(tmp_path / "p"), "--only", "run",
               "--env-in", str(env_in), "--env-out", str(tmp_path / "out.yaml")], cwd=REPO)
    assert res.returncode == 1 and "hosts declare npu.soc ascend910_93, ascend910b; give --soc" in res.stderr


@needs_makeself
def test_cli_builds_and_prints_both_paths(tmp_path):
    res = run([sys.executable, "-m", "framework.artifacts", "build", "--out", str(tmp_path / "o"), "--json"],
              cwd=REPO)
    assert res.returncode == 0, res.stderr
    paths = json.loads(res.stdout)
    assert sorted(paths) == ["run", "wheel"] and all(Path(p).is_file() for p in paths.values())
    res = run([sys.executable, "-m", "framework.artifacts", "build", "--out", str(tmp_path / "p"), "--only", "run",
               "--soc", "ascend910_93", "--template", "old"], cwd=REPO)
    assert res.returncode == 0 and res.stdout.strip().endswith(f"CAM_ascend910_93_{artifacts.os_id()}_"
                                                                f"{platform.machine()}.run")
    listing = run(["sh", res.stdout.strip(), "--list"]).stdout
    assert "./vendors/CAM/op_api/lib/libcust_opapi.so" in listing


@needs_makeself
def test_builds_are_reproducible(built, tmp_path):
    again = artifacts.build_all(tmp_path)
    assert sha256(again["wheel"]) == sha256(built["wheel"])
    assert sha256(again["run"]) == sha256(built["run"])


def test_bad_arguments_are_artifact_errors(tmp_path):
    with pytest.raises(ArtifactError, match="unknown fault"):
        artifacts.build_run_package(tmp_path, fault="boom")
    with pytest.raises(ArtifactError, match="unknown installer template"):
        artifacts.build_run_package(tmp_path, template="boom")
    with pytest.raises(ArtifactError, match="no pyproject.toml"):
        artifacts.build_wheel(tmp_path, source=tmp_path)
    with pytest.raises(ArtifactError, match="unsupported makeself version"):
        artifacts.patched_header("#!/bin/sh\necho not a makeself header\n")


# --------------------------------------------------------------------------- the .run package
def _installer_lines(stdout: str) -> list[str]:
    """The installer's log lines; every other line must be a same-file listing (``include lib ``)."""
    lines = stdout.splitlines()
    for line in lines[:-1]:
        assert LOG_RE.match(line) or re.fullmatch(r"([\w.-]+ )+", line), line
    return [ln for ln in lines if LOG_RE.match(ln)]


def test_install_tree_and_output(built, installed, tmp_path):
    res = run([str(built["run"]), f"--install-path={installed}", "--quiet"])      # reinstall over it
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert lines[-1] == SUCCESS                                                    # a bare SUCCESS line, last
    logged = _installer_lines(res.stdout)
    assert "[INFO] upgrade op api" in " ".join(logged) and "include lib " in lines   # same files listed
    vendor = installed / "vendors" / "CAM"
    assert logged[-1].endswith(f"execute the command [ source {vendor}/bin/set_env.bash ] to set the environment "
                               "path")
    for rel in ("bin/set_env.bash", "op_api/lib/libcust_opapi.so", "version.info",
                "op_api/include/aclnn_moe_dispatch_normal.h",
                f"op_impl/ai_core/tbe/op_tiling/lib/linux/{platform.machine()}/libcust_opmaster_rt2.0.so",
                f"op_proto/lib/linux/{platform.machine()}/libcust_opsproto_rt2.0.so"):
        assert (vendor / rel).is_file(), rel
    info = dict(line.split("=", 1) for line in (vendor / "version.info").read_text().splitlines())
    assert info["Version"] == "209.0.0b1" and info["vendor_name"] == "CAM" and info["soc_version"] == "cpu"


def test_libcust_opapi_is_a_shared_object_with_every_aclnn_api(installed):
    lib = installed / "vendors" / "CAM" / "op_api" / "lib" / "libcust_opapi.so"
    assert lib.read_bytes()[:4] == b"\x7fELF"
    res = run([sys.executable, "-c", "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
               "print(all(hasattr(lib, n) for n in sys.argv[2:]))", str(lib),
               *[n for api in artifacts.ACLNN_APIS for n in (api, api + "GetWorkspaceSize")]])
    assert res.stdout.strip() == "True", res.stderr
    # the names are upstream's EXEC_NPU_CMD(...) of umdk src/cam/comm_operator/pybind/*.cpp
    assert set(artifacts.ACLNN_APIS) == {"aclnnFusedDeepMoe", "aclnnDispatchLayout", "aclnnNotifyDispatch",
                                         "aclnnMoeDispatchNormal", "aclnnMoeCombineNormal"}


def test_verbose_install_looks_like_cann(built, tmp_path):
    root = tmp_path / "opp"
    stale = root / "vendors" / "CAM" / "op_api" / "lib" / "libstale.so"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    res = run(["sh", str(built["run"]), f"--install-path={root}/"])
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()
    assert lines[0].startswith("Verifying archive integrity...") and "All good." in lines[0]
    assert any(ln.endswith("[INFO] replace or merge old ops op_api files ......") for ln in lines)
    assert lines[-1] == SUCCESS
    assert not stale.exists()                                   # quiet: the old op_api directory is replaced


def test_set_env_bash_prepends_the_vendor_paths(installed):
    vendor = installed / "vendors" / "CAM"
    script = (f'export LD_LIBRARY_PATH=/usr/lib/x; unset ASCEND_CUSTOM_OPP_PATH; '
              f'source "{vendor}/bin/set_env.bash"; echo "$LD_LIBRARY_PATH"; echo "$ASCEND_CUSTOM_OPP_PATH"; '
              f'source "{vendor}/bin/set_env.bash"; echo "$ASCEND_CUSTOM_OPP_PATH"')
    res = bash(script)
    assert res.returncode == 0, res.stderr
    ld, opp, opp2 = res.stdout.splitlines()
    assert ld == f"{vendor}/op_api/lib/:/usr/lib/x"              # as the template writes it (trailing '/')
    assert opp == f"{vendor}:"                                   # the template's stray ':' when unset
    assert opp2 == f"{vendor}:{vendor}:"


def test_old_template_set_env_lacks_op_api_and_prints_the_hint(tmp_path):
    pkg = artifacts.build_run_package(tmp_path / "out", template="old")
    root = tmp_path / "opp"
    res = run(["sh", str(pkg), f"--install-path={root}", "--quiet"])
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == SUCCESS
    vendor = root / "vendors" / "CAM"
    assert _installer_lines(res.stdout)[-1].endswith(
        f"execute the command [ export LD_LIBRARY_PATH={vendor}/op_api/lib/:${{LD_LIBRARY_PATH}} ] to set the "
        "environment path")
    text = (vendor / "bin" / "set_env.bash").read_text()
    assert text == f"#!/bin/bash\nexport ASCEND_CUSTOM_OPP_PATH={vendor}:${{ASCEND_CUSTOM_OPP_PATH}}\n"
    res = bash(f'unset LD_LIBRARY_PATH; source "{vendor}/bin/set_env.bash"; printf %s "$LD_LIBRARY_PATH"')
    assert res.stdout == ""
    with pytest.raises(ArtifactError, match="unknown installer template"):
        artifacts.build_run_package(tmp_path / "x", template="ancient")


def test_quotes_and_spaces_in_the_install_path(built, tmp_path):
    root = tmp_path / "it's a $HOME `id` dir" / "opp"
    res = run([str(built["run"]), f"--install-path={root}", "--quiet"])
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == SUCCESS
    res = bash('unset LD_LIBRARY_PATH; source "$0/vendors/CAM/bin/set_env.bash"; printf %s "$LD_LIBRARY_PATH"',
               str(root))
    assert res.stdout == f"{root}/vendors/CAM/op_api/lib/:"


def test_relative_install_path_is_refused(built, tmp_path):
    res = run([str(built["run"]), "--install-path=rel/opp", "--quiet"], cwd=tmp_path)
    assert res.returncode != 0
    assert LOG_RE.match(res.stdout) and "[ERROR] use absolute path for --install-path argument" in res.stdout
    assert "SUCCESS" not in res.stdout and not (tmp_path / "rel").exists()


def test_unknown_options_are_ignored_and_the_default_target(built, tmp_path):
    res = run([str(built["run"]), f"--install-path={tmp_path / 'a'}", "--frobnicate", "--install-for-all",
               "--quiet", "--version"])
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == SUCCESS, res.stdout
    assert (tmp_path / "a" / "vendors" / "CAM" / "bin" / "set_env.bash").is_file()
    env = {k: v for k, v in os.environ.items() if k not in ("ASCEND_OPP_PATH", "ASCEND_CUSTOM_OPP_PATH")}
    res = run([str(built["run"]), "--quiet"], env=env)
    assert res.returncode != 0 and "[ERROR] env ASCEND_OPP_PATH no exist" in res.stdout
    res = run([str(built["run"]), "--quiet"], env=dict(env, ASCEND_OPP_PATH=str(tmp_path / "opp")))
    assert res.returncode != 0 and f"[ERROR] {tmp_path / 'opp'} no exist" in res.stdout
    (tmp_path / "opp").mkdir()
    res = run([str(built["run"]), "--quiet"], env=dict(env, ASCEND_OPP_PATH=str(tmp_path / "opp")))
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == SUCCESS
    vendors = tmp_path / "opp" / "vendors"
    assert (vendors / "config.ini").read_text() == "load_priority=CAM\n"
    assert not (vendors / "CAM" / "bin").exists()               # set_env.bash only with --install-path
    assert "export LD_LIBRARY_PATH=" in _installer_lines(res.stdout)[-1]


def test_makeself_own_options_still_work(built):
    res = run([str(built["run"]), "--check"])
    assert res.returncode == 0 and "All good." in res.stdout
    res = run([str(built["run"]), "--info"])
    assert res.returncode == 0 and "CAM custom operator package 209.0.0b1 (cpu)" in res.stdout
    assert "./install.sh" in res.stdout
    res = run([str(built["run"]), "--list"])
    assert res.returncode == 0 and "./vendors/CAM/op_api/lib/libcust_opapi.so" in res.stdout
    assert "./install.sh" in res.stdout
    res = run([str(built["run"]), "--help"])
    assert res.returncode == 0 and "--install-path=<absolute path>" in res.stderr


@needs_makeself
def test_fault_fail_exits_nonzero_and_installs_nothing(tmp_path):
    pkg = artifacts.build_run_package(tmp_path / "out", fault="fail")
    assert pkg.name == artifacts.run_package_name("cpu")
    root = tmp_path / "opp"
    res = run([str(pkg), f"--install-path={root}", "--quiet"])
    assert res.returncode != 0
    assert any("[ERROR]" in ln and LOG_RE.match(ln) for ln in res.stdout.splitlines()) and "SUCCESS" not in res.stdout
    assert not (root / "vendors").exists()
    from framework.deploy.plan import parse_run_output
    ok, err = parse_run_output(res.stdout)
    assert not ok and err is not None and "[ERROR]" in err


@needs_makeself
def test_fault_nosuccess_exits_zero_without_success_line(tmp_path):
    pkg = artifacts.build_run_package(tmp_path / "out", fault="nosuccess")
    root = tmp_path / "opp"
    for extra in (["--quiet"], []):
        res = run([str(pkg), f"--install-path={root}", *extra])
        assert res.returncode == 0
        assert "SUCCESS" not in res.stdout and "ERROR" not in res.stdout
    assert (root / "vendors" / "CAM" / "bin" / "set_env.bash").is_file()


# --------------------------------------------------------------------------- the wheel
_CALL = ("import torch, importlib.metadata as md, umdk_cam_op_lib as m; "
         "print(md.version('umdk_cam_op_lib'), "
         "m.get_dispatch_layout(torch.tensor([[1, 0], [1, 2]]), 4, 2)[0].tolist())")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CAMIT_STANDIN_NO_OPAPI_CHECK", "PYTHONPATH", "LD_LIBRARY_PATH")}
    return env


def test_wheel_installs_and_imports_in_a_fresh_venv(venv, tmp_path):
    # like the real wheel: no __version__ on the module, the version is the distribution's
    res = run([str(venv), "-c", "import umdk_cam_op_lib; print(hasattr(umdk_cam_op_lib, '__version__'))"],
              cwd=tmp_path, env=_clean_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"
    res = run([str(venv), "-c", "import importlib.metadata as md, umdk_cam_op_lib as m; "
               "print(md.version('umdk_cam_op_lib')); print(m.__file__)"], cwd=tmp_path, env=_clean_env())
    version, where = res.stdout.split()
    assert version == "209.0.0b1" and where.startswith(str(venv.parent.parent))


def test_op_call_needs_the_vendor_set_env(venv, installed, tmp_path):
    set_env = installed / "vendors" / "CAM" / "bin" / "set_env.bash"
    ok = bash('source "$0" && exec "$1" -c "$2"', str(set_env), str(venv), _CALL, cwd=tmp_path, env=_clean_env())
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "209.0.0b1 [1, 2, 1, 0]"
    bad = run([str(venv), "-c", _CALL], cwd=tmp_path, env=_clean_env())
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1] == (
        "RuntimeError: aclnnDispatchLayout or aclnnDispatchLayoutGetWorkspaceSize not in libopapi.so, "
        "or libopapi.sonot found.")


def test_old_template_op_call_needs_ld_library_path(venv, tmp_path):
    """Old msOpGen template: set_env.bash alone is not enough, the printed LD_LIBRARY_PATH export is."""
    pkg = artifacts.build_run_package(tmp_path / "out", template="old")
    root = tmp_path / "opp"
    assert run(["sh", str(pkg), f"--install-path={root}", "--quiet"]).returncode == 0
    vendor = root / "vendors" / "CAM"
    only_set_env = bash('source "$0/bin/set_env.bash" && exec "$1" -c "$2"', str(vendor), str(venv), _CALL,
                        cwd=tmp_path, env=_clean_env())
    assert only_set_env.returncode != 0 and "not in libopapi.so" in only_set_env.stderr
    with_hint = bash('source "$0/bin/set_env.bash" && export LD_LIBRARY_PATH="$0/op_api/lib/:${LD_LIBRARY_PATH}" '
                     '&& exec "$1" -c "$2"', str(vendor), str(venv), _CALL, cwd=tmp_path, env=_clean_env())
    assert with_hint.returncode == 0, with_hint.stderr
    assert with_hint.stdout.strip() == "209.0.0b1 [1, 2, 1, 0]"


def test_broken_wheel_has_its_own_version_and_fails_to_import(tmp_path):
    wheel = artifacts.build_wheel(tmp_path / "out", broken_import=True)
    assert wheel.name == "umdk_cam_op_lib-209.0.0b1+broken-py3-none-any.whl"
    venv = tmp_path / "v"
    assert run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)]).returncode == 0
    py = str(venv / "bin" / "python")
    res = run([py, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check", "-q", str(wheel)])
    assert res.returncode == 0, res.stderr
    res = run([py, "-c", "import importlib.metadata as md; print(md.version('umdk_cam_op_lib'))"], cwd=tmp_path)
    assert res.stdout.strip() == "209.0.0b1+broken"
    res = run([py, "-c", "import umdk_cam_op_lib"], cwd=tmp_path, env=_clean_env())
    assert res.returncode != 0 and "ImportError: umdk_cam_op_lib 209.0.0b1+broken" in res.stderr
