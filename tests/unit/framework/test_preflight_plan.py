"""framework.preflight.run{,_probe,_checks}: the probe plan and script, section parsing, every verdict — no network.

The probe script itself runs for real under /bin/sh through LocalTransport, with fake ``npu-smi``
and ``hccn_tool`` on PATH printing captured outputs, so the shell side is tested too.
"""

from __future__ import annotations

import dataclasses
import stat
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import pytest

from framework.config.effective import EnvConfig, HostSpec, LaunchSpec, NicSpec, NpuSpec
from framework.errors import EXIT_FAILED, EXIT_INFRA, EXIT_OK, HostUnreachable
from framework.hosts import Cluster, Host
from framework.preflight.checks import CHECKS, ERROR, FAIL, NPU_CHECKS, OK, SKIP, WARN, Report, Sample, evaluate
from framework.preflight.probe import Limits, Section, plan_probe, probe_script, split_sections
from framework.preflight.run import Preflight, run_probe
from framework.result import Result
from framework.transport.local import LocalTransport
from tests.support.builders import ASCEND_CAPTURES

DATA = ASCEND_CAPTURES


def capture(name: str) -> str:
    return (DATA / name).read_text().split("\n", 1)[1]


def spec(name: str = "node1", *, soc: str = "cpu", count: int = 0, visible=None, workdir: str = "/var/tmp/camit",
         python: str = "python3", **kw) -> HostSpec:
    return HostSpec(name=name, manage_nic=NicSpec("eth0", f"10.0.0.{len(name)}"), workdir=workdir, python=python,
                    npu=NpuSpec(count=count, soc=soc, visible=visible), **kw)


class _Env:
    def __init__(self, *specs: HostSpec, set_env: str | None = None) -> None:
        self.hosts = {s.name: s for s in specs}
        self.launch = LaunchSpec()
        self.cann = type("Cann", (), {"set_env": set_env})() if set_env else None


def env_of(*specs: HostSpec, set_env: str | None = None) -> EnvConfig:
    """The stand-in as the EnvConfig it stands in for (the probe reads hosts, launch and cann only)."""
    return cast(EnvConfig, _Env(*specs, set_env=set_env))


# --------------------------------------------------------------------------- plan and script


def test_plan_from_spec():
    p = plan_probe(spec(workdir="/w/", python="/usr/bin/python3.11", host_key="ssh-ed25519 AAAA"), None)
    assert (p.workdir, p.venv_python, p.python) == ("/w", "/w/venv/bin/python", "/usr/bin/python3.11")
    assert not p.npu and p.host_key == "pinned"
    assert plan_probe(spec(host_key_policy="insecure"), None).host_key == "insecure"
    assert plan_probe(spec(), None).host_key == "known_hosts (strict)"


def test_cpu_script_has_no_npu_probes():
    script = probe_script(plan_probe(spec(), None))
    assert "npu-smi" not in script and "hccn" not in script
    assert "sec t0 date +%s.%N" in script and "read _go" in script


@pytest.mark.parametrize(("soc", "queries", "absent"), [
    ("ascend910b", ["-link -g", "-net_health -g", "-ip -g", "-tls -g"], []),
    ("ascend910_93", ["-tls -g", "-link -g"], ["-net_health -g", "-ip -g"]),
])
def test_hccn_queries_per_platform(soc, queries, absent):
    script = probe_script(plan_probe(spec(soc=soc, count=16), None))
    for q in queries:
        assert f"hc -i $i {q}" in script
    for q in absent:
        assert q not in script
    assert "while [ $i -lt 16 ]" in script
    assert "info -m" not in script  # only needed to map visible devices


def test_visible_devices_add_the_chip_mapping_and_set_env_is_probed():
    env = env_of(set_env="/usr/local/Ascend/ascend-toolkit/set_env.sh")
    p = plan_probe(spec(soc="ascend910_93", count=16, visible=(0, 1)), env)
    script = probe_script(p)
    assert "sec npu-smi-m $TO \"$NPUSMI\" info -m" in script
    assert "sec set_env ls -l -- /usr/local/Ascend/ascend-toolkit/set_env.sh" in script
    assert p.cann_homes[:3] == ["/usr/local/Ascend/ascend-toolkit", "/usr/local/Ascend/ascend-toolkit/latest",
                                "/usr/local/Ascend/cann"]
    assert "\"$HOME\"/Ascend/cann/*-linux/ascend_toolkit_install.info" in script


