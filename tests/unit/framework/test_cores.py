"""Core dumps and host logs, without a lab: pattern plans, the scan script in a real local shell,
handler outputs (coredumpctl JSON/text, apport, abrt), ELF notes, attribution, the policy, the
Ascend failure signatures, and CoreWatch end to end on a LocalTransport host.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from framework.config.effective import EnvConfig
from framework.cores.inspection import (
    Core,
    CorePolicy,
    RankProc,
    attribute,
    core_facts,
    crash_header_facts,
    facts_program,
    gdb_argv,
    parse_crash_header,
    verdict_message,
)
from framework.cores.logs import dmesg_since, logs_script, parse_logs_output, scan_signatures, summarize
from framework.cores.scan import (
    Baseline,
    CoreSources,
    HostScan,
    new_candidates,
    parse_core_pattern,
    parse_coredumpctl_json,
    parse_coredumpctl_text,
    parse_scan,
    scan_script,
    signal_name,
)
from framework.cores.watch import CoreDefaults, CoreWatch, rank_procs
from framework.errors import FrameworkError, UsageError
from framework.hosts import Cluster, Host
from framework.lab.plan import LAB_CORE_PATTERN, core_pattern_on_down, core_pattern_on_up
from framework.launch.runwatch import ClusterWatch
from framework.transport.local import LocalTransport
from tests.support.builders import ASCEND_CAPTURES, make_host_spec

DATA = ASCEND_CAPTURES
LAB_PATTERN = "/var/crash/camit/core.%e.%p.%t.%s"


def fixture(name: str) -> str:
    """A fixture's text without its ``# source:`` line."""
    lines = (DATA / name).read_text().splitlines()
    return "\n".join(lines[1:] if lines and lines[0].startswith("# source:") else lines) + "\n"


# --------------------------------------------------------------------------- patterns


@pytest.mark.parametrize("raw, kind", [
    (LAB_PATTERN, "file"),
    ("core", "relative"),
    ("cores/core.%p", "relative"),
    ("|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h", "systemd"),
    ("|/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -u%u -g%g -- %E", "apport"),
    ("|/usr/share/apport/apport %p %s %c %d %P %E", "apport"),
    ("|/usr/libexec/abrt-hook-ccpp %s %c %p %u %g %t %e %P %I %h", "abrt"),
    ("|/usr/bin/my-collector %p", "pipe"),
    ("@/run/systemd/coredump", "socket"),
    ("", "none"),
])
def test_pattern_kinds(raw: str, kind: str) -> None:
    assert parse_core_pattern(raw).kind == kind


def test_systemd_fixture_pattern_with_and_without_trailing_e() -> None:
    raw = fixture("core-pattern-systemd-coredump.txt").strip()
    assert raw.endswith("%e")
    assert parse_core_pattern(raw).kind == "systemd"
    assert parse_core_pattern(raw.rsplit(" ", 1)[0]).kind == "systemd"
    assert parse_core_pattern(raw).handler == "/usr/lib/systemd/systemd-coredump"


@pytest.mark.parametrize("raw, path, fields", [
    (LAB_PATTERN, "/var/crash/camit/core.python3.1234.1700000000.11",
     {"e": "python3", "p": "1234", "t": "1700000000", "s": "11"}),
    # a command name with dots is still split right: the numeric tail anchors it
    (LAB_PATTERN, "/var/crash/camit/core.pt.main.7.1700000000.6",
     {"e": "pt.main", "p": "7", "t": "1700000000", "s": "6"}),
    ("/cores/%h/core-%E-%P", "/cores/host2/core-!usr!bin!python3-99",
     {"h": "host2", "E": "!usr!bin!python3", "P": "99"}),
    ("/c/core.%%.%p", "/c/core.%.5", {"p": "5"}),
    ("/c/core.%Z%p", "/c/core.5", {"p": "5"}),  # unknown specifiers expand to nothing
    ("/c/core", "/c/core", {}),
    ("/c/core", "/c/core.321", {"p": "321"}),  # kernel.core_uses_pid
])
def test_file_pattern_fields(raw: str, path: str, fields: dict[str, str]) -> None:
    assert parse_core_pattern(raw).fields(path) == fields


@pytest.mark.parametrize("raw, path", [
    (LAB_PATTERN, "/var/crash/camit/other.txt"),
    (LAB_PATTERN, "/var/crash/camit/core.python3.x.1.2"),
    (LAB_PATTERN, "/var/crash/camit/sub/core.python3.1.2.3"),
    ("/c/core", "/c/core.py"),
])
def test_file_pattern_rejects_other_files(raw: str, path: str) -> None:
    assert parse_core_pattern(raw).fields(path) is None


def test_relative_pattern_matches_a_path_suffix_in_any_cwd() -> None:
    pat = parse_core_pattern("core.%e.%p")
    assert pat.fields("/var/tmp/camit/runs/L1/core.python3.42") == {"e": "python3", "p": "42"}
    assert pat.fields("/var/tmp/camit/runs/L1/notcore.python3.42") is None
    assert parse_core_pattern("core").fields("/w/runs/x/core") == {}


# --------------------------------------------------------------------------- the scan script, in a real shell


def run_sh(script: str, env: dict[str, str] | None = None) -> str:
    cp = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60,
                        env={**os.environ, **(env or {})})
    assert "@@end" in cp.stdout, cp.stderr
    return cp.stdout


def proc_dir(tmp: Path, pattern: str) -> Path:
    d = tmp / "proc"
    d.mkdir(exist_ok=True)
    (d / "core_pattern").write_text(pattern + "\n")
    return d


def test_scan_of_an_absolute_pattern_lists_only_its_directory(tmp_path: Path) -> None:
    cores = tmp_path / "crash"
    (cores / "deeper").mkdir(parents=True)
    (cores / "core.python3.1.1700000000.11").write_bytes(b"x" * 10)
    (cores / "unrelated.log").write_text("x")
    (cores / "deeper" / "core.python3.2.1700000000.11").write_text("x")
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, f"{cores}/core.%e.%p.%t.%s")))
    scan = parse_scan("h1", run_sh(scan_script(src)))
    assert scan.complete and scan.pattern.kind == "file" and scan.now > 1e9
    assert list(scan.files) == [f"{cores}/core.python3.1.1700000000.11"]
    entry = scan.files[f"{cores}/core.python3.1.1700000000.11"]
    assert entry.size == 10 and entry.inode > 0 and abs(entry.mtime - time.time()) < 60
    assert scan.limit_hard and scan.uptime is not None


