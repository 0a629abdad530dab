"""The two-node smoke run of ``camit check --heal`` (run by torchrun on the hosts): one gloo
all_reduce whose every element must be ``world * (world + 1) / 2``."""

import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    t = torch.full((256 * 1024,), float(rank + 1))
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    ok = bool((t == want).all())
    verdict = "ok" if ok else "WRONG"
    sys.stdout.write(f"smoke: rank {rank}/{world} on {os.uname().nodename}: all_reduce {verdict}\n")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
