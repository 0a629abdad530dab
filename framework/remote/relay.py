#!/usr/bin/env python3
"""camit relay: receive one artifact, write it, and forward the same stream to the next host.

Shipped to the hosts by ``framework.deploy``; standard library only (runs on the
host's base python). One process per host and artifact:

    relay.py --out PATH --sha256 HEX --size N [--listen IP] [--deadline S]

Protocol on stdin (lines, then — for the head of the chain — the raw bytes):

    NEXT <ip> <port> <token>     or   NEXT -          where to forward (token for the next hop)
    TOKEN <token>                (listeners only)     the one-time token the upstream must send
    <size raw bytes>             (head only)          the artifact itself

A listener binds ``IP:0`` and prints ``PORT <n>`` first; it keeps accepting until a
connection's first line is its one-time token (compared in constant time) or the
deadline passes: a connection that sends anything else, nothing within
``TOKEN_WAIT`` seconds or more than a line is closed unread (a stray local user can
neither end the hop nor get data; nothing is ever sent upstream). Idle connections cannot
crowd out the upstream: past ``MAX_PENDING`` waiting (``MAX_PER_PEER`` from one address)
the oldest one is closed, never the newcomer. Then it reads
``size`` bytes. Every byte read is written to a fresh file created exclusively
(``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600, ``PATH.part-<random>``: a symlink planted
at any name is never followed) and sent on to the next hop at the same time (a
pipeline, not store-and-forward). At the end the sha256 is checked, the file
renamed to PATH and ``<dir>/.ok`` written (the same way), and the relay prints
``OK <sha256>``; otherwise ``ERR <reason>`` and the partial file is removed. A
failed next hop never stops the local write: it prints ``NEXT-FAILED <reason>``
and carries on, so the controller can push directly to the hosts after it. Every
socket operation has a deadline (``IO_TIMEOUT``: a next hop that stops reading is
dropped as failed), and the process exits at ``--deadline`` seconds whatever happens.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import select
import signal
import socket
import sys
import time
from typing import BinaryIO

CHUNK = 1 << 20
#: seconds a connection to a listener has to send its token line
TOKEN_WAIT = 10.0
#: seconds any single socket operation may take (connect, sendall, recv)
IO_TIMEOUT = 60.0
#: connections waiting for their token line at once (past it, the oldest that sent nothing is closed)
MAX_PENDING = 16
#: connections from one address waiting for their token line at once (past it, that address's oldest is closed)
MAX_PER_PEER = 4

# the protocol's words (framework.remote.protocol; this file ships alone, a unit test keeps them equal)
NEXT = "NEXT"
NEXT_NONE = "-"
TOKEN = "TOKEN"
PORT = "PORT"
OK = "OK"
ERR = "ERR"
NEXT_FAILED = "NEXT-FAILED"


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def read_line(stream: BinaryIO) -> str:
    raw = stream.readline(4096)
    return raw.decode("ascii", errors="replace").strip()


def connect_next(nxt: list[str]) -> socket.socket | None:
    """The next host's relay (``NEXT <ip> <port> <token>``), sent its token; None (said) when it cannot be reached."""
    try:
        downstream = socket.create_connection((nxt[1], int(nxt[2])), timeout=10)
        downstream.settimeout(IO_TIMEOUT)
        downstream.sendall(nxt[3].encode() + b"\n")
    except OSError as exc:
        say(f"{NEXT_FAILED} connect {nxt[1]}:{nxt[2]}: {exc}")
        return None
    return downstream


def forward(downstream: socket.socket | None, block: bytes) -> socket.socket | None:
    """``block`` on to the next host; None (said, closed) from the first failed send on."""
    if downstream is None:
        return None
    try:
        downstream.sendall(block)
    except OSError as exc:
        say(f"{NEXT_FAILED} send: {exc}")
        downstream.close()
        return None
    return downstream


