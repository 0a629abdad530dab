"""framework.samepath: the probe run by a real /bin/sh on real files (hostile names included); ``ship`` on a
host sharing this file system (``LocalTransport``: nothing written) and on hosts without the files or with
other ones (``FakeTransport``'s in-memory files: what is written, refused, taken away)."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

from framework.commands import quote
from framework.errors import TransferError
from framework.hosts import Host
from framework.remote.layout import UNSAFE_RC, unsafe_reason
from framework.samepath import (
    ancestors,
    files_of,
    folders_of,
    mkdir_script,
    parse_made,
    parse_probe,
    probe_script,
    ship,
    tops,
)
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
    assert folders_of(["/t/a/x", "/t/a/b/y", "/t/c/z"]) == ["/t", "/t/a", "/t/c", "/t/a/b"]
    assert tops(["/t/a", "/t/a/b", "/t/c/d"]) == ["/t/a", "/t/c/d"]


def sh(script: str, cwd: Path) -> str:
    return subprocess.run(["/bin/sh", "-c", script], cwd=cwd, capture_output=True, text=True).stdout


def test_the_probe_reports_digests_and_the_missing_folders_quoting_every_path(tmp_path):
    folder = case(tmp_path)
    files = [str(folder / "echo app"), str(folder / "test.py"), str(folder / "sub dir" / "deeper" / "missing")]
    folders = folders_of(files)
    digests, missing = parse_probe(sh(probe_script(files, folders), tmp_path), files, folders)
    assert digests == {files[0]: sha(folder / "echo app"), files[1]: sha(folder / "test.py"), files[2]: None}
    assert missing == [str(folder / "sub dir"), str(folder / "sub dir" / "deeper")]
    assert tops(missing) == [str(folder / "sub dir")]
    assert not list(tmp_path.rglob("PWNED"))  # the $(...) in the name is a name, never run
    out = sh(probe_script(files[:1], ancestors(str(folder))), tmp_path)
    assert parse_probe(out, files[:1], ancestors(str(folder)))[1] == []  # every folder there


def local_host() -> Host:
    return Host("host1", LocalTransport("host1"), command_timeout=30)


def test_a_host_sharing_this_file_system_gets_nothing_written(tmp_path):
    folder = case(tmp_path)
    shipment = ship(local_host(), folder)
    assert shipment.written == [] and shipment.created == []
    assert shipment.kept == [str(folder / "echo app"), str(folder / "test.py")]
    shipment.remove()
    assert (folder / "test.py").read_text() == "# the case\n"  # removing takes away only what was written


def run_sh(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script], cwd=cwd, capture_output=True, text=True)


def test_missing_folders_are_made_one_level_at_a_time_0755(tmp_path):
    folders = [str(tmp_path / "a b"), str(tmp_path / "a b" / "c")]
    out = run_sh(mkdir_script(folders), tmp_path)
    assert out.returncode == 0 and parse_made(out.stdout, folders) == folders
    assert all(stat.S_IMODE(os.stat(d).st_mode) == 0o755 for d in folders)
    out = run_sh(mkdir_script(folders), tmp_path)  # there already: made by someone, so never used
    assert out.returncode == UNSAFE_RC and parse_made(out.stdout, folders) == []
    assert unsafe_reason(out.stdout) == f"{folders[0]}: could not be made (made by someone else meanwhile?)"


#: the review's co-tenant (security-review-3 #3): an unprivileged uid owning what camit would use
NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play the co-tenant's uid")
@pytest.mark.parametrize("plant", ["folder", "kept file", "writable folder"])
def test_a_tree_a_co_tenant_could_swap_is_refused_naming_host_and_path(tmp_path, plant):
    """Security review 3, #3 on this machine as the host (LocalTransport, the SSH user is root): the
    controller's path is there, but something on the way is not root's, so ship refuses before writing."""
    folder = case(tmp_path / "ci")
    shared = tmp_path / "ci"
    if plant == "folder":
        os.chown(shared, NOBODY, NOBODY)
        where, why = shared, f"is owned by uid {NOBODY} (not root or the SSH user, uid 0)"
    elif plant == "kept file":
        os.chown(folder / "test.py", NOBODY, NOBODY)
        where, why = folder / "test.py", f"is owned by uid {NOBODY}, not by the SSH user (uid 0)"
    else:
        shared.chmod(0o777)
        where, why = shared, "is writable by group/others (mode 777) without the sticky bit"
    with pytest.raises(TransferError) as err:
        ship(local_host(), folder)
    assert str(err.value) == f"host1: refusing to ship {folder}: {where}: {why}"
    assert not list(tmp_path.rglob("*.camit-part-*"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play the co-tenant's uid")
def test_a_co_tenants_symlink_on_the_way_is_refused_where_mkdir_p_would_follow_it(tmp_path):
    """A symlink a co-tenant planted at a folder the controller has as a real one: refused, nothing made
    behind it."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "ci").symlink_to(tmp_path / "elsewhere")
    os.lchown(tmp_path / "ci", NOBODY, NOBODY)
    files = [str(tmp_path / "ci" / "case" / "test.py")]
    out = run_sh(probe_script(files, folders_of(files)), tmp_path)
    assert out.returncode == UNSAFE_RC and unsafe_reason(out.stdout) == (
        f"{tmp_path / 'ci'}: is a symlink owned by uid {NOBODY} (not root)")
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play the co-tenant's uid")
@pytest.mark.parametrize("target", ["sound", "co-tenant's", "writable"])
def test_a_roots_symlinked_ancestor_is_followed_only_into_a_target_that_passes_the_guard(tmp_path, target):
    """A real cluster's ``/home -> /data/home``: a symlink root owns, in a folder that passes the guard, is
    accepted when every folder of its resolved target passes it too (the tree is made and shipped
    there); a target folder a co-tenant owns or may write is refused with one line naming host and path."""
    data = tmp_path / "data"
    (data / "home").mkdir(parents=True)
    (tmp_path / "home").symlink_to(data / "home")  # root's link (the test runs as root)
    if target == "co-tenant's":
        os.chown(data, NOBODY, NOBODY)
    elif target == "writable":
        data.chmod(0o777)
    there = tmp_path / "home" / "user" / "ci"
    files = [str(there / "case" / "test.py")]
    out = run_sh(probe_script(files, folders_of(files)), tmp_path)
    if target == "sound":
        assert out.returncode == 0, out.stdout + out.stderr
        missing = parse_probe(out.stdout, files, folders_of(files))[1]
        assert missing == [str(tmp_path / "home" / "user"), str(there), str(there / "case")]
        made = run_sh(mkdir_script(missing), tmp_path)
        assert made.returncode == 0 and (data / "home" / "user" / "ci" / "case").is_dir()
        return
    why = {"co-tenant's": f"is owned by uid {NOBODY} (not root or the SSH user, uid 0)",
           "writable": "is writable by group/others (mode 777) without the sticky bit"}[target]
    assert out.returncode == UNSAFE_RC and unsafe_reason(out.stdout) == f"{data}: {why}"
    assert list((data / "home").iterdir()) == []