def test_split_sections():
    out = ("@@camit@@ ready\n@@camit@@ begin a\nx\ny\n\n@@camit@@ end a 0\n"
           "@@camit@@ begin file:/p q\nno newline\n@@camit@@ end file:/p q 2\n"
           "@@camit@@ begin cut\npartial\n")
    sec = split_sections(out)
    assert sec["a"] == Section("a", "x\ny\n", 0)
    assert sec["file:/p q"] == Section("file:/p q", "no newline", 2)
    assert sec["cut"] == Section("cut", "partial\n", None)


def local_host(name: str = "local") -> Host:
    return Host(name, LocalTransport(name), command_timeout=30)


def test_cpu_probe_runs_locally_with_hostile_paths(tmp_path):
    odd = tmp_path / "it's a $(dir)"
    odd.mkdir()
    p = plan_probe(spec("local", workdir=str(odd / "not yet"), python=sys.executable), None)
    sample = run_probe(local_host(), p)
    assert sample.result is not None and sample.result.ok, sample.result
    assert {"t0", "id", "python", "disk", "core"} <= set(sample.sections)
    assert sample.received is not None and sample.sent <= sample.received < sample.sent + 5
    report = evaluate({"local": p}, {"local": sample})
    assert report.get("local", "python").status == OK
    assert report.get("local", "python").value == "%d.%d.%d" % sys.version_info[:3]
    disk = report.get("local", "disk")
    assert disk.status == OK and f"at {odd}" in disk.summary and "not created yet" in disk.summary
    clock = report.get("local", "clock")
    assert clock.status == OK and report.clock is not None and abs(report.clock.offsets["local"]) < 0.5
    assert all(report.get("local", c).status == SKIP for c in NPU_CHECKS)


FAKE_NPU_SMI = """#!/bin/sh
case "$*" in
  "info") cat {info} ;;
  "info -m") cat {mapping} ;;
  *) echo "unexpected npu-smi $*" >&2; exit 2 ;;
esac
"""

FAKE_HCCN = """#!/bin/sh
dev=$2
case "$3" in
  -tls) echo "dev_id:$dev, tls switch[{tls}](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset)" ;;
  -link) echo "link status: UP" ;;
  -net_health) echo "net health status: Success" ;;
  -ip) echo "ipaddr:10.9.0.$dev"; echo "netmask:255.255.255.0" ;;
  *) exit 2 ;;
esac
"""


@pytest.fixture
def fake_ascend(tmp_path: Path, monkeypatch):
    """Fake npu-smi/hccn_tool on PATH and a CANN 8.5 record under $HOME/Ascend/cann."""

    def make(info: str, tls: int = 0) -> Path:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        npu_smi = FAKE_NPU_SMI.format(info=DATA / info, mapping=DATA / "npu-smi-info-m-910b4.txt")
        for name, text in (("npu-smi", npu_smi),
                           ("hccn_tool", FAKE_HCCN.format(tls=tls))):
            tool = bin_dir / name
            tool.write_text(text)
            tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
        rec = tmp_path / "home" / "Ascend" / "cann" / "aarch64-linux" / "ascend_toolkit_install.info"
        rec.parent.mkdir(parents=True, exist_ok=True)
        rec.write_text(capture("ascend-toolkit-install-info-8.5.0-cann-layout.txt"))
        monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        return tmp_path

    return make


