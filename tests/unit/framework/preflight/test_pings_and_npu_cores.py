"""Cores on NPU hosts (bounded rank core limit, coredump_filter, systemd-coredump caps, free space) and the A2
device-NIC ping round of preflight (plan, script, verdict), with the emulated hccn_tool's peer link state."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from framework.ascend.tools import NPU_CORE_LIMIT
from framework.cores.caps import CAPS_SCRIPT, core_findings, parse_coredump_conf, parse_space, size_bytes, space_script
from framework.cores.pattern import parse_core_pattern
from framework.launch.plan import (
    AUTO_CORE_LIMIT,
    NPU_COREDUMP_FILTER,
    Prepared,
    Target,
    node_command,
    plan_nodes,
)
from framework.preflight import pings
from framework.preflight.checks import OK, CheckResult, Report
from framework.preflight.probe import ProbePlan, Section, plan_probe, split_sections
from framework.remote.layout import HostLayout
from tests.support.builders import ASCEND_CAPTURES, make_env

CANN = {"set_env": "/usr/local/Ascend/cann/set_env.sh"}


def _plans(soc: str, core_limit: str | None):
    npu = {"soc": soc, "count": 8} if soc != "cpu" else None
    env = make_env({"n1": {"npu": npu} if npu else {}}, cann=CANN)
    lay = HostLayout("/w", "/w/opp")
    prep = {"n1": Prepared(lay, "/w/bin/sup.py", "/w/bin/wrap.py")}
    return plan_nodes(env, ["n1"], prep, nproc=1, backend="gloo", master_port=1, launch_id="x", extra_env={},
                      timeout=10, core_limit=core_limit)["n1"]


def test_ranks_on_npu_hosts_get_a_bounded_core_limit_and_filter_by_default():
    npu = _plans("ascend910b", AUTO_CORE_LIMIT)
    assert npu.core_limit == NPU_CORE_LIMIT == str(4 * 1024 * 1024)  # ulimit -c blocks of 1 KiB: 4 GiB
    assert npu.coredump_filter == NPU_COREDUMP_FILTER == "0x11"  # anon private + ELF headers (core(5))
    assert int(NPU_COREDUMP_FILTER, 16) & 0b1001101010 == 0  # no shared, file-backed shared, hugetlb, DAX bits
    text = node_command(npu, Target(script="/t.py")).text
    assert "ulimit -S -c 4194304" in text and "echo 0x11 > /proc/self/coredump_filter" in text
    cpu = _plans("cpu", AUTO_CORE_LIMIT)
    assert cpu.core_limit == "unlimited" and cpu.coredump_filter is None
    assert _plans("ascend910_93", "unlimited").core_limit == "unlimited"  # an explicit limit is kept


def test_the_filter_reaches_the_process_the_line_execs(tmp_path):
    """The launch line's filter step in a real bash: what it execs (as the supervisor, then the ranks) inherits it."""
    step = "{ echo 0x11 > /proc/self/coredump_filter; } 2>/dev/null || true"
    out = subprocess.run(["bash", "-c", f"{step} && exec cat /proc/self/coredump_filter"], capture_output=True,
                         text=True, check=True).stdout
    assert int(out, 16) == 0x11


CONF = """@file /etc/systemd/coredump.conf
[Coredump]
#ProcessSizeMax=32G
ProcessSizeMax=2G
MaxUse=1G
@file /etc/systemd/coredump.conf.d/50-npu.conf
[Coredump]
ExternalSizeMax=1G
@file /usr/lib/systemd/coredump.conf.d/10-vendor.conf
[Coredump]
ExternalSizeMax=64G
Storage=external
@file /usr/lib/systemd/coredump.conf.d/50-npu.conf
[Coredump]
ExternalSizeMax=99G
"""


def test_coredump_conf_main_then_dropins_by_name_etc_hiding_usr_lib():
    assert parse_coredump_conf(CONF) == {"ProcessSizeMax": "2G", "MaxUse": "1G", "ExternalSizeMax": "1G",
                                         "Storage": "external"}
    assert size_bytes("2G") == 2 * 1024 ** 3 and size_bytes("512M") == 512 * 1024 ** 2
    assert size_bytes("infinity") is None and size_bytes("10%") is None


def test_core_check_reports_caps_below_the_rank_limit_and_low_free_space():
    systemd = parse_core_pattern("|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h")
    space = "dir /var/lib/systemd/coredump\nFilesystem 1024-blocks Used Available Capacity Mounted on\n" \
            "/dev/vda 100 50 2097152 50% /\n"
    warnings, notes = core_findings(systemd, CONF, space, npu=True, core_limit_bytes=4 * 1024 ** 3)
    assert notes == ["systemd-coredump ProcessSizeMax=2G, ExternalSizeMax=1G, MaxUse=1G"]
    assert warnings == [
        "systemd-coredump ProcessSizeMax=2G is below the ranks' core limit (4G): their cores are cut or dropped",
        "systemd-coredump ExternalSizeMax=1G is below the ranks' core limit (4G): their cores are cut or dropped",
        "only 2.0G free under /var/lib/systemd/coredump (below 8G): cores may be lost"]
    warnings, notes = core_findings(parse_core_pattern("/var/crash/core.%p"), None, space, npu=False,
                                    core_limit_bytes=None)
    assert warnings == [] and notes == ["2.0G free under /var/lib/systemd/coredump"]


