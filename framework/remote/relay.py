#!/usr/bin/env python3
"""camit relay: receive one artifact, write it, and forward the same stream to the next host.

Shipped to the hosts by ``framework.deploy``; standard library only (runs on the
host's base python). One process per host and artifact:

    relay.py --out PATH --sha256 HEX --size N [--listen IP] [--deadline S]

Protocol on stdin (lines, then — for the head of the chain — the raw bytes):

    NEXT <ip> <port> <token>     or   NEXT -          where to forward (token for the next hop)
    TOKEN <token>                (listeners only)     the one-time token the upstream must send
    <size raw bytes>             (head only)          the artifact itself

A listener binds ``IP:0`` and prints ``PORT <n>`` first; it accepts exactly one
connection whose first line is its token (compared in constant time), then reads
``size`` bytes. Every byte read is written to ``PATH.part`` and sent on to the
next hop at the same time (a pipeline, not store-and-forward). At the end the
sha256 is checked, the file renamed to PATH and ``<dir>/.ok`` written, and the
relay prints ``OK <sha256>``; otherwise ``ERR <reason>`` and the partial file is
removed. A failed next hop never stops the local write: it prints
``NEXT-FAILED <reason>`` and carries on, so the controller can push directly to
the hosts after it. The process exits at ``--deadline`` seconds whatever happens.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import signal
import socket
import sys
from typing import BinaryIO

CHUNK = 1 << 20

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sha256", required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--listen", default=None)
    ap.add_argument("--deadline", type=float, default=600.0)
    args = ap.parse_args()

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
        server.listen(1)
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

    downstream = None
    if len(nxt) == 4:
        try:
            downstream = socket.create_connection((nxt[1], int(nxt[2])), timeout=10)
            downstream.settimeout(60)
            downstream.sendall(nxt[3].encode() + b"\n")
        except OSError as exc:
            say(f"{NEXT_FAILED} connect {nxt[1]}:{nxt[2]}: {exc}")
            downstream = None

    if server is not None:
        conn, _peer = server.accept()
        server.close()
        conn.settimeout(60)
        source: BinaryIO = conn.makefile("rb")
        got = read_line(source)
        if not (my_token and hmac.compare_digest(got.encode(), my_token.encode())):
            say(f"{ERR} bad token from upstream")
            return 2
    else:
        source = stdin

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    part = args.out + ".part"
    digest = hashlib.sha256()
    remaining = args.size
    try:
        with open(part, "wb") as fh:
            while remaining > 0:
                block = source.read(min(CHUNK, remaining))
                if not block:
                    raise OSError(f"stream ended {remaining} bytes early")
                remaining -= len(block)
                if downstream is not None:
                    try:
                        downstream.sendall(block)
                    except OSError as exc:
                        say(f"{NEXT_FAILED} send: {exc}")
                        downstream.close()
                        downstream = None
                fh.write(block)
                digest.update(block)
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
    with open(os.path.join(os.path.dirname(args.out), ".ok"), "w") as ok_file:
        ok_file.write(args.sha256 + "\n")
    say(f"{OK} {args.sha256}")
    return 0


def _cleanup(out: str) -> None:
    try:
        os.unlink(out + ".part")
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
