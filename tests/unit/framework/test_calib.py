"""camit calibrate's pure parts: normalisation and comparison, the host script run by a real sh, the
replay table and the emulated tools answering from it, and the verb's exit statuses and errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework.calib import bundle, compare, replay
from framework.calib.probe import CAM_REFUSALS, HOST_FACTS, TORCH_PROBE, host_script
from framework.cli import main
from framework.lab.emu.tools import hccn_tool, npu_smi
from framework.preflight.probe import split_sections

REPO = Path(__file__).resolve().parents[3]

TABLE = """| npu-smi 25.2.3   Version: 25.2.3 |
| 0     Ascend910  | OK    | 93.1   45   0 / 0 |
| 0     0          | 0000:C1:00.0 | 0  3161 / 65536 |
| NPU  Chip  | Process id  | Process name | Process memory(MB) |
+=====+
| 0    0     | 4242        | python       | 2048 |
"""


def test_volatile_parts_are_normalised_away() -> None:
    other = (
        TABLE.replace("93.1", "101.7")
        .replace("45 ", "61 ")
        .replace("C1:00.0", "C2:00.0")
        .replace("4242", "77")
        .replace("python", "torchrun")
    )
    assert compare.differences({"host.npu_smi_info": TABLE}, {"host.npu_smi_info": other}) == []
    stamped = {"k": "at 2026-12-06 06:31:04 pid 4711 at 0x7f00deadbeef"}
    assert (
        compare.differences(stamped, {"k": "at 2026-01-01T00:00:00 pid=12 at 0x7f0011112222"}) == []
    )
    # ACL's log form
    acl = "EZ9999: [PID: 1266] 2026-12-06-06:34:23.455.509 DispatchLayout: numExperts (7)"
    assert (
        compare.differences({"k": acl}, {"k": acl.replace("1266", "9").replace("23.455", "59.001")})
        == []
    )


def test_a_changed_or_missing_fact_is_named() -> None:
    base = {"a": "x", "b": "y", "host.npu_smi_info": TABLE}
    assert compare.differences({**base, "b": "z"}, base) == ["b"]
    assert compare.differences({"a": "x", "host.npu_smi_info": TABLE}, base) == ["b"]
    # the table's structure (a chip name) is a fact, only its numbers are volatile
    assert compare.differences(
        {**base, "host.npu_smi_info": TABLE.replace("Ascend910", "Ascend910B")}, base
    ) == ["host.npu_smi_info"]


def test_normalise_is_idempotent() -> None:
    once = compare.normalise("host.npu_smi_info", TABLE)
    assert compare.normalise("host.npu_smi_info", once) == once


def test_host_script_answers_every_fact_in_a_real_sh(tmp_path: Path) -> None:
    """Without Ascend tools each section still opens and closes (the failure is the value)."""
    set_env = tmp_path / "set_env.sh"
    set_env.write_text("")
    script = host_script([str(tmp_path / "cann"), "$HOME/Ascend/cann"], str(set_env))
    cp = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    sections = split_sections(cp.stdout)
    assert {s for s, _c, _w in HOST_FACTS.values()} <= set(sections)
    assert sections["set_env"].text.strip() == f"present {set_env}"
    assert sections["cann"].rc == 1 and sections["cann"].text.strip() == "absent"


def test_replay_table_and_exit_status() -> None:
    doc = {
        "hosts": {
            "b": {"host.hccn_link": {"value": "oops\n\n[exit 3]"}},
            "a": {
                "host.npu_smi_info": {"value": "A\n"},
                "host.hccn_link": {"value": "[not answered]"},
            },
        }
    }
    assert replay.host_replay(doc, 0) == {"npu-smi info": {"stdout": "A\n", "rc": 0}}
    assert replay.host_replay(doc, 3) == {"hccn_tool -i 0 -link -g": {"stdout": "oops\n", "rc": 3}}


def _emu(tmp_path: Path, table: dict[str, dict[str, object]]) -> Path:
    emu = tmp_path / "emu"
    emu.mkdir()
    (emu / "host.json").write_text(json.dumps({"count": 16, "chips_per_npu": 2, "npus": 8}))
    (emu / "replay.json").write_text(json.dumps(table))
    return emu


def test_emulated_tools_answer_from_the_replay_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emu = _emu(
        tmp_path,
        {
            "npu-smi info": {"stdout": "REPLAYED\n", "rc": 0},
            "hccn_tool -i 0 -link -g": {"stdout": "link status: DOWN\n", "rc": 2},
        },
    )
    assert npu_smi.main(["info"], emu) == 0
    assert capsys.readouterr().out == "REPLAYED\n"
    assert hccn_tool.main(["-i", "0", "-link", "-g"], emu) == 2
    assert capsys.readouterr().out == "link status: DOWN\n"


def _bundle(path: Path, facts: dict[str, str]) -> Path:
    path.mkdir()
    doc = {
        "schema": bundle.SCHEMA,
        "hosts": {},
        "facts": {k: {"value": v, "source": f"h: {k}"} for k, v in facts.items()},
    }
    (path / bundle.BUNDLE_FILE).write_text(json.dumps(doc))
    return path


def test_compare_verb_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"facts": {"a": "1", "b": "2"}}))
    same = _bundle(tmp_path / "same", {"a": "1", "b": "2"})
    assert main(["calibrate", "--compare", str(same), "--profile", str(profile)]) == 0
    changed = _bundle(tmp_path / "changed", {"a": "1", "b": "3"})
    capsys.readouterr()
    assert main(["calibrate", "--compare", str(changed), "--profile", str(profile)]) == 1
    assert capsys.readouterr().out == "differs: b (h: b)\n"


def test_a_bad_bundle_is_one_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "calibration.json"
    bad.write_text(json.dumps({"schema": bundle.SCHEMA, "facts": {"x": {"value": 1}}, "hosts": {}}))
    assert main(["calibrate", "--compare", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: facts.x.value: expected a string" in err and "Traceback" not in err


def test_the_built_in_profile_is_normalised_and_loads() -> None:
    profile = bundle.load_profile()
    assert {"host.npu_smi_info", "torch_npu.numpy_error", "hccl.env.HCCL_BUFFSIZE"} <= set(profile)
    assert all(compare.normalise(k, v) == v for k, v in profile.items())


def test_cam_refusals_name_what_the_contract_names() -> None:
    rank = str(REPO / "suites" / "cam" / "rank")
    sys.path.insert(0, rank)
    try:
        import camcontract
    finally:
        sys.path.remove(rank)
    for op, (entry, words) in CAM_REFUSALS.items():
        assert camcontract.LIMITS[entry].names == words, op


def test_torch_probe_records_errors_as_facts_with_the_stand_ins() -> None:
    """The probe run by a real python against the stand-ins (what the emulation assumes): every
    fact is present, the device errors and one refusal per op are recorded as values, never a
    failed probe."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "standin_npu"), str(REPO / "standin")]),
        "CAMIT_STANDIN_NO_OPAPI_CHECK": "1",
    }
    cp = subprocess.run(
        [sys.executable, "-c", TORCH_PROBE],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    line = next(ln for ln in cp.stdout.splitlines() if ln.startswith("@@camit-calib@@"))
    values = json.loads(line[len("@@camit-calib@@") :])
    assert values["torch_npu.numpy_error"].startswith("TypeError: can't convert npu:0")
    assert values["torch_npu.mix_device_error"].startswith("RuntimeError: Expected all tensors")
    assert values["cam.version"] == "209.0.0b1" or values["cam.version"].startswith(
        "PackageNotFoundError"
    )
    assert bundle.refusal_checks(values) == {
        f"cam.refusal.{op}.names_quantity": "yes" for op in CAM_REFUSALS
    }


def test_write_scrubs_secrets_from_the_json_and_the_raw_captures(tmp_path: Path) -> None:
    from framework.records.scrub import Scrubber

    fact = {"value": "token=s3cr3t-pw here", "source": "h1: npu-smi info"}
    doc = {
        "schema": bundle.SCHEMA,
        "facts": {"host.npu_smi_info": dict(fact)},
        "hosts": {"h1": {"host.npu_smi_info": dict(fact)}},
    }
    path = bundle.write(doc, tmp_path / "b", Scrubber(["s3cr3t-pw"]))
    texts = [
        path.read_text(),
        (tmp_path / "b" / "raw" / "h1" / "host.npu_smi_info.txt").read_text(),
    ]
    assert all("s3cr3t" not in t and "token=*** here" in t for t in texts)
    assert (
        bundle.load(tmp_path / "b")["hosts"]["h1"]["host.npu_smi_info"]["raw"]
        == "raw/h1/host.npu_smi_info.txt"
    )


def test_write_bounds_each_value_after_scrubbing_it(tmp_path: Path) -> None:
    """A host that prints without end gives MAX_VALUE characters and a note; a secret across the
    cut is scrubbed whole (no fragment of it is kept)."""
    from framework.records.scrub import Scrubber

    value = "x" * (bundle.MAX_VALUE - 4) + "s3cr3t-pw" + "y" * 200_000
    doc = {
        "schema": bundle.SCHEMA,
        "facts": {"host.npu_smi_info": {"value": value, "source": "h1"}},
        "hosts": {"h1": {"host.npu_smi_info": {"value": value, "source": "h1"}}},
    }
    path = bundle.write(doc, tmp_path / "b", Scrubber(["s3cr3t-pw"]))
    got = bundle.load(path)["facts"]["host.npu_smi_info"]["value"]
    raw = (tmp_path / "b" / "raw" / "h1" / "host.npu_smi_info.txt").read_text()
    assert got.endswith(" more characters not kept]") and len(got) < bundle.MAX_VALUE + 60
    assert raw == got + "\n" and "s3cr" not in path.read_text() + raw
    assert path.stat().st_size < 3 * bundle.MAX_VALUE


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), "lab: error: --calibration needs --npu (only emulated hosts replay a bundle)"),
        (("--npu", "a3"), "lab: error: /nonexistent/bundle: not a calibration bundle"),
    ],
)
def test_lab_up_calibration_usage_errors_come_before_any_lab_work(
    extra: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from framework.lab.manage import main as lab_main

    argv = [
        "up",
        "--hosts",
        "2",
        "--name",
        "calibunit",
        "--subnet",
        "10.254.9.0/24",
        "--state-dir",
        "/nonexistent/state",
        "--calibration",
        "/nonexistent/bundle",
        *extra,
    ]
    assert lab_main(argv) == 2
    assert capsys.readouterr().err.startswith(message)


def test_records_replay_only_what_the_probe_read() -> None:
    doc = {
        "hosts": {
            "a": {
                "host.driver_version": {"value": "Version=99.0\n"},
                "host.firmware_version": {"value": "cat: no such file\n\n[exit 1]"},
            }
        }
    }
    assert replay.host_records(doc, 1) == {"Ascend/driver/version.info": "Version=99.0\n"}


def test_a_bind_assertions_source_position_is_not_a_fact():
    """TORCH_BIND_ASSERT names the build's file and line: another build of the same check is no difference."""
    from framework.calib.compare import normalise

    a = "RuntimeError: Failed: Assertion error prefill.py:184 error message or error code is 'x.dim() == 2'"
    b = ("RuntimeError: Failed: Assertion error /build/pybind/moe_combine_prefill.cpp:35 "
         "error message or error code is 'x.dim() == 2'")
    assert normalise("cam.refusal.moe_combine_prefill", a) == normalise("cam.refusal.moe_combine_prefill", b)
    assert normalise("k", a) != normalise("k", a.replace("x.dim() == 2", "x.dim() == 3"))
