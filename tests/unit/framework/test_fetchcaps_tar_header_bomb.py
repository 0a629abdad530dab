"""Bounded before parsed (issue 31, item 4; security-review-3 §5): a GNU long-name or pax header is
refused by its declared size before tarfile reads it whole; notes quote at most 200 printable characters
of a host-supplied name. Real tar archives (Python's tarfile writing GNU/pax headers), real gzip."""

from __future__ import annotations

import gzip
import io
import resource
import tarfile
import time
from pathlib import Path

import pytest

from framework import fetchcaps
from framework.fetchcaps import HEADER_BYTES, extract_tar

CAPS = fetchcaps.FetchCaps(member_bytes=1 << 20, total_bytes=4 << 20, expand_bytes=64 << 20)


def bomb(path: Path, name_bytes: int, fmt: int) -> None:
    """One member whose name is ``name_bytes`` long (a GNU 'L' or a pax 'x' header), then a normal one."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        ok = tarfile.TarInfo("before.log")
        ok.size = 2
        tar.addfile(ok, io.BytesIO(b"ok"))
        big = tarfile.TarInfo("a" * name_bytes)
        big.size = 1
        tar.addfile(big, io.BytesIO(b"x"))
        after = tarfile.TarInfo("after.log")
        after.size = 2
        tar.addfile(after, io.BytesIO(b"ok"))
    path.write_bytes(gzip.compress(buf.getvalue(), 9))


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_a_header_bomb_is_refused_before_it_is_read(tmp_path: Path, fmt: int) -> None:
    tgz = tmp_path / "bomb.tgz"
    bomb(tgz, 48 << 20, fmt)  # a 48 MiB "name" (the review used 200 MiB: 429 MiB of RSS, no cap applied)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.process_time()
    got = extract_tar(tgz, tmp_path / "out", host="h1", what="run folder", place=lambda m: Path(m.name), cap=CAPS)
    cpu = time.process_time() - start
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    assert [p.name for p in got.files] == ["before.log"], got
    [note] = got.notes or []
    assert note.startswith("h1: run folder: stopped after 1 file(s): a member header of 48"), note
    assert f"is over {fetchcaps.human(HEADER_BYTES)}" in note and len(note) < 400
    assert grown_mib < 16 and cpu < 1.0, (grown_mib, cpu)  # measured: ~0 MiB and ~0.01 s here


def test_a_legit_long_name_still_extracts_and_notes_quote_a_short_printable_name(tmp_path: Path) -> None:
    tgz = tmp_path / "long.tgz"
    bomb(tgz, 4000, tarfile.GNU_FORMAT)  # a long but plausible name is fine
    got = extract_tar(tgz, tmp_path / "out", host="h1", what="logs", place=lambda m: Path(m.name[:100]), cap=CAPS)
    assert sorted(p.name for p in got.files) == ["a" * 100, "after.log", "before.log"] and not got.notes
    assert fetchcaps.shown("x\n\x1b[2J" + "y" * 500) == "x??[2J" + "y" * 194 + "…"


def test_an_expansion_bomb_stops_at_expand_bytes_while_reading(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(3):
            info = tarfile.TarInfo(f"zeros{i}")
            info.size = 24 << 20
            tar.addfile(info, io.BytesIO(bytes(info.size)))
    tgz = tmp_path / "zeros.tgz"
    tgz.write_bytes(gzip.compress(buf.getvalue(), 9))
    caps = fetchcaps.FetchCaps(member_bytes=1 << 20, total_bytes=64 << 20, expand_bytes=32 << 20)
    got = extract_tar(tgz, tmp_path / "out", host="h1", what="logs", place=lambda m: Path(m.name), cap=caps)
    assert len(got.files) <= 2 and any("expands past 32 MiB" in n for n in got.notes or []), got.notes