def test_the_probe_functions_run_in_a_real_shell(tmp_path):
    script = f"{CAPS_SCRIPT}\n{space_script(str(tmp_path))}\ncore_caps; core_space"
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    parse_coredump_conf(out)  # whatever this machine has parses
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if not pattern.startswith(("|", "@")) or "systemd-coredump" in pattern:
        space = parse_space(out)
        assert space is not None and space[1] > 0, out


def _a2(name: str, ip: str) -> tuple[ProbePlan, dict[str, Section]]:
    from framework.config.effective import load  # noqa: F401  (the plan comes from a loaded env)

    env = make_env({name: {"npu": {"soc": "ascend910b", "count": 8}}}, cann=CANN)
    ip_section = Section("hccn:0:ip", f"ipaddr:{ip}\nnetmask:255.255.255.0", 0)
    return plan_probe(env.hosts[name], env), {"hccn:0:ip": ip_section}


def test_each_a2_node_pings_every_other_nodes_first_device_once():
    (p1, s1), (p2, s2), (p3, s3) = _a2("a", "192.168.1.8"), _a2("b", "192.168.2.8"), _a2("c", "192.168.3.8")
    plans = {"a": p1, "b": p2, "c": p3}
    got = pings.plan_pings(plans, {"a": s1, "b": s2, "c": s3})
    assert [(p.peer, p.address) for p in got["a"]] == [("b", "192.168.2.8"), ("c", "192.168.3.8")]
    assert sum(len(v) for v in got.values()) == 6  # one per node pair and direction
    assert "-i 0 -ping -g address 192.168.2.8" in str(pings.ping_script(got["a"]))
    assert pings.plan_pings({"a": p1}, {"a": s1}) == {}


CAPTURES = ASCEND_CAPTURES


def _body(name: str) -> str:
    return "\n".join(ln for ln in (CAPTURES / name).read_text().splitlines() if not ln.startswith("# source:"))


def test_a_lost_ping_fails_the_senders_hccn_column_naming_peer_and_loss():
    ok = pings.Ping("a", 0, "b", 0, "11.12.165.80")
    lossy = pings.Ping("a", 0, "c", 0, "192.168.3.8")
    text = f"@@camit@@ begin ping:b\n{_body('hccn-ping-ok-8dev.txt').split('device 1')[0]}\n@@camit@@ end ping:b 0\n" \
           f"@@camit@@ begin ping:c\n{_body('hccn-ping-loss.txt')}\n@@camit@@ end ping:c 0\n"
    sections = split_sections(text)
    problems, notes = pings.verdict([ok, lossy], sections)
    assert problems == ["ping dev 0 -> c dev 0 192.168.3.8: 2 of 3 replies (33.33% loss)"]
    assert notes == ["ping dev 0 -> b dev 0 11.12.165.80 ok"]
    report = Report(["a"], {("a", "hccn"): CheckResult("a", "hccn", OK, "8 devices: link/net_health/ip fine", "up")})
    pings.apply(report, {"a": [ok, lossy]}, {"a": sections})
    r = report.get("a", "hccn")
    assert r.status == "fail" and r.summary.startswith("ping dev 0 -> c dev 0 192.168.3.8: 2 of 3 replies"), r


def test_emulated_ping_to_a_link_down_peer_times_out(tmp_path):
    from framework.lab import emu
    from framework.lab.emu.tools import common, hccn_tool

    trees = []
    for i, name in enumerate(("host1", "host2")):
        tree = tmp_path / name
        emu.populate(tree, emu.profile("a2"), host=name, index=i, n_hosts=2)
        trees.append(tree)
    emu.set_fault(trees[1], "link-down", device=0)
    emu.sync_peer_links(trees)
    one = common.Host(trees[0] / "Ascend/.camit-emu")
    peer0 = json.loads((trees[1] / "Ascend/.camit-emu" / "host.json").read_text())["devices"]
    lines = hccn_tool.run(one, ["-i", "0", "-ping", "-g", "address", peer0[0]["ip"]])
    assert lines[-1] == "3 packets transmitted, 0 received, 100.00% packet loss" and "recv time out seq=0" in lines
    assert hccn_tool.run(one, ["-i", "0", "-ping", "-g", "address", peer0[1]["ip"]])[-1].startswith(
        "3 packets transmitted, 3 received")
    emu.clear_faults(trees[1])
    emu.sync_peer_links(trees)
    assert hccn_tool.run(one, ["-i", "0", "-ping", "-g", "address", peer0[0]["ip"]])[-1].startswith(
        "3 packets transmitted, 3 received")


@pytest.mark.parametrize("soc", ["cpu"])
def test_cpu_hosts_keep_unlimited_cores(soc):
    assert _plans(soc, AUTO_CORE_LIMIT).core_limit == "unlimited"
