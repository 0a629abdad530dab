"""framework.preflight.checks: the verdicts the healthy-cluster tests
(tests/unit/framework/test_preflight_plan.py) do not reach: a CANN found by its version.cfg beside
another version, a driver without firmware, a device without a TLS state, an A3 host without npu-smi
and a host clock that was read but not timed."""

from __future__ import annotations

from framework.config.effective import HostSpec, NicSpec, NpuSpec
from framework.preflight.checks import FAIL, OK, WARN, Report, Sample, clock_skew, evaluate
from framework.preflight.probe import Section, plan_probe
from tests.support.builders import ASCEND_CAPTURES

RECORD = "file:/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"
CFG = "file:/usr/local/Ascend/cann/version.cfg"


def capture(name: str) -> str:
    return (ASCEND_CAPTURES / name).read_text().split("\n", 1)[1]


def judge(sections: dict[str, str], *, soc: str = "ascend910b", count: int = 2,
          received: float | None = 1000.1) -> Report:
    spec = HostSpec(name="n1", manage_nic=NicSpec("eth0", "10.0.0.1"), workdir="/w",
                    python="python3", npu=NpuSpec(count=count, soc=soc))
    secs = {name: Section(name, text, 0) for name, text in sections.items()}
    return evaluate({"n1": plan_probe(spec, None)}, {"n1": Sample("n1", secs, 1000.0, received)})


def test_a_cann_named_by_version_cfg_beside_another_version_is_a_warning() -> None:
    cfg = "toolkit_running_version=[8.0.0.1:8.0.RC3]\n"
    record = capture("ascend-toolkit-install-info-8.3rc2.txt")
    r = judge({RECORD: record, CFG: cfg}).get("n1", "cann")
    assert r.status == WARN and r.value == "8.3.RC2"
    assert r.summary.endswith("; other installs: 8.0.RC3 (/usr/local/Ascend/cann/version.cfg)")
    assert r.details == (f"8.3.RC2 in {RECORD[5:]}", f"8.0.RC3 in {CFG[5:]}")


def test_a_driver_without_firmware_record_passes_with_the_firmware_unknown() -> None:
    driver = {"file:/usr/local/Ascend/driver/version.info": "Version=24.1.rc1\n"}
    r = judge(driver).get("n1", "driver")
    assert (r.status, r.summary, r.value) == (OK, "driver 24.1.rc1, firmware unknown", "24.1.rc1")


def test_a_device_without_a_tls_state_fails_tls_naming_it() -> None:
    tls = {"hccn:0:tls": "dev_id:0, tls switch[1](0:disable, 1:enable)",
           "hccn:1:tls": "no such device"}
    r = judge({"hccn.path": "/usr/local/Ascend/driver/tools/hccn_tool", **tls}).get("n1", "tls")
    assert (r.status, r.summary) == (FAIL, "no TLS state from devices [1]")


def test_an_a3_host_without_npu_smi_fails_spod() -> None:
    r = judge({"npu-smi.path": ""}, soc="ascend910_93", count=16).get("n1", "spod")
    assert (r.status, r.summary) == (FAIL, "npu-smi not found: cannot read the Super Pod ID")


def test_a_clock_read_but_not_timed_is_a_warning_and_left_out_of_the_skew() -> None:
    report = judge({"t0": "1000.05"}, received=None)
    r = report.get("n1", "clock")
    assert (r.status, r.summary) == (WARN, "the host clock was read but the exchange was not timed")
    assert report.clock is None
    timed = Sample("n1", {"t0": Section("t0", "1000.25", 0)}, 1000.0, 1000.1)
    skew = clock_skew({"n1": timed, "n2": Sample("n2", {}, 1000.0, 1000.1)})
    assert skew is not None and list(skew.offsets) == ["n1"]
    assert round(skew.offsets["n1"], 6) == 0.2 and round(skew.uncertainty["n1"], 6) == 0.05
