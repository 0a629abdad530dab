"""framework.ascend.parse parsers against every relevant capture in tests/data/ascend/."""

from __future__ import annotations

import pytest

from framework.ascend import parse as ascend
from framework.ascend.parse import A2, A3
from framework.cores.pattern import parse_core_pattern
from tests.support.builders import ASCEND_CAPTURES

DATA = ASCEND_CAPTURES


def capture(name: str) -> str:
    """A fixture's text without its ``# source:`` first line."""
    text = (DATA / name).read_text()
    first, _, rest = text.partition("\n")
    assert first.startswith("# source:"), f"{name} lost its source line"
    return rest


# --------------------------------------------------------------------------- npu-smi info


def test_a2_busy_910b3():
    info = ascend.parse_npu_smi_info(capture("npu-smi-info-910b3-a2-busy.txt"))
    assert info.version == "25.2.0"
    assert info.platform == A2 and not info.phy_id_column
    assert len(info.chips) == 8 and info.npus == list(range(8))
    assert info.names == ["910B3"]
    assert all(c.healthy and c.chip == 0 and c.phy_id is None for c in info.chips)
    assert info.chips[2].bus_id == "0000:81:00.0"
    assert (info.chips[2].hbm_used_mb, info.chips[2].hbm_total_mb) == (41052, 65536)  # "41052/ 65536"
    assert (info.chips[0].hbm_used_mb, info.chips[0].hbm_total_mb) == (3408, 65536)  # "3408 / 65536"
    assert info.has_process_table
    assert info.processes == (ascend.NpuProcess(npu=2, chip=0, pid=1333928, name="", memory_mb=37709),)
    assert info.busy_npus == [2]
    assert info.idle_npus == frozenset({0, 1, 3, 4, 5, 6, 7})


def test_a3_busy_two_dies_per_npu_and_pids_listed_twice():
    info = ascend.parse_npu_smi_info(capture("npu-smi-info-a3-busy.txt"))
    assert info.version == "25.2.3"
    assert info.platform == A3 and info.phy_id_column
    assert len(info.chips) == 16 and info.npus == list(range(8))
    assert [c.phy_id for c in info.chips] == list(range(16))
    assert [c.chip for c in info.chips[:4]] == [0, 1, 0, 1]
    assert info.names == ["Ascend910"]
    assert info.chips[1].hbm_used_mb == 52948 and info.chips[4].hbm_used_mb == 3128
    assert info.chips[15].aicore_pct == 17.0
    assert info.busy_npus == [0, 1, 6, 7]
    assert info.idle_npus == frozenset({2, 3, 4, 5})
    assert len(info.processes) == 14
    # one PID on two dies: the big entry and the ~130 MB shadow (vllm-ascend#4930)
    by_pid = [p for p in info.processes if p.pid == 3328327]
    assert {(p.npu, p.chip, p.memory_mb) for p in by_pid} == {(0, 0, 133), (0, 1, 50119)}
    assert [info.logical_id(c) for c in info.chips[:3]] == [0, 1, 2]


def test_16_npu_idle_with_alignment_shift_past_npu_9():
    info = ascend.parse_npu_smi_info(capture("npu-smi-info-910b2c-16npu-idle.txt"))
    assert info.version == "24.1.rc2.2"
    assert info.platform == A2
    assert [c.npu for c in info.chips] == list(range(16))
    assert info.chips[10].bus_id == "0000:48:00.0" and info.chips[15].hbm_used_mb == 3377
    assert info.processes == () and info.busy_npus == []
    assert info.idle_npus == frozenset(range(16))
    assert info.logical_id(info.chips[12]) == 12


def test_v26_wide_layout_header_excerpt():
    info = ascend.parse_npu_smi_info(capture("npu-smi-info-a3-v26-header-excerpt.txt"))
    assert info.version == "26.0.rc2"
    assert info.platform == A3
    assert [(c.npu, c.chip, c.phy_id) for c in info.chips] == [(0, 0, 0), (0, 1, 1)]
    assert (info.chips[0].hbm_used_mb, info.chips[1].hbm_used_mb) == (3419, 2874)
    assert not info.has_process_table  # an excerpt: idleness cannot be judged from it


