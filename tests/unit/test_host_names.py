"""Names are data (issue 31, item 1): a host's file names reach the controller in an injective encoding and
are never read as records; each scan record is accepted once, in order; a core whose uid is unknown is not
the run's. The scripts run in a real ``/bin/sh`` on real files here; the lab tests play the co-tenant."""

from __future__ import annotations

import base64
import subprocess
import time
from pathlib import Path

from framework.cores.inspection import Core, RankProc, is_ours
from framework.cores.scan import CoreSources, new_candidates, parse_scan, scan_roots, scan_script

#: the review's name (security-review-3 §1): records smuggled in through newlines
INJECTED = "x\n@@pattern %e\nF 60 99999999999 1 .bash_history"


def run_sh(script: str) -> str:
    cp = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert "@@end" in cp.stdout, cp.stderr
    return cp.stdout


def pattern_src(tmp: Path, pattern: str) -> CoreSources:
    (tmp / "proc").mkdir(exist_ok=True)
    (tmp / "proc" / "core_pattern").write_text(pattern + "\n")
    return CoreSources(proc_dir=str(tmp / "proc"), apport_dirs=(str(tmp / "crash"),))


def test_a_name_with_newlines_is_one_ignored_name_not_records(tmp_path: Path) -> None:
    crash = tmp_path / "crash"
    crash.mkdir()
    (crash / ("core." + INJECTED)).write_bytes(b"junk")  # matches the pattern's prefix: listed by find
    (crash / "core.python3.7.1700000000.11").write_bytes(b"x")
    src = pattern_src(tmp_path, f"{crash}/core.%e.%p.%t.%s")
    scan = parse_scan("h1", run_sh(scan_script(src)))
    assert scan.complete and scan.pattern.raw == f"{crash}/core.%e.%p.%t.%s"  # the host's pattern, not '%e'
    assert list(scan.files) == [f"{crash}/core.python3.7.1700000000.11"]
    assert scan.ignored == 1 and "1 file name(s) with control characters" in " ".join(scan.notes())


def test_apport_listing_keeps_the_crash_dir_names_as_data(tmp_path: Path) -> None:
    crash = tmp_path / "crash"
    crash.mkdir()
    (crash / INJECTED).write_bytes(b"junk")
    (crash / "a b.crash").write_bytes(b"ProblemType: Crash\n")  # a space is fine: NUL ends a record
    src = pattern_src(tmp_path, "|/usr/share/apport/apport -p%p -s%s -c%c -- %E")
    scan = parse_scan("h1", run_sh(scan_script(src)))
    assert scan.pattern.kind == "apport" and list(scan.files) == [f"{crash}/a b.crash"]


def test_each_record_is_accepted_once_and_in_order() -> None:
    listing = base64.b64encode(b"F 1 2 3 /c/core.1\0").decode()
    good = f"@@now 5\n@@pattern /c/core.%p\n@@uid 0\n@@files\n{listing}\n@@end\n"
    assert parse_scan("h", good).complete and list(parse_scan("h", good).files) == ["/c/core.1"]
    for bad, why in [
        (good.replace("@@end\n", "@@pattern %e\n@@end\n"), "repeated or out of order"),
        (good.replace("@@uid 0\n", "@@uid 0\n@@uid 1\n"), "repeated or out of order"),
        (good.replace("@@now 5\n", "@@now 5\n@@bogus 1\n"), "unknown"),
        (good.replace(listing, "F 1 2 3 /c/core.1"), "not base64"),
        ("@@now 5\n@@pattern core\nF 1 2 3 /x\n@@end\n", "unexpected text"),
    ]:
        scan = parse_scan("h", bad)
        assert not scan.complete and not scan.files and why in (scan.error or ""), (bad, scan.error)


def test_listed_names_must_be_absolute_without_control_characters() -> None:
    names = [b"F 1 2 3 relative\0", b"F 1 2 3 /c/a\x1bb\0", b"F 1 2 3 /c/\xff\0", b"F 1 2 3 /c/ok\0"]
    listing = base64.b64encode(b"".join(names)).decode()
    scan = parse_scan("h", f"@@now 1\n@@pattern /c/%e\n@@files\n{listing}\n@@end\n")
    assert list(scan.files) == ["/c/ok"] and scan.ignored == 3


def test_a_relative_core_counts_only_under_the_searched_dirs() -> None:
    def listing(*paths: str) -> str:
        return base64.b64encode(b"".join(f"F 1 {time.time():.0f} 1 {p}\0".encode() for p in paths)).decode()

    before = parse_scan("h", "@@now 1\n@@pattern core\n@@end\n")
    after = parse_scan("h", f"@@now 2\n@@pattern core\n@@files\n"
                            f"{listing('/wd/runs/L/core', '/root/core', '/wd/runs/../../root/core')}\n@@end\n")
    roots = scan_roots(after.pattern, CoreSources(), ["/wd/runs", "/wd"])
    assert [c.location for c in new_candidates(before, after, roots)] == ["/wd/runs/L/core"]


def test_a_core_of_unknown_uid_is_not_the_runs() -> None:
    def core(**kw: object) -> Core:
        c = Core("h1", "file", "/c/core.1", 0.0)
        for k, v in kw.items():
            setattr(c, k, v)
        return c

    procs = [RankProc("L", 0, "h1", 100, None)]
    assert not is_ours(core(uid=None, facts_read=False), [], 0)  # not an ELF core: was "ours" (review §1)
    assert not is_ours(core(uid=None, relation="rank", rank=0), procs, 0)
    assert not is_ours(core(uid=0, facts_read=True), [], None)  # the SSH user's uid unknown
    assert is_ours(core(uid=0, facts_read=True), [], 0)
    assert is_ours(core(uid=0, facts_read=True, relation="rank", rank=0), procs, 0)
