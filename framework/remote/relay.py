#!/usr/bin/env python3
"""camit relay: receive one artifact, write it, and forward the same stream to the next host.

Shipped to the hosts by ``framework.deploy``; standard library only. One process per host and
artifact: ``relay.py --out PATH --sha256 HEX --size N [--listen IP] [--deadline S]``.
Protocol and guarantees: docs/internals/remote-and-lab.md.
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
#: connections waiting for their token line at once
#: (past it, the oldest that sent nothing is closed)
MAX_PENDING = 16
#: connections from one address waiting for their token line at once
#: (past it, that address's oldest is closed)
MAX_PER_PEER = 4

# the protocol's words (framework.remote.protocol; this file ships alone,
# a unit test keeps them equal)
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
    """The next host's relay (``NEXT <ip> <port> <token>``), sent its token.

    None (said) when it cannot be reached.
    """
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
    """``size`` bytes from ``source`` into ``fh`` and the digest.

    And on downstream while it takes them.
    """
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


class Failure(Exception):
    """The relay cannot go on: it says ``ERR <message>`` and exits with ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sha256", required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--listen", default=None)
    ap.add_argument("--deadline", type=float, default=600.0)
    return ap.parse_args()


def arm_deadline(seconds: float) -> None:
    """At ``seconds`` the process says ERR, removes its partial file and exits 3."""

    def expire(*_: object) -> None:
        say(f"{ERR} deadline reached")
        _cleanup()
        os._exit(3)

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def listen(address: str) -> socket.socket:
    """A socket bound to ``address:0``, its port said first (``PORT <n>``)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, 0))
    server.listen(MAX_PENDING)
    say(f"{PORT} {server.getsockname()[1]}")
    return server


def read_orders(stdin: BinaryIO, listening: bool) -> tuple[list[str], bytes]:
    """The ``NEXT`` line's words and (listeners) the ``TOKEN`` the upstream must send."""
    nxt = read_line(stdin).split()
    if not nxt or nxt[0] != NEXT:
        raise Failure(2, f"protocol: expected {NEXT}")
    if not listening:
        return nxt, b""
    tok = read_line(stdin).split()
    if len(tok) != 2 or tok[0] != TOKEN:
        raise Failure(2, f"protocol: expected {TOKEN}")
    return nxt, tok[1].encode()


def upstream(server: socket.socket, token: bytes, seconds: float) -> BinaryIO:
    """The stream of the first connection that sends ``token`` within ``seconds``."""
    conn = accept_peer(server, token, time.monotonic() + seconds)
    server.close()
    if conn is None:
        raise Failure(2, "no upstream with the token arrived")
    conn.settimeout(IO_TIMEOUT)
    return conn.makefile("rb")


def receive(out: str, source: BinaryIO, size: int, downstream: socket.socket | None) -> str:
    """``size`` bytes into a new partial file beside ``out`` (and on downstream): its hex digest."""
    global _PART
    try:
        _PART, fd = exclusive_file(out + ".part")
    except OSError as exc:
        raise Failure(1, f"cannot create the partial file: {exc}") from exc
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as fh:
            downstream = copy(source, fh, size, downstream, digest)
    except OSError as exc:
        _cleanup()
        raise Failure(1, str(exc)) from exc
    finally:
        close_downstream(downstream)
    return digest.hexdigest()


def close_downstream(downstream: socket.socket | None) -> None:
    """Tell the next hop the stream is complete (errors are its own business now)."""
    if downstream is None:
        return
    try:
        downstream.shutdown(socket.SHUT_WR)
        downstream.close()
    except OSError:
        pass


def publish(out: str, sha256: str) -> None:
    """The verified partial file becomes ``out``; ``<dir>/.ok`` holds its sha256."""
    global _PART
    assert _PART is not None
    os.replace(_PART, out)
    _PART = None
    ok_path = os.path.join(os.path.dirname(out) or ".", ".ok")
    ok_tmp, ok_fd = exclusive_file(ok_path)
    with os.fdopen(ok_fd, "w") as ok_file:
        ok_file.write(sha256 + "\n")
    os.replace(ok_tmp, ok_path)


def relay(args: argparse.Namespace) -> None:
    """Read the orders, find the stream, write and forward it, verify, publish."""
    server = listen(args.listen) if args.listen else None
    stdin: BinaryIO = sys.stdin.buffer
    nxt, token = read_orders(stdin, server is not None)
    downstream = connect_next(nxt) if len(nxt) == 4 else None
    source = stdin if server is None else upstream(server, token, args.deadline)
    os.makedirs(os.path.dirname(args.out) or ".", mode=0o700, exist_ok=True)
    got = receive(args.out, source, args.size, downstream)
    if got != args.sha256:
        _cleanup()
        raise Failure(1, f"sha256 mismatch: expected {args.sha256}, got {got}")
    publish(args.out, args.sha256)


def main() -> int:
    args = parse_args()
    arm_deadline(args.deadline)
    try:
        relay(args)
    except Failure as exc:
        say(f"{ERR} {exc}")
        return exc.code
    say(f"{OK} {args.sha256}")
    return 0


