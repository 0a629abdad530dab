"""The case's "test binary": -B ADDR serves one client, -S ADDR connects; -n messages each way; exit 0 on pass."""

import argparse
import socket
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-P", type=int, required=True)
    ap.add_argument("-B")
    ap.add_argument("-S")
    ap.add_argument("-d", default="")
    ap.add_argument("-n", type=int, default=3)
    args = ap.parse_args()
    if args.B:
        srv = socket.create_server((args.B, args.P))
        srv.settimeout(30)
        print(f"listening on {args.B}:{args.P} dev {args.d}", flush=True)
        conn, _ = srv.accept()
        with conn, conn.makefile("rwb") as f:
            for _ in range(args.n):
                line = f.readline()
                f.write(line)
                f.flush()
                print("echoed", line.decode().strip(), flush=True)
        return 0
    end = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((args.S, args.P), timeout=10)
            break
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)
    with conn, conn.makefile("rwb") as f:
        for i in range(args.n):
            f.write(f"msg{i}\n".encode())
            f.flush()
            if f.readline() != f"msg{i}\n".encode():
                print("echo mismatch", flush=True)
                return 1
            print("echo ok", i, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