def test_scan_of_a_relative_pattern_searches_the_run_dirs(tmp_path: Path) -> None:
    runs = tmp_path / "wd" / "runs"
    (runs / "L1").mkdir(parents=True)
    (runs / "L1" / "core.4242").write_text("x")
    (runs / "L1" / "rank0.log").write_text("x")
    (tmp_path / "wd" / "core").write_text("x")
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, "core")))
    scan = parse_scan("h1", run_sh(scan_script(src, [(str(runs), 2), (str(tmp_path / "wd"), 1)])))
    assert scan.pattern.kind == "relative"
    assert sorted(scan.files) == sorted([f"{runs}/L1/core.4242", f"{tmp_path}/wd/core"])


def fake_coredumpctl(tmp: Path, *, json_rows: list[dict[str, object]] | None, text: str = "",
                     core: Path | None = None) -> Path:
    """A ``coredumpctl`` stand-in: ``list`` prints the rows, ``dump -o F`` copies ``core`` to F."""
    (tmp / "list.json").write_text(json.dumps(json_rows) if json_rows is not None else "")
    (tmp / "list.txt").write_text(text)
    script = tmp / "coredumpctl"
    json_list = ('cat ' + str(tmp / 'list.json') if json_rows is not None
                 else 'echo "unrecognized option --json" >&2; exit 1')
    script.write_text(f"""#!/bin/sh
echo "$@" >> {tmp}/calls
case "$*" in
  *--json=short*) {json_list} ;;
  *dump*) while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done; cp {core} "$out" ;;
  *list*) cat {tmp / 'list.txt'} ;;
esac
""")
    script.chmod(0o755)
    return script


def test_scan_of_systemd_coredump_reads_coredumpctl_json(tmp_path: Path) -> None:
    now_us = int(time.time() * 1e6)
    ctl = fake_coredumpctl(tmp_path, json_rows=[{"time": now_us, "pid": 77, "uid": 0, "gid": 0, "sig": 11,
                                                 "corefile": "present", "exe": "/usr/bin/python3", "size": 100}])
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h")),
                      coredumpctl=str(ctl))
    scan = parse_scan("h1", run_sh(scan_script(src, since=1_700_000_000)))
    assert [(e.pid, e.signal, e.exe, e.size) for e in scan.journal] == [(77, "SIGSEGV", "/usr/bin/python3", 100)]
    assert "--since=@1699999700" in (tmp_path / "calls").read_text()  # the window minus the journal lag


def test_scan_of_old_systemd_falls_back_to_the_text_table(tmp_path: Path) -> None:
    ctl = fake_coredumpctl(tmp_path, json_rows=None, text=fixture("coredumpctl-list-text.txt"))
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h %e")),
                      coredumpctl=str(ctl))
    scan = parse_scan("h1", run_sh(scan_script(src)))
    assert [e.pid for e in scan.journal] == [89240, 89521, 1234]


def test_scan_of_apport_and_abrt_lists_their_stores(tmp_path: Path) -> None:
    crash, spool = tmp_path / "crash", tmp_path / "abrt"
    crash.mkdir()
    spool.mkdir()
    (crash / "_usr_bin_python3.11.0.crash").write_text("ProblemType: Crash\n")
    (spool / "ccpp-2024-01-02-10:11:12-4321").mkdir()
    (spool / "notes").mkdir()
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, "|/usr/share/apport/apport -p%p -s%s -c%c -- %E")),
                      apport_dirs=(str(crash),), abrt_dirs=(str(spool),))
    assert list(parse_scan("h", run_sh(scan_script(src))).files) == [f"{crash}/_usr_bin_python3.11.0.crash"]
    (tmp_path / "proc" / "core_pattern").write_text("|/usr/libexec/abrt-hook-ccpp %s %c %p %u %g %t %e %P %I %h\n")
    files = parse_scan("h", run_sh(scan_script(src))).files
    problem_dir = f"{spool}/ccpp-2024-01-02-10:11:12-4321"
    assert list(files) == [problem_dir] and files[problem_dir].is_dir


def test_an_unknown_pipe_is_reported_not_listed(tmp_path: Path) -> None:
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, "|/usr/bin/collector %p")))
    scan = parse_scan("h", run_sh(scan_script(src)))
    assert scan.complete and not scan.files and not scan.pattern.checked
    assert "not one camit can read" in " ".join(scan.notes())


# --------------------------------------------------------------------------- the window


def scan_of(now: float, files: dict[str, tuple[int, float, int]], pattern: str = LAB_PATTERN) -> HostScan:
    from framework.cores.scan import FileEntry

    s = HostScan("h1", now=now, pattern=parse_core_pattern(pattern), complete=True)
    s.files = {p: FileEntry(p, size, mtime, inode) for p, (size, mtime, inode) in files.items()}
    return s


def test_only_cores_that_appeared_in_the_window_count() -> None:
    old = "/var/crash/camit/core.python3.10.1699999000.11"
    new = "/var/crash/camit/core.python3.11.1700000050.6"
    copied_in = "/var/crash/camit/core.python3.12.1699000000.11"  # new file, but its own time is older
    before = scan_of(1_700_000_000.5, {old: (1, 1699999000, 1)})
    after = scan_of(1_700_000_100, {old: (1, 1699999000, 1), new: (5, 1700000051, 2), copied_in: (1, 1700000060, 3)})
    got = new_candidates(before, after)
    assert [(c.location, c.pid, c.comm, c.signal, c.time) for c in got] == [(new, 11, "python3", "SIGABRT", 1700000050)]


def test_a_rewritten_core_of_a_fixed_name_counts_again() -> None:
    path = "/w/runs/L/core"
    before = scan_of(1_700_000_000, {path: (10, 1699999990, 7)}, "core")
    after = scan_of(1_700_000_100, {path: (10, 1700000050, 8)}, "core")
    assert [c.location for c in new_candidates(before, after)] == [path]


