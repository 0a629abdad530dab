"""camit's real preflight probe (framework/preflight/probe.py), run with sh against an emulated host's tools.

No lab: the tree sits under tmp_path and its tools are found on PATH, as the probe finds them first
(``command -v npu-smi`` / ``command -v hccn_tool``); the verdicts are checks.evaluate's. The CANN and
driver records are read at their absolute host paths by the probe, so those checks need the lab's
mounts and are not judged here (test_lab_emu.py parses the records in the tree). Each fault knob shows
up in the check that reads its tool; ``other-spod`` is absent: no check reads ``spod-info``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.lab import emu
from framework.preflight.checks import FAIL, OK, Report, Sample, evaluate
from framework.preflight.probe import ProbePlan, probe_script, split_sections
from tests.support.emu_holders import holder as start_holder
from tests.support.emu_holders import kill

ROOT = Path(__file__).resolve().parents[4]
JUDGED = ("npu", "idle", "hccn", "tls")


def _populate(tmp_path: Path, name: str) -> Path:
    tree = tmp_path / name
    emu.populate(tree, emu.profile(name), host="host0", index=0, n_hosts=2)
    return tree


def _env(tree: Path) -> dict[str, str]:
    camit = tree / "Ascend/.camit-emu"
    path = f"{tree / 'sbin'}:{tree / 'Ascend/driver/tools'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**os.environ, "PATH": path, "CAMIT_EMU_NPU": str(camit / "npu.json"),
            "CAMIT_EMU_NPU_DIR": str(camit / "registry")}


def _preflight(tmp_path: Path, tree: Path, name: str, visible: tuple[int, ...] | None = None,
               count: int | None = None) -> Report:
    """The probe of a host declaring ``count`` devices (default: the profile's; fewer: fewer hccn queries)."""
    prof = emu.profile(name)
    plan = ProbePlan(host="host0", workdir=str(tmp_path / "work"), python=sys.executable,
                     venv_python=str(tmp_path / "none"), soc=prof.soc, npu_count=count or prof.count, visible=visible,
                     cann_set_env=prof.set_env, tool_timeout=20)
    sent = time.time()
    r = subprocess.run(["sh", "-c", probe_script(plan)], input="go\n", capture_output=True, text=True,
                       env=_env(tree), timeout=120)
    sample = Sample("host0", split_sections(r.stdout), sent, time.time())
    return evaluate({"host0": plan}, {"host0": sample})


def _verdicts(report: Report) -> dict[str, tuple[str, str]]:
    return {c: (report.get("host0", c).status, report.get("host0", c).summary) for c in JUDGED}


@pytest.mark.parametrize("name", ["a2", "a3"])
def test_a_healthy_emulated_host_passes_every_npu_check(tmp_path: Path, name: str) -> None:
    prof = emu.profile(name)
    verdicts = _verdicts(_preflight(tmp_path, _populate(tmp_path, name), name))
    assert {c: v[0] for c, v in verdicts.items()} == dict.fromkeys(JUDGED, OK), verdicts
    assert verdicts["npu"][1].startswith(f"{'A3' if prof.a3 else 'A2'}, {prof.count} chips on 8 NPUs")
    assert verdicts["tls"][1] == f"TLS switch 0 on all {prof.count} devices"


def test_knobs_show_in_their_checks(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a2")
    emu.set_fault(tree, "tls-mismatch", device=1)
    emu.set_fault(tree, "health-alarm", device=4)
    emu.set_fault(tree, "link-down", device=2)
    holder = start_holder(tree, 6)  # what held-device's process (holder_argv) does: a registry record
    try:
        verdicts = _verdicts(_preflight(tmp_path, tree, "a2"))
    finally:
        kill(holder)
    assert verdicts["tls"][0] == FAIL and "switch 1: devices [1]" in verdicts["tls"][1]
    assert verdicts["npu"][0] == FAIL and "not healthy: NPU 4 chip 0: Alarm" in verdicts["npu"][1]
    assert verdicts["hccn"] == (FAIL, "dev 2 link DOWN; dev 2 net health Fault")
    assert verdicts["idle"][0] == FAIL and f"NPU 6 chip 0 pid {holder.pid}" in verdicts["idle"][1]


def test_a_held_device_outside_the_visible_ones_is_idle(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a3")
    holder = start_holder(tree, 9)
    try:
        report = _preflight(tmp_path, tree, "a3", visible=(0, 1), count=1)
        busy = _preflight(tmp_path, tree, "a3", visible=(8, 9), count=1)
    finally:
        kill(holder)
    assert report.get("host0", "idle").status == OK
    assert busy.get("host0", "idle").status == FAIL and "NPU 4 chip 1" in busy.get("host0", "idle").summary


def test_a3_link_down_is_a_warning_and_a_busy_hccn_tool_is_reported(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a3")
    emu.set_fault(tree, "link-down", device=7)
    emu.set_fault(tree, "hccn-busy", device=0)
    # 8 of the 16 devices (fewer queries); the probe retries each busy query 5 times first
    verdicts = _verdicts(_preflight(tmp_path, tree, "a3", count=8))
    assert verdicts["tls"][0] == FAIL and verdicts["tls"][1].startswith(
        "no TLS state from devices [0]: hccn_tool stayed busy through the probe's retries")
    # the busy device fails hccn; the down link (only a warning on A3, where -link may read DOWN while
    # HCCS works) is still named beside it
    assert verdicts["hccn"][0] == FAIL
    assert verdicts["hccn"][1] == ("dev 0 link: hccn_tool stayed busy through the probe's retries (another "
                                   "hccn_tool or a device job holds it); dev 7 link DOWN")


def test_no_driver_fails_the_tool_checks(tmp_path: Path) -> None:
    tree = _populate(tmp_path, "a2")
    emu.set_fault(tree, "no-driver")
    verdicts = _verdicts(_preflight(tmp_path, tree, "a2"))
    assert verdicts["npu"][0] == verdicts["idle"][0] == FAIL and "npu-smi not found" in verdicts["npu"][1]
    assert verdicts["hccn"][0] == verdicts["tls"][0] == FAIL and "hccn_tool not found" in verdicts["hccn"][1]
