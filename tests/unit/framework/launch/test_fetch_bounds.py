"""Fetch bounds (issue 17, item 4) and the core filters (item 2) as pure logic: framework.fetchcaps, the core
watch's ownership rule and unique names. The real downloads and runs are in tests/security/test_cores_fetch_lab.py."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from framework import fetchcaps
from framework.cores.inspection import Core, RankProc, is_ours, unique_base
from framework.cores.scan import parse_scan
from framework.errors import UsageError
from framework.fetchcaps import FetchCapError, FetchCaps, caps, extract_tar
from framework.hosts import Host
from framework.launch.fetch import unpack
from framework.testing.fake import FakeTransport

MiB = 1 << 20


def _tgz(path: Path, members: list[tuple[str, bytes | int]]) -> Path:
    """A gzip tar of ``(name, data)``; an int is that many zero bytes, streamed (a bomb costs no memory)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if isinstance(data, int):
                info.size = data
                tar.addfile(info, _Zeros(data))
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.left = n

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        self.left -= size
        return bytes(size)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


# -- the caps and their env keys -----------------------------------------------------------------------
def test_caps_have_defaults_and_env_keys() -> None:
    default = caps({})
    assert default == FetchCaps() and default.member_bytes == 256 * MiB and default.timeout > 0
    got = caps({"CAMIT_FETCH_MAX_BYTES": "3M", "CAMIT_FETCH_TOTAL_BYTES": "1G", "CAMIT_FETCH_TIMEOUT": "7.5",
                "CAMIT_FETCH_MEMBER_BYTES": "4096", "CAMIT_FETCH_EXPAND_BYTES": "2g"})
    assert (got.max_bytes, got.total_bytes, got.timeout, got.member_bytes, got.expand_bytes) == (
        3 * MiB, 1 << 30, 7.5, 4096, 2 << 30)


@pytest.mark.parametrize("key, value", [("CAMIT_FETCH_MAX_BYTES", "lots"), ("CAMIT_FETCH_MEMBER_BYTES", "0"),
                                        ("CAMIT_FETCH_TIMEOUT", "-1"), ("CAMIT_FETCH_TIMEOUT", "soon")])
def test_a_bad_cap_is_one_error_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(UsageError, match=key):
        caps({key: value})


# -- downloads: counted while reading --------------------------------------------------------------------
def _host(data: bytes) -> tuple[Host, FakeTransport]:
    fake = FakeTransport("node1")
    fake.files["/w/big"] = data
    return Host("node1", fake), fake


def test_a_download_stops_at_its_byte_cap_and_names_host_and_file(tmp_path: Path) -> None:
    host, _ = _host(os.urandom(3 * MiB))
    cap = FetchCaps(max_bytes=MiB)
    with pytest.raises(FetchCapError, match=r"^node1: download of /w/big stopped at the cap of 1 MiB "
                                            r"\(CAMIT_FETCH_MAX_BYTES\)"):
        host.get("/w/big", tmp_path / "kept", cap=cap, keep_partial=True)
    assert (tmp_path / "kept").stat().st_size == MiB and _mode(tmp_path / "kept") == 0o600
    with pytest.raises(FetchCapError):
        host.get("/w/big", tmp_path / "gone", cap=cap)
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"]  # no partial file without keep_partial


def test_a_download_under_the_cap_is_whole_verified_and_private(tmp_path: Path) -> None:
    data = os.urandom(MiB + 5)
    host, _ = _host(data)
    host.get("/w/big", tmp_path / "x", cap=FetchCaps(max_bytes=2 * MiB))
    assert (tmp_path / "x").read_bytes() == data and _mode(tmp_path / "x") == 0o600


def test_the_time_cap_is_checked_while_reading() -> None:
    slow = iter([b"a" * 10] * 5)
    ticks = iter([0.0, 0.5, 1.5, 2.5, 3.5, 4.5, 9.0])
    out = io.BytesIO()
    import framework.fetchcaps as fc

    real = fc.time.monotonic
    fc.time.monotonic = lambda: next(ticks)
    try:
        with pytest.raises(FetchCapError, match=r"took longer than 2s \(CAMIT_FETCH_TIMEOUT\); stopped after 30 B"):
            fetchcaps.copy_bounded(lambda n: next(slow, b""), out, host="h", remote="/r",
                                   cap=FetchCaps(timeout=2.0))
    finally:
        fc.time.monotonic = real


# -- archives: member, total and expansion caps -----------------------------------------------------------
def test_a_gzip_bomb_stops_at_the_member_cap_and_keeps_the_rest(tmp_path: Path) -> None:
    tgz = _tgz(tmp_path / "bomb.tgz", [("rank0.json", b'{"rank": 0}'), ("perf-bomb.json", 64 * MiB),
                                       ("rank0.log", b"log\n")])
    assert tgz.stat().st_size < MiB
    dest = tmp_path / "out"
    notes = unpack(tgz, dest, host="host1", what="run folder /w/runs/x", cap=FetchCaps(member_bytes=2 * MiB))
    assert notes == ["host1: run folder /w/runs/x: perf-bomb.json is 64 MiB, cut at the member cap of 2 MiB "
                     "(CAMIT_FETCH_MEMBER_BYTES)"]
    assert (dest / "perf-bomb.json").stat().st_size == 2 * MiB
    assert (dest / "rank0.json").read_text() == '{"rank": 0}' and (dest / "rank0.log").read_text() == "log\n"
    assert {_mode(p) for p in dest.iterdir()} == {0o600}