def test_a3_probe_with_fake_tools_runs_in_one_script(fake_ascend, tmp_path):
    fake_ascend("npu-smi-info-a3-busy.txt")
    p = plan_probe(spec("local", soc="ascend910_93", count=16, workdir=str(tmp_path), python=sys.executable), None)
    sample = run_probe(local_host(), p)
    assert sample.sections["npu-smi"].rc == 0
    assert [n for n in sample.sections if n.startswith("hccn:15:")] == ["hccn:15:tls", "hccn:15:link"]
    report = evaluate({"local": p}, {"local": sample})
    npu = report.get("local", "npu")
    assert npu.status == OK and "A3, 16 chips on 8 NPUs (Ascend910)" in npu.summary
    idle = report.get("local", "idle")
    assert idle.status == FAIL and "NPU 0 chip 0 pid 3325989 (50128 MB)" in idle.summary and "more" in idle.summary
    assert report.get("local", "tls").status == OK and report.get("local", "tls").value == "0"
    assert report.get("local", "hccn").status == OK
    cann = report.get("local", "cann")
    assert cann.status == OK and cann.value == "8.5.0" and "cann layout" in cann.summary
    # no real driver on this machine: the check says so instead of guessing
    assert report.get("local", "driver").status == FAIL
    assert report.get("local", "torch_npu").status == FAIL  # NPU host without torch_npu
    assert report.exit_code == EXIT_FAILED


def test_visible_devices_limit_the_idle_check(fake_ascend, tmp_path):
    fake_ascend("npu-smi-info-a3-busy.txt")
    p = plan_probe(spec("local", soc="ascend910_93", count=16, visible=(4, 5, 6, 7), workdir=str(tmp_path),
                        python=sys.executable), None)
    sample = run_probe(local_host(), p)
    # the -m capture is an A2 one (logic id = NPU id): NPUs 4..7 → pids on NPUs 6 and 7 count
    report = evaluate({"local": p}, {"local": sample})
    assert report.get("local", "idle").status == FAIL
    assert "NPU 6" in report.get("local", "idle").summary and "NPU 0" not in report.get("local", "idle").summary


def test_npu_smi_missing_on_a_declared_npu_host_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    p = plan_probe(spec("local", soc="ascend910b", count=8, workdir=str(tmp_path), python=sys.executable), None)
    report = evaluate({"local": p}, {"local": run_probe(local_host(), p)})
    npu = report.get("local", "npu")
    assert npu.status == FAIL and "npu-smi not found" in npu.summary
    assert "hccn_tool not found" in report.get("local", "hccn").summary


# --------------------------------------------------------------------------- verdicts on synthetic samples


BASE = {
    "t0": "1000.000",
    "id": "root\nnode",
    "python": "interpreter /w/venv/bin/python\npython 3.11.7\ntorch 2.5.1\ntorch_npu 2.5.1.post1",
    "disk": "dir /w\nFilesystem 1024-blocks Used Available Capacity Mounted on\n/dev/sda 100000000 1 50000000 1% /",
    "core": "pattern=|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h\nsoft=0\nhard=unlimited\ntarget=ok",
    # the manage_nic addresses spec() gives (10.0.0.<len(name)>)
    "addr": "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
            + "\n".join(f"2: eth0    inet 10.0.0.{i}/24 brd 10.0.0.255 scope global eth0" for i in range(1, 10)),
}


def a2_sections(**over: str) -> dict[str, str]:
    sec = dict(BASE)
    sec["reserved_ports"] = "60000-60031"
    sec["npu-smi.path"] = "/usr/local/sbin/npu-smi"
    sec["npu-smi"] = capture("npu-smi-info-910b3-a2-busy.txt").replace(
        "| 2       0                 | 1333928       |                          | 37709                   |\n", "")
    sec["file:/usr/local/Ascend/driver/version.info"] = capture("driver-version-info.txt")
    sec["file:/usr/local/Ascend/firmware/version.info"] = capture("firmware-version-info.txt")
    sec["file:/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"] = capture(
        "ascend-toolkit-install-info-8.3rc2.txt")
    sec["hccn.path"] = "/usr/local/Ascend/driver/tools/hccn_tool"
    ips = capture("hccn-ip-8dev.txt").splitlines()
    tls = capture("hccn-tls-8dev.txt").splitlines()
    for d in range(8):
        sec[f"hccn:{d}:link"] = capture("hccn-link-up.txt")
        sec[f"hccn:{d}:net_health"] = "net health status: Success"
        sec[f"hccn:{d}:ip"] = "\n".join(ips[2 * d:2 * d + 2])
        sec[f"hccn:{d}:tls"] = tls[d]
    sec.update(over)
    return sec


