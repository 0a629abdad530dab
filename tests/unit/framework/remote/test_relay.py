"""The relay program on loopback: a real three-hop pipeline, tokens, and a dead next hop."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from framework import remote

RELAY, _ = remote.script("relay.py")


def start(out: Path, data: bytes, listen: bool, sha: str | None = None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, str(RELAY), "--out", str(out), "--sha256", sha or hashlib.sha256(data).hexdigest(),
            "--size", str(len(data)), "--deadline", "30"]
    if listen:
        argv += ["--listen", "127.0.0.1"]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def send(p: subprocess.Popen[bytes], data: bytes) -> None:
    """``data`` on the relay's stdin, then its end."""
    assert p.stdin is not None
    p.stdin.write(data)
    p.stdin.close()


def port_of(p: subprocess.Popen[bytes]) -> int:
    assert p.stdout is not None
    line = p.stdout.readline().decode()
    assert line.startswith("PORT "), line
    return int(line.split()[1])


def finish(p: subprocess.Popen[bytes]) -> str:
    assert p.stdout is not None
    out = p.stdout.read()
    p.wait(30)
    p.stdout.close()
    return out.decode()


def test_three_hop_pipeline_writes_and_verifies_everywhere(tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    sha = hashlib.sha256(data).hexdigest()
    outs = [tmp_path / f"h{i}" / "a b.bin" for i in range(3)]
    l2 = start(outs[2], data, True)
    l1 = start(outs[1], data, True)
    p2, p1 = port_of(l2), port_of(l1)
    send(l2, b"NEXT -\nTOKEN t2\n")
    send(l1, f"NEXT 127.0.0.1 {p2} t2\nTOKEN t1\n".encode())
    head = start(outs[0], data, False)
    send(head, f"NEXT 127.0.0.1 {p1} t1\n".encode() + data)
    for p in (head, l1, l2):
        assert f"OK {sha}" in finish(p)
    for out in outs:
        assert out.read_bytes() == data
        assert (out.parent / ".ok").read_text().strip() == sha
        assert not Path(str(out) + ".part").exists()


def test_wrong_token_is_dropped_unread_and_the_real_peer_still_served(tmp_path):
    """A connection with a wrong token (a stray local user) is closed without data; the listener keeps
    listening and the upstream with the token delivers (issue 17: the first connection no longer wins)."""
    import socket

    data = b"payload" * 1000
    listener = start(tmp_path / "l" / "x", data, True)
    port = port_of(listener)
    send(listener, b"NEXT -\nTOKEN right\n")
    silent = socket.create_connection(("127.0.0.1", port))  # says nothing at all
    stray = socket.create_connection(("127.0.0.1", port))
    stray.sendall(b"wrong\n" + b"evil" * 100)
    stray.settimeout(10)
    try:
        got = stray.recv(100)
    except ConnectionResetError:  # closed with our bytes unread
        got = b""
    assert got == b""  # closed, nothing sent back
    stray.close()
    head = start(tmp_path / "h" / "x", data, False)
    send(head, f"NEXT 127.0.0.1 {port} right\n".encode() + data)
    assert "OK " in finish(head) and "OK " in finish(listener)
    assert (tmp_path / "l" / "x").read_bytes() == data
    silent.close()


def test_a_listener_without_its_peer_ends_at_the_deadline(tmp_path):
    import hashlib as h

    data = b"x"
    argv = [sys.executable, str(RELAY), "--out", str(tmp_path / "x"), "--sha256", h.sha256(data).hexdigest(),
            "--size", "1", "--deadline", "3", "--listen", "127.0.0.1"]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    port_of(p)
    send(p, b"NEXT -\nTOKEN t\n")
    assert "ERR" in finish(p)
    assert not (tmp_path / "x").exists()


def test_a_symlink_planted_at_the_part_path_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "x.part").symlink_to(victim)
    data = b"new bytes" * 100
    head = start(tmp_path / "x", data, False)
    send(head, b"NEXT -\n" + data)
    assert "OK " in finish(head)
    assert victim.read_text() == "keep me"
    assert (tmp_path / "x").read_bytes() == data and not (tmp_path / "x").is_symlink()


def test_dead_next_hop_is_reported_and_local_copy_kept(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead_port = s.getsockname()[1]
    s.close()  # nothing listens there any more
    data = b"x" * 1000
    head = start(tmp_path / "x", data, False)
    send(head, f"NEXT 127.0.0.1 {dead_port} tok\n".encode() + data)
    out = finish(head)
    assert "NEXT-FAILED connect" in out and "OK " in out
    assert (tmp_path / "x").read_bytes() == data


def test_short_stream_or_bad_hash_leaves_no_partial_file(tmp_path):
    data = b"abc" * 100
    head = start(tmp_path / "x", data, False)
    send(head, b"NEXT -\n" + data[:-5])
    assert "ERR stream ended 5 bytes early" in finish(head)
    head = start(tmp_path / "y", data, False, sha="0" * 64)
    send(head, b"NEXT -\n" + data)
    assert "ERR sha256 mismatch" in finish(head)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_ok_marker_is_written_to_a_fresh_file_not_through_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / ".ok").symlink_to(victim)
    data = b"abc"
    head = start(tmp_path / "d" / "x", data, False)
    send(head, b"NEXT -\n" + data)
    assert "OK " in finish(head)
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "d" / ".ok").is_symlink()


def test_idle_local_connections_cannot_crowd_out_the_upstream(tmp_path):
    """Security review 3, #14 as ``relay_flood.py`` ran it: 16 idle local connections filled MAX_PENDING and
    the real upstream was dropped ("too many connections"). Now the oldest idle one goes, never the newcomer,
    and one address keeps at most MAX_PER_PEER waiting."""
    import socket

    data = b"payload" * 1000
    listener = start(tmp_path / "l" / "x", data, True)
    port = port_of(listener)
    send(listener, b"NEXT -\nTOKEN right\n")
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    try:
        head = start(tmp_path / "h" / "x", data, False)
        send(head, f"NEXT 127.0.0.1 {port} right\n".encode() + data)
        assert f"OK {hashlib.sha256(data).hexdigest()}" in finish(head)
        assert f"OK {hashlib.sha256(data).hexdigest()}" in finish(listener)
    finally:
        for s in idle:
            s.close()
    assert (tmp_path / "l" / "x").read_bytes() == data


def test_orders_out_of_protocol_end_with_one_err_line_and_exit_2(tmp_path):
    """No NEXT line first, or a listener without its TOKEN line: ``ERR protocol: ...``, exit 2."""
    head = start(tmp_path / "x", b"abc", False)
    head.stdin.write(b"HELLO\n")  # type: ignore[union-attr]
    head.stdin.close()  # type: ignore[union-attr]
    assert finish(head) == "ERR protocol: expected NEXT\n" and head.returncode == 2
    listener = start(tmp_path / "y", b"abc", True)
    port_of(listener)
    listener.stdin.write(b"NEXT -\nTOKEN\n")  # type: ignore[union-attr]
    listener.stdin.close()  # type: ignore[union-attr]
    assert finish(listener) == "ERR protocol: expected TOKEN\n" and listener.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []

