"""A torchrun target: all_to_all across every rank, checked; options make a rank fail on purpose.

    alltoall.py [--raise-rank R] [--segv-rank R] [--hang-rank R] [--sleep S]
"""

import argparse
import ctypes
import os
import sys
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--raise-rank", type=int, default=-1)
ap.add_argument("--segv-rank", type=int, default=-1)
ap.add_argument("--hang-rank", type=int, default=-1)
ap.add_argument("--sleep", type=float, default=0.0)
args = ap.parse_args()
if os.environ.get("CAMIT_TEST_DECOY"):
    # a process with exactly a worker's command line, started outside camit: must survive
    print("decoy", os.getpid(), flush=True)
    time.sleep(600)
    sys.exit(0)

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"rank {rank}/{world} on {os.uname().nodename} pid {os.getpid()}", flush=True)
send = torch.arange(world, dtype=torch.int64) + 100 * rank
recv = torch.empty(world, dtype=torch.int64)
dist.all_to_all_single(recv, send)
expected = torch.arange(world, dtype=torch.int64) * 100 + rank
assert torch.equal(recv, expected), (recv, expected)
print(f"rank {rank}: all_to_all ok {recv.tolist()}", flush=True)
if args.sleep:
    time.sleep(args.sleep)
if rank == args.raise_rank:
    raise RuntimeError(f"rank {rank} raising on purpose")
if rank == args.segv_rank:
    ctypes.string_at(0)
if rank == args.hang_rank:
    time.sleep(3600)
dist.barrier()
dist.destroy_process_group()
sys.exit(0)