def make_sample(host: str, sections: dict[str, str], *, offset: float = 0.0, rcs: dict[str, int] | None = None,
                result: Result | None = None) -> Sample:
    secs = {n: Section(n, t, (rcs or {}).get(n, 0)) for n, t in sections.items()}
    if "t0" in secs:
        secs["t0"] = Section("t0", f"{1000.0 + offset:.6f}", 0)
    return Sample(host, secs, 999.999, 1000.001, result)


def a2_plan(name: str, **kw):
    return plan_probe(spec(name, soc=kw.pop("soc", "ascend910b"), count=kw.pop("count", 8), workdir="/w", **kw), None)


def run_eval(samples: Mapping[str, Sample | BaseException], limits: Limits | None = None, **plan_kw) -> Report:
    plans = {h: a2_plan(h, **plan_kw) for h in samples}
    return evaluate(plans, samples, limits)


def test_healthy_a2_cluster_passes_everything():
    report = run_eval({h: make_sample(h, a2_sections()) for h in ("n1", "n2")})
    bad = [r for r in report.results.values() if r.status != OK and r.check not in ("spod", "rdzv")]
    assert bad == [], bad
    # the reachability check needs the hosts themselves (framework.preflight.rendezvous): evaluate alone skips it
    assert report.get("n1", "rdzv").status == SKIP and report.get("n1", "rdzv").summary == "not run"
    assert report.get("n1", "spod").status == SKIP and "A3 only" in report.get("n1", "spod").summary
    assert report.exit_code == EXIT_OK
    assert report.get("n1", "npu").value == "A2 8x910B3"
    assert report.get("n1", "cann").value == "8.3.RC2" and "ascend-toolkit layout" in report.get("n1", "cann").summary
    assert report.get("n1", "driver").value == "24.1.rc1 fw 7.1.0.11.220"
    assert report.get("n1", "core").summary.endswith("soft limit 0 (launches raise it to unlimited)")
    assert list(report.table()[0]) == ["host", *CHECKS]


def test_busy_npu_fails_idle_with_the_process():
    report = run_eval({"n1": make_sample("n1", a2_sections(**{"npu-smi": capture("npu-smi-info-910b3-a2-busy.txt")}))})
    r = report.get("n1", "idle")
    assert r.status == FAIL and r.summary == "busy: NPU 2 chip 0 pid 1333928 (37709 MB)"


def test_cann_version_differs_on_the_minority_host():
    old = a2_sections()
    new = a2_sections()
    rec = "file:/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"
    del new[rec]
    new["file:/usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info"] = capture(
        "ascend-toolkit-install-info-8.5.0-cann-layout.txt")
    report = run_eval({"n1": make_sample("n1", old), "n2": make_sample("n2", new), "n3": make_sample("n3", new)})
    assert report.get("n2", "cann").status == OK and report.get("n3", "cann").status == OK
    r = report.get("n1", "cann")
    assert r.status == FAIL and r.summary.endswith("differs from 8.5.0 on n2, n3")


def test_tie_is_broken_by_the_first_host_and_python_compares_minor_versions():
    py312 = BASE["python"].replace("3.11.7", "3.12.1").replace("torch 2.5.1", "torch 2.6.0")
    py3119 = BASE["python"].replace("3.11.7", "3.11.9")
    report = run_eval({"n1": make_sample("n1", a2_sections()), "n2": make_sample("n2", a2_sections(python=py312)),
                       "n3": make_sample("n3", a2_sections(python=py3119))})
    assert report.get("n3", "python").status == OK  # 3.11.9 vs 3.11.7: same minor
    python = report.get("n2", "python")
    assert python.status == FAIL and "differs from 3.11 on n1, n3" in python.summary
    assert report.get("n2", "torch").status == FAIL and "differs from 2.5.1" in report.get("n2", "torch").summary


