"""framework.samepath: the probe run by a real /bin/sh on real files (hostile names included); ``ship`` on a
host sharing this file system (``LocalTransport``: nothing written) and on hosts without the files or with
other ones (``FakeTransport``'s in-memory files: what is written, refused, taken away)."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from framework.commands import quote
from framework.errors import TransferError
from framework.hosts import Host
from framework.samepath import ancestors, files_of, parse_probe, probe_script, ship
from framework.testing import FakeTransport
from framework.transport.local import LocalTransport


def case(root: Path) -> Path:
    folder = root / "it's a $(touch PWNED) case"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "test.py").write_text("# the case\n")
    (folder / "echo app").write_text("#!/bin/sh\necho hi\n")
    (folder / "echo app").chmod(0o755)
    (folder / "__pycache__" / "test.cpython-311.pyc").write_bytes(b"\0")
    (folder / ".hidden").write_text("x")
    return folder


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_files_of_a_folder_leaves_out_byte_code_and_dot_names(tmp_path):
    folder = case(tmp_path)
    assert files_of(folder) == [folder / "echo app", folder / "test.py"]
    assert files_of(folder / "test.py") == [folder / "test.py"]
    with pytest.raises(Exception, match="no such file or folder"):
        files_of(tmp_path / "absent")


def test_ancestors_top_down_without_the_root():
    assert ancestors("/tmp/ci/tests") == ["/tmp", "/tmp/ci", "/tmp/ci/tests"]
    assert ancestors("/") == []


def test_the_probe_reports_digests_and_the_topmost_missing_folder_quoting_every_path(tmp_path):
    folder = case(tmp_path)
    files = [str(folder / "echo app"), str(folder / "test.py"), str(folder / "missing")]
    absent = folder / "sub dir" / "deeper"
    folders = ancestors(str(absent))
    out = subprocess.run(["/bin/sh", "-c", probe_script(files, folders)], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout
    digests, top = parse_probe(out, files, folders)
    assert digests == {files[0]: sha(folder / "echo app"), files[1]: sha(folder / "test.py"), files[2]: None}
    assert top == str(folder / "sub dir")
    assert not list(tmp_path.rglob("PWNED"))  # the $(...) in the name is a name, never run
    out = subprocess.run(["/bin/sh", "-c", probe_script(files[:1], ancestors(str(folder)))], capture_output=True,
                         text=True, check=True).stdout
    assert parse_probe(out, files[:1], ancestors(str(folder)))[1] is None  # every folder there


def test_a_host_sharing_this_file_system_gets_nothing_written(tmp_path):
    folder = case(tmp_path)
    host = Host("host1", LocalTransport("host1"), command_timeout=30)
    shipment = ship(host, folder)
    assert shipment.written == [] and shipment.created is None
    assert shipment.kept == [str(folder / "echo app"), str(folder / "test.py")]
    shipment.remove()
    assert (folder / "test.py").read_text() == "# the case\n"  # removing takes away only what was written


def fake_host(probe_stdout: str, files: dict[str, bytes] | None = None) -> tuple[Host, FakeTransport]:
    fake = FakeTransport("host2", files=files)
    fake.on(re.compile(r"^i=0; for f in "), stdout=probe_stdout)
    fake.on(re.compile(r"^chmod "))
    fake.on(re.compile(r"^rm -rf -- "))
    return Host("host2", fake, command_timeout=30), fake


def test_a_host_without_the_folder_gets_each_file_with_its_mode_and_loses_the_folder_it_made(tmp_path):
    folder = case(tmp_path)
    app, test = str(folder / "echo app"), str(folder / "test.py")
    depth = len(ancestors(str(folder)))
    host, fake = fake_host(f"1 -\n2 -\n@@top {depth - 1}\n")  # the case's parent is missing there too
    shipment = ship(host, folder)
    assert fake.files == {app: (folder / "echo app").read_bytes(), test: b"# the case\n"}
    assert shipment.written == [app, test] and shipment.created == str(folder.parent)
    chmods = [c for c in fake.calls if c.startswith("chmod ")]
    assert sorted(chmods) == sorted([f"chmod 755 -- {quote(app)}", f"chmod 644 -- {quote(test)}"])
    shipment.remove()
    assert fake.calls[-1] == f"rm -rf -- {quote(str(folder.parent))}"


def test_a_file_there_with_other_content_is_refused_before_anything_is_written(tmp_path):
    folder = case(tmp_path)
    other = hashlib.sha256(b"another revision").hexdigest()
    host, fake = fake_host(f"1 {other}\n2 -\n")
    with pytest.raises(TransferError, match=rf"host2: .*echo app is there with other content \(sha256 {other} on the "
                                            rf"host, {sha(folder / 'echo app')} here\): not overwritten"):
        ship(host, folder)
    assert fake.files == {}
    assert not [c for c in fake.calls if not c.startswith("i=0; for f in ")]