def test_systemd_entries_in_the_baseline_never_count() -> None:
    rows = parse_coredumpctl_json(fixture("coredumpctl-list-json.txt"))
    before = HostScan("h", now=rows[1].time - 10, pattern=parse_core_pattern("|/x/systemd-coredump %P"),
                      journal=[rows[0]])
    after = HostScan("h", now=rows[1].time + 5, pattern=before.pattern, journal=rows)
    got = new_candidates(before, after)
    assert [(c.source, c.pid, c.signal, c.executable) for c in got] == [
        ("systemd", 89521, "SIGABRT", "/usr/local/bin/torchrun")]


# --------------------------------------------------------------------------- handler outputs


def test_coredumpctl_json_fixture() -> None:
    rows = parse_coredumpctl_json(fixture("coredumpctl-list-json.txt"))
    assert [(r.pid, r.uid, r.signal, r.corefile, r.exe, r.size) for r in rows] == [
        (89240, 1000, "SIGSEGV", "present", "/usr/bin/python3.11", 33485),
        (89521, 0, "SIGABRT", "missing", "/usr/local/bin/torchrun", None)]
    assert rows[0].time == pytest.approx(1712191396.123456)


def test_coredumpctl_text_fixture_new_and_old_layouts() -> None:
    rows = parse_coredumpctl_text(fixture("coredumpctl-list-text.txt"))
    assert [(r.pid, r.signal, r.corefile, r.exe, r.size) for r in rows] == [
        (89240, "SIGSEGV", "present", "/usr/bin/python3.11", int(32.7 * 1024)),
        (89521, "SIGABRT", "missing", "/usr/local/bin/torchrun", None),
        (1234, "SIGSEGV", "present", "/usr/bin/python3.6", None)]
    assert rows[0].time == 1712191396.0  # read as UTC: same instant as the JSON row


def test_apport_crash_header() -> None:
    text = ("ProblemType: Crash\nDate: Tue Jan  2 10:00:00 2024\nExecutablePath: /usr/bin/python3.11\n"
            "ProcCmdline: python3 train.py --x\nProcStatus:\n Name:\tpython3\n Pid:\t4242\n PPid:\t4200\n"
            " Uid:\t1000\t1000\t1000\t1000\n"
            "Signal: 11\nCoreDump: base64\n H4sICAAAAAAC/0NvcmVEdW1wAA==\n")
    facts = crash_header_facts(parse_crash_header(text))
    assert facts == {"pid": 4242, "ppid": 4200, "uid": 1000, "executable": "/usr/bin/python3.11", "signal": "SIGSEGV",
                     "cmdline": "python3 train.py --x"}


@pytest.mark.parametrize("value, name", [(11, "SIGSEGV"), ("6", "SIGABRT"), ("SEGV", "SIGSEGV"),
                                         ("SIGBUS", "SIGBUS"), (0, None), ("-", None), (None, None)])
def test_signal_names(value: object, name: str | None) -> None:
    assert signal_name(value) == name


# --------------------------------------------------------------------------- ELF notes


def synth_core(*, pid: int, ppid: int, sig: int, comm: str, env: list[str], execfn: str = "/usr/bin/python3",
               big_endian: bool = False) -> bytes:
    """A minimal 64-bit ELF core: a PT_NOTE (PRSTATUS, PRPSINFO, SIGINFO, AUXV) and a PT_LOAD 'stack'."""
    e = ">" if big_endian else "<"
    stack_base = 0x7FFF0000
    strings = b"python3\0train.py\0" + b"".join(s.encode() + b"\0" for s in env)
    execfn_addr = stack_base + 64 + len(strings)
    stack = b"\0" * 64 + strings + execfn.encode() + b"\0" * 9

    def note(ntype: int, desc: bytes) -> bytes:
        return struct.pack(e + "III", 5, len(desc), ntype) + b"CORE\0\0\0\0" + desc + b"\0" * (-len(desc) % 4)

    prstatus = bytearray(336)
    struct.pack_into(e + "h", prstatus, 12, sig)
    psinfo = bytearray(136)
    struct.pack_into(e + "IIiiii", psinfo, 16, 0, 0, pid, ppid, ppid, ppid)
    psinfo[40:40 + len(comm)] = comm.encode()
    psinfo[56:56 + 17] = b"python3 train.py "
    siginfo = struct.pack(e + "iii", sig, 0, 0) + b"\0" * 116
    auxv = struct.pack(e + "QQQQ", 31, execfn_addr, 0, 0)
    notes = note(1, bytes(prstatus)) + note(3, bytes(psinfo)) + note(0x53494749, siginfo) + note(6, auxv)
    phoff, phnum = 64, 2
    notes_off = phoff + 56 * phnum
    load_off = notes_off + len(notes)
    ident = b"\x7fELF" + bytes([2, 2 if big_endian else 1, 1]) + b"\0" * 9
    header = ident + struct.pack(e + "HHIQQQIHHHHHH", 4, 62, 1, 0, phoff, 0, 0, 64, 56, phnum, 64, 0, 0)
    ph_note = struct.pack(e + "IIQQQQQQ", 4, 0, notes_off, 0, 0, len(notes), 0, 1)
    ph_load = struct.pack(e + "IIQQQQQQ", 1, 6, load_off, stack_base, 0, len(stack), len(stack), 4096)
    return header + ph_note + ph_load + notes + stack


@pytest.mark.parametrize("big_endian", [False, True])
def test_core_facts_from_a_synthesized_core(tmp_path: Path, big_endian: bool) -> None:
    path = tmp_path / "core"
    path.write_bytes(synth_core(pid=4242, ppid=4200, sig=11, comm="python3", big_endian=big_endian,
                                env=["HOME=/root", "RANK=3", "CAMIT_RUN_ID=L7.host2", "LOCAL_RANK=1"]))
    facts = core_facts(str(path))
    assert facts["pid"] == 4242 and facts["ppid"] == 4200 and facts["signal"] == 11
    assert facts["comm"] == "python3" and facts["psargs"] == "python3 train.py"
    assert facts["execfn"] == "/usr/bin/python3"
    assert facts["env"] == {"RANK": "3", "CAMIT_RUN_ID": "L7.host2", "LOCAL_RANK": "1"}


def test_core_facts_refuses_what_is_not_a_core(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"hello")
    assert core_facts(str(tmp_path / "x")) == {"error": "not an ELF file"}
    assert core_facts(sys.executable)["error"] == "not a core file"