def test_tls_mismatch_within_a_host_and_across_hosts():
    lines = capture("hccn-tls-mismatch.txt").splitlines()
    mixed = a2_sections(**{"hccn:0:tls": lines[0], "hccn:1:tls": lines[1]})
    r = run_eval({"n1": make_sample("n1", mixed)}).get("n1", "tls")
    assert r.status == FAIL and "switch 0: devices [0, 2, 3, 4, 5, 6, 7], switch 1: devices [1]" in r.summary
    assert "EI0006" in r.summary
    on = a2_sections(**{f"hccn:{d}:tls": f"dev_id:{d}, tls switch[1](0:disable, 1:enable)" for d in range(8)})
    report = run_eval({"n1": make_sample("n1", a2_sections()), "n2": make_sample("n2", on),
                       "n3": make_sample("n3", a2_sections())})
    assert report.get("n2", "tls").status == FAIL and "differs from 0 on n1, n3" in report.get("n2", "tls").summary


def test_a2_hccn_failures_are_named_per_device():
    sec = a2_sections(**{"hccn:3:ip": capture("hccn-ip-not-configured.txt"),
                         "hccn:5:net_health": capture("hccn-net-health-init.txt"),
                         "hccn:6:link": "link status: DOWN"})
    r = run_eval({"n1": make_sample("n1", sec)}).get("n1", "hccn")
    assert r.status == FAIL
    assert "dev 3 has no IP (Get ipconf failed" in r.summary
    assert "dev 5 net health Init" in r.summary and "dev 6 link DOWN" in r.summary


SPOD = "        SDID                           : {sdid}\n        Super Pod ID                   : {spod}\n"


def a3_sections(spod: int, sdid: int = 0) -> dict[str, str]:
    sec = a2_sections(**{"npu-smi": capture("npu-smi-info-a3-busy.txt"), "spod": SPOD.format(sdid=sdid, spod=spod)})
    for d in range(16):
        sec[f"hccn:{d}:tls"] = f"dev_id:{d}, tls switch[0](0:disable, 1:enable)"
        sec[f"hccn:{d}:link"] = "link status: UP"
    return sec


def test_a3_hosts_in_another_super_pod_fail_spod():
    samples = {h: make_sample(h, a3_sections(spod, 16 * i)) for i, (h, spod) in enumerate(
        (("n1", 0), ("n2", 0), ("n3", 7)))}
    report = run_eval(samples, soc="ascend910_93", count=16)
    assert [report.get(h, "spod").status for h in ("n1", "n2")] == [OK, OK]
    r = report.get("n3", "spod")
    assert r.status == FAIL and r.value == "7"
    assert "Super Pod ID 7" in r.summary and "differs from 0 on n1, n2" in r.summary
    # the probe asks for it on A3 only
    assert "spod-info" in str(probe_script(a2_plan("x", soc="ascend910_93", count=16)))
    assert "spod-info" not in str(probe_script(a2_plan("x")))


def test_a3_spod_query_that_fails_is_named():
    sec = a3_sections(0)
    sec["spod"] = "This device does not support querying spod-info."
    r = run_eval({"n1": make_sample("n1", sec, rcs={"spod": 255})}, soc="ascend910_93", count=16).get("n1", "spod")
    assert r.status == FAIL and "rc 255" in r.summary and "does not support" in r.summary


def test_hccn_tool_that_stays_busy_fails_hccn_and_tls_naming_the_device():
    busy = "hccn_tool is busy, please try again"
    sec = a3_sections(0)
    sec.update({"hccn:3:tls": busy, "hccn:3:link": busy})
    report = run_eval({"n1": make_sample("n1", sec)}, soc="ascend910_93", count=16)
    hccn, tls = report.get("n1", "hccn"), report.get("n1", "tls")
    assert hccn.status == FAIL and "dev 3 link: hccn_tool stayed busy" in hccn.summary
    assert tls.status == FAIL and "devices [3]" in tls.summary and tls.value == "busy"


