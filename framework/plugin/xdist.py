"""pytest-xdist scheduling for cluster suites: deal the first tests out like cards.

xdist's ``load`` scheduler starts each worker on a *consecutive* chunk of the collection (at least two
tests: a worker runs a test only once it knows the next one). The plugin sorts the tests that launch
across the cluster first, the largest world first, so with two launches in a run both went to the first
worker's hosts and the second worker ran the cheap checks beside it, then idled: the launches ran one
after the other on one half of the cluster. ``ClusterScheduling`` hands the first chunk out in turns,
one test per worker per round, so the heaviest tests start at once, one on each worker's host share.
Everything after the first hand-out is xdist's own (``check_schedule``: whoever is free takes the next).
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScheduling


class ClusterScheduling(LoadScheduling):
    """``LoadScheduling`` whose initial distribution deals round-robin instead of in blocks."""

    def schedule(self) -> None:
        if self.collection is not None or not self._check_nodes_have_same_collection():
            # a rescheduling (a node added) or differing collections: xdist's own handling
            return super().schedule()
        self.collection = next(iter(self.node2collection.values()))
        self.pending[:] = range(len(self.collection))
        if not self.collection:
            return None
        if self.maxschedchunk is None:
            self.maxschedchunk = len(self.collection)
        nodes = self.nodes
        per_node = initial_chunk(len(self.collection), len(nodes), self.maxschedchunk)
        for _ in range(per_node):
            for node in nodes:
                self._send_tests(node, 1)
        if not self.pending:
            for node in nodes:
                node.shutdown()
        return None


def initial_chunk(tests: int, workers: int, maxschedchunk: int) -> int:
    """How many tests each worker gets in the first hand-out: xdist's own rule, kept as it is.

    Fewer than two tests per worker: all of them (in turns). Otherwise a quarter of a worker's share,
    at most ``maxschedchunk``, at least two.
    """
    if tests < 2 * workers:
        return -(-tests // workers)
    return max(min(tests // workers // 4, maxschedchunk), 2)


def make_scheduler(config: Any, log: Any) -> ClusterScheduling | None:
    """The scheduler for ``--dist load`` (what ``-n N`` means); other ``--dist`` modes stay xdist's."""
    if config.getvalue("dist") != "load":
        return None
    return ClusterScheduling(config, log)