def test_the_shipped_facts_program_runs_standalone(tmp_path: Path) -> None:
    path = tmp_path / "core"
    path.write_bytes(synth_core(pid=9, ppid=8, sig=6, comm="x", env=["RANK=0"]))
    cp = subprocess.run([sys.executable, "-I", "-c", facts_program(), str(path), str(tmp_path / "missing")],
                        capture_output=True, text=True, timeout=30)
    first, second = (json.loads(line) for line in cp.stdout.splitlines())
    assert first["pid"] == 9 and first["env"] == {"RANK": "0"}
    assert "FileNotFoundError" in second["error"]


@pytest.fixture(scope="module")
def real_core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real core of a python child (gcore, once per module), with the run tag and RANK in its
    environment; ``<core>.pid`` holds the child's pid."""
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed")
    exe = os.path.realpath(sys.executable)
    child = subprocess.Popen([exe, "-c", "import time; time.sleep(60)"], env={
        **os.environ, "CAMIT_RUN_ID": "LAUNCH1.h1", "RANK": "5"})
    try:
        time.sleep(0.3)
        out = tmp_path_factory.mktemp("gcore") / "gcore.core"
        cp = subprocess.run(["gdb", "-batch", "-nx", "-p", str(child.pid), "-ex", f"gcore {out}"],
                            capture_output=True, text=True, timeout=60)
        if not out.exists():
            pytest.skip(f"gcore failed: {cp.stderr[-300:]}")
        out.with_suffix(".pid").write_text(str(child.pid))
        return out
    finally:
        child.kill()
        child.wait()


def test_core_facts_of_a_real_core(real_core: Path) -> None:
    facts = core_facts(str(real_core))
    assert facts["pid"] == int(real_core.with_suffix(".pid").read_text()) and facts["ppid"] == os.getpid()
    assert facts["execfn"] == os.path.realpath(sys.executable)
    assert facts["env"] == {"CAMIT_RUN_ID": "LAUNCH1.h1", "RANK": "5"}


# --------------------------------------------------------------------------- attribution and verdict


PROCS = [RankProc("L1", 0, "host1", 100), RankProc("L1", 1, "host1", 101), RankProc("L1", 2, "host2", 200),
         RankProc("L1", 3, "host2", None)]


@pytest.mark.parametrize("host, pid, ppid, env, want", [
    ("host2", 200, 150, {}, (2, "rank")),
    ("host1", 555, 101, {}, (1, "child")),
    ("host2", 777, 666, {"CAMIT_RUN_ID": "L1.host2", "RANK": "3"}, (3, "process")),
    ("host2", 778, 1, {"CAMIT_RUN_ID": "L1.host2"}, (None, "launch")),
    ("host1", 200, 1, {}, (None, None)),  # rank 2's pid, but on another host (shared pid namespace)
    ("host1", 900, 1, {"CAMIT_RUN_ID": "L1.host2", "RANK": "2"}, (None, None)),  # tag of another host
    ("host1", 900, 1, {"CAMIT_RUN_ID": "OTHER.host1", "RANK": "0"}, (None, None)),  # another launch
])
def test_attribution(host: str, pid: int, ppid: int, env: dict[str, str], want: tuple[int | None, str | None]) -> None:
    assert attribute(host, pid, ppid, env, PROCS) == want


def test_rank_pids_come_from_the_fetched_status_json(tmp_path: Path) -> None:
    (tmp_path / "host2").mkdir()
    (tmp_path / "host2" / "rank2.json").write_text(json.dumps({"rank": 2, "pid": 4321, "signal": "SIGSEGV"}))
    lr = SimpleNamespace(launch_id="L9", report_dir=str(tmp_path),
                         ranks={2: SimpleNamespace(host="host2", signal=None),
                                3: SimpleNamespace(host="host2", signal=None)})
    assert rank_procs([lr]) == [RankProc("L9", 2, "host2", 4321), RankProc("L9", 3, "host2", None)]
    assert rank_procs(lr) == rank_procs([lr]) and rank_procs(None) == []


def test_describe() -> None:
    c = Core("host2", "file", "/x", 0.0, pid=1234, executable="/usr/bin/python3", signal="SIGSEGV", rank=2,
             relation="rank")
    assert c.describe() == "core dump on host2: python3 (pid 1234, rank 2, SIGSEGV)"
    c.relation = "child"
    assert c.describe() == "core dump on host2: python3 (pid 1234, child of rank 2, SIGSEGV)"
    assert Core("h", "file", "/x", 0.0, comm="torchrun").describe() == "core dump on h: torchrun (pid unknown)"


def test_verdict_per_policy() -> None:
    core = Core("host1", "file", "/x", 0.0, pid=1, comm="python3", signal="SIGABRT",
                backtrace="junk\n@@crashing\n#0  abort ()\n#1  main ()\n@@threads\n#0 other\n")
    failed, msg = verdict_message([core], CorePolicy.FAIL)
    assert failed and "core dump on host1: python3 (pid 1, SIGABRT)" in msg
    assert "#0  abort ()" in msg and "#0 other" not in msg
    failed, msg = verdict_message([core], CorePolicy.WARN)
    assert not failed and msg.startswith("1 warning") and "python3" in msg
    assert verdict_message([core], CorePolicy.IGNORE) == (False, "")
    assert verdict_message([], CorePolicy.FAIL) == (False, "")


def test_policy_parsing_and_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CorePolicy.parse(" WARN ") is CorePolicy.WARN
    with pytest.raises(UsageError, match="fail, warn or ignore"):
        CorePolicy.parse("explode")
    cluster = Cluster([])
    monkeypatch.delenv("CAMIT_CORE_POLICY", raising=False)
    assert CoreWatch(cluster).policy is CorePolicy.FAIL
    monkeypatch.setenv("CAMIT_CORE_POLICY", "warn")
    assert CoreWatch(cluster).policy is CorePolicy.WARN
    # the caller's defaults (the env file has no `cores:` section: the schema forbids it, so it is never read)
    defaults = CoreDefaults(policy="ignore", cap_bytes=5)
    assert CoreWatch(cluster, defaults=defaults).policy is CorePolicy.IGNORE
    assert CoreWatch(cluster, defaults=defaults).cap_bytes == 5
    assert CoreWatch(cluster, policy="fail", defaults=defaults).policy is CorePolicy.FAIL
    env = cast(EnvConfig, SimpleNamespace(cores=SimpleNamespace(policy="ignore", cap_bytes=5)))
    assert CoreWatch(cluster, env).policy is CorePolicy.WARN and CoreWatch(cluster, env).cap_bytes == 1 << 30