def test_a3_link_down_is_only_a_warning():
    sec = a2_sections(**{"npu-smi": capture("npu-smi-info-a3-busy.txt")})
    for d in range(16):
        sec[f"hccn:{d}:tls"] = f"dev_id:{d}, tls switch[0](0:disable, 1:enable)"
        sec[f"hccn:{d}:link"] = "link status: DOWN" if d == 9 else "link status: UP"
    report = run_eval({"n1": make_sample("n1", sec)}, soc="ascend910_93", count=16)
    r = report.get("n1", "hccn")
    assert r.status == WARN and "dev 9 link DOWN" in r.summary
    assert report.get("n1", "npu").status == OK


@pytest.mark.parametrize(("plan_kw", "capture_name", "expect"), [
    ({"count": 16}, "npu-smi-info-910b3-a2-busy.txt", "8 chips, env npu.count says 16"),
    ({"soc": "ascend910_93", "count": 8}, "npu-smi-info-910b3-a2-busy.txt",
     "this is an A2 host (ascend910b), env npu.soc says ascend910_93"),
    ({"count": 16}, "npu-smi-info-a3-busy.txt", "this is an A3 host (ascend910_93), env npu.soc says ascend910b"),
])
def test_npu_shape_must_match_the_env(plan_kw, capture_name, expect):
    sec = a2_sections(**{"npu-smi": capture(capture_name)})
    for d in range(16):
        sec.setdefault(f"hccn:{d}:tls", f"dev_id:{d}, tls switch[0](0:disable, 1:enable)")
        for q in ("link", "net_health", "ip"):
            sec.setdefault(f"hccn:{d}:{q}", sec[f"hccn:0:{q}"])
    r = run_eval({"n1": make_sample("n1", sec)}, **plan_kw).get("n1", "npu")
    assert r.status == FAIL and expect in r.summary


def test_unhealthy_chip_fails_npu():
    text = capture("npu-smi-info-910b2c-16npu-idle.txt").replace(
        "| 11    910B2C              | OK ", "| 11    910B2C              | Warning")
    sec = a2_sections(**{"npu-smi": text})
    for d in range(16):
        for q in ("link", "net_health", "ip", "tls"):
            sec.setdefault(f"hccn:{d}:{q}", sec[f"hccn:0:{q}"].replace("dev_id:0", f"dev_id:{d}"))
    report = run_eval({"n1": make_sample("n1", sec)}, count=16)
    assert "not healthy: NPU 11 chip 0: Warning" in report.get("n1", "npu").summary
    assert report.get("n1", "idle").status == OK


def test_unreachable_host_is_exit_3_and_its_other_checks_are_skipped():
    samples: dict[str, Sample | BaseException] = {
        "n1": make_sample("n1", a2_sections()),
        "n2": HostUnreachable("n2", "cannot connect to 10.0.0.2:22: connection refused")}
    report = run_eval(samples)
    assert report.get("n2", "ssh").status == ERROR
    assert report.get("n2", "ssh").summary == "cannot connect to 10.0.0.2:22: connection refused"
    assert {report.get("n2", c).status for c in CHECKS[1:]} == {SKIP}
    assert report.exit_code == EXIT_INFRA
    assert report.table()[1][1][1] == "UNREACHABLE"


def test_timed_out_probe_fails_the_checks_it_never_reached():
    sec = {k: v for k, v in a2_sections().items() if k in ("t0", "id", "python")}
    res = Result("n1", "probe", None, timed_out=True)
    report = run_eval({"n1": make_sample("n1", sec, result=res)}, Limits(probe_timeout=30))
    assert report.get("n1", "python").status == OK
    assert report.get("n1", "disk").summary == "no output from disk (probe timed out after 30s)"


def test_clock_outlier_fails_and_pairwise_spread_is_reported():
    samples = {"n1": make_sample("n1", a2_sections(), offset=0.01), "n2": make_sample("n2", a2_sections(), offset=2.5),
               "n3": make_sample("n3", a2_sections(), offset=-0.02)}
    report = run_eval(samples, Limits(max_skew=1.0))
    assert report.get("n1", "clock").status == OK and report.get("n3", "clock").status == OK
    r = report.get("n2", "clock")
    assert r.status == FAIL and "+2.500s from the controller" in r.summary and "from the median" in r.summary
    assert report.clock is not None
    assert report.clock.pair == ("n2", "n3") and report.clock.max_pairwise == pytest.approx(2.52)
    assert report.clock.uncertainty["n1"] == pytest.approx(0.001)


