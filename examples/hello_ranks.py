"""A first torchrun target for ``camit run``: each rank says where it runs (stdlib only)."""

import os
import socket

rank, world = os.environ["RANK"], os.environ["WORLD_SIZE"]
node = os.environ.get("GROUP_RANK", "?")
print(
    f"rank {rank} of {world} on {socket.gethostname()}"
    f" (node {node}, local rank {os.environ['LOCAL_RANK']})"
)