def test_the_total_cap_stops_the_archive(tmp_path: Path) -> None:
    tgz = _tgz(tmp_path / "t.tgz", [(f"rank{i}.log", 3 * MiB) for i in range(5)])
    got = extract_tar(tgz, tmp_path / "o", host="h", what="a", place=lambda m: Path(m.name),
                      cap=FetchCaps(member_bytes=4 * MiB, total_bytes=7 * MiB))
    assert sum(p.stat().st_size for p in got.files) == 7 * MiB == got.total
    assert [p.name for p in got.files] == ["rank0.log", "rank1.log", "rank2.log"]
    assert got.notes == ["h: a: rank2.log is 3 MiB, cut at the total cap of 7 MiB (CAMIT_FETCH_TOTAL_BYTES)",
                         "h: a: stopped at the total cap of 7 MiB (CAMIT_FETCH_TOTAL_BYTES) before rank3.log; "
                         "the files before it are kept"]


def test_the_expansion_cap_stops_reading_a_huge_member(tmp_path: Path) -> None:
    tgz = _tgz(tmp_path / "t.tgz", [("a.log", b"a"), ("huge.log", 40 * MiB), ("b.log", b"b")])
    got = extract_tar(tgz, tmp_path / "o", host="h", what="a", place=lambda m: Path(m.name),
                      cap=FetchCaps(expand_bytes=8 * MiB))
    assert [p.name for p in got.files] == ["a.log"]
    assert got.notes == ["h: a: stopped: the archive expands past 8 MiB (CAMIT_FETCH_EXPAND_BYTES) before "
                         "huge.log; the files before it are kept"]


def test_a_truncated_archive_keeps_the_members_before_the_cut(tmp_path: Path) -> None:
    tgz = _tgz(tmp_path / "t.tgz", [("first.log", b"one\n"), ("second.log", os.urandom(2 * MiB))])
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(tgz.read_bytes()[: MiB])
    got = extract_tar(cut, tmp_path / "o", host="h", what="a", place=lambda m: Path(m.name))
    assert (tmp_path / "o" / "first.log").read_text() == "one\n"
    assert got.notes and got.notes[-1].startswith("h: a: archive unreadable after ")


def test_extraction_never_writes_through_a_symlink_or_outside(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    dest = tmp_path / "o"
    dest.mkdir()
    (dest / "rank0.log").symlink_to(victim)
    tgz = _tgz(tmp_path / "t.tgz", [("rank0.log", b"new"), ("../escape.log", b"x")])
    extract_tar(tgz, dest, host="h", what="a", place=lambda m: Path(m.name))
    assert victim.read_text() == "keep" and not (dest / "rank0.log").is_symlink()
    assert (dest / "rank0.log").read_text() == "new" and not (tmp_path / "escape.log").exists()


# -- cores: whose, and under which name ----------------------------------------------------------------
def _core(**kw: object) -> Core:
    c = Core("host1", "file", "/w/runs/x/core", 0.0, owner=0)
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def test_only_the_runs_cores_are_its_own() -> None:
    procs = [RankProc("L", 0, "host1", 100, None)]
    assert is_ours(_core(relation="rank", rank=0, facts_read=True, uid=0), procs, 0)
    assert not is_ours(_core(pid=555, facts_read=True, uid=0), procs, 0)  # another process, notes read
    assert not is_ours(_core(pid=None, facts_read=False, uid=None), procs, 0)  # unknown uid: fail closed
    # without the run's ranks (a pytest test driving hosts): another user's core is not ours
    assert not is_ours(_core(uid=1000, facts_read=True), [], 0)
    assert is_ours(_core(uid=0, facts_read=True), [], 0)


def test_two_cores_with_one_name_get_two_names(tmp_path: Path) -> None:
    taken: set[str] = set()
    assert unique_base(tmp_path, "core", 11, taken) == "core"
    assert unique_base(tmp_path, "core", 12, taken) == "core.12"
    assert unique_base(tmp_path, "core", 12, taken) == "core-2"
    (tmp_path / "core.py.7.gz").write_bytes(b"")  # a core fetched by an earlier test of the run
    assert unique_base(tmp_path, "core.py.7", 7, set()) == "core.py.7-2"


def test_the_scan_reads_the_ssh_users_uid() -> None:
    scan = parse_scan("h", "@@now 1\n@@pattern core\n@@uid 1000\n@@files\n@@end\n")
    assert scan.uid == 1000 and scan.complete