def test_gdb_prints_the_crashing_thread_first() -> None:
    argv = gdb_argv("/c/core", "/usr/bin/python3")
    assert argv[-2:] == ["/usr/bin/python3", "/c/core"]
    assert argv.index("bt") < argv.index("thread apply all bt")
    assert gdb_argv("/c/core", None)[-2:] == ["-c", "/c/core"]


# --------------------------------------------------------------------------- CoreWatch on a local host


def local_cluster(tmp_path: Path, name: str = "h1") -> Cluster:
    spec = make_host_spec(name, workdir=str(tmp_path / "wd"), python=sys.executable)
    (tmp_path / "wd").mkdir(exist_ok=True)
    return Cluster([Host(name, LocalTransport(name), spec=spec, command_timeout=60)])


def test_corewatch_end_to_end_on_a_file_pattern(tmp_path: Path, real_core: Path) -> None:
    crash = tmp_path / "crash"
    crash.mkdir()
    pid = int(real_core.with_suffix(".pid").read_text())
    (crash / f"core.python3.{pid - 1}.1600000000.11").write_bytes(b"old")  # before the window: never counts
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, f"{crash}/core.%e.%p.%t.%s")))
    report = tmp_path / "report"
    (report / "h1").mkdir(parents=True)
    (report / "h1" / "rank5.json").write_text(json.dumps({"rank": 5, "pid": pid + 1}))  # not this pid
    launch = SimpleNamespace(launch_id="LAUNCH1", report_dir=str(report),
                             ranks={5: SimpleNamespace(host="h1", signal=None)})
    with local_cluster(tmp_path) as cluster:
        watch = CoreWatch(cluster, policy="fail", sources=src)
        baseline = watch.snapshot()
        assert watch.collect(baseline, rundir=report) == []
        shutil.copy(real_core, crash / f"core.python3.{pid}.{int(time.time())}.11")
        cores = watch.collect(baseline, rundir=report, ranks=[launch])
    assert len(cores) == 1
    core = cores[0]
    # the run tag and RANK in the core's environment attribute it (its pid is not the rank's)
    assert (core.pid, core.rank, core.relation, core.signal) == (pid, 5, "process", "SIGSEGV")
    assert core.describe().startswith(f"core dump on h1: {Path(sys.executable).resolve().name} (pid {pid}, "
                                      "process of rank 5, SIGSEGV)")
    assert core.local_path == report / "h1" / "cores" / f"{crash.joinpath(Path(core.location).name).name}.gz"
    assert gzip.decompress(core.local_path.read_bytes()) == real_core.read_bytes()
    assert core.backtrace and "@@crashing" in core.backtrace and core.crashing_frames()
    assert core.backtrace_path is not None and core.backtrace_path.exists()
    assert json.loads((report / "cores.json").read_text())[0]["rank"] == 5
    assert not list((tmp_path / "wd").rglob("*.gz")), "temporary files left on the host"
    failed, msg = watch.verdict(cores)
    assert failed and "backtrace of the crashing thread" in msg


def test_clusterwatch_snapshots_collects_judges_and_collects_logs_only_on_failure(tmp_path: Path,
                                                                                   real_core: Path) -> None:
    """The one watch-around-a-run: begin, end with the run's launches; logs when the run or its cores fail."""
    crash = tmp_path / "crash"
    crash.mkdir()
    pid = int(real_core.with_suffix(".pid").read_text())
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, f"{crash}/core.%e.%p.%t.%s")))
    report = tmp_path / "report"
    (report / "h1").mkdir(parents=True)
    launch = SimpleNamespace(launch_id="LAUNCH1", report_dir=str(report),
                             ranks={5: SimpleNamespace(host="h1", signal=None)})
    with local_cluster(tmp_path) as cluster:
        with ClusterWatch(cluster, policy="warn", sources=src, rundir=report, ascend_log_dirs=[]) as quiet:
            pass  # nothing crashed, the run passed: no cores, no logs
        assert quiet.outcome is not None and quiet.outcome.cores == [] and not quiet.outcome.failed
        assert not (report / "h1" / "dmesg.txt").exists()
        watch = ClusterWatch(cluster, policy="fail", sources=src, rundir=report, label="t::one",
                             ascend_log_dirs=[])
        watch.begin()
        shutil.copy(real_core, crash / f"core.python3.{pid}.{int(time.time())}.11")
        out = watch.end(ranks=[launch])  # the run passed, its core fails it
    assert out.policy is CorePolicy.FAIL and out.failed
    [core] = out.cores
    assert (core.rank, core.relation) == (5, "process")  # attributed through the run tag
    assert out.message.startswith("1 core dump(s) appeared:") and core.describe() in out.message
    assert json.loads((report / "cores.json").read_text())[0]["rank"] == 5
    assert core.local_path is not None and core.local_path.exists()
    assert (report / "h1" / "dmesg.txt").exists() and out.log_error is None  # logs: its cores failed it
    with pytest.raises(FrameworkError, match="without begin"):
        ClusterWatch(Cluster([])).end()


def test_clusterwatch_warn_policy_keeps_the_outcome_and_a_failed_run_gets_its_logs(tmp_path: Path) -> None:
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, f"{tmp_path}/crash/core.%e.%p")))
    report = tmp_path / "report"
    with local_cluster(tmp_path) as cluster:
        watch = ClusterWatch(cluster, policy="warn", sources=src, ascend_log_dirs=[])
        watch.begin()
        out = watch.end(failed=True, rundir=report)  # the run failed: logs, though no core appeared
    assert out.cores == [] and not out.failed and out.message == ""
    assert (report / "h1" / "dmesg.txt").exists()