def test_v26_process_table_with_container_pid_column():
    info = ascend.parse_npu_smi_info(capture("npu-smi-info-a3-v26-proc-excerpt.txt"))
    assert info.version is None  # the excerpt starts below the header
    assert [(c.npu, c.chip, c.phy_id, c.hbm_used_mb) for c in info.chips] == [(7, 1, 15, 31877)]
    assert info.platform == A3
    assert info.processes == (
        ascend.NpuProcess(npu=0, chip=0, pid=632268, name="python3.1", memory_mb=197, container_pid="NA"),
    )
    assert info.idle_npus == frozenset({1})


def test_unhealthy_chip_is_reported():
    text = capture("npu-smi-info-910b3-a2-busy.txt").replace(
        "| 5     910B3               | OK            |", "| 5     910B3               | Alarm         |")
    info = ascend.parse_npu_smi_info(text)
    assert [(c.npu, c.health) for c in info.unhealthy] == [(5, "Alarm")]


def test_npu_smi_list_910b4():
    lst = ascend.parse_npu_smi_list(capture("npu-smi-info-l-910b4.txt"))
    assert lst.total == 8
    assert lst.chips == {i: 1 for i in range(8)}
    assert lst.platform == A2


def test_npu_smi_mapping_with_mcu_rows():
    rows = ascend.parse_npu_smi_mapping(capture("npu-smi-info-m-910b4.txt"))
    assert len(rows) == 16
    chips = [r for r in rows if r.logic_id is not None]
    first_two = [(r.npu, r.chip, r.logic_id, r.name) for r in chips[:2]]
    assert first_two == [(0, 0, 0, "Ascend 910B4"), (1, 0, 1, "Ascend 910B4")]
    assert [r.name for r in rows if r.logic_id is None] == ["Mcu"] * 8


@pytest.mark.parametrize(("name", "values"), [
    ("npu-smi-info-t-health-chip.txt", ["OK"]),
    ("npu-smi-info-t-health-card.txt", ["OK", "OK"]),
])
def test_health_chip_and_card(name, values):
    assert ascend.parse_health(capture(name)) == values


def test_health_chip_error_fields():
    (block,) = ascend.parse_kv_blocks(capture("npu-smi-info-t-health-chip.txt"))
    assert block == {"Health Status": "OK", "Error Code": "NA", "Error Information": "NA"}


def test_usages_key_values():
    blocks = ascend.parse_kv_blocks(capture("npu-smi-info-t-usages-doc.txt"))
    merged = {k: v for b in blocks for k, v in b.items()}
    assert merged["HBM Capacity(MB)"] == "32768" and merged["Chip ID"] == "0"
    assert merged["Aicore Usage Rate(%)"] == "0"


def test_lspci_counts_910b_functions():
    assert ascend.parse_lspci_npus(capture("lspci-910b-d802.txt")) == {"d802": 8}


# --------------------------------------------------------------------------- hccn_tool


def test_link_up():
    assert ascend.parse_link(capture("hccn-link-up.txt")) == "UP"
    assert ascend.parse_link("link status: DOWN\n") == "DOWN"
    assert ascend.parse_link("hccn_tool is busy, please try again\n") is None


def test_net_health_values():
    assert ascend.parse_net_health(capture("hccn-net-health-init.txt")) == ["Init"]
    assert ascend.parse_net_health(capture("hccn-net-health-success-8dev.txt")) == ["Success", "Success"]


def test_ip_configured_and_not():
    ips = ascend.parse_ip(capture("hccn-ip-8dev.txt"))
    assert [i.ip for i in ips] == [f"11.12.165.{80 + d}" for d in range(8)]
    assert all(i.configured and i.netmask == "255.255.255.0" for i in ips)
    (missing,) = ascend.parse_ip(capture("hccn-ip-not-configured.txt"))
    assert not missing.configured


def test_tls_consistent_over_8_devices():
    states = ascend.parse_tls(capture("hccn-tls-8dev.txt"))
    assert [s.dev for s in states] == list(range(8))
    assert {s.switch for s in states} == {0} and {s.preconfigured for s in states} == {1}


def test_tls_mismatch_between_devices():
    states = ascend.parse_tls(capture("hccn-tls-mismatch.txt"))
    assert [(s.dev, s.switch) for s in states] == [(0, 0), (1, 1)]


def test_ping_ok_8_devices():
    results = ascend.parse_ping(capture("hccn-ping-ok-8dev.txt"))
    assert [r.device for r in results] == list(range(8))
    assert all(r.ok and r.loss_pct == 0.0 and r.address == "11.12.165.80" and len(r.times_ms) == 3 for r in results)
    assert results[0].times_ms == (0.114, 0.067, 0.063)