def copy(source: BinaryIO, fh: BinaryIO, size: int, downstream: socket.socket | None,
         digest: hashlib._Hash) -> socket.socket | None:
    """``size`` bytes from ``source`` into ``fh`` and the digest (and on downstream while it takes them)."""
    remaining = size
    while remaining > 0:
        block = source.read(min(CHUNK, remaining))
        if not block:
            raise OSError(f"stream ended {remaining} bytes early")
        remaining -= len(block)
        downstream = forward(downstream, block)
        fh.write(block)
        digest.update(block)
    return downstream


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sha256", required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--listen", default=None)
    ap.add_argument("--deadline", type=float, default=600.0)
    args = ap.parse_args()
    global _PART

    def expire(*_: object) -> None:
        say(f"{ERR} deadline reached")
        _cleanup(args.out)
        os._exit(3)

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, args.deadline)

    stdin: BinaryIO = sys.stdin.buffer
    server = None
    if args.listen:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((args.listen, 0))
        server.listen(MAX_PENDING)
        say(f"{PORT} {server.getsockname()[1]}")

    nxt = read_line(stdin).split()
    if not nxt or nxt[0] != NEXT:
        say(f"{ERR} protocol: expected {NEXT}")
        return 2
    my_token = None
    if server is not None:
        tok = read_line(stdin).split()
        if len(tok) != 2 or tok[0] != TOKEN:
            say(f"{ERR} protocol: expected {TOKEN}")
            return 2
        my_token = tok[1]

    downstream = connect_next(nxt) if len(nxt) == 4 else None

    if server is not None:
        assert my_token is not None
        conn = accept_peer(server, my_token.encode(), time.monotonic() + args.deadline)
        server.close()
        if conn is None:
            say(f"{ERR} no upstream with the token arrived")
            return 2
        conn.settimeout(IO_TIMEOUT)
        source: BinaryIO = conn.makefile("rb")
    else:
        source = stdin

    out_dir = os.path.dirname(args.out) or "."
    os.makedirs(out_dir, mode=0o700, exist_ok=True)
    try:
        part, fd = exclusive_file(args.out + ".part")
    except OSError as exc:
        say(f"{ERR} cannot create the partial file: {exc}")
        return 1
    _PART = part
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as fh:
            downstream = copy(source, fh, args.size, downstream, digest)
    except OSError as exc:
        say(f"{ERR} {exc}")
        _cleanup(args.out)
        return 1
    finally:
        if downstream is not None:
            try:
                downstream.shutdown(socket.SHUT_WR)
                downstream.close()
            except OSError:
                pass
    if digest.hexdigest() != args.sha256:
        say(f"{ERR} sha256 mismatch: expected {args.sha256}, got {digest.hexdigest()}")
        _cleanup(args.out)
        return 1
    os.replace(part, args.out)
    _PART = None
    ok_tmp, ok_fd = exclusive_file(os.path.join(out_dir, ".ok"))
    with os.fdopen(ok_fd, "w") as ok_file:
        ok_file.write(args.sha256 + "\n")
    os.replace(ok_tmp, os.path.join(out_dir, ".ok"))
    say(f"{OK} {args.sha256}")
    return 0


#: the partial file being written (removed on failure and at the deadline)
_PART: str | None = None


def exclusive_file(base: str) -> tuple[str, int]:
    """A new file ``<base>-<random>`` created exclusively, never through a symlink (mode 0600): (path, fd)."""
    for _ in range(100):
        path = f"{base}-{os.urandom(6).hex()}"
        try:
            return path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for {base}-*")


def accept_peer(server: socket.socket, token: bytes, deadline: float) -> socket.socket | None:
    """The first connection whose first line is ``token`` (None at ``deadline``); every other is closed unread.

    Connections are served together (``select``): a stray one that says nothing holds nobody up.
    """
    server.setblocking(False)
    pending: dict[socket.socket, tuple[bytes, float, str]] = {}  # what it sent, since, from
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                return None
            for c, (_buf, since, _peer) in list(pending.items()):
                if now - since > TOKEN_WAIT:
                    _drop(pending, c, "sent no token in time")
            ready, _, _ = select.select([server, *pending], [], [], min(1.0, deadline - now))
            for r in ready:
                if r is server:
                    _accept_one(server, pending)
                    continue
                found = _read_token(r, pending, token)
                if found:
                    pending.pop(r)
                    r.setblocking(True)
                    return r
    finally:
        for c in list(pending):
            _drop(pending, c, "")


def _accept_one(server: socket.socket, pending: dict[socket.socket, tuple[bytes, float, str]]) -> None:
    """Take the new connection; past :data:`MAX_PER_PEER` from its address, or :data:`MAX_PENDING` in all,
    the oldest one (of that address; in all: one that sent nothing first) goes, never the newcomer: idle
    connections cannot crowd out the upstream, which sends its token at once."""
    try:
        conn, peer = server.accept()
    except OSError:
        return
    conn.setblocking(False)
    address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
    pending[conn] = (b"", time.monotonic(), address)
    same = [c for c, (_b, _t, a) in pending.items() if a == address]
    if len(same) > MAX_PER_PEER:
        _drop(pending, same[0], "was the oldest of too many from one address")
    if len(pending) > MAX_PENDING:
        idle = [c for c, (b, _t, _a) in pending.items() if not b] or list(pending)
        _drop(pending, idle[0], "was the oldest of too many connections")


def _read_token(conn: socket.socket, pending: dict[socket.socket, tuple[bytes, float, str]], token: bytes) -> bool:
    """Read what ``conn`` sent so far (byte by byte up to the newline: no data past the token is taken);
    True when its line is ``token``. A wrong line, EOF or an over-long line drops it."""
    buf, since, peer = pending[conn]
    try:
        while True:
            b = conn.recv(1)
            if not b:
                _drop(pending, conn, "closed before its token")
                return False
            if b == b"\n":
                if hmac.compare_digest(buf.strip(), token):
                    return True
                _drop(pending, conn, "sent a wrong token")
                return False
            buf += b
            if len(buf) > 4096:
                _drop(pending, conn, "sent an over-long line")
                return False
    except BlockingIOError:
        pending[conn] = (buf, since, peer)
        return False
    except OSError:
        _drop(pending, conn, "failed before its token")
        return False


def _drop(pending: dict[socket.socket, tuple[bytes, float, str]], conn: socket.socket, why: str) -> None:
    pending.pop(conn, None)
    if why:
        sys.stderr.write(f"relay: dropped a connection that {why}\n")
        sys.stderr.flush()
    try:
        conn.close()
    except OSError:
        pass


def _cleanup(out: str) -> None:
    if _PART is not None:
        try:
            os.unlink(_PART)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
