"""The shipped wheel installer (``framework/remote/wheelinst.py``, issue 18): run as a subprocess by a real venv's
interpreter (``--without-pip --system-site-packages``, as deploy makes it), on the stand-in wheel and on hand-made
ones; what it leaves must be what pip leaves (``pip show``, ``pip uninstall``, ``importlib.metadata``), and a bad
wheel is refused with one line and nothing changed."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest

from framework import remote
from framework.lab import artifacts
from tests.support.builders import make_wheel, record_digest

INSTALLER, _ = remote.script("wheelinst.py")
PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    path = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(path)], check=True)
    return path


def site(venv: Path) -> Path:
    return venv / "lib" / PY / "site-packages"


def install(venv: Path, wheel: Path, *opts: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "python"), "-I", str(INSTALLER), *opts, str(wheel)],
                          capture_output=True, text=True, timeout=300)


def py(venv: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=300)


def pip(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The host's pip as the venv sees it (its system site-packages), run by the venv's python."""
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=300)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def record_rows(dist_info: Path) -> list[list[str]]:
    with open(dist_info / "RECORD", newline="") as f:
        return [r for r in csv.reader(f) if r]


def check_record(dist_info: Path) -> set[Path]:
    """Every RECORD row names an existing file whose hash and size match (RECORD itself without): the files."""
    base = dist_info.parent
    files = set()
    for path, hashed, size in record_rows(dist_info):
        f = (base / path).resolve()
        files.add(f)
        if path.endswith(".dist-info/RECORD"):
            assert hashed == "" and size == "", path
            continue
        data = f.read_bytes()
        assert hashed == record_digest(data) and int(size) == len(data), path
    return files


def test_the_standin_wheel_installs_as_pip_would_and_pip_uninstalls_it(tmp_path, venv):
    wheel = artifacts.build_wheel(tmp_path / "dist")
    before = tree(venv)
    res = install(venv, wheel)
    assert res.returncode == 0, res.stderr
    code = ("import json, umdk_cam_op_lib, importlib.metadata as md; d = md.distribution('umdk_cam_op_lib'); "
            "print(json.dumps([md.version('umdk_cam_op_lib'), umdk_cam_op_lib.__file__, str(d.locate_file('')), "
            "sorted(str(f) for f in d.files), d.read_text('INSTALLER')]))")
    out = py(venv, code)
    assert out.returncode == 0, out.stderr
    version, module, location, files, installer = json.loads(out.stdout)
    assert version == "209.0.0b1" and Path(location) == site(venv) and installer == "camit\n"
    assert module == str(site(venv) / "umdk_cam_op_lib" / "__init__.py")  # the venv's copy, imported
    with zipfile.ZipFile(wheel) as z:
        assert {n for n in z.namelist() if not n.endswith("RECORD")} <= set(files)
    info = site(venv) / "umdk_cam_op_lib-209.0.0b1.dist-info"
    recorded = check_record(info)
    assert {info / "INSTALLER", info / "REQUESTED", info / "RECORD"} <= recorded
    pycs = {p for p in recorded if p.suffix == ".pyc"}
    assert pycs and all(p.parent.name == "__pycache__" for p in pycs)  # byte-compiled, as pip does
    # everything it wrote is in RECORD
    assert {venv / p for p in tree(venv) - before if (venv / p).is_file()} == recorded
    show = pip(venv, "show", "-f", "umdk_cam_op_lib")
    assert show.returncode == 0, show.stderr
    assert "Name: umdk_cam_op_lib\n" in show.stdout and "Version: 209.0.0b1\n" in show.stdout
    assert f"Location: {site(venv)}\n" in show.stdout and "umdk_cam_op_lib/prefill.py" in show.stdout
    gone = pip(venv, "uninstall", "-y", "umdk_cam_op_lib")
    assert gone.returncode == 0, gone.stderr
    assert tree(venv) == before, "pip uninstall left files behind"


def test_a_reinstall_of_another_version_removes_the_old_versions_files(tmp_path, venv):
    v1 = make_wheel(tmp_path / "1", {"demo_pkg/__init__.py": b"V = 1\n", "demo_pkg/old.py": b"OLD = 1\n",
                                     "Demo.Pkg-1.0.data/scripts/old-tool": b"#!python\nprint('old')\n"},
                    name="Demo.Pkg")  # the same distribution as demo_pkg (PEP 503)
    v2 = make_wheel(tmp_path / "2", {"demo_pkg/__init__.py": b"V = 2\n"}, version="2.0")
    assert install(venv, v1).returncode == 0
    assert (site(venv) / "demo_pkg" / "old.py").is_file() and (venv / "bin" / "old-tool").is_file()
    assert list((site(venv) / "demo_pkg" / "__pycache__").glob("old.*.pyc"))
    res = install(venv, v2)
    assert res.returncode == 0, res.stderr
    assert not (site(venv) / "demo_pkg" / "old.py").exists() and not (venv / "bin" / "old-tool").exists()
    assert not list((site(venv) / "demo_pkg" / "__pycache__").glob("old.*.pyc"))
    assert sorted(p.name for p in site(venv).glob("*.dist-info")) == ["demo_pkg-2.0.dist-info"]
    out = py(venv, "import demo_pkg, importlib.metadata as md; print(demo_pkg.V, md.version('demo_pkg'))")
    assert out.stdout.split() == ["2", "2.0"], out.stderr
    assert install(venv, v2).returncode == 0  # the same version again: replaced in place
    check_record(site(venv) / "demo_pkg-2.0.dist-info")



