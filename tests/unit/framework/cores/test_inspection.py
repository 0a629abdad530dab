"""framework.cores.inspection: which source wins for each fact of a core, names, sizes, the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from framework.cores.inspection import (
    Core,
    CorePolicy,
    apply_inspection,
    split_sections,
    verdict_message,
)
from framework.cores.scan import Candidate, JournalEntry


def _core(cand: Candidate) -> Core:
    """The core as the watch makes it from a candidate, before the inspection."""
    return Core(
        cand.host,
        cand.source,
        cand.location,
        cand.time,
        cand.pid,
        None,
        cand.executable,
        cand.comm,
        cand.signal,
        cand.size,
    )


def _open(i: str, **rec: Any) -> str:
    return json.dumps({"i": i, **rec})


def _facts(core: Core) -> dict[str, Any]:
    keys = (
        "pid",
        "ppid",
        "comm",
        "signal",
        "executable",
        "cmdline",
        "env",
        "uid",
        "facts_read",
        "owner",
        "size",
        "copied",
        "artifact_copied",
        "time",
        "notes",
    )
    return {k: getattr(core, k) for k in keys}


def test_abrt_metadata_fills_what_unreadable_notes_leave_out() -> None:
    cand = Candidate("h", "abrt", "/var/spool/abrt/ccpp-2026-12-06-10:00:00-4242", 5.0, None, 4242)
    core = _core(cand)
    sec = {
        "meta": [
            "executable /usr/bin/python3",
            "pid 4243",
            "time 1700000000",
            "cmdline python3 x.py",
            "reason python3 killed by SIGSEGV",
            "empty",
        ],
        "open": [
            _open("0", owner=1000, size=2048, sha256="ab", facts={"error": "not an ELF file"})
        ],
    }
    apply_inspection(core, cand, sec)
    assert _facts(core) == {
        "pid": 4243,
        "ppid": None,
        "comm": None,
        "signal": "SIGSEGV",
        "executable": "/usr/bin/python3",
        "cmdline": "python3 x.py",
        "env": {},
        "uid": None,
        "facts_read": False,
        "owner": 1000,
        "size": 2048,
        "copied": True,
        "artifact_copied": True,
        "time": 1700000000.0,
        "notes": ["core notes unreadable: not an ELF file"],
    }


def test_an_apport_report_the_notes_win_then_the_crash_header() -> None:
    cand = Candidate(
        "h", "apport", "/var/crash/_usr_bin_python3.11.0.crash", 5.0, 900, None, "python3.11"
    )
    core = _core(cand)
    facts = {
        "pid": 7,
        "ppid": 6,
        "uid": 1000,
        "comm": "python3",
        "signal": 6,
        "psargs": "python3 " + "a" * 75,
        "execfn": "/usr/bin/python3.11",
        "env": {"RANK": "2"},
    }
    hdr = [
        "ProblemType: Crash",
        "ExecutablePath: /opt/x",
        "ProcCmdline: python3 run.py",
        "Signal: 11",
        "ProcStatus:",
        " Pid:\t8",
        " PPid:\t5",
        " Uid:\t1001",
    ]
    sec = {
        "hdr": hdr,
        "open": [
            _open("c0", owner=0, size=100, sha256="a"),
            _open("0", owner=1000, size=5000, sha256="b", facts=facts),
            "Traceback: x",
        ],
    }
    apply_inspection(core, cand, sec)
    assert _facts(core) == {
        "pid": 7,
        "ppid": 6,
        "comm": "python3",
        "signal": "SIGABRT",
        "executable": "/opt/x",
        "cmdline": "python3 run.py",
        "env": {"RANK": "2"},
        "uid": 1000,
        "facts_read": True,
        "owner": 0,
        "size": 5000,
        "copied": True,
        "artifact_copied": True,
        "time": 5.0,
        "notes": [],
    }


def test_without_header_or_metadata_the_notes_give_the_executable_and_command_line() -> None:
    cand = Candidate("h", "file", "/c/core.7", 5.0, 10, 7, "python3")
    core = _core(cand)
    facts = {"pid": 7, "uid": 1000, "psargs": "python3 " + "a" * 71, "execfn": "/usr/bin/python3"}
    apply_inspection(core, cand, {"open": [_open("0", owner=1000, size=20, facts=facts)]})
    assert (core.executable, core.cmdline, core.size, core.copied, core.artifact_copied) == (
        "/usr/bin/python3",
        "python3 " + "a" * 71 + "…",
        20,
        False,
        False,
    )
    relative = Candidate("h", "file", "/c/core.8", 5.0, 10, 8, "torchrun")
    core = _core(relative)
    apply_inspection(
        core, relative, {"open": [_open("0", owner=1000, facts={"pid": 8, "execfn": "torchrun"})]}
    )
    assert (core.executable, core.cmdline, core.size) == ("torchrun", None, 10)


def test_a_refused_file_is_noted_and_has_no_owner_and_the_journal_gives_the_uid() -> None:
    entry = JournalEntry(5.0, 7, 1000, 1000, "SIGBUS", "present", "/usr/bin/python3", 10)
    cand = Candidate(
        "h", "systemd", "coredumpctl:7", 5.0, 10, 7, "python3", "/usr/bin/python3", "SIGBUS", entry
    )
    core = _core(cand)
    apply_inspection(core, cand, {"open": [_open("0", owner=0, refused="a hard link", error="x")]})
    assert _facts(core) == {
        "pid": 7,
        "ppid": None,
        "comm": "python3",
        "signal": "SIGBUS",
        "executable": "/usr/bin/python3",
        "cmdline": None,
        "env": {},
        "uid": 1000,
        "facts_read": False,
        "owner": None,
        "size": 10,
        "copied": False,
        "artifact_copied": False,
        "time": 5.0,
        "notes": ["not read: a hard link", "not read: x"],
    }


def test_sections_group_records_by_index_and_raw_keeps_the_text() -> None:
    text = "noise\n@@core 0\n@@open a\n@@err b\n@@core 1\n@@open c\n@@core 0\n@@open d\n"
    assert split_sections(text, "core") == {
        "0": {"open": ["a", "d"], "err": ["b"]},
        "1": {"open": ["c"]},
    }
    raw = "@@job 0\ngdb says\n#0 f\n@@job 1\n@@crashing\n#1 g\n"
    assert split_sections(raw, "job", raw=True) == {
        "0": {"raw": ["gdb says\n#0 f"]},
        "1": {"raw": ["@@crashing\n#1 g"]},
    }


def test_the_verdict_lists_each_core_its_command_copy_notes_and_frames(tmp_path: Path) -> None:
    core = Core(
        "h1",
        "file",
        "/c/core",
        1.0,
        42,
        signal="SIGSEGV",
        executable="/usr/bin/python3",
        cmdline="python3 x.py",
        size=3 * 1024 * 1024,
        local_path=tmp_path / "core.gz",
        backtrace="@@crashing\n#0 f ()\n#1 g ()\n@@threads\n#0 h ()\n",
        backtrace_path=tmp_path / "bt",
        notes=["n1"],
    )
    failed, message = verdict_message([core], CorePolicy.FAIL, ["cluster note"])
    assert failed and message == (
        "1 core dump(s) appeared:\n"
        "  core dump on h1: python3 (pid 42, SIGSEGV)\n"
        "    command: python3 x.py\n"
        f"    core: {tmp_path / 'core.gz'} (3.0 MiB before gzip)\n"
        "    note: n1\n"
        f"    backtrace of the crashing thread: (all threads: {tmp_path / 'bt'})\n"
        "      #0 f ()\n      #1 g ()\n"
        "  note: cluster note"
    )
    bare = Core("h1", "file", "/c/core", 1.0)
    assert verdict_message([bare], CorePolicy.WARN) == (
        False,
        "1 warning: core dump(s) appeared (policy warn):\n"
        "  core dump on h1: unknown process (pid unknown)",
    )
    assert verdict_message([bare], CorePolicy.IGNORE) == (False, "")
    assert verdict_message([], CorePolicy.FAIL) == (False, "")


def test_fetched_names_never_collide(tmp_path: Path) -> None:
    from framework.cores.inspection import unique_base

    taken: set[str] = set()
    assert [unique_base(tmp_path, "core", 7, taken) for _ in range(3)] == [
        "core",
        "core.7",
        "core-2",
    ]
    (tmp_path / "core-3.bt.txt").write_text("")
    assert unique_base(tmp_path, "core", 7, taken) == "core-4"
    assert [unique_base(tmp_path, "core.9", 9, set()), unique_base(tmp_path, "x", None, {"x"})] == [
        "core.9",
        "x-2",
    ]


def test_local_names_and_sizes() -> None:
    from framework.cores.inspection import human_size, local_name

    assert local_name(Core("h", "file", "/c/core.a b", 1.0)) == "core.a_b"
    assert local_name(Core("h", "abrt", "/var/spool/abrt/ccpp-1-2", 1.0)) == "ccpp-1-2.core"
    assert local_name(Core("h", "apport", "/var/crash/x.crash", 1.0)) == "x.crash"
    assert local_name(Core("h", "systemd", "coredumpctl:5", 7.9, 5, comm="py/3")) == "core.py_3.5.7"
    assert local_name(Core("h", "systemd", "coredumpctl:5", 7.9)) == "core.unknown.None.7"
    assert [
        human_size(n) for n in (None, 0, 1023, 1024, 5 << 20, 3 << 30, 2 << 40, 5000 << 40)
    ] == ["?", "0 B", "1023 B", "1.0 KiB", "5.0 MiB", "3.0 GiB", "2.0 TiB", "5000.0 TiB"]
