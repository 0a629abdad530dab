"""``camit calibrate`` on the emulated A3 lab (CAMIT_NPU_LAB_ENV): the bundle of the emulated hosts
agrees with the built-in profile, a changed fact is named, and ``lab up --calibration`` replays a
bundle's capture. Real sshd, real ``camit`` (artifacts build, deploy, calibrate) and ``python -m
framework.lab`` processes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from framework.calib.bundle import BUNDLE_FILE
from framework.calib.golden import KEY as GOLDEN_KEY
from framework.config.effective import EnvConfig
from framework.hosts import Cluster
from framework.lab.manage import Lab

REPO = Path(__file__).resolve().parents[2]


def _run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def bundle_dir(npu_lab_env_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab calibrated as the profile was made: the op library (the stand-in) deployed, into a
    workdir of this module's own, so its refusals are recorded rather than a missing module."""
    tmp = tmp_path_factory.mktemp("calib")
    cp = _run(
        "framework.artifacts",
        "build",
        "--out",
        str(tmp / "art"),
        "--env-in",
        str(npu_lab_env_path),
        "--env-out",
        str(tmp / "built.yaml"),
    )
    assert cp.returncode == 0, cp.stdout + cp.stderr
    doc = yaml.safe_load((tmp / "built.yaml").read_text())
    doc["defaults"]["workdir"] = "/var/tmp/camit/calibrate"
    env = tmp / "env.yaml"
    env.write_text(yaml.safe_dump(doc, sort_keys=False))
    cp = _run("framework.cli", "deploy", "--env", str(env), "--report-dir", str(tmp / "deploy"))
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    cp = _run("framework.cli", "calibrate", "--env", str(env), "--out", str(tmp / "bundle"))
    assert cp.returncode == 0, cp.stderr
    return tmp / "bundle"


def _altered(src: Path, dst: Path, key: str, value: str) -> Path:
    shutil.copytree(src, dst)
    doc = json.loads((dst / BUNDLE_FILE).read_text())
    for facts in [doc["facts"], *doc["hosts"].values()]:
        if (
            key in facts
        ):  # host facts are in every host's part, torch facts only in the top-level one
            facts[key]["value"] = value
    (dst / BUNDLE_FILE).write_text(json.dumps(doc))
    return dst


def test_emulated_hosts_match_the_profile_and_a_changed_fact_is_named(
    bundle_dir: Path, tmp_path: Path
) -> None:
    same = _run("framework.cli", "calibrate", "--compare", str(bundle_dir))
    assert (same.returncode, same.stdout) == (0, ""), same.stdout + same.stderr
    files = sorted(p.relative_to(bundle_dir) for p in bundle_dir.rglob("*") if p.is_file())
    assert {p.parts[0] for p in files} == {BUNDLE_FILE, "raw"}  # no core, no log, no launch folder
    assert all(p.suffix == ".txt" for p in files if p.parts[0] == "raw")
    assert sum((bundle_dir / p).stat().st_size for p in files) < 1 << 20
    facts = json.loads((bundle_dir / BUNDLE_FILE).read_text())["facts"]
    for dtype in ("bfloat16", "float16"):  # fused vs golden measured at world 4 on hccl
        assert facts[f"{GOLDEN_KEY}.{dtype}"]["value"] == "holds"
        assert facts[f"{GOLDEN_KEY}.{dtype}.measured"]["value"].endswith("(worst of 4 ranks)")
    changed = _altered(
        bundle_dir, tmp_path / "changed", "torch_npu.numpy_error", "TypeError: something else"
    )
    cp = _run("framework.cli", "calibrate", "--compare", str(changed))
    assert cp.returncode == 1
    assert [line.split()[1] for line in cp.stdout.splitlines()] == ["torch_npu.numpy_error"]


def _up_args(env: EnvConfig) -> list[str]:
    key = env.defaults.key_file
    assert key is not None
    lab = Lab.load(json.loads((key.parent / "lab.json").read_text())["name"], key.parent)
    p = lab.plan
    assert p.npu is not None and p.jump is None
    args = [
        "framework.lab",
        "up",
        "--hosts",
        str(len(p.hosts)),
        "--name",
        p.name,
        "--subnet",
        str(p.subnet),
        "--npu",
        p.npu.profile,
        "--env-out",
        str(p.env_file),
        "--state-dir",
        str(p.state_dir),
    ]
    return args + (
        ["--visible", ",".join(map(str, p.npu.visible))] if p.npu.visible is not None else []
    )


