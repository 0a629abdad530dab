"""framework/lab/wheelwrite.py writes the stand-ins' wheels without setuptools: the members setuptools
put in them, a RECORD that hashes right, the same bytes twice, and pip installs the result."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from framework.lab.wheelwrite import WheelError, write_wheel

ROOT = Path(__file__).resolve().parents[4]


def _record_ok(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(z.read(record).decode())))
        for name, digest, size in rows:
            if name == record:
                assert (digest, size) == ("", "")
                continue
            data = z.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, size) == (f"sha256={expected}", str(len(data))), name
        assert sorted(r[0] for r in rows) == sorted(names)
    return names


def test_the_torch_npu_standin_wheel(tmp_path):
    wheel = write_wheel(ROOT / "standin_npu", tmp_path / "a")
    assert wheel.name == "torch_npu_standin-2.13.0.post0-py3-none-any.whl"
    names = _record_ok(wheel)
    sources = {p.relative_to(ROOT / "standin_npu").as_posix()
               for p in (ROOT / "standin_npu").rglob("*.py") if "__pycache__" not in p.parts}
    assert {n for n in names if not n.startswith("torch_npu_standin-")} == sources
    with zipfile.ZipFile(wheel) as z:
        meta = z.read("torch_npu_standin-2.13.0.post0.dist-info/METADATA").decode()
    assert "Name: torch-npu-standin\n" in meta and "Requires-Dist: torch==2.13.0\n" in meta
    # reproducible: the same bytes from another build
    assert write_wheel(ROOT / "standin_npu", tmp_path / "b").read_bytes() == wheel.read_bytes()


def test_the_op_library_wheel_reads_its_version_from_the_source(tmp_path):
    wheel = write_wheel(ROOT / "standin", tmp_path)
    assert wheel.name == "umdk_cam_op_lib-209.0.0b1-py3-none-any.whl"
    _record_ok(wheel)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    assert (target / "umdk_cam_op_lib" / "__init__.py").is_file()
    assert (target / "umdk_cam_op_lib-209.0.0b1.dist-info" / "RECORD").is_file()


def test_a_listed_package_that_is_missing_is_named(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "1"\n[tool.setuptools]\npackages = ["nope"]\n')
    with pytest.raises(WheelError, match="lists package 'nope'"):
        write_wheel(tmp_path / "src", tmp_path / "out")