def test_a_fifo_at_a_file_path_is_refused_at_once(tmp_path):
    """A FIFO where a shipped file goes once hung the probe until its timeout (``[ -f ]`` then a read)."""
    os.mkfifo(tmp_path / "test.py")
    files = [str(tmp_path / "test.py")]
    start = time.monotonic()
    out = subprocess.run(["/bin/sh", "-c", probe_script(files, folders_of(files))], capture_output=True,
                         text=True, timeout=20)
    assert out.returncode == UNSAFE_RC and unsafe_reason(out.stdout) == f"{files[0]}: is not a regular file"
    assert time.monotonic() - start < 5


def fake_host(probe_stdout: str, files: dict[str, bytes] | None = None,
              made: str = "") -> tuple[Host, FakeTransport]:
    fake = FakeTransport("host2", files=files)
    fake.on(re.compile(r"; i=0; for f in "), stdout=probe_stdout)
    fake.on(re.compile(r"; mkdir -m 0755 -- "), stdout=made)
    fake.on(re.compile(r"^chmod "))
    fake.on(re.compile(r"^rm -rf -- "))
    return Host("host2", fake, command_timeout=30), fake


def test_a_host_without_the_folder_gets_each_file_with_its_mode_and_loses_the_folder_it_made(tmp_path):
    folder = case(tmp_path)
    app, test = str(folder / "echo app"), str(folder / "test.py")
    depth = len(ancestors(str(folder)))
    # the case's parent is missing there too: both made, the parent is the top
    host, fake = fake_host(f"@@missing {depth - 1}\n@@missing {depth}\n1 -\n2 -\n", made="@@made 1\n@@made 2\n")
    shipment = ship(host, folder)
    assert fake.files == {app: (folder / "echo app").read_bytes(), test: b"# the case\n"}
    assert shipment.written == [app, test] and shipment.created == [str(folder.parent)]
    mkdir = [c for c in fake.calls if "; mkdir -m 0755 -- " in c]
    assert mkdir == [str(mkdir_script([str(folder.parent), str(folder)]))]
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
    assert not [c for c in fake.calls if "; i=0; for f in " not in c]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play the co-tenant's uid")
def test_ship_and_the_urma_tree_share_one_judgement_of_the_folders(tmp_path):
    """``ship`` and ``urma.tree.ship_tree`` judge and make the folders by one public step
    (``samepath.prepare``; only their upload differs): the same refusal line for a co-tenant's folder,
    the same kept files on a host that has the tree, and no private helper of samepath borrowed."""
    from framework.urma import tree

    folder = case(tmp_path / "ci")
    digests = {p: sha(p) for p in files_of(folder)}
    kept = ship(local_host(), folder).kept
    assert [s.kept for s in tree.ship_tree(local_host(), [folder], digests)] == [kept]
    os.chown(tmp_path / "ci", NOBODY, NOBODY)
    refusals = []
    for attempt in (lambda: ship(local_host(), folder), lambda: tree.ship_tree(local_host(), [folder], digests)):
        with pytest.raises(TransferError) as err:
            attempt()
        refusals.append(str(err.value))
    assert refusals == [f"host1: refusing to ship {folder}: {tmp_path / 'ci'}: is owned by uid {NOBODY} "
                        "(not root or the SSH user, uid 0)"] * 2
    assert not hasattr(tree, "_refuse") and "prepare" in vars(tree)
