"""RankSuite.ship: the local archive of the rank-side tree, when xdist workers share one run folder."""

from __future__ import annotations

import re
import subprocess
import tarfile
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from framework.hosts import Cluster, Host
from framework.launch.runner import Launcher
from framework.ranksuite.suite import RankSuite, sh_tree_digest, tree_archive, tree_digest
from framework.testing.fake import FakeTransport
from tests.support.builders import make_env


class HeldPut(FakeTransport):
    """A fake host whose upload starts only when ``go`` is set (a slow link, or a busy worker)."""

    def __init__(self, name: str, go: threading.Event) -> None:
        super().__init__(name)
        self.go = go

    def put(self, local: Path, remote: str, progress=None) -> None:
        assert self.go.wait(30)
        super().put(local, remote, progress)


def fake_host(transport: FakeTransport) -> FakeTransport:
    transport.on(re.compile(r"^\[ -f .*/\.ok \] && "), rc=1)  # not shipped yet
    transport.on(re.compile(r"tar xzf"))
    return transport


def suite(transport: FakeTransport, rundir: Path, tree: Path) -> RankSuite:
    env = make_env({transport.name: {"workdir": "/w"}})
    launcher = cast(Launcher, SimpleNamespace(rundir=SimpleNamespace(path=rundir)))  # the run folder is all it reads
    return RankSuite(env, Cluster([Host(transport.name, transport)]), launcher, tree=tree, slots=2)


def test_two_workers_ship_the_same_tree_from_one_run_folder_at_once(tmp_path):
    """Worker A's upload is still to start when worker B has shipped and cleaned up: A's archive is its own."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "test_x_rank.py").write_text("def test_x():\n    pass\n")
    rundir = tmp_path / "run"
    rundir.mkdir()
    go = threading.Event()
    slow = fake_host(HeldPut("host1", go))
    fast = fake_host(FakeTransport("host2"))
    box: dict[str, object] = {}
    a = threading.Thread(target=lambda: box.setdefault("a", suite(slow, rundir, tree).ship()))
    a.start()
    try:
        shipped_b = suite(fast, rundir, tree).ship()
    finally:
        go.set()
        a.join(30)
    assert box.get("a") == {"host1": shipped_b["host2"]}, box
    sha = shipped_b["host2"].rsplit("/", 1)[1]
    # both hosts got the same bytes, and no archive is left in the run folder
    assert slow.files[f"/w/suites/{sha}.tgz"] == fast.files[f"/w/suites/{sha}.tgz"]
    assert list(rundir.iterdir()) == []


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "pkg" / "sub dir").mkdir(parents=True)
    (tree / "test_x_rank.py").write_text("def test_x():\n    pass\n")
    (tree / "pkg" / "B.py").write_text("b = 1\n")
    (tree / "pkg" / "a.py").write_text("a = 1\n")
    (tree / "pkg" / "sub dir" / "c.txt").write_text("c\n")
    return tree


def test_the_host_digest_of_an_extracted_tree_is_the_shipped_one_and_changes_with_any_file(tmp_path):
    """sh_tree_digest run by a real sh over the extracted archive prints tree_digest of the archive."""
    data, _ = tree_archive(_tree(tmp_path))
    dest = tmp_path / "dest"
    dest.mkdir()
    (tmp_path / "t.tgz").write_bytes(data)
    with tarfile.open(tmp_path / "t.tgz") as tar:
        tar.extractall(dest, filter="data")
    (dest / ".ok").touch()

    def host_digest() -> str:
        return subprocess.run(["sh", "-c", sh_tree_digest(str(dest))], capture_output=True, text=True,
                              check=True).stdout.strip()

    assert host_digest() == tree_digest(data)
    (dest / "pkg" / "a.py").write_text("import os; os.system('touch /tmp/pwned')\n")
    assert host_digest() != tree_digest(data)
    (dest / "pkg" / "a.py").write_text("a = 1\n")
    assert host_digest() == tree_digest(data)
    (dest / "pkg" / "conftest.py").write_text("x = 1\n")  # a file added to the tree counts too
    assert host_digest() != tree_digest(data)


def test_a_shipped_tree_is_reused_only_when_it_hashes_as_shipped(tmp_path):
    tree = _tree(tmp_path)
    rundir = tmp_path / "run"
    rundir.mkdir()
    data, _ = tree_archive(tree)
    good = FakeTransport("host1").on(re.compile(r"^\[ -f .*/\.ok \] && "), stdout=tree_digest(data) + "\n")
    dest = suite(good, rundir, tree).ship()["host1"]
    assert f"{dest}.tgz" not in good.files and not any("tar xzf" in c for c in good.calls)
    tampered = FakeTransport("host1").on(re.compile(r"^\[ -f .*/\.ok \] && "), stdout="0" * 64 + "\n")
    tampered.on(re.compile(r"tar xzf"))
    assert suite(tampered, rundir, tree).ship()["host1"] == dest
    assert tampered.files[f"{dest}.tgz"] == data  # shipped again, into a fresh directory
    assert any(c.startswith(f"rm -rf {dest} && ") and "tar xzf" in c for c in tampered.calls), tampered.calls
