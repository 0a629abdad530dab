"""The fault bundle (framework.cores.faultbundle): ascend-fd's per-host input layout, scrubbed, bounded."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from framework.cores import faultbundle
from framework.records.scrub import Scrubber

SECRET = "s3cr3t-token-42"


def _host(folder: Path) -> Path:
    """A host's fetched run folder after a failed NPU launch, as the runner leaves it."""
    files = {
        "rank2.log": f"step 1\nHCCL_SECRET={SECRET}\nRuntimeError: EI0002\n",
        "rank3.log": "RuntimeError: ... error code is 507035\n",
        "rank3.json": "{}",
        "torchrun.log": "torchrun\n",
        "ascend/debug/plog/plog-201_1.log": "[ERROR] RUNTIME(201,python3):2026-12-06-06:03:32.001.002 retCode=507035\n",
        "npu-state/npu-smi-info.txt": "| npu-smi 24.1.0 Version: 24.1.0 |\n",
        "npu-state/hccn.txt": "== hccn_tool -i 0 -link -g\nlink status: UP\n",
        "npu-state/msnpureport/2026-12-06/device-0/slog/device-os_1.log": "device 0 os log\n",
        "dmesg.txt": "[12.5] kernel line\n",
    }
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def test_a_host_tree_matches_the_tools_layout_and_keeps_no_secret(tmp_path: Path) -> None:
    src = _host(tmp_path / "run" / "host2")
    tree = tmp_path / "bundle" / "host2"
    notes = faultbundle.host_tree(src, tree, scrub=Scrubber([SECRET]).text, env={"HCCL_EXEC_TIMEOUT": "2"},
                                  versions={"camit": "0.1"})
    assert faultbundle.check_tree(tree) == []
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()) == [
        "camit/environment.txt", "camit/notes.txt", "camit/versions.txt",
        "device_log/2026-12-06/device-0/slog/device-os_1.log", "dmesg",
        "environment_check/npu_info_after.txt", "process_log/plog/plog-201_1.log", "rank-2.txt", "rank-3.txt"]
    assert SECRET not in (tree / "rank-2.txt").read_text() and "***" in (tree / "rank-2.txt").read_text()
    after = (tree / "environment_check/npu_info_after.txt").read_text()
    assert "npu-smi 24.1.0" in after and "link status: UP" in after
    assert notes == ["environment_check/npu_info_before.txt: not captured on this host"]
    assert (tree / "camit/environment.txt").read_text() == "HCCL_EXEC_TIMEOUT=2\n"


def test_the_manifest_check_names_what_is_missing_or_too_big(tmp_path: Path) -> None:
    tree = tmp_path / "host1"
    (tree / "process_log").mkdir(parents=True)
    (tree / "process_log" / "plog-1.log").write_bytes(b"x" * 64)
    man = faultbundle.layout()
    small = {**man, "limits": {**man["limits"], "cann_log_file_bytes": 32}}
    problems = faultbundle.check_tree(tree, small)
    assert "host1: environment_check (NPU network port and state information, resource information) is missing" \
        in problems
    assert "host1: environment_check/npu_info_after.txt (NPU check after the job (npu-smi, hccn_tool)) is missing" \
           in problems
    assert "host1: process_log/plog-1.log is over 32 bytes" in problems


def test_files_are_cut_to_the_tools_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    man = faultbundle.layout()
    monkeypatch.setattr(faultbundle, "layout", lambda: {**man, "limits": {**man["limits"], "cann_log_file_bytes": 40,
                                                                            "console_log_read_bytes": 10}})
    src = _host(tmp_path / "src")
    (src / "ascend/debug/plog/plog-201_1.log").write_text("old " * 100 + "NEWEST")
    tree = tmp_path / "t"
    notes = faultbundle.host_tree(src, tree)
    assert (tree / "process_log/plog/plog-201_1.log").read_text().endswith("NEWEST")
    assert (tree / "process_log/plog/plog-201_1.log").stat().st_size == 40
    assert (tree / "rank-2.txt").stat().st_size == 10
    assert faultbundle.check_tree(tree) == []
    assert any(n.startswith("process_log/plog/plog-201_1.log: cut to 40") for n in notes), notes