def test_two_hosts_drifting_apart_both_fail_though_each_is_close_to_the_controller():
    samples = {"n1": make_sample("n1", a2_sections(), offset=0.7), "n2": make_sample("n2", a2_sections(), offset=-0.7)}
    report = run_eval(samples, Limits(max_skew=1.0))
    assert [report.get(h, "clock").status for h in ("n1", "n2")] == [FAIL, FAIL]


@pytest.mark.parametrize(("core", "status", "text"), [
    ("pattern=core\nsoft=0\nhard=0", FAIL, "no core can be written"),
    ("pattern=|/usr/lib/systemd/systemd-coredump %P\nsoft=unlimited\nhard=unlimited\ntarget=missing", FAIL,
     "not an executable here"),
    ("pattern=/var/crash/%h/core.%p\nsoft=unlimited\nhard=unlimited\ntarget=readonly", FAIL,
     "core directory /var/crash is readonly"),
    ("pattern=/var/crash/camit/core.%e.%p\nsoft=unlimited\nhard=unlimited\ntarget=creatable", OK,
     "/var/crash/camit will be created"),
    ("pattern=core\nsoft=0\nhard=unlimited", WARN, "relative pattern"),
    ("pattern=\nsoft=0\nhard=unlimited", FAIL, "core_pattern is empty"),
])
def test_core_pattern_and_limits(core, status, text):
    r = run_eval({"n1": make_sample("n1", a2_sections(core=core))}).get("n1", "core")
    assert r.status == status and text in r.summary


def test_low_disk_and_broken_interpreter_fail():
    low = BASE["disk"].replace("50000000", "1048576")  # 1 GiB
    broken = "interpreter /usr/bin/python3\nsh: 1: /usr/bin/python3: not found"
    report = run_eval({"n1": make_sample("n1", a2_sections(disk=low, python=broken), rcs={"python": 127})},
                      Limits(min_free_gb=2))
    assert report.get("n1", "disk").status == FAIL and "only 1.0 GiB free" in report.get("n1", "disk").summary
    assert report.get("n1", "python").summary == "/usr/bin/python3 does not run: sh: 1: /usr/bin/python3: not found"
    assert report.get("n1", "torch").status == FAIL


def test_missing_set_env_fails_cann():
    env = env_of(set_env="/usr/local/Ascend/cann/set_env.sh")
    plans = {"n1": plan_probe(spec("n1", soc="ascend910b", count=8, workdir="/w"), env)}
    sample = make_sample("n1", a2_sections(set_env="ls: cannot access"), rcs={"set_env": 2})
    r = evaluate(plans, {"n1": sample}).get("n1", "cann")
    assert r.status == FAIL and "cann.set_env /usr/local/Ascend/cann/set_env.sh does not exist" in r.summary


def test_report_json_round_trip():
    report = run_eval({"n1": make_sample("n1", a2_sections()), "n2": HostUnreachable("n2", "refused")})
    data = report.to_json()
    again = Report.from_json(data)
    assert again.results == report.results and again.hosts == report.hosts
    assert again.exit_code == report.exit_code == EXIT_INFRA
    assert data["clock"]["offsets"].keys() == {"n1"}


# --------------------------------------------------------------------------- scale


class CountingLocal(LocalTransport):
    """LocalTransport that counts calls and concurrent probes."""

    lock = threading.Lock()
    active = 0
    peak = 0

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.spawns = self.runs = 0

    def run(self, *a, **kw):
        self.runs += 1
        return super().run(*a, **kw)

    def spawn(self, *a, **kw):
        self.spawns += 1
        with CountingLocal.lock:
            CountingLocal.active += 1
            CountingLocal.peak = max(CountingLocal.peak, CountingLocal.active)
        proc = super().spawn(*a, **kw)
        wait = proc.wait

        def done(timeout=None):
            r = wait(timeout)
            with CountingLocal.lock:
                CountingLocal.active -= 1
            return r

        setattr(proc, "wait", done)  # noqa: B010 - the probe ends when it is waited for
        return proc