#: the torch fact the replayed bundle changes (raised by standin_npu/torch_npu/_replay.py)
NUMPY_ERROR = "RuntimeError: REPLAYED numpy refusal on npu:0"


@pytest.fixture
def replaying(npu_lab_env: EnvConfig, bundle_dir: Path, tmp_path: Path) -> Iterator[Cluster]:
    """The lab brought up again replaying an altered bundle (npu-smi, driver, one torch_npu error
    text), calibrated again into ``tmp_path/again`` (without the golden launch); restored after."""
    args = _up_args(npu_lab_env)
    bundle = _altered(
        bundle_dir, tmp_path / "altered", "host.npu_smi_info", "ALTERED capture\nsecond line\n"
    )
    bundle = _altered(bundle, tmp_path / "altered2", "host.driver_version", "Version=99.9.9\n")
    _altered(bundle, tmp_path / "altered3", "torch_npu.numpy_error", NUMPY_ERROR)
    try:
        cp = _run(*args, "--calibration", str(tmp_path / "altered3"))
        assert cp.returncode == 0, cp.stderr
        cp = _run("framework.cli", "calibrate", "--env", str(bundle_dir.parent / "env.yaml"),
                  "--no-golden", "--out", str(tmp_path / "again"))
        assert cp.returncode == 0, cp.stderr
        with Cluster.from_env(npu_lab_env) as cluster:
            yield cluster
    finally:
        assert _run(*args).returncode == 0


def _differing(bundle: Path) -> list[str]:
    """``calibrate --compare``'s named facts, but the golden verdicts a --no-golden run skipped."""
    cp = _run("framework.cli", "calibrate", "--compare", str(bundle))
    keys = [line.split()[1] for line in cp.stdout.splitlines()]
    assert cp.returncode == (1 if keys else 0), cp.stderr
    return [k for k in keys if not k.startswith(GOLDEN_KEY)]





def test_lab_up_calibration_replays_the_bundle_and_calibrates_back_to_it(
    replaying: Cluster, tmp_path: Path
) -> None:
    """The tools answer with the captures, the records are the bundle's; then replay, calibrate,
    compare: exactly the altered facts differ from the profile (every other replayed capture and
    torch fact comes back as the bundle had it), the torch_npu stand-in's text verbatim."""
    again = json.loads((tmp_path / "again" / BUNDLE_FILE).read_text())
    assert again["facts"]["torch_npu.numpy_error"]["value"] == NUMPY_ERROR
    assert _differing(tmp_path / "again") == [
        "host.driver_version", "host.npu_smi_info", "torch_npu.numpy_error"]
    for host in replaying:
        result = host.run(["npu-smi", "info"])
        assert (result.rc, result.stdout) == (0, "ALTERED capture\nsecond line\n")
        assert host.run(["npu-smi", "info", "-l"]).stdout.startswith("        Total Count")
        assert (
            host.run(["cat", "/usr/local/Ascend/driver/version.info"]).stdout == "Version=99.9.9\n"
        )


def test_up_without_calibration_stops_the_replay(npu_lab_env: EnvConfig) -> None:
    with Cluster.from_env(npu_lab_env) as cluster:
        for host in cluster:
            assert "Process id" in host.run(["npu-smi", "info"]).stdout
            assert (
                "Version=99.9.9"
                not in host.run(["cat", "/usr/local/Ascend/driver/version.info"]).stdout
            )
            assert host.run(["test", "-e", "/usr/local/Ascend/.camit-emu/torch-facts.json"]).rc == 1


def test_hccl_variables_are_seen_as_a_rank_sees_them(bundle_dir: Path, tmp_path: Path) -> None:
    """launch.env's HCCL_BUFFSIZE reaches the probe: the bundle differs from the profile's unset."""
    doc = yaml.safe_load((bundle_dir.parent / "env.yaml").read_text())
    doc.setdefault("launch", {}).setdefault("env", {})["HCCL_BUFFSIZE"] = "300"
    env = tmp_path / "env.yaml"
    env.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "bundle"
    assert (
        _run(
            "framework.cli", "calibrate", "--env", str(env), "--hosts", "host1", "--no-golden",
            "--out", str(out),
        ).returncode
        == 0
    )
    assert _differing(out) == ["hccl.env.HCCL_BUFFSIZE"]
