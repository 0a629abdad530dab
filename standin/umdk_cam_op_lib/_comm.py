"""Process groups and row transport over torch.distributed (gloo) for the collective ops.

Design: docs/internals/standin.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

from ._assert import bind_assert, fail_assert, standin_limit


def group_name(group: ProcessGroup | None = None) -> str:
    """The `group_ep` string for `group` (default: WORLD) that the stand-in ops accept."""
    bind_assert(dist.is_available() and dist.is_initialized(), "dist.is_initialized()",
                "torch.distributed is not initialised")
    pg = dist.group.WORLD if group is None else group
    if pg is None or pg is dist.GroupMember.NON_GROUP_MEMBER:
        fail_assert("group is a member group", "this process is not a member of the group")
    return pg.group_name


def resolve_group(name: str) -> ProcessGroup:
    """The live ProcessGroup called `name` (see `group_name`); RuntimeError if there is none."""
    bind_assert(dist.is_available() and dist.is_initialized(), "dist.is_initialized()",
                f"group_ep '{name}': torch.distributed is not initialised")
    try:
        from torch.distributed.distributed_c10d import _resolve_process_group

        return _resolve_process_group(cast(Any, name))
    except Exception:  # noqa: BLE001 - private API: fall back to the public-ish name table
        pass
    for pg, pg_name in dist.distributed_c10d._world.pg_names.items():
        if pg_name == name:
            return pg
    fail_assert("group_ep names a process group",
                f"group_ep '{name}' does not name a process group of this process "
                "(pass umdk_cam_op_lib.group_name(group))")


def check_rank(group: ProcessGroup, rank: int, num_ranks: int, rank_arg: str = "rank",
               size_arg: str = "num_ranks") -> None:
    """The rank/size arguments must be this process's rank in, and the size of, the group."""
    standin_limit(num_ranks == group.size(), f"{size_arg}={num_ranks} but the group has {group.size()} ranks")
    standin_limit(rank == group.rank(), f"{rank_arg}={rank} but this process is rank {group.rank()} of the group")


def all_to_all_counts(send: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """Exchange equal-sized int64 blocks: row d of `send` (R, m) goes to rank d; row s of the result came
    from rank s."""
    send = send.to(torch.int64).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return recv


def exchange_rows(columns: Sequence[torch.Tensor], dest: torch.Tensor, group: ProcessGroup,
                  recv_counts: Sequence[int] | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Send row i of every column to rank `dest[i]`.

    Returns the received columns (same dtypes and trailing shapes) ordered by source rank, rows of one
    source in the order that source sent them, and the source rank of every received row. The receive
    counts are exchanged first unless `recv_counts` (rows from each source) is given.
    """
    world = group.size()
    n = int(dest.numel())
    dest = dest.to(torch.int64)
    order = torch.argsort(dest, stable=True)
    send_counts = torch.bincount(dest, minlength=world) if n else torch.zeros(world, dtype=torch.int64)
    if recv_counts is None:
        got = all_to_all_counts(send_counts.view(world, 1), group).view(world)
        recv_list = [int(c) for c in got]
    else:
        recv_list = [int(c) for c in recv_counts]
    total_in = sum(recv_list)

    trailing = [tuple(c.shape[1:]) for c in columns]
    widths = [int(torch.Size(t).numel()) * c.element_size() for t, c in zip(trailing, columns)]
    row_bytes = sum(widths)
    packed = torch.empty((n, row_bytes), dtype=torch.uint8)
    off = 0
    for col, width in zip(columns, widths):
        if width and n:
            packed[:, off:off + width] = col.contiguous().reshape(n, -1).view(torch.uint8)
        off += width
    packed = packed[order].contiguous()

    recv = torch.empty((total_in, row_bytes), dtype=torch.uint8)
    if row_bytes:
        dist.all_to_all_single(recv, packed, output_split_sizes=recv_list,
                               input_split_sizes=[int(c) for c in send_counts], group=group)
    out: list[torch.Tensor] = []
    off = 0
    for col, shape, width in zip(columns, trailing, widths):
        if width and total_in:
            # an explicit copy: with one row, .contiguous() keeps the slice's row stride (a size-1 dim
            # counts as contiguous) and the dtype view then fails on that rank alone (found by the fuzz)
            part = torch.empty((total_in, width), dtype=torch.uint8).copy_(recv[:, off:off + width])
            out.append(part.view(col.dtype).reshape((total_in, *shape)))
        else:
            out.append(torch.empty((total_in, *shape), dtype=col.dtype))
        off += width
    src = torch.repeat_interleave(torch.arange(world, dtype=torch.int64),
                                  torch.tensor(recv_list, dtype=torch.int64))
    return out, src