def test_preflight_is_one_round_trip_per_host_through_the_bounded_pool(tmp_path):
    names = [f"h{i:02d}" for i in range(12)]
    specs = [dataclasses.replace(spec(n, workdir=str(tmp_path / n), python=sys.executable),
                                 manage_nic=NicSpec("lo", "127.0.0.1")) for n in names]
    env = env_of(*specs)
    transports = {n: CountingLocal(n) for n in names}
    cluster = Cluster([Host(n, transports[n], spec=s) for n, s in zip(names, specs)], max_parallel=4)
    report = Preflight(env, cluster).run()
    assert report.hosts == names
    # the probe: one script per host; then the reachability check: node 0's listener (spawned, later killed by
    # its pid) and one connect from every host
    assert transports[names[0]].spawns == 2 and transports[names[0]].runs == 2
    assert all(t.spawns == 1 and t.runs == 1 for t in list(transports.values())[1:])
    assert {report.get(n, "rdzv").status for n in names} == {OK}
    assert 1 <= CountingLocal.peak <= 4
    assert report.exit_code == EXIT_OK, [r for r in report.results.values() if not r.passed]


def test_the_version_snippet_reads_version_py_and_falls_back_to_metadata(tmp_path):
    """torch's build writes torch/version.py; a torch_npu without one is read from its dist-info."""
    import subprocess

    from framework.preflight import probe as preflight_probe

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise SystemExit('the probe must not import torch')\n")
    (tmp_path / "torch" / "version.py").write_text("from typing import Optional\n__version__: str = '2.6.0+cpu'\n")
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text("raise SystemExit('nor torch_npu')\n")
    meta = tmp_path / "torch_npu-2.6.0.post3.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.6.0.post3\n")
    out = subprocess.run([sys.executable, "-S", "-c", preflight_probe._PY_VERSIONS], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    v = sys.version_info
    assert out.stdout == f"python {v.major}.{v.minor}.{v.micro}\ntorch 2.6.0+cpu\ntorch_npu 2.6.0.post3\n", out.stderr
    (tmp_path / "torch_npu" / "__init__.py").unlink()
    (tmp_path / "torch_npu").rmdir()
    meta.joinpath("METADATA").unlink()
    meta.rmdir()
    out = subprocess.run([sys.executable, "-S", "-c", preflight_probe._PY_VERSIONS], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.stdout.splitlines()[2] == "torch_npu -"


# --------------------------------------------------------------------------- one core-pattern model


@pytest.mark.parametrize(("raw", "kind", "delivery"), [
    ("/var/crash/camit/core.%e.%p", "file", "file"),
    ("core.%e.%p", "relative", "relative"),
    ("|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h", "systemd", "pipe"),
    ("|/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -u%u -g%g -- %E", "apport", "pipe"),
    ("|/usr/libexec/abrt-hook-ccpp %s %c %p %u %g %t %e %P %I %h", "abrt", "pipe"),
    ("|/usr/local/bin/my-crash-handler %p", "pipe", "pipe"),
])
def test_preflight_and_the_core_watcher_classify_a_pattern_the_same_way(raw, kind, delivery):
    """The preflight ``core`` check and the core scan read ``core_pattern`` through one model."""
    from framework.cores.scan import parse_scan

    scan = parse_scan("n1", f"@@now 1.0\n@@pattern {raw}\n@@ulimit unlimited unlimited\n@@end\n")
    checked = run_eval({"n1": make_sample("n1", a2_sections(
        core=f"pattern={raw}\nsoft=unlimited\nhard=unlimited\ntarget=ok"))}).get("n1", "core")
    assert (scan.pattern.kind, scan.pattern.delivery) == (kind, delivery)
    assert checked.value == scan.pattern.delivery and checked.status == (WARN if kind == "relative" else OK)
    assert repr(raw) in checked.summary and scan.pattern.raw == raw
    handler = raw[1:].split()[0] if raw.startswith("|") else None
    assert scan.pattern.handler == handler
    assert scan.pattern.checked == (kind != "pipe")
