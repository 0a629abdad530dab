"""framework.fetchcaps: a long-name header's size read in GNU base-256 and a size field that is not
octal, a read of the whole expanded stream refused, and a member whose folder leads out of the
destination through a symlink left unwritten. Real tar archives, real files."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from framework import fetchcaps
from framework.fetchcaps import ArchiveBound, extract_tar

CAPS = fetchcaps.FetchCaps(member_bytes=1 << 20, total_bytes=4 << 20, expand_bytes=64 << 20)


def long_name_tar(size_field: bytes) -> bytes:
    """A GNU archive whose first header (the 'L' long-name one) has ``size_field`` as its size."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("n" * 300)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    data = bytearray(buf.getvalue())
    assert data[156:157] == b"L"
    data[124:136] = size_field
    return bytes(data)


def test_a_long_name_header_sized_in_base_256_is_refused_by_that_size(tmp_path: Path) -> None:
    tgz = tmp_path / "a.tar"
    tgz.write_bytes(long_name_tar(b"\x80" + (1 << 30).to_bytes(11, "big")))
    got = extract_tar(tgz, tmp_path / "out", host="h1", what="logs", place=lambda m: Path("x"),
                      cap=CAPS)
    assert got.files == []
    assert got.notes == ["h1: logs: stopped after 0 file(s): a member header of 1 GiB (type L) is "
                         "over 64 KiB; the files before it are kept"]


def test_a_size_field_that_is_not_octal_is_left_to_tarfile_to_refuse(tmp_path: Path) -> None:
    tgz = tmp_path / "a.tar"
    tgz.write_bytes(long_name_tar(b"0000000009x\0"))
    got = extract_tar(tgz, tmp_path / "out", host="h1", what="logs", place=lambda m: Path("x"),
                      cap=CAPS)
    assert got.files == [] and len(got.notes or []) == 1
    assert (got.notes or [""])[0].startswith("h1: logs: archive unreadable after 0 file(s)")


@pytest.mark.parametrize(("n", "shown"), [(-1, "all"), (5 << 20, "5 MiB")])
def test_a_read_of_the_whole_stream_or_of_too_much_at_once_is_refused(n: int, shown: str) -> None:
    stream = fetchcaps._Bounded(io.BytesIO(bytes(10)), 100)
    with pytest.raises(ArchiveBound, match=f"a single read of {shown} refused"):
        stream.read(n)
    assert stream.read(4) == bytes(4)


def test_a_member_whose_folder_leads_out_through_a_symlink_is_not_written(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("x.log")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    tgz = tmp_path / "a.tar"
    tgz.write_bytes(buf.getvalue())
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "sub").symlink_to(tmp_path / "elsewhere")
    got = extract_tar(tgz, tmp_path / "out", host="h1", what="logs",
                      place=lambda m: Path("sub") / m.name, cap=CAPS)
    assert got.files == [] and not got.notes
    assert list((tmp_path / "elsewhere").iterdir()) == []