def test_corewatch_cap_keeps_big_cores_on_the_host_and_ignore_fetches_nothing(tmp_path: Path, real_core: Path) -> None:
    crash = tmp_path / "crash"
    crash.mkdir()
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, f"{crash}/core.%e.%p.%t.%s")))
    with local_cluster(tmp_path) as cluster:
        capped = CoreWatch(cluster, policy="warn", cap_bytes=1024, sources=src)
        ignoring = CoreWatch(cluster, policy="ignore", sources=src)
        b1, b2 = capped.snapshot(), ignoring.snapshot()
        shutil.copy(real_core, crash / f"core.python3.1.{int(time.time())}.6")
        [core] = capped.collect(b1, rundir=tmp_path / "r1")
        [seen] = ignoring.collect(b2, rundir=tmp_path / "r2")
    # over the cap: no copy is made, so nothing is fetched or backtraced (gdb reads only camit's copies)
    assert core.local_path is None and any("over the cap" in n for n in core.notes) and core.backtrace is None
    assert capped.verdict([core])[0] is False
    assert seen.local_path is None and seen.backtrace is None and not (tmp_path / "r2").exists()
    assert ignoring.verdict([seen]) == (False, "")


def test_corewatch_reads_systemd_coredump_through_coredumpctl(tmp_path: Path, real_core: Path) -> None:
    pid = int(real_core.with_suffix(".pid").read_text())
    exe = os.path.realpath(sys.executable)
    ctl_dir = tmp_path / "ctl"
    ctl_dir.mkdir()
    ctl = fake_coredumpctl(ctl_dir, json_rows=[], core=real_core)
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h")),
                      coredumpctl=str(ctl))
    with local_cluster(tmp_path) as cluster:
        watch = CoreWatch(cluster, sources=src)
        baseline = watch.snapshot()
        (ctl_dir / "list.json").write_text(json.dumps([{"time": int(time.time() * 1e6), "pid": pid, "uid": 0,
                                                        "gid": 0, "sig": 6, "corefile": "present", "exe": exe,
                                                        "size": real_core.stat().st_size}]))
        [core] = watch.collect(baseline, rundir=tmp_path / "report")
    assert (core.source, core.pid, core.executable) == ("systemd", pid, exe)
    assert f"dump {pid}" in (ctl_dir / "calls").read_text()
    assert core.local_path is not None and gzip.decompress(core.local_path.read_bytes()) == real_core.read_bytes()
    assert core.crashing_frames()


def test_corewatch_reads_an_abrt_dump_dir(tmp_path: Path, real_core: Path) -> None:
    spool = tmp_path / "abrt"
    spool.mkdir()
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, "|/usr/libexec/abrt-hook-ccpp %s %c %p %u %g %t %e %P %I %h")),
                      abrt_dirs=(str(spool),))
    with local_cluster(tmp_path) as cluster:
        watch = CoreWatch(cluster, sources=src)
        baseline = watch.snapshot()
        d = spool / time.strftime("ccpp-%Y-%m-%d-%H:%M:%S-31337")
        d.mkdir()
        shutil.copy(real_core, d / "coredump")
        (d / "executable").write_text(os.path.realpath(sys.executable))
        (d / "reason").write_text("python3 killed by SIGSEGV")
        (d / "cmdline").write_text("python3 train.py")
        (d / "time").write_text(str(int(time.time())))
        [core] = watch.collect(baseline, rundir=tmp_path / "report")
    assert core.source == "abrt" and core.executable == os.path.realpath(sys.executable)
    assert core.cmdline == "python3 train.py"
    assert core.local_path is not None and core.local_path.name.endswith(".core.gz")


def test_corewatch_reads_an_apport_crash_file_and_its_core_store(tmp_path: Path, real_core: Path) -> None:
    crash, store = tmp_path / "crash", tmp_path / "apport-cores"
    crash.mkdir()
    store.mkdir()
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, "|/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -- %E")),
                      apport_dirs=(str(crash), str(store)))
    with local_cluster(tmp_path) as cluster:
        watch = CoreWatch(cluster, sources=src)
        baseline = watch.snapshot()
        (crash / "_usr_bin_python3.11.0.crash").write_text(
            "ProblemType: Crash\nExecutablePath: /usr/bin/python3.11\nProcStatus:\n Pid:\t4242\n PPid:\t1\n"
            f" Uid:\t{os.getuid()}\t{os.getuid()}\t0\t0\nSignal: 6\nCoreDump: base64\n AAAA\n")
        shutil.copy(real_core, store / "core._usr_bin_python3.0.0123456789abcdef0123456789abcdef.777.4242")
        cores = watch.collect(baseline, rundir=tmp_path / "report")
    by_name = {Path(c.location).name: c for c in cores}
    crash_core = by_name["_usr_bin_python3.11.0.crash"]
    assert (crash_core.pid, crash_core.signal, crash_core.executable) == (4242, "SIGABRT", "/usr/bin/python3.11")
    if shutil.which("apport-unpack") is None:
        assert crash_core.local_path is not None and crash_core.local_path.name.endswith(".crash.gz")
    stored = by_name["core._usr_bin_python3.0.0123456789abcdef0123456789abcdef.777.4242"]
    assert stored.pid == int(real_core.with_suffix(".pid").read_text()) and stored.crashing_frames()


def test_a_host_that_cannot_be_snapshotted_is_recorded_not_raised(tmp_path: Path) -> None:
    from framework.testing import FakeTransport

    fake = FakeTransport("h2")
    fake.on(re.compile("core_pattern"), rc=127, stdout="", stderr="sh: not found")
    cluster = Cluster([Host("h2", fake)])
    watch = CoreWatch(cluster)
    baseline = watch.snapshot()
    assert baseline.hosts["h2"].error and "did not complete" in baseline.hosts["h2"].error
    assert watch.collect(baseline) == []
    assert any("not checked" in n for n in baseline.notes())


# --------------------------------------------------------------------------- signatures and logs