#: the partial file being written (removed on failure and at the deadline)
_PART: str | None = None


def exclusive_file(base: str) -> tuple[str, int]:
    """A new file ``<base>-<random>``, created exclusively, never through a symlink (0600).

    Returns (path, fd).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        path = f"{base}-{os.urandom(6).hex()}"
        try:
            return path, os.open(path, flags, 0o600)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for {base}-*")


class Caller:
    """A connection waiting for its token line: what it sent, since when, from which address."""

    __slots__ = ("sent", "since", "address")

    def __init__(self, address: str) -> None:
        self.sent = b""
        self.since = time.monotonic()
        self.address = address


def accept_peer(server: socket.socket, token: bytes, deadline: float) -> socket.socket | None:
    """The first connection whose first line is ``token``; None at ``deadline``.

    Every other is closed unread. Connections are served together (``select``): a stray one that
    says nothing holds nobody up.
    """
    server.setblocking(False)
    pending: dict[socket.socket, Caller] = {}
    try:
        while time.monotonic() < deadline:
            _drop_slow(pending)
            wait = min(1.0, deadline - time.monotonic())
            ready, _, _ = select.select([server, *pending], [], [], max(wait, 0.0))
            found = _serve(server, ready, pending, token)
            if found is not None:
                return found
        return None
    finally:
        for c in list(pending):
            _drop(pending, c, "")


def _serve(server: socket.socket, ready: list[socket.socket], pending: dict[socket.socket, Caller],
           token: bytes) -> socket.socket | None:
    """Accept or read every ready socket; the connection that sent ``token``, if one did."""
    for r in ready:
        if r is server:
            _accept_one(server, pending)
        elif _read_token(r, pending, token):
            pending.pop(r)
            r.setblocking(True)
            return r
    return None


def _drop_slow(pending: dict[socket.socket, Caller]) -> None:
    """Close every connection that has not sent its token within :data:`TOKEN_WAIT`."""
    now = time.monotonic()
    for c, caller in list(pending.items()):
        if now - caller.since > TOKEN_WAIT:
            _drop(pending, c, "sent no token in time")


def _accept_one(server: socket.socket, pending: dict[socket.socket, Caller]) -> None:
    """Take the new connection; past the limits the oldest one goes, never the newcomer.

    Past :data:`MAX_PER_PEER` from its address that address's oldest goes; past :data:`MAX_PENDING`
    in all the oldest that sent nothing (or the oldest): idle connections cannot crowd out the
    upstream, which sends its token at once.
    """
    try:
        conn, peer = server.accept()
    except OSError:
        return
    conn.setblocking(False)
    pending[conn] = Caller(str(peer[0]))
    _make_room(pending, str(peer[0]))


def _make_room(pending: dict[socket.socket, Caller], address: str) -> None:
    """Close the oldest connection of ``address``, or of all, when there are too many."""
    same = [c for c, caller in pending.items() if caller.address == address]
    if len(same) > MAX_PER_PEER:
        _drop(pending, same[0], "was the oldest of too many from one address")
    if len(pending) > MAX_PENDING:
        _drop(pending, _oldest_idle(pending), "was the oldest of too many connections")


def _oldest_idle(pending: dict[socket.socket, Caller]) -> socket.socket:
    """The oldest connection that sent nothing yet, else the oldest."""
    idle = [c for c, caller in pending.items() if not caller.sent]
    return idle[0] if idle else next(iter(pending))


def _read_token(conn: socket.socket, pending: dict[socket.socket, Caller], token: bytes) -> bool:
    """Read what ``conn`` sent so far (byte by byte); True when its line is ``token``.

    No data past the token is taken. A wrong line, EOF or an over-long line drops it.
    """
    caller = pending[conn]
    try:
        why = _read_line_of(conn, caller, token)
    except BlockingIOError:
        return False
    except OSError:
        why = "failed before its token"
    if why:
        _drop(pending, conn, why)
    return not why


def _read_line_of(conn: socket.socket, caller: Caller, token: bytes) -> str:
    """Read the caller's line on: "" when it is ``token``, else why it is dropped.

    Raises BlockingIOError when the line is not complete yet (what came is kept in ``caller``).
    """
    while True:
        b = conn.recv(1)
        if not b:
            return "closed before its token"
        if b == b"\n":
            return "" if hmac.compare_digest(caller.sent.strip(), token) else "sent a wrong token"
        caller.sent += b
        if len(caller.sent) > 4096:
            return "sent an over-long line"


def _drop(pending: dict[socket.socket, Caller], conn: socket.socket, why: str) -> None:
    pending.pop(conn, None)
    if why:
        sys.stderr.write(f"relay: dropped a connection that {why}\n")
        sys.stderr.flush()
    try:
        conn.close()
    except OSError:
        pass


def _cleanup() -> None:
    """Remove the partial file, if one is being written."""
    if _PART is not None:
        try:
            os.unlink(_PART)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
