"""Names are data (issue 31, item 1): a host's file names reach the controller in an injective encoding and
are never read as records; each scan record is accepted once, in order; a core whose uid is unknown is not
the run's. The scripts run in a real ``/bin/sh`` on real files here; the lab tests play the co-tenant."""

from __future__ import annotations

import base64
import subprocess
import tarfile
import time
from pathlib import Path

from framework.cores.inspection import Core, RankProc, is_ours
from framework.cores.scan import CoreSources, new_candidates, parse_scan, scan_roots, scan_script

#: the review's name (security-review-3 §1): records smuggled in through newlines
INJECTED = "x\n@@pattern %e\nF 60 99999999999 1 .bash_history"


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    assert f is not None, member.name
    data: bytes = f.read()
    return data


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
        c = Core("h1", "file", "/c/core.1", 0.0, owner=0)
        for k, v in kw.items():
            setattr(c, k, v)
        return c

    procs = [RankProc("L", 0, "h1", 100, None)]
    assert not is_ours(core(uid=None, facts_read=False), [], 0)  # not an ELF core: was "ours" (review §1)
    assert not is_ours(core(uid=None, relation="rank", rank=0), procs, 0)
    assert not is_ours(core(uid=0, facts_read=True), [], None)  # the SSH user's uid unknown
    assert is_ours(core(uid=0, facts_read=True), [], 0)
    assert is_ours(core(uid=0, facts_read=True, relation="rank", rank=0), procs, 0)


def test_a_core_is_the_runs_only_when_its_owner_and_notes_agree() -> None:
    def core(source: str, owner: int | None, uid: int | None) -> Core:
        return Core("h1", source, "/c/core.1", 0.0, uid=uid, owner=owner, facts_read=True)

    assert is_ours(core("file", 1000, 1000), [], 1000)
    assert not is_ours(core("file", 65534, 1000), [], 1000)  # a co-tenant's file whose notes say uid 1000
    assert not is_ours(core("file", 0, 1000), [], 1000)  # root's file, not the kernel's dump of our process
    assert not is_ours(core("file", None, 1000), [], 1000)  # refused by its descriptor, or never opened
    assert is_ours(core("apport", 0, 1000), [], 1000)  # a root-run handler's store: the recorded uid decides
    assert not is_ours(core("apport", 65534, 1000), [], 1000)


def run_hostfile(out: Path, cap: int, *items: tuple[str, str, Path]) -> dict[str, dict[str, object]]:
    import json
    import sys

    from framework.cores.inspection import hostfile_program

    args = [a for i, uids, path in items for a in (i, uids, str(path))]
    cp = subprocess.run([sys.executable, "-I", "-c", hostfile_program(), str(out), str(cap), *args],
                        capture_output=True, text=True, timeout=60, check=True)
    return {r["i"]: r for r in map(json.loads, cp.stdout.splitlines())}


def test_the_host_program_judges_each_file_by_its_descriptor(tmp_path: Path) -> None:
    import gzip
    import hashlib
    import os

    me = str(os.getuid())
    good = tmp_path / "core.1"
    good.write_bytes(b"\x7fELF-not-really" * 100)
    good.chmod(0o600)
    (tmp_path / "link").symlink_to(good)
    (tmp_path / "hard").write_bytes(b"x")
    os.link(tmp_path / "hard", tmp_path / "hard2")
    (tmp_path / "gw").write_bytes(b"x")
    (tmp_path / "gw").chmod(0o620)
    os.mkfifo(tmp_path / "fifo")  # O_NONBLOCK: opening it does not hang
    out = tmp_path / "out"
    out.mkdir()
    got = run_hostfile(out, 1 << 20, ("0", me, good), ("1", me, tmp_path / "link"), ("2", me, tmp_path / "hard"),
                       ("3", me, tmp_path / "gw"), ("4", me, tmp_path / "fifo"), ("5", "65534", good))
    assert got["0"]["owner"] == os.getuid() and got["0"]["size"] == 1500
    assert (out / "0.core").read_bytes() == good.read_bytes() == gzip.decompress((out / "0.gz").read_bytes())
    assert got["0"]["sha256"] == hashlib.sha256(good.read_bytes()).hexdigest()
    assert (out / "0.core").stat().st_mode & 0o777 == 0o600 and (out / "0.gz").stat().st_mode & 0o777 == 0o600
    assert "cannot open without following links" in str(got["1"]["refused"])
    assert got["2"]["refused"] == "has 2 links"
    assert got["3"]["refused"] == "writable by group or others"
    assert got["4"]["refused"] == "not a regular file"
    assert got["5"]["refused"] == f"owned by uid {os.getuid()}"
    assert sorted(p.name for p in out.iterdir()) == ["0.core", "0.gz"]  # nothing else read or copied