def _fake_tool(bindir: Path, calls: Path) -> None:
    bindir.mkdir()
    tool = bindir / "ascend-fd"
    tool.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"
                    "[ \"$1\" = diag ] && echo 'Root cause node: host2 device 1 (507035 vector core exception)'\n"
                    "exit 0\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_where_ascend_fd_is_installed_it_parses_each_host_then_diagnoses(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls.txt"
    _fake_tool(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    folders = {h: _host(tmp_path / "run" / h) for h in ("host1", "host2")}
    bundle, verdict = faultbundle.write_bundle(tmp_path / "run", folders)
    assert verdict == "Root cause node: host2 device 1 (507035 vector core exception)"
    assert calls.read_text().splitlines() == [
        f"parse -i {bundle / 'host1'} -o {bundle / 'parsed' / 'host1'}",
        f"parse -i {bundle / 'host2'} -o {bundle / 'parsed' / 'host2'}",
        f"diag -i {bundle / 'parsed'} -o {bundle / 'diag'}"]
    assert "Root cause node: host2" in (bundle / faultbundle.VERDICT).read_text()


def test_without_ascend_fd_the_bundle_is_written_and_no_verdict(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    bundle, verdict = faultbundle.write_bundle(tmp_path, {"host1": _host(tmp_path / "host1")})
    assert verdict is None and not (bundle / faultbundle.VERDICT).exists()
    assert faultbundle.check_tree(bundle / "host1") == []


def test_the_layout_cites_its_source() -> None:
    man = faultbundle.layout()
    assert all(s.startswith("https://") and "faultdiag" in s for s in man["sources"])
    assert json.dumps(man)  # plain data


def test_the_report_shows_the_bundle_and_ascend_fds_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from framework.report.html import write_index

    calls = tmp_path / "calls.txt"
    _fake_tool(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    run = tmp_path / "run"
    faultbundle.write_bundle(run, {"host2": _host(tmp_path / "src" / "host2")})
    page = write_index(run).read_text()
    section = page[page.index("<section id='fault-bundle'>"):]
    assert "one tree per host (host2)" in section
    assert "<b>ascend-fd</b>: Root cause node: host2 device 1 (507035 vector core exception)" in section


def test_dmesg_collected_after_the_launch_joins_its_hosts_tree_only(tmp_path: Path) -> None:
    faultbundle.host_tree(_host(tmp_path / "src"), tmp_path / faultbundle.BUNDLE / "host2")
    (tmp_path / faultbundle.BUNDLE / "host2" / "dmesg").unlink()
    faultbundle.add_dmesg(tmp_path, "host2", "[1.0] Out of memory: Killed process 42 (python3)\n")
    faultbundle.add_dmesg(tmp_path, "host1", "[1.0] no bundle for this host\n")
    assert (tmp_path / faultbundle.BUNDLE / "host2" / "dmesg").read_text().startswith("[1.0] Out of memory")
    assert not (tmp_path / faultbundle.BUNDLE / "host1").exists()


def test_a_later_failed_launchs_tree_replaces_the_earlier_one(tmp_path: Path) -> None:
    first = _host(tmp_path / "l1" / "host2")
    (first / "rank7.log").write_text("from the first launch\n")
    faultbundle.write_bundle(tmp_path, {"host2": first})
    faultbundle.write_bundle(tmp_path, {"host2": _host(tmp_path / "l2" / "host2")})
    assert not (tmp_path / faultbundle.BUNDLE / "host2" / "rank-7.txt").exists()


def test_npu_smi_before_the_launch_is_npu_info_before(tmp_path: Path) -> None:
    src = _host(tmp_path / "src")
    (src / faultbundle.BEFORE).mkdir()
    (src / faultbundle.BEFORE / "npu-smi-info.txt").write_text("| npu-smi 24.1.0 | before |\n")
    notes = faultbundle.host_tree(src, tmp_path / "t")
    assert "before |" in (tmp_path / "t/environment_check/npu_info_before.txt").read_text()
    assert not [n for n in notes if "npu_info_before" in n]


def test_the_real_tools_table_gives_its_root_node_and_first_suspected_fault() -> None:
    """ascend-fd 7.3.0's own output on the lab's device-fault bundle (tests/data/ascend-fd/verdict-zh.txt): its
    last line is 'The diag job is complete.', which says nothing; the verdict is read from its table."""
    text = (Path(__file__).parents[3] / "data" / "ascend-fd" / "verdict-zh.txt").read_text(encoding="utf-8")
    assert faultbundle.verdict_line(text) == (
        "root cause node(s) ['Unknown Device']; first suspected fault AISW_PyTorch_ERRCODE_Common_ERR00100 "
        "on ['host1 device-0', 'host1 device-1']")
    english = ("| Root Cause Node Analysis | Root Cause Node(s) | ['host2 device-1'] |\n"
               "| Suspected Root Cause | Status Code | AISW_X_1 |\n|  | Faulty Device(s) | ['host2 device-1'] |\n")
    assert faultbundle.verdict_line(english) == (
        "root cause node(s) ['host2 device-1']; first suspected fault AISW_X_1 on ['host2 device-1']")


@pytest.mark.skipif(shutil.which("ascend-fd") is None,
                    reason="MindCluster's ascend-fd is not installed on this controller (pip has no distribution "
                           "of it; build it from mind-cluster component/ascend-faultdiag, see docs/failures.md)")
def test_the_installed_ascend_fd_reads_the_bundle_and_gives_a_table_verdict(tmp_path: Path) -> None:
    folders = {h: _host(tmp_path / "run" / h) for h in ("host1", "host2")}
    bundle, verdict = faultbundle.write_bundle(tmp_path.resolve() / "run", folders)
    assert verdict is not None and verdict.startswith("root cause node(s) "), (bundle / faultbundle.VERDICT).read_text()


def test_device_log_notes_say_whether_msnpureport_ran(tmp_path: Path) -> None:
    src = _host(tmp_path / "src")
    shutil.rmtree(src / "npu-state" / "msnpureport")
    notes = faultbundle.host_tree(src, tmp_path / "a")
    assert "device_log: msnpureport did not run on this host" in notes
    (src / "npu-state" / "msnpureport").mkdir()
    notes = faultbundle.host_tree(src, tmp_path / "b")
    assert "device_log: msnpureport exported no file on this host" in notes
    assert (tmp_path / "b" / "device_log").is_dir()


def test_a_tree_over_the_tools_total_bounds_is_named(tmp_path: Path) -> None:
    tree = tmp_path / "host1"
    faultbundle.host_tree(_host(tmp_path / "src"), tree)
    man = faultbundle.layout()
    for limit, value in (("total_files", 2), ("total_bytes", 10)):
        small = {**man, "limits": {**man["limits"], limit: value}}
        assert faultbundle.check_tree(tree, small) == ["host1: over the tool's input bounds"]


def test_without_a_table_the_verdict_is_the_tools_last_line() -> None:
    assert faultbundle.verdict_line("$ parse -i (exit 0)\nparsed\n  done  \n\n") == "done"
    assert faultbundle.verdict_line("$ diag -i (exit 1)\n\n") == "(no output)"
