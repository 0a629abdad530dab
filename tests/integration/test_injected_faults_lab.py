"""Each injected data fault fails the CAM suite on the emulated A3 lab, on the case meant to catch it.

One copy of the stand-in carries every fault, each behind a knob: ``CAMIT_INJECT`` maps a fault to the one
rank-side case (a ``PYTEST_CURRENT_TEST`` substring) during which it is active. One launch (world 4, two
visible dies a host, ``--launch-per world``) runs the prefill and fused modules: every targeted case fails
with the check that names the fault's output, and every other case of the launch passes (no fault leaks).
The lab is CAMIT_NPU_LAB_ENV (``make test`` brings it up); without it the test is skipped.
"""

from __future__ import annotations

import json
import secrets
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.support.ascend_lab import npu_lab_lock, run, suite_env
from tests.support.faults import FAULTS, faulty_standin

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]

def rank_cases(folder: Path) -> dict[str, dict[str, str]]:
    """Every rank-side case of the run's rank XML files: case → {rank file: failure text, or '' when passed}."""
    cases: dict[str, dict[str, str]] = {}
    for xml in sorted(folder.glob("host*/*/rank*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = str(case.get("name"))
            bad = [e for e in case if e.tag in ("failure", "error")]
            text = "".join((e.get("message") or "") + (e.text or "") for e in bad)
            cases.setdefault(name, {})[f"{xml.parent.name}/{xml.name}"] = text if bad else ""
    return cases



@pytest.fixture
def a3_lab(npu_lab_env_path: Path) -> tuple[Path, None, str]:
    """The emulated A3 lab's env file, as ``_suite_env`` takes it."""
    return npu_lab_env_path, None, ""

def test_each_injected_data_fault_fails_the_case_meant_to_catch_it(a3_lab, tmp_path):
    knob = ";".join(f"{name}={f.case}" for name, f in FAULTS.items())

    def change(doc: dict[str, Any]) -> None:
        doc["defaults"]["npu"]["visible"] = [0, 1]
        # a workdir of its own each run: with venv false the wheel goes into the host's python, which another
        # test's deploy may have changed since, while a reused workdir's deploy state says "unchanged"
        doc["defaults"]["workdir"] = f"/var/tmp/camit/injected-faults-{secrets.token_hex(4)}"
        doc.setdefault("launch", {}).setdefault("env", {})["CAMIT_INJECT"] = knob

    env = suite_env(a3_lab, tmp_path, change, wheel_source=faulty_standin(tmp_path / "standin"))
    with npu_lab_lock():
        proc = run("-m", "pytest", "suites/cam/test_prefill.py", "suites/cam/test_fused.py", "--env", str(env),
                   "--world-sizes", "4", "--launch-per", "world", "--report-dir", str(tmp_path / "r"),
                   "-p", "no:cacheprovider", "-q", timeout=900)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]
    folder = (tmp_path / "r" / "latest").resolve()
    launches = [json.loads(p.read_text()) for p in folder.glob("launch-*.json")]
    assert len(launches) == 1 and launches[0]["world_size"] == 4, [x["launch_id"] for x in launches]
    cases = rank_cases(folder)
    assert len({r for by_rank in cases.values() for r in by_rank}) == 4, cases   # every rank's report came back
    targets = {f.case: (name, f.caught) for name, f in FAULTS.items()}
    for case, by_rank in cases.items():
        if case not in targets:   # no fault active: the case passes on every rank
            assert not any(by_rank.values()), (case, by_rank)
            continue
        name, caught = targets[case]
        failed = [text for text in by_rank.values() if text]
        assert failed, f"fault {name!r} went unseen: {case} passed on every rank"
        assert any(caught in text for text in failed), (name, caught, failed[0][:2000])
    assert set(targets) <= set(cases), sorted(set(targets) - set(cases))