def test_ping_ok_with_time_dash_typo():
    (r,) = ascend.parse_ping(capture("hccn-ping-ok-mindie.txt"))
    assert r.ok and r.device == 0 and r.address == "10.10.100.10"
    assert r.times_ms == (0.067, 0.049, 0.047)


def test_ping_loss_with_seq_letter_o():
    (r,) = ascend.parse_ping(capture("hccn-ping-loss.txt"))
    assert not r.ok
    assert (r.transmitted, r.received, r.loss_pct, r.timeouts) == (3, 2, 33.33, 1)
    assert r.times_ms == (0.097, 0.066) and r.device is None


# --------------------------------------------------------------------------- version records


def test_toolkit_install_info_old_layout_8_3_rc2():
    rec = ascend.parse_toolkit_install_info(capture("ascend-toolkit-install-info-8.3rc2.txt"))
    assert rec == ascend.CannInstall("8.3.RC2", "V100R001C23SPC002B210", "aarch64",
                                     "/usr/local/Ascend/ascend-toolkit/8.3.RC2/aarch64-linux", "ascend-toolkit")


def test_toolkit_install_info_cann_layout_8_5_0():
    rec = ascend.parse_toolkit_install_info(capture("ascend-toolkit-install-info-8.5.0-cann-layout.txt"))
    assert rec is not None and rec.version == "8.5.0" and rec.layout == "cann"
    assert rec.path == "/usr/local/Ascend/cann-8.5.0/aarch64-linux"


def test_version_cfg_components():
    cfg = ascend.parse_version_cfg(capture("ascend-toolkit-version-cfg.txt"))
    assert set(cfg) == {"runtime", "compiler", "opp", "toolkit", "aoe", "ncs"}
    assert cfg["toolkit"]["running"] == ("1.84.15.1.310", "6.0.1")
    assert ascend.cann_version_from_cfg(cfg) == "6.0.1"
    assert ascend.cann_version_from_cfg(ascend.parse_version_cfg("# version: 1.0\n")) is None


def test_driver_and_firmware_version_info():
    drv = capture("driver-version-info.txt")
    assert ascend.driver_version(drv) == "24.1.rc1"
    assert ascend.parse_key_values(drv)["compatible_version_fw"] == "[7.0.0,7.2.99]"
    assert ascend.driver_version(capture("firmware-version-info.txt")) == "7.1.0.11.220"
    assert ascend.driver_version("package_version=25.2.0\n") == "25.2.0"


def test_etc_ascend_install_info():
    kv = ascend.parse_key_values(capture("etc-ascend-install-info.txt"))
    assert kv["Driver_Install_Path_Param"] == "/usr/local/Ascend"
    assert kv["UserName"] == "HwHiAiUser"


@pytest.mark.parametrize(("path", "layout"), [
    ("/usr/local/Ascend/cann/aarch64-linux", "cann"),
    ("/usr/local/Ascend/cann-9.0.0/x86_64-linux", "cann"),
    ("/root/Ascend/ascend-toolkit/latest/aarch64-linux", "ascend-toolkit"),
    ("/opt/other", None),
    (None, None),
])
def test_cann_layout(path, layout):
    assert ascend.cann_layout(path) == layout


# --------------------------------------------------------------------------- core_pattern, df


def test_core_pattern_systemd_pipe():
    # the one pattern model (framework.cores.pattern): a pipe delivery, to the systemd handler
    cp = parse_core_pattern(capture("core-pattern-systemd-coredump.txt"))
    assert cp.delivery == "pipe" and cp.handler == "/usr/lib/systemd/systemd-coredump"
    assert cp.kind == "systemd"
    assert cp.raw.endswith("%h %e")


@pytest.mark.parametrize(("raw", "kind", "directory"), [
    ("/var/crash/camit/core.%e.%p", "file", "/var/crash/camit"),
    ("/var/crash/%h/core.%p", "file", "/var/crash"),
    ("/core.%p", "file", "/"),
    ("core", "relative", None),
])
def test_core_pattern_kinds(raw, kind, directory):
    cp = parse_core_pattern(raw + "\n")
    assert (cp.delivery, cp.directory) == (kind, directory)


def test_df():
    out = ("Filesystem     1024-blocks     Used Available Capacity Mounted on\n"
           "/dev/vda         264212084 24244000  82146912      23% /var/tmp/camit\n")
    assert ascend.parse_df(out) == ascend.DiskFree("/dev/vda", 264212084, 82146912, "/var/tmp/camit")
    assert ascend.parse_df("df: /nope: No such file or directory\n") is None