@pytest.mark.parametrize("name, codes, detail", [
    ("hccl-ei0006-socket-timeout.txt", ["OPS-ERROR", "ERR01100", "EI0006"], ("EI0006", "peer ranks 2, 4")),
    ("hccl-ei0002-notify-wait-timeout.txt", ["ERR00100", "EI0002"], ("EI0002", "remote rank 24")),
    ("hccl-plog-link-error-info.txt", ["HCCL-LISTEN-FAIL", "HCCL-LINK-TIMEOUT", "HCCL-LINK-ERROR-INFO"],
     ("HCCL-LINK-TIMEOUT", "rank 12, role 1, timeout 120 s")),
    ("torch-npu-507048-sync-timeout.txt", ["ACL-507048", "NPU-ERROR", "ERR00100"],
     ("NPU-ERROR", "AclrtSynchronizeDeviceWithTimeout, error code 507048")),
    ("torch-npu-hccl-watchdog-abort.txt",
     ["HCCL-WATCHDOG", "ERR02005", "TERMINATE", "ACL-507014", "NPU-ERROR", "ERR00100"],
     ("ACL-507014", "")),
])
def test_signatures_on_the_fixtures(name: str, codes: list[str], detail: tuple[str, str]) -> None:
    found = scan_signatures(fixture(name))
    assert [s.code for s in found] == codes
    by_code = {s.code: s for s in found}
    assert by_code[detail[0]].detail == detail[1]
    assert all(s.line and s.lineno >= 1 for s in found)


def test_signature_counts_and_the_summary_puts_causes_first() -> None:
    found = scan_signatures(fixture("torch-npu-hccl-watchdog-abort.txt"))
    by_code = {s.code: s for s in found}
    assert by_code["ACL-507014"].count == 2 and by_code["ERR02005"].count == 2
    text = summarize({"host2": found})
    assert text.startswith("host2:\n  !! HCCL-WATCHDOG")
    assert text.index("ACL-507014") < text.index("ERR02005")  # causes before the torch_npu wrappers
    assert scan_signatures("all good\n") == [] and summarize({"h": []}) == ""


@pytest.mark.parametrize("code", ["EI9999", "EI0011", "EI0019", "HCCL_BUFFSIZE", "ACL-507901"])
def test_other_listed_signatures(code: str) -> None:
    text = {"EI9999": "EI9999: hccl fftsplus task timeout",
            "EI0011": "EI0011: Resource_Error_Insufficient_Device_Memory",
            "EI0019": "EI0019: bind failed", "HCCL_BUFFSIZE": "HCCL_BUFFSIZE is too SMALL, need 300MB",
            "ACL-507901": "error code is 507901"}[code]
    assert [s.code for s in scan_signatures("x\n" + text + "\n")] == [code]


@pytest.mark.parametrize(("line", "code"), [
    ("synchronize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:467 NPU function error: "
     "AclrtSynchronizeDeviceWithTimeout, error code is 507035", "ACL-507035"),
    ("[ERROR] RUNTIME(4242,python):... error code is 507015", "ACL-507015"),
    ("rtStreamSynchronize failed, error code is 507045", "ACL-50704X"),
    ("EL0004: alloc device memory failed, runtime result = 207018", "ACL-207018"),
    ("call aclnnMoeDispatchNormal failed, detail:EZ9999: Inner Error!", "EZ9999"),
    ("error code is 507016", "ACL-507016"),
    ("error code is 507036", "ACL-507036"),
    ("error code is 507034", "ACL-507034"),
    ("error code is 507033", "ACL-507033"),
    ("error code is 507042", "ACL-50704X"),
    ("error code is 507043", "ACL-50704X"),
    ("error code is 507044", "ACL-50704X"),
    ("error code is 507046", "ACL-50704X-WAIT"),
    ("error code is 507047", "ACL-50704X-WAIT"),
])
def test_device_faults_a_cam_kernel_raises_are_primary_signatures(line: str, code: str) -> None:
    found = {s.code: s for s in scan_signatures("x\n" + line + "\n")}
    assert code in found and found[code].primary, found


def test_a_cam_op_past_the_op_execute_timeout_is_its_own_diagnosis_not_hccls() -> None:
    """507034/507014 at the rank's own synchronize: the op-execute timeout (a CAM kernel spins outside HCCL),
    named as such; HCCL's EI0002 stays the diagnosis of collectives only; a 507014 of the HCCL watchdog's
    event query (the captured vllm-ascend report) is not taken for it."""
    sync = ("npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:479 NPU function error: "
            "AclrtSynchronizeDeviceWithTimeout, error code is {code}")
    for code in (507034, 507014):
        found = {s.code: s for s in scan_signatures("x\n" + sync.format(code=code) + "\n")}
        assert found["OP-EXECUTE-TIMEOUT"].primary and found["OP-EXECUTE-TIMEOUT"].detail == f"error code {code}"
        assert found["OP-EXECUTE-TIMEOUT"].meaning.startswith("CAM op did not finish (op-execute timeout)")
        assert "EI0002" not in found
    hccl = {s.code for s in scan_signatures(fixture("hccl-ei0002-notify-wait-timeout.txt"))}
    watchdog = {s.code for s in scan_signatures(fixture("torch-npu-hccl-watchdog-abort.txt"))}
    assert "EI0002" in hccl and "OP-EXECUTE-TIMEOUT" not in hccl | watchdog


def test_dmesg_since_the_snapshot() -> None:
    text = "[  10.000000] old\n[  99.500000] segfault at 0\n  continuation\n[ 100.000000] after\nno stamp\n"
    want = ["[  99.500000] segfault at 0", "  continuation", "[ 100.000000] after", "no stamp"]
    assert dmesg_since(text, 99.0) == want
    assert dmesg_since(text, None)[0] == "[  10.000000] old"


def test_logs_script_in_a_real_shell_packs_recent_ascend_logs_only(tmp_path: Path) -> None:
    log_root = tmp_path / "ascend" / "log"
    for sub in ("debug/plog", "run/device-0", "security"):
        (log_root / sub).mkdir(parents=True)
    (log_root / "debug" / "plog" / "plog-1_2.log").write_text("EI0006 here\n")
    (log_root / "run" / "device-0" / "device-1_2.log").write_text("x\n")
    (log_root / "security" / "s.log").write_text("secret\n")
    old = log_root / "debug" / "plog" / "plog-old.log"
    old.write_text("old\n")
    os.utime(old, (1_000_000_000, 1_000_000_000))
    out = run_sh(logs_script(time.time() - 60, str(tmp_path / "t"), [str(log_root)]) + "printf '@@end\\n'\n")
    dmesg, failed, tgz = parse_logs_output(out)
    assert tgz == f"{tmp_path}/t.tgz"
    names = sorted(Path(n).name for n in tarfile.open(tgz).getnames())
    assert names == ["device-1_2.log", "plog-1_2.log"]
    assert isinstance(failed, bool) and isinstance(dmesg, str)


