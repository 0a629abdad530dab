"""Unit tests of the emulated Ascend lab's planning (``up --npu``) and its CLI errors: no root, no namespaces."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.config.effective import load
from framework.errors import EXIT_USAGE, LabError
from framework.lab import emu
from framework.lab.manage import Lab, LabHost, main
from framework.lab.plan import (
    LabPlan,
    MountKind,
    env_document,
    mount_points,
    mount_points_on_down,
    mount_points_on_up,
    mount_points_to_create,
    npu_shape,
    parse_visible,
    plan_lab,
    render_env_yaml,
    setup_script,
    sshd_config_lines,
    tree_path,
)

STATE = Path("/run/camit-lab/camitnpu")
PY = "/usr/bin/python3"


def make(n: int = 2, **kw: Any) -> LabPlan:
    args: dict[str, Any] = {"name": "camitnpu", "subnet": "10.78.0.0/24", "state_dir": STATE,
                               "env_file": Path("/repo/env/lab-npu.yaml"), "python": PY}
    args.update(kw)
    return plan_lab(n, **args)


def env_of(plan: LabPlan) -> dict[str, Any]:
    keys = {h.name: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
            for h in plan.hosts}
    return env_document(plan, keys, {}, "x86_64")


# --------------------------------------------------------------------------- the plan


def test_cpu_lab_has_no_npu_part() -> None:
    plan = make()
    assert plan.npu is None
    assert all(h.mounts == () for h in plan.hosts)
    assert npu_shape(plan) == "a CPU lab"


@pytest.mark.parametrize("name", ["a2", "a3"])
def test_npu_plan_takes_the_profile(name: str) -> None:
    prof = emu.profile(name)
    plan = make(npu=name)
    assert plan.npu is not None
    assert (plan.npu.profile, plan.npu.soc, plan.npu.count, plan.npu.set_env) == (
        prof.name, prof.soc, prof.count, prof.set_env)
    assert (plan.npu.npu_json, plan.npu.python, plan.npu.visible) == (emu.NPU_JSON, emu.PYTHON, None)
    assert npu_shape(plan) == f"an emulated {name} lab"


def test_a3_has_16_devices_and_a2_8() -> None:
    a3, a2 = make(npu="a3").npu, make(npu="a2").npu
    assert a3 is not None and a3.count == 16
    assert a2 is not None and a2.count == 8


def test_each_host_mounts_its_own_tree() -> None:
    plan = make(npu="a3")
    for h in plan.hosts:
        assert h.emu_dir == STATE / "hosts" / h.name / "emu"
        assert h.mounts == tuple((str(h.emu_dir / m.tree), m.target) for m in emu.MOUNTS)
    assert plan.hosts[0].mounts != plan.hosts[1].mounts


def test_setup_script_binds_the_tree_after_the_host_dirs_and_before_exec() -> None:
    plan = make(npu="a3")
    h = plan.hosts[1]
    lines = setup_script(h).splitlines()
    binds = [f"mount --bind {h.emu_dir / m.tree} {m.target}" for m in emu.MOUNTS]
    assert lines[-1] == 'exec "$@"'
    assert lines[-1 - len(binds):-1] == binds
    assert lines.index(binds[0]) > max(i for i, line in enumerate(lines) if "/tmp" in line and "--bind" in line)
    # set up as CANN's docs ask: HCCL's host ports reserved (preflight's ports check)
    assert "echo 60000-60031 > /proc/sys/net/ipv4/ip_local_reserved_ports 2>/dev/null || true" in lines


def test_setup_script_with_small_workdir_keeps_the_tree_binds() -> None:
    h = make(npu="a2").hosts[0]
    script = setup_script(h, "8m")
    assert all(f"mount --bind {h.emu_dir / m.tree} {m.target}" in script for m in emu.MOUNTS)
    assert script.index("camit-small-workdir") > script.index(f"{emu.MOUNTS[-1].target}\n")


def test_sshd_config_sets_the_npu_json_only_on_emulated_hosts() -> None:
    plan = make(npu="a3")
    lines = sshd_config_lines(plan, plan.hosts[0])
    assert lines[-1] == f"SetEnv CAMIT_EMU_NPU={emu.NPU_JSON}"
    assert lines[:-1] == sshd_config_lines(make(), make().hosts[0])
    assert not any(line.startswith("SetEnv") for line in sshd_config_lines(make(), make().hosts[0]))


def test_tree_path_maps_host_paths_into_the_tree() -> None:
    plan = make(npu="a3")
    assert plan.npu is not None
    h = plan.hosts[0]
    py = tree_path(h, plan.npu, emu.PYTHON)
    assert py == h.emu_dir / "Ascend" / ".camit-emu" / "python" / "bin" / "python"
    assert tree_path(h, plan.npu, "/etc/ascend_install.info") == h.emu_dir / "etc" / "ascend_install.info"
    with pytest.raises(LabError, match="not under any mount"):
        tree_path(h, plan.npu, "/usr/local/bin/x")


# --------------------------------------------------------------------------- env document


def test_emulated_env_declares_npus_cann_python_and_hccl() -> None:
    plan = make(npu="a3")
    doc = env_of(plan)
    d = doc["defaults"]
    assert isinstance(d, dict)
    assert d["npu"] == {"soc": "ascend910_93", "count": 16}
    assert (d["python"], d["venv"]) == (emu.PYTHON, False)
    assert doc["cann"] == {"set_env": emu.profile("a3").set_env}
    assert doc["launch"] == {"backend": "hccl"}


def test_emulated_env_with_visible_lists_them() -> None:
    doc = env_of(make(npu="a3", visible="0,1,8"))
    assert doc["defaults"]["npu"] == {"soc": "ascend910_93", "count": 16, "visible": [0, 1, 8]}


def test_cpu_env_is_unchanged() -> None:
    doc = env_of(make())
    assert "cann" not in doc
    assert doc["launch"] == {"backend": "gloo"}
    assert doc["defaults"]["npu"] == {"count": 0, "soc": "cpu"}
    assert (doc["defaults"]["python"], doc["defaults"]["venv"]) == (PY, True)


@pytest.mark.parametrize(("npu", "visible"), [("a3", None), ("a3", "0,1"), ("a2", "7"), ("a2", None)])
def test_emulated_env_validates_with_camits_loader(tmp_path: Path, npu: str, visible: str | None) -> None:
    plan = make(npu=npu, visible=visible)
    path = tmp_path / "lab-npu.yaml"
    path.write_text(render_env_yaml(env_of(plan)))
    env = load(path)
    prof = emu.profile(npu)
    assert env.launch.backend == "hccl"
    assert env.cann is not None and env.cann.set_env == prof.set_env
    for h in env.hosts.values():
        assert (h.npu.soc, h.npu.count) == (prof.soc, prof.count)
        assert h.npu.visible == (tuple(int(v) for v in visible.split(",")) if visible else None)
        assert (h.python, h.venv) == (emu.PYTHON, False)


# --------------------------------------------------------------------------- bad input


def test_unknown_profile_names_the_valid_ones() -> None:
    with pytest.raises(LabError) as exc:
        make(npu="a9")
    assert "'a9'" in str(exc.value) and "a2" in str(exc.value) and "a3" in str(exc.value)


@pytest.mark.parametrize(("visible", "match"), [
    ("16", "device 16 is past the a3 profile's 16 devices"),
    ("0,99", "device 99 is past"),
    ("0,x", "invalid --visible '0,x'"),
    ("", "invalid --visible ''"),
    ("0,,1", "invalid --visible"),
    ("-1", "invalid --visible"),
    ("1,1", "lists device 1 twice"),
])
def test_bad_visible(visible: str, match: str) -> None:
    with pytest.raises(LabError, match=match):
        make(npu="a3", visible=visible)


def test_visible_past_the_a2_count() -> None:
    with pytest.raises(LabError, match="device 8 is past the a2 profile's 8 devices"):
        make(npu="a2", visible="0,8")


def test_visible_without_npu() -> None:
    with pytest.raises(LabError, match="--visible needs --npu"):
        make(visible="0,1")


def test_parse_visible_accepts_lists_and_spaces() -> None:
    assert parse_visible(" 0, 3 ", 16, "a3") == (0, 3)
    assert parse_visible([2, 1], 8, "a2") == (2, 1)


@pytest.mark.parametrize(("extra", "match"), [
    (["--npu", "a9"], "unknown emulated NPU profile 'a9'"),
    (["--npu", "a3", "--visible", "16"], "device 16 is past"),
    (["--npu", "a3", "--visible", "0;1"], "invalid --visible"),
    (["--visible", "0"], "--visible needs --npu"),
])
def test_cli_up_refuses_bad_npu_input(capsys: pytest.CaptureFixture[str], extra: list[str], match: str) -> None:
    assert main(["up", "--hosts", "2", "--name", "camitnpu", *extra]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("lab: error: ") and match in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- mount-point bookkeeping


def test_mount_points_are_the_targets_in_order() -> None:
    assert mount_points(None) == []
    assert mount_points(make(npu="a3").npu) == [(m.target, m.kind) for m in emu.MOUNTS]


def test_mount_points_to_create_adds_missing_parents_first() -> None:
    have = {"/", "/usr", "/usr/local", "/etc", "/root", "/root/ascend"}
    needed: list[tuple[str, MountKind]] = [("/usr/local/Ascend", "dir"), ("/opt/x/y", "file"), ("/root/ascend", "dir"),
              ("/etc/ascend_install.info", "file"), ("/opt/x/z", "dir")]
    assert mount_points_to_create(needed, have.__contains__) == [
        ("/usr/local/Ascend", "dir"), ("/opt", "dir"), ("/opt/x", "dir"), ("/opt/x/y", "file"),
        ("/etc/ascend_install.info", "file"), ("/opt/x/z", "dir"),
    ]
    assert mount_points_to_create(needed, lambda p: True) == []


def test_mount_points_are_shared_by_the_emulated_labs_that_are_up() -> None:
    mine: list[tuple[str, MountKind]] = [("/usr/local/Ascend", "dir")]
    theirs: list[list[tuple[str, MountKind]]] = [[("/etc/ascend_install.info", "file")], [("/usr/local/Ascend", "dir")]]
    assert mount_points_on_up(mine, theirs) == [("/etc/ascend_install.info", "file"), ("/usr/local/Ascend", "dir")]
    assert mount_points_on_up([], []) == []


def test_mount_points_go_with_the_last_emulated_lab_children_first() -> None:
    rec: list[tuple[str, MountKind]] = [("/opt", "dir"), ("/opt/x", "dir"), ("/opt/x/y", "file"),
                                        ("/usr/local/Ascend", "dir")]
    assert mount_points_on_down(rec, others_up=1) == []
    order = [p for p, _ in mount_points_on_down(rec, others_up=0)]
    assert order.index("/opt/x/y") < order.index("/opt/x") < order.index("/opt")
    assert sorted(order) == sorted(p for p, _ in rec)


# --------------------------------------------------------------------------- lab.json and the fault CLI


@pytest.fixture
def state_root() -> Iterator[Path]:
    """A state root outside /tmp (the hosts mount over /tmp, so a lab's state dir may not live there)."""
    d = Path(tempfile.mkdtemp(prefix="camit-labunit-", dir="/var/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def saved_lab(state_root: Path, npu: str | None, visible: str | None = None) -> Lab:
    """A lab.json (and, for an emulated lab, the hosts' trees) as ``up`` leaves them; no namespaces."""
    plan = plan_lab(2, name="camitunit", subnet="10.78.0.0/24", state_dir=state_root / "camitunit",
                    env_file=state_root / "lab-npu.yaml", python=PY, npu=npu, visible=visible)
    lab = Lab(plan, [LabHost(h) for h in plan.hosts], created="now",
              mount_points=[("/usr/local/Ascend", "dir")] if npu else [])
    lab.save()
    if npu:
        for h in plan.hosts:
            emu.populate(h.emu_dir, emu.profile(npu), host=h.name, index=h.index - 1, n_hosts=2)
    return lab


def test_lab_json_records_profile_visible_mount_points_and_holders(state_root: Path) -> None:
    lab = saved_lab(state_root, "a3", "0,1")
    lab.hosts[1].holders = [4242]
    lab.save()
    data = json.loads(lab.plan.state_file.read_text())
    assert data["npu"] == {"profile": "a3", "visible": [0, 1]}
    assert data["mount_points"] == [["/usr/local/Ascend", "dir"]]
    assert [h["holders"] for h in data["hosts"]] == [[], [4242]]
    again = Lab.load("camitunit", lab.state_dir)
    assert again.plan.npu == lab.plan.npu
    assert again.mount_points == [("/usr/local/Ascend", "dir")]
    assert again.hosts[1].holders == [4242]


def test_lab_json_of_a_cpu_lab_has_no_npu(state_root: Path) -> None:
    lab = saved_lab(state_root, None)
    assert json.loads(lab.plan.state_file.read_text())["npu"] is None
    assert Lab.load("camitunit", lab.state_dir).plan.npu is None


def fault(state_root: Path, *args: str) -> int:
    return main(["fault", *args, "--name", "camitunit", "--state-dir", str(state_root / "camitunit")])


def test_fault_on_a_cpu_lab_host_is_refused(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved_lab(state_root, None)
    assert fault(state_root, "host1", "health-alarm") == EXIT_USAGE
    err = capsys.readouterr().err
    assert "host1 of lab 'camitunit' is a CPU lab host" in err and "--npu a2|a3" in err


def test_unknown_knob_names_the_valid_ones(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved_lab(state_root, "a3")
    assert fault(state_root, "host1", "cosmic-ray") == EXIT_USAGE
    err = capsys.readouterr().err
    assert "unknown fault knob 'cosmic-ray'" in err and all(k in err for k in emu.KNOBS)


def test_fault_on_an_unknown_host(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved_lab(state_root, "a3")
    assert fault(state_root, "host9", "health-alarm") == EXIT_USAGE
    assert "lab 'camitunit' has no host 'host9' (hosts: host1, host2)" in capsys.readouterr().err


def test_fault_without_a_lab(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fault(state_root, "host1", "health-alarm") == EXIT_USAGE
    assert "no lab 'camitunit' is up" in capsys.readouterr().err


def test_fault_sets_and_clears_a_knob_on_that_host_only(state_root: Path) -> None:
    lab = saved_lab(state_root, "a3")
    assert fault(state_root, "host2", "link-down") == 0
    assert lab.active_faults("host2") == ["link-down"]
    assert lab.active_faults("host1") == []
    assert emu.active_faults(lab.plan.hosts[1].emu_dir) == ["link-down"]
    assert fault(state_root, "host2", "clear") == 0
    assert lab.active_faults("host2") == []


def test_status_names_each_emulated_hosts_profile_faults_and_live_holders(
        state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lab = saved_lab(state_root, "a3")
    lab.hosts[0].holders = [os.getpid(), 999999999]  # a live pid and one above any pid_max
    lab.save()
    assert fault(state_root, "host2", "link-down") == 0
    assert capsys.readouterr().out == "host2: link-down set\n"
    assert main(["status", "--name", "camitunit", "--state-dir", str(state_root / "camitunit")]) == 1
    lines = capsys.readouterr().out.splitlines()
    host1 = next(line for line in lines if line.startswith("  host1 "))
    host2 = next(line for line in lines if line.startswith("  host2 "))
    assert host1.endswith(f"sshd STOPPED, a3, faults: none, holder pid(s) {os.getpid()}"), host1
    assert host2.endswith("sshd STOPPED, a3, faults: link-down"), host2
    assert lines[-1].startswith("NOT healthy: ") and "host1: netns camitunit-host1 is missing" in lines[-1]


def test_held_device_past_the_profile_is_refused(state_root: Path) -> None:
    lab = saved_lab(state_root, "a2")
    with pytest.raises(LabError, match="device 8 is past the a2 profile's 8 devices"):
        lab.set_fault("host1", "held-device", device=8)


@pytest.mark.parametrize(("args", "match"), [
    (["health-alarm", "--device", "16"], "health-alarm: device 16 is past the a3 profile's 16 devices"),
    (["health-alarm", "--level", "Sunny"], "level 'Sunny' is not one of"),
    (["link-down", "--spod-id", "2"], "unknown parameter spod_id"),
    (["link-down", "--linger", "3"], "--linger is a number of seconds >= 0, for held-device (or linger) only"),
    (["linger"], "fault HOST linger takes --linger SECONDS (>= 0) and nothing else"),
    (["linger", "--linger", "5", "--device", "1"], "fault HOST linger takes --linger SECONDS"),
    (["held-device", "--linger", "-1"], "--linger is a number of seconds >= 0"),
    (["other-spod", "--spod-id", "0"], "spod_id 0 is this lab's own super pod"),
])
def test_bad_knob_parameters_are_usage_errors(state_root: Path, capsys: pytest.CaptureFixture[str],
                                              args: list[str], match: str) -> None:
    lab = saved_lab(state_root, "a3")
    assert fault(state_root, "host1", *args) == EXIT_USAGE
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1
    assert lab.active_faults("host1") == []


def test_linger_setting_is_written_for_later_processes(state_root: Path) -> None:
    lab = saved_lab(state_root, "a3")
    assert fault(state_root, "host1", "linger", "--linger", "30") == 0
    npu_json = lab._emu_tree("host1")[1] / "Ascend/.camit-emu/npu.json"
    assert json.loads(npu_json.read_text())["linger_s"] == 30
    assert lab.active_faults("host1") == []  # a setting, not a knob
    assert fault(state_root, "host1", "clear") == 0
    assert json.loads(npu_json.read_text())["linger_s"] == 0


def test_other_spod_on_an_a2_host_is_a_usage_error(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved_lab(state_root, "a2")
    assert fault(state_root, "host1", "other-spod") == EXIT_USAGE
    assert "A2 node" in capsys.readouterr().err


def test_knob_parameters_reach_the_tree(state_root: Path) -> None:
    lab = saved_lab(state_root, "a3")
    assert fault(state_root, "host1", "health-alarm", "--device", "5", "--level", "Critical") == 0
    assert emu.fault_params(lab.plan.hosts[0].emu_dir, "health-alarm") == {"device": 5, "level": "Critical"}
