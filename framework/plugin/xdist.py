"""pytest-xdist for cluster suites: each worker's host share, the test order, and the first
hand-out.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling


class ClusterScheduling(LoadScheduling):
    """``LoadScheduling`` whose initial distribution deals round-robin instead of in blocks."""

    # set by LoadScheduling (untyped in xdist)
    collection: list[str] | None
    maxschedchunk: int | None

    def schedule(self) -> None:
        if self.collection is not None or not self._check_nodes_have_same_collection():
            # a rescheduling (a node added) or differing collections: xdist's own handling
            super().schedule()
            return
        collection: list[str] = next(iter(self.node2collection.values()))
        self.collection = collection
        self.pending[:] = range(len(collection))
        if collection:
            self._deal(len(collection))

    def _deal(self, tests: int) -> None:
        """The first hand-out of ``tests``: :func:`initial_chunk` to each node, one test at a
        time in turns; the nodes are shut down when none is left."""
        if self.maxschedchunk is None:
            self.maxschedchunk = tests
        nodes = self.nodes
        for _ in range(initial_chunk(tests, len(nodes), self.maxschedchunk)):
            for node in nodes:
                self._send_tests(node, 1)
        if not self.pending:
            for node in nodes:
                node.shutdown()


def initial_chunk(tests: int, workers: int, maxschedchunk: int) -> int:
    """How many tests each worker gets in the first hand-out: xdist's own rule, kept as it is.

    Fewer than two tests per worker: all of them (in turns). Otherwise a quarter of a worker's share,
    at most ``maxschedchunk``, at least two.
    """
    if tests < 2 * workers:
        return -(-tests // workers)
    return max(min(tests // workers // 4, maxschedchunk), 2)


def make_scheduler(config: pytest.Config, log: Any) -> ClusterScheduling | None:
    """The scheduler for ``--dist load`` (what ``-n N`` means); other ``--dist`` modes stay xdist's.

    ``log`` is xdist's own logger object (untyped in xdist).
    """
    if config.getvalue("dist") != "load":
        return None
    return ClusterScheduling(config, log)


def host_share(names: Sequence[str], worker: Mapping[str, object] | None) -> list[str]:
    """The hosts one process drives: every one of ``names``, or an xdist worker's contiguous share.

    ``worker`` is xdist's ``workerinput`` (``workerid`` ``gwK``, ``workercount``). The shares are as
    equal as they go, the first ones one host larger: five hosts and two workers give ``a,b,c`` and ``d,e``.
    """
    names = list(names)
    if worker is None:
        return names
    count = int(str(worker.get("workercount", 1)))
    index = int(str(worker.get("workerid", "gw0")).lstrip("gw") or 0)
    if count <= 1:
        return names
    if len(names) < count:
        raise pytest.UsageError(f"-n {count} needs at least {count} hosts in the env (one share per worker); "
                                f"it has {len(names)}")
    share, extra = divmod(len(names), count)
    start = index * share + min(index, extra)
    return names[start:start + share + (1 if index < extra else 0)]


class ShareBook:
    """The controller's hand-out of host shares to xdist workers, one per worker, a dead worker's to its replacement."""

    def __init__(self, names: Sequence[str], count: int) -> None:
        self.names = list(names)
        self.count = count
        self.held: dict[str, int] = {}  # worker id -> share index
        self.free: list[int] = []  # shares of dead workers, for their replacements

    def share(self, index: int) -> list[str]:
        return host_share(self.names, {"workerid": f"gw{index}", "workercount": self.count})

    def hand_out(self, worker_id: str) -> list[str]:
        """The share of a starting worker: its own (``gwK``, K below the count), else a dead worker's.

        Raises ``UsageError`` when the hosts are fewer than the workers (as :func:`host_share`).
        """
        digits = worker_id.lstrip("gw")
        index = int(digits) if digits.isdigit() else -1
        if not 0 <= index < self.count or index in self.held.values():
            if not self.free:
                raise pytest.UsageError(f"no host share left for xdist worker {worker_id}")
            index = self.free.pop(0)
        self.held[worker_id] = index
        return self.share(index)

    def give_back(self, worker_id: str) -> None:
        """A worker died: its share waits for the replacement xdist starts."""
        index = self.held.pop(worker_id, None)
        if index is not None:
            self.free.append(index)


def cluster_weight(item: pytest.Item, worlds: frozenset[int] | None) -> int:
    """How much of the cluster a test occupies: its world size (``ranks``), else its node count (``nodes``).

    A world ``--world-sizes`` leaves out weighs nothing: it is skipped at once, and sorted first it would
    take a worker's first turn in place of a real launch. Only what is the same on every worker counts
    (xdist refuses differing collections), so not the worker's own host share.
    """
    for name in ("ranks", "nodes"):
        m = item.get_closest_marker(name)
        if m and m.args:
            size = _size(m.args[0])
            return 0 if name == "ranks" and _left_out(size, worlds) else size
    return 0


def _size(value: Any) -> int:
    """A marker's size argument as a number; 0 when it is none."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _left_out(world: int, worlds: frozenset[int] | None) -> bool:
    """Whether ``--world-sizes`` (``worlds``; None: all) leaves the world size ``world`` out."""
    return worlds is not None and world not in worlds


def sort_for_workers(items: list[pytest.Item], worlds: frozenset[int] | None) -> None:
    """Tests that launch across the cluster first, the largest world first (stable: the same on every worker).

    xdist's default ``load`` scheduler sends each worker consecutive chunks of the collection; with the
    suite's many cheap per-host checks collected first and the launches last, every launch of a 16-host
    ``-n 2`` run landed on one worker's hosts while the other worker sat idle. Sorted, dealt one per
    worker at the start (:class:`ClusterScheduling`) and then handed out one at a time
    (``--maxschedchunk 1``, set in ``pytest_configure`` unless given), the launches go to whichever
    worker's host share is free, longest first.
    """
    items.sort(key=lambda item: -cluster_weight(item, worlds))