def test_unreadable_dmesg_is_noted() -> None:
    dmesg, failed, tgz = parse_logs_output(
        "@@dmesg\ndmesg: read kernel buffer failed: Operation not permitted\n\n@@dmesg-failed\n\n@@end-dmesg\n")
    assert failed and "Operation not permitted" in dmesg and tgz is None


# --------------------------------------------------------------------------- the lab's core_pattern bookkeeping


def test_first_lab_up_records_the_original_and_sets_the_lab_pattern() -> None:
    assert core_pattern_on_up("core", []) == ("core", True)
    assert core_pattern_on_up("|/usr/lib/systemd/systemd-coredump %P", [None]) == (
        "|/usr/lib/systemd/systemd-coredump %P", True)


def test_a_second_lab_takes_the_original_from_the_first() -> None:
    assert core_pattern_on_up(LAB_CORE_PATTERN, [None, "core"]) == ("core", False)
    assert core_pattern_on_up(LAB_CORE_PATTERN, []) == (None, False)  # nobody knows it any more
    assert core_pattern_on_up(LAB_CORE_PATTERN, [LAB_CORE_PATTERN]) == (None, False)


def test_only_the_last_lab_restores_and_only_its_own_pattern() -> None:
    assert core_pattern_on_down(LAB_CORE_PATTERN, "core", others_up=1) is None
    assert core_pattern_on_down(LAB_CORE_PATTERN, "core", others_up=0) == "core"
    assert core_pattern_on_down("/somebody/else/%p", "core", others_up=0) is None
    assert core_pattern_on_down(LAB_CORE_PATTERN, None, others_up=0) is None
    assert LAB_CORE_PATTERN == LAB_PATTERN


def test_baseline_notes_a_hard_limit_of_zero() -> None:
    scan = HostScan("h", now=1.0, pattern=parse_core_pattern(LAB_PATTERN), limit_hard="0", complete=True)
    assert Baseline({"h": scan}, 1.0).notes() == ["h: hard core size limit is 0: crashes leave no core"]


def test_a_core_the_pipe_handler_stores_late_is_waited_for_when_a_rank_died_of_a_signal(
        tmp_path: Path, real_core: Path) -> None:
    import threading

    pid = int(real_core.with_suffix(".pid").read_text())
    ctl_dir = tmp_path / "ctl"
    ctl_dir.mkdir()
    ctl = fake_coredumpctl(ctl_dir, json_rows=[], core=real_core)
    src = CoreSources(proc_dir=str(proc_dir(tmp_path, "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h")),
                      coredumpctl=str(ctl))
    report = tmp_path / "report"
    (report / "h1").mkdir(parents=True)
    (report / "h1" / "rank0.json").write_text(json.dumps({"rank": 0, "pid": pid, "signal": "SIGSEGV"}))
    launch = SimpleNamespace(launch_id="L", report_dir=str(report),
                             ranks={0: SimpleNamespace(host="h1", signal="SIGSEGV")})
    row = [{"time": int(time.time() * 1e6), "pid": pid, "uid": 0, "gid": 0, "sig": 11, "corefile": "present",
            "exe": os.path.realpath(sys.executable), "size": 10}]
    with local_cluster(tmp_path) as cluster:
        watch = CoreWatch(cluster, sources=src)
        baseline = watch.snapshot()
        late = threading.Timer(1.5, lambda: (ctl_dir / "list.json").write_text(json.dumps(row)))
        late.start()
        t0 = time.monotonic()
        cores = watch.collect(baseline, rundir=report, ranks=launch)
        late.join()
    assert [(c.pid, c.rank, c.relation) for c in cores] == [(pid, 0, "rank")]
    assert 1.4 < time.monotonic() - t0 < 10


def test_cores_are_still_reported_when_inspecting_them_fails(tmp_path: Path) -> None:
    from framework.errors import HostUnreachable
    from framework.testing import FakeTransport

    empty = ("@@now 1700000000.0\n@@pattern /c/core.%e.%p.%t.%s\n@@ulimit 0 unlimited\n"
             "@@gdb /usr/bin/gdb\n@@files\n@@end\n")
    listing = base64.b64encode(b"F 100 1700000005.0 7 /c/core.python3.42.1700000005.11\0").decode()
    one = empty.replace("@@files\n", f"@@files\n{listing}\n")
    fake = FakeTransport("h1")
    fake.on(re.compile(r"core_pattern"), stdout=empty, times=1).on(re.compile(r"core_pattern"), stdout=one)
    fake.on(re.compile(r"@@core 0"), raises=HostUnreachable("h1", "connection lost"))
    fake.on(re.compile(r"^rm -rf"), rc=0)
    watch = CoreWatch(Cluster([Host("h1", fake)]))
    cores = watch.collect(watch.snapshot(), rundir=tmp_path)
    assert [(c.pid, c.signal) for c in cores] == [(42, "SIGSEGV")]
    assert any("connection lost" in n for n in cores[0].notes)
    assert watch.verdict(cores)[0]


def test_kernel_oom_kill_is_a_signature_naming_the_victim():
    """A real OOM kill from the lab (two world-16 launches at once on 23 GiB): the rank 'died of SIGKILL'."""
    text = (Path(__file__).resolve().parents[2] / "data" / "kernel" / "dmesg-oom.txt").read_text()
    found = scan_signatures(text, "host16/dmesg.txt")
    oom = [s for s in found if s.code == "OOM-KILL"]
    assert len(oom) == 1 and oom[0].primary
    assert oom[0].detail == "pid 21182 (python), 983 MiB resident"
    assert oom[0].line.startswith("[11794.043617] Out of memory: Killed process 21182 (python)")
    assert "OOM killer" in oom[0].describe() and "host16/dmesg.txt:" in oom[0].describe()
    # a cgroup's limit reads differently; both name the victim; other kernel lines are not signatures
    cg = scan_signatures("Memory cgroup out of memory: Killed process 7 (torchrun) total-vm:1kB, anon-rss:2048kB,\n"
                         "[1.0] hrtimer: interrupt took 2153650 ns\n")
    assert [(s.code, s.detail) for s in cg] == [("OOM-KILL", "pid 7 (torchrun), 2 MiB resident")]
