"""RankSuite.ship: the local archive of the rank-side tree, when xdist workers share one run folder."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from types import SimpleNamespace

from builders import make_env

from framework.hosts import Cluster, Host
from framework.suite import RankSuite
from framework.testing.fake import FakeTransport


class HeldPut(FakeTransport):
    """A fake host whose upload starts only when ``go`` is set (a slow link, or a busy worker)."""

    def __init__(self, name: str, go: threading.Event) -> None:
        super().__init__(name)
        self.go = go

    def put(self, local: Path, remote: str, progress=None) -> None:  # type: ignore[no-untyped-def]
        assert self.go.wait(30)
        super().put(local, remote, progress)


def fake_host(transport: FakeTransport) -> FakeTransport:
    transport.on(re.compile(r"^test -f .*/\.ok$"), rc=1)  # not shipped yet
    transport.on(re.compile(r"tar xzf"))
    return transport


def suite(transport: FakeTransport, rundir: Path, tree: Path) -> RankSuite:
    env = make_env({transport.name: {"workdir": "/w"}})
    launcher = SimpleNamespace(rundir=SimpleNamespace(path=rundir))
    return RankSuite(env, Cluster([Host(transport.name, transport)]), launcher, tree=tree, slots=2)  # type: ignore[arg-type]


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