def test_the_host_program_copies_nothing_over_the_cap(tmp_path: Path) -> None:
    import os

    big = tmp_path / "core.2"
    big.write_bytes(b"y" * 4096)
    out = tmp_path / "out"
    out.mkdir()
    got = run_hostfile(out, 1024, ("0", str(os.getuid()), big))
    assert got["0"]["size"] == 4096 and "copy" not in got["0"] and not list(out.iterdir())


def test_a_plog_name_is_one_member_whatever_it_holds(tmp_path: Path) -> None:
    """review §4: a plog named ``x\\n<ts> 1 -C ..\\n...`` added lines (and ``-C``) to root's ``tar -T`` list.
    Now the host program packs each file it walked to as one member, its name encoded by the tar format:
    the archive holds exactly the files."""

    from framework.cores.logs import logs_script

    plog = tmp_path / "root" / "debug" / "plog"
    plog.mkdir(parents=True)
    (tmp_path / "outside").write_text("not a plog")
    evil = "x\n9999999993 1 -C ..\n9999999992 1 outside"
    (plog / evil).write_text("plog text")
    (plog / "-C").write_text("a plog named like an option")
    (plog / "plog-1.log").write_text("EI0006")
    out = run_sh(logs_script(time.time() - 60, str(tmp_path / "t"), [str(tmp_path / "root")]) + "printf '@@end\\n'\n")
    tgz = next(line.split()[1] for line in out.splitlines() if line.startswith("@@ascend "))
    with tarfile.open(tgz) as tar:
        names = sorted(Path(m.name).name for m in tar.getmembers())
    assert names == sorted(["-C", evil, "plog-1.log"]), names


def test_gdb_gets_an_executable_only_when_nobody_else_can_write_it(tmp_path: Path) -> None:
    """review §15: root ran gdb on an attacker-chosen ELF. gdb reads camit's copy of the core with init
    files, auto-load and debuginfod off; the executable hint is used only when root or the SSH user owns
    it and group/others cannot write it (else gdb reads the core alone)."""
    import os
    import sys

    from framework.cores.inspection import _EXE_OK, BacktraceJob, backtrace_script, gdb_argv

    planted = tmp_path / "python3"
    planted.write_bytes(b"\x7fELF planted")
    planted.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(sys.executable)

    def exe_ok(path: Path) -> str:
        cp = subprocess.run(["/bin/sh", "-c", f'U=$(id -u); {_EXE_OK}; exe_ok "$1"', "sh", str(path)],
                            capture_output=True, text=True, timeout=30)
        return cp.stdout if cp.returncode == 0 else ""

    assert exe_ok(link) == os.path.realpath(sys.executable)
    assert exe_ok(planted) == "" and exe_ok(tmp_path / "missing") == ""
    argv = gdb_argv("/w/.camit-cores/x/0.core", None)
    assert argv[:8] == ["gdb", "-batch", "-nx", "-iex", "set auto-load off", "-iex", "set debuginfod enabled off",
                        "-ex"] and argv[-2:] == ["-c", "/w/.camit-cores/x/0.core"]
    script = backtrace_script([BacktraceJob(0, "/w/.camit-cores/x/0.core", str(planted))], timeout=5)
    assert f"exe_ok {planted}" in script and '"$x" /w/.camit-cores/x/0.core' in script