def test_a_reinstall_removes_the_pyc_an_import_wrote_beside_the_old_files(tmp_path, venv):
    """pycs not in the old RECORD (written by an import after a ``--no-compile`` install) go with their .py."""
    v1 = make_wheel(tmp_path / "1", {"demo_pkg/__init__.py": b"", "demo_pkg/old.py": b"OLD = 1\n"})
    assert install(venv, v1, "--no-compile").returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    assert subprocess.run([str(venv / "bin" / "python"), "-c", "import demo_pkg.old"], env=env).returncode == 0
    assert list((site(venv) / "demo_pkg" / "__pycache__").glob("old.*.pyc"))
    assert install(venv, make_wheel(tmp_path / "2", {"demo_pkg/__init__.py": b""}, version="2.0")).returncode == 0
    assert not list((site(venv) / "demo_pkg" / "__pycache__").glob("old.*.pyc"))


def test_data_scripts_headers_and_entry_points_go_to_the_scheme_paths(tmp_path, venv):
    files = {
        "demo_pkg/__init__.py": b"",
        "demo_pkg/cli.py": b"import sys\ndef main():\n    print('cli', sys.argv[1:])\n    return 3\n",
        "demo_pkg-1.0.data/scripts/tool": b"#!python\nimport sys\nprint('tool', sys.executable)\n",
        "demo_pkg-1.0.data/scripts/plain.sh": b"#!/bin/sh\necho plain\n",
        "demo_pkg-1.0.data/data/share/demo/x.txt": b"data\n",
        "demo_pkg-1.0.data/headers/demo.h": b"int demo;\n",
        "demo_pkg-1.0.data/purelib/demo_extra.py": b"E = 1\n",
        "demo_pkg-1.0.dist-info/entry_points.txt":
            b"[console_scripts]\ndemo-cli = demo_pkg.cli:main\n[gui_scripts]\nDemo-Gui = demo_pkg.cli:main\n",
    }
    wheel = make_wheel(tmp_path / "d", files, purelib=False)
    res = install(venv, wheel)
    assert res.returncode == 0, res.stderr
    paths = sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)}, scheme="venv")
    python = str(venv / "bin" / "python")
    tool = venv / "bin" / "tool"
    assert tool.read_text().splitlines()[0] == f"#!{python}" and tool.stat().st_mode & 0o111
    assert subprocess.run([str(tool)], capture_output=True, text=True).stdout == f"tool {python}\n"
    assert subprocess.run([str(venv / "bin" / "plain.sh")], capture_output=True, text=True).stdout == "plain\n"
    cli = subprocess.run([str(venv / "bin" / "demo-cli"), "a"], capture_output=True, text=True)
    assert cli.returncode == 3 and cli.stdout == "cli ['a']\n", cli.stderr
    assert (venv / "bin" / "Demo-Gui").is_file()  # the name's case kept
    assert (venv / "share" / "demo" / "x.txt").read_bytes() == b"data\n"
    assert (venv / "include" / "site" / PY / "demo_pkg" / "demo.h").is_file()
    assert (Path(paths["platlib"]) / "demo_pkg" / "cli.py").is_file()  # Root-Is-Purelib: false
    assert (Path(paths["purelib"]) / "demo_extra.py").is_file()
    recorded = check_record(site(venv) / "demo_pkg-1.0.dist-info")
    assert {tool, venv / "bin" / "demo-cli", venv / "share" / "demo" / "x.txt"} <= recorded
    rows = record_rows(site(venv) / "demo_pkg-1.0.dist-info")
    assert [r[0] for r in rows if r[0].endswith("demo-cli")] == ["../../../bin/demo-cli"]
    assert pip(venv, "uninstall", "-y", "demo_pkg").returncode == 0
    assert not any(p.exists() for p in recorded)


GOOD = {"demo_pkg/__init__.py": b"V = 'new'\n", "demo_pkg/more.py": b""}


