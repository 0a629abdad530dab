"""The fault-injected stand-in copy of tests/integration/test_injected_faults_lab.py, without a lab: every
fault lands once behind its knob, the copy compiles, and the knob turns a fault on only in its case."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.support.faults import FAULTS, Fault, faulty_standin


def test_every_fault_lands_behind_its_knob_and_the_copy_compiles(tmp_path: Path) -> None:
    pkg = faulty_standin(tmp_path / "standin") / "umdk_cam_op_lib"
    for name, fault in FAULTS.items():
        text = (pkg / fault.module).read_text()
        assert text.count(f"if _inject.on({name!r}):\n") == 1, name
    for module in {f.module for f in FAULTS.values()} | {"_inject.py"}:
        compile((pkg / module).read_text(), str(pkg / module), "exec")


def test_a_fault_whose_line_is_gone_fails_the_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = Fault("prefill.py", "    no such line\n", "pass", "case", "text")
    monkeypatch.setitem(FAULTS, "wrong_scale", gone)
    with pytest.raises(AssertionError, match="update fault 'wrong_scale'"):
        faulty_standin(tmp_path / "standin")


def test_the_knob_turns_a_fault_on_only_in_its_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = faulty_standin(tmp_path / "standin") / "umdk_cam_op_lib" / "_inject.py"
    spec = importlib.util.spec_from_file_location("camit_test_inject", path)
    assert spec is not None and spec.loader is not None
    inject = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(inject)
    monkeypatch.setenv("CAMIT_INJECT", "drop=test_a[x];scale=test_b")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_prefill_rank.py::test_a[x] (call)")
    assert inject.on("drop") and not inject.on("scale") and not inject.on("other")
    monkeypatch.delenv("CAMIT_INJECT")
    assert not inject.on("drop")
