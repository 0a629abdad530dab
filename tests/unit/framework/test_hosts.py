"""Host and Cluster behaviour on the FakeTransport: no network."""

from __future__ import annotations

import re
import threading
import time

import pytest

from framework.commands import ShellScript
from framework.errors import (
    EXIT_FAILED,
    EXIT_INFRA,
    CommandFailed,
    CommandTimedOut,
    HostUnreachable,
    MultiHostError,
    TransferError,
)
from framework.hosts import Cluster, GroupResult, Host
from framework.result import Result
from framework.testing import FakeTransport


def make(name: str = "node1") -> tuple[Host, FakeTransport]:
    fake = FakeTransport(name)
    return Host(name, fake, command_timeout=5), fake


def test_run_returns_result_and_check_raises_with_host_command_rc_and_tail():
    host, fake = make()
    fake.on("hostname", stdout="node1\n").on("false", rc=3, stderr="boom\nlast words\n")
    assert host.run(ShellScript("hostname")).stdout == "node1\n"
    res = host.run(ShellScript("false"))
    assert res.rc == 3 and res.failed
    with pytest.raises(CommandFailed) as info:
        host.check(ShellScript("false"))
    err = info.value
    assert err.host == "node1" and err.result.rc == 3
    assert str(err).startswith("node1: exit status 3: false")
    assert "last words" in str(err)
    assert err.exit_code == EXIT_FAILED


def test_timeout_is_reported_as_timed_out_error():
    host, fake = make()
    fake.on(re.compile(r"^sleep"), timed_out=True)
    res = host.run(["sleep", "60"], timeout=2)
    assert res.timed_out and res.rc is None and not res.ok
    with pytest.raises(CommandTimedOut, match="timed out after 2s"):
        host.check(["sleep", "60"], timeout=2)


def test_unexpected_command_is_loud():
    host, _ = make()
    with pytest.raises(AssertionError, match="unexpected command"):
        host.run(ShellScript("rm -rf /"))


def test_broken_host_fails_fast_until_reset():
    host, fake = make()
    fake.connect_error = HostUnreachable("node1", "cannot connect to 10.0.0.1:22: connection refused")
    with pytest.raises(HostUnreachable):
        host.run(ShellScript("true"))
    fake.connect_error = None
    fake.on("true")
    with pytest.raises(HostUnreachable, match="connection refused"):
        host.run(ShellScript("true"))  # remembered: no second connect attempt
    assert fake.calls == []
    host.reset()
    assert host.run(ShellScript("true")).ok


def test_put_verifies_sha256_and_replaces_atomically(tmp_path):
    host, fake = make()
    src = tmp_path / "a b.bin"
    src.write_bytes(b"payload" * 1000)
    digest = host.put(src, "/w/dir/a b.bin")
    assert fake.files["/w/dir/a b.bin"] == src.read_bytes()
    assert not [p for p in fake.files if ".camit-part-" in p]
    back = tmp_path / "back.bin"
    assert host.get("/w/dir/a b.bin", back) == digest
    assert back.read_bytes() == src.read_bytes()


def test_corrupted_upload_is_detected_and_partial_file_removed(tmp_path):
    host, fake = make()
    src = tmp_path / "x"
    src.write_bytes(b"0123456789")
    fake.corrupt_next_put = True
    with pytest.raises(TransferError, match="sha256 mismatch"):
        host.put(src, "/w/x")
    assert fake.files == {}


def test_corrupted_download_is_detected(tmp_path, monkeypatch):
    host, fake = make()
    fake.files["/w/x"] = b"abc"
    orig_get = fake.get

    def bad_get(remote, local, **caps):
        orig_get(remote, local, **caps)
        local.write_bytes(b"abd")

    monkeypatch.setattr(fake, "get", bad_get)
    with pytest.raises(TransferError, match="sha256 mismatch after download"):
        host.get("/w/x", tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert list(tmp_path.iterdir()) == []


def _cluster(n: int, **kw) -> tuple[Cluster, dict[str, FakeTransport]]:
    fakes = {f"h{i}": FakeTransport(f"h{i}") for i in range(1, n + 1)}
    return Cluster([Host(n_, f, command_timeout=5) for n_, f in fakes.items()], **kw), fakes


def test_cluster_reports_every_host_and_never_stops_at_first_failure():
    cluster, fakes = _cluster(4)
    fakes["h1"].on("x", stdout="ok")
    fakes["h2"].connect_error = HostUnreachable("h2", "cannot connect to 10.0.0.2:22: connection refused")
    fakes["h3"].on("x", rc=1, stderr="bad")
    fakes["h4"].on("x", stdout="ok")
    group = cluster.run(ShellScript("x"))
    assert list(group) == ["h1", "h2", "h3", "h4"]
    assert set(group.succeeded) == {"h1", "h4"}
    assert set(group.failed) == {"h2", "h3"}
    with pytest.raises(MultiHostError) as info:
        group.raise_on_failure()
    text = str(info.value)
    assert text.splitlines()[0] == "2 of 4 hosts failed:"
    assert "h2: cannot connect to 10.0.0.2:22: connection refused" in text
    assert "h3: exit status 1: x" in text
    assert info.value.exit_code == EXIT_INFRA  # unreachable beats a failed command


def test_cluster_pool_is_bounded():
    cluster, fakes = _cluster(12, max_parallel=3)
    lock = threading.Lock()
    active = peak = 0

    def slow(_cmd: str) -> Result:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
        return Result("h", "slow", 0)

    for f in fakes.values():
        f.on("slow", handler=slow)
    assert cluster.run(ShellScript("slow")).ok
    assert peak == 3


def test_cluster_map_keeps_unexpected_exceptions_per_host():
    cluster, _ = _cluster(2)

    def fn(host: Host) -> str:
        if host.name == "h2":
            raise RuntimeError("bug")
        return host.name.upper()

    group = cluster.map(fn)
    assert group["h1"] == "H1"
    assert isinstance(group["h2"], RuntimeError)
    assert isinstance(group, GroupResult) and not group.ok


def test_cluster_selects_hosts():
    cluster, fakes = _cluster(3)
    fakes["h2"].on("x")
    assert list(cluster.run(ShellScript("x"), hosts=["h2"])) == ["h2"]
    assert fakes["h1"].calls == [] and fakes["h3"].calls == []


def test_the_pool_is_kept_between_calls_and_a_nested_map_cannot_deadlock():
    cluster, _ = _cluster(3, max_parallel=1)
    names = cluster.map(lambda h: threading.current_thread().name)
    again = cluster.map(lambda h: threading.current_thread().name)
    assert set(names.values()) == set(again.values()) and len(set(names.values())) == 1  # one kept thread
    # every pool thread busy (max_parallel 1) and the task maps again: it gets a pool of its own
    inner = cluster.map(lambda h: dict(cluster.map(lambda g: g.name)))
    assert all(v == {"h1": "h1", "h2": "h2", "h3": "h3"} for v in inner.values())
    cluster.close()
    assert cluster.map(lambda h: h.name).ok  # a closed cluster starts a new pool when used again