@pytest.mark.parametrize(("case", "member", "why"), [
    ("hash", "demo_pkg/more.py", "sha256 does not match RECORD"),
    ("size", "demo_pkg/more.py", "size 0 does not match RECORD (5)"),
    ("unrecorded", "demo_pkg/sneaky.py", "is not listed in RECORD"),
    ("nohash", "demo_pkg/more.py", "has no sha256 (or stronger) hash in RECORD"),
    ("dotdot", "demo_pkg/../../../evil.py", "'..'"),
    ("absolute", "/tmp/camit-wheelinst-evil.py", "absolute"),
    ("datakey", "demo_pkg-1.0.data/bin/x", "unknown demo_pkg-1.0.data/ folder"),
    ("version", "demo_pkg-1.0.dist-info/WHEEL", "Wheel-Version 2.0 is not supported"),
])
def test_a_bad_wheel_is_refused_with_one_line_and_nothing_changes(tmp_path, venv, case, member, why):
    old = make_wheel(tmp_path / "old", {"demo_pkg/__init__.py": b"V = 'old'\n"}, version="0.9")
    assert install(venv, old).returncode == 0
    before = {p: p.read_bytes() for p in venv.rglob("*") if p.is_file()}
    files, kw = dict(GOOD), dict[str, Any]()
    if case == "hash":
        kw["record"] = {member: f"{member},{record_digest(b'other')},0"}
    elif case == "size":
        kw["record"] = {member: f"{member},{record_digest(b'')},5"}
    elif case == "unrecorded":
        kw["unrecorded"] = {member: b"import os\n"}
    elif case == "nohash":
        kw["record"] = {member: f"{member},,"}
    elif case == "version":
        kw["wheel_version"] = "2.0"
    else:
        files[member] = b"x = 1\n"
    bad = make_wheel(tmp_path / "bad", files, **kw)
    res = install(venv, bad)
    assert res.returncode == 2, res
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wheelinst: {bad.name} refused, nothing installed: "), lines
    assert member in lines[0] and why in lines[0], lines[0]
    after = {p: p.read_bytes() for p in venv.rglob("*") if p.is_file()}
    assert after == before, "a refused wheel changed the venv"
    assert not Path("/tmp/camit-wheelinst-evil.py").exists() and not (tmp_path / "evil.py").exists()
    assert py(venv, "import demo_pkg; print(demo_pkg.V)").stdout == "old\n"


def test_not_a_wheel_and_no_compile(tmp_path, venv):
    junk = tmp_path / "junk.whl"
    junk.write_bytes(b"not a zip")
    res = install(venv, junk)
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1 and "not a readable zip file" in res.stderr
    wheel = make_wheel(tmp_path / "d", dict(GOOD))
    assert install(venv, wheel, "--no-compile").returncode == 0
    assert not (site(venv) / "demo_pkg" / "__pycache__").exists()
    assert py(venv, "import demo_pkg; print(demo_pkg.V)").stdout == "new\n"


def test_a_staging_folder_left_by_a_killed_installer_is_swept(tmp_path, venv):
    left = site(venv) / ".camit-wheelinst-999999999"  # above any pid_max: no such process
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "0").write_bytes(b"half")
    assert install(venv, make_wheel(tmp_path / "d", dict(GOOD))).returncode == 0
    assert not left.exists()
    assert not list(site(venv).glob(".camit-wheelinst-*"))


def test_with_sha256_the_open_wheel_is_hashed_first_and_a_mismatch_installs_nothing(tmp_path, venv):
    """``--sha256``: the installer checks the staged wheel itself (deploy no longer runs ``sha256sum`` on it
    first); a wheel that is not the named one ends it with exit 3 and one line before anything is read."""
    import hashlib

    old = make_wheel(tmp_path / "old", {"demo_pkg/__init__.py": b"V = 'old'\n"}, version="0.9")
    assert install(venv, old).returncode == 0
    before = {p: p.read_bytes() for p in venv.rglob("*") if p.is_file()}
    wheel = make_wheel(tmp_path / "d", dict(GOOD))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    other = hashlib.sha256(b"another wheel").hexdigest()
    res = install(venv, wheel, "--sha256", other)
    assert res.returncode == 3, res
    assert res.stderr.splitlines() == [f"wheelinst: {wheel} does not match its sha256 {other[:12]}: not installed"]
    assert {p: p.read_bytes() for p in venv.rglob("*") if p.is_file()} == before
    # a symlink at the wheel's path is not followed, even to the right content
    link = tmp_path / "link" / wheel.name
    link.parent.mkdir()
    link.symlink_to(wheel)
    res = install(venv, link, "--sha256", sha)
    assert res.returncode == 1 and "installing" in res.stderr and "failed" in res.stderr, res
    assert {p: p.read_bytes() for p in venv.rglob("*") if p.is_file()} == before
    assert install(venv, wheel, "--sha256", "not-hex").returncode == 2  # a malformed digest is a usage error
    res = install(venv, wheel, "--sha256", sha.upper())
    assert res.returncode == 0, res
    assert py(venv, "import demo_pkg; print(demo_pkg.V)").stdout == "new\n"
