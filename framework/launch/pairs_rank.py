"""The rank program of ``camit check --pairs`` (run by torchrun, one rank per node): timed gloo
send/recv, one ``PAIRTIME <round> <a> <b> <seconds>`` line per round (the fastest round trip)."""

import sys
import time

import torch
import torch.distributed as dist


def partner(pairs: str, rank: int) -> int | None:
    for pair in pairs.split(","):
        a, b = (int(x) for x in pair.split("-"))
        if rank in (a, b):
            return b if rank == a else a
    return None


def exchange(buf: torch.Tensor, rank: int, peer: int) -> None:
    if rank < peer:
        dist.send(buf, peer)
        dist.recv(buf, peer)
    else:
        dist.recv(buf, peer)
        dist.send(buf, peer)


def main() -> int:
    schedule, size, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    buf = torch.zeros(max(1, size // 4), dtype=torch.float32)
    for rnd, pairs in enumerate(schedule.split(";")):
        peer = partner(pairs, rank)
        dist.barrier()
        if peer is None:
            continue
        exchange(buf, rank, peer)  # warm-up: the connection to this peer is made here
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            exchange(buf, rank, peer)
            times.append(time.perf_counter() - t0)
        if rank < peer:
            sys.stdout.write(f"PAIRTIME {rnd} {rank} {peer} {min(times):.6f}\n")
            sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