def test_the_log_pack_walks_folders_by_descriptor_and_opens_each_file_once(tmp_path: Path) -> None:
    """Issue 31: the Ascend logs are packed by the host program, not by ``tar`` re-opening listed paths:
    a folder that is a symlink is not followed, a hard-linked file or one another uid owns is refused,
    and the newest files go first up to the cap."""
    import json
    import os
    import sys

    from framework.cores.logs import pack_program

    root = tmp_path / "root" / "debug"
    (root / "plog").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "plog-9.log").write_text("SECRET")
    (root / "linked").symlink_to(outside)
    (root / "plog" / "plog-1.log").write_text("old-1")
    (root / "plog" / "plog-2.log").write_text("new-2")
    os.utime(root / "plog" / "plog-1.log", (time.time() - 30, time.time() - 30))
    os.link(outside / "plog-9.log", root / "plog" / "hard.log")
    (root / "plog" / "theirs.log").write_text("theirs")
    os.chown(root / "plog" / "theirs.log", 65534, 65534)

    def pack(cap: int, out: str) -> tuple[dict[str, int], dict[str, bytes]]:
        cp = subprocess.run([sys.executable, "-I", "-c", pack_program(), str(tmp_path / out), str(cap),
                             str(int(time.time()) - 60), str(os.getuid()), "{}", str(root)],
                            capture_output=True, text=True, timeout=60, check=True)
        with tarfile.open(tmp_path / out) as tar:
            got = {m.name: _read(tar, m) for m in tar.getmembers()}
        return json.loads(cp.stdout), got

    rec, got = pack(1 << 20, "all.tgz")
    base = str(root).strip("/")
    assert got == {f"{base}/plog/plog-2.log": b"new-2", f"{base}/plog/plog-1.log": b"old-1"}, got
    assert rec == {"files": 2, "bytes": 10, "refused": 2}
    _, newest = pack(7, "cap.tgz")  # room for one 5-byte file: the newest
    assert list(newest) == [f"{base}/plog/plog-2.log"]


def test_collect_logs_packs_home_logs_through_the_host_program(tmp_path: Path) -> None:
    """``camit collect --logs`` once ran ``tar czf -C $HOME ascend/log``: every file there whoever owns it,
    hard links included. Now the same host program packs it: the SSH user's single-link files only, no
    folder followed through a symlink; no ``~/ascend/log`` is exit 3."""
    import os

    from framework.cores.logs import home_logs_script

    home = tmp_path / "home"
    plog = home / "ascend" / "log" / "debug" / "plog"
    plog.mkdir(parents=True)
    (plog / "plog-1.log").write_text("ours")
    (tmp_path / "secret").write_text("SECRET")
    os.link(tmp_path / "secret", plog / "linked.log")
    (home / "ascend" / "log" / "run").symlink_to(tmp_path)
    tgz = tmp_path / "out.tgz"
    env = {**os.environ, "HOME": str(home)}
    cp = subprocess.run(["/bin/sh", "-c", home_logs_script(":", str(tgz), 1 << 20)], env=env,
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    with tarfile.open(tgz) as tar:
        got = {Path(m.name).name: _read(tar, m) for m in tar.getmembers()}
    assert got == {"plog-1.log": b"ours"}
    env["HOME"] = str(tmp_path / "nowhere")
    cp = subprocess.run(["/bin/sh", "-c", home_logs_script(":", str(tgz), 1 << 20)], env=env,
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 3


def test_coverage_data_is_packed_by_the_host_program_never_through_a_link(tmp_path: Path) -> None:
    """Issue 31: the ``.gcda`` files come back through the host program, as every fetched artifact does:
    a hard-linked file is refused (``find | tar`` packed it, and re-opened each path after the listing),
    a folder that is a symlink is not followed, only ``*.gcda`` files are packed, and the count is
    what was packed."""
    import os

    from framework.ranksuite import coverage

    vendor = tmp_path / "vendors" / "CAM"
    (vendor / "obj").mkdir(parents=True)
    (vendor / "obj" / "a.gcda").write_bytes(b"gcda")
    (vendor / "obj" / "a.o").write_bytes(b"obj")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.gcda").write_bytes(b"SECRET")
    (vendor / "linked").symlink_to(elsewhere)
    os.link(elsewhere / "secret.gcda", vendor / "obj" / "b.gcda")
    tgz = tmp_path / "g.tgz"
    out = run_sh(str(coverage.gcda_script([str(vendor)], str(tgz))) + "\nprintf '@@end\\n'\n")
    assert coverage.parse_gcda_count(out) == 1, out
    with tarfile.open(tgz) as tar:
        assert tar.getnames() == [f"{str(vendor).lstrip('/')}/obj/a.gcda"]
    empty, none = tmp_path / "empty", tmp_path / "none.tgz"
    empty.mkdir()
    out = run_sh(str(coverage.gcda_script([str(empty)], str(none))) + "\nprintf '@@end\\n'\n")
    assert coverage.parse_gcda_count(out) == 0 and not none.exists(), out  # nothing left on the host
