"""The -n scheduler: the first hand-out deals tests one per worker in turns; the rest is xdist's. Host shares."""

from __future__ import annotations

from typing import cast

import pytest
from xdist.scheduler import LoadScheduling

from framework.plugin.xdist import (
    ClusterScheduling,
    ShareBook,
    cluster_weight,
    host_share,
    initial_chunk,
    make_scheduler,
)
from tests.support.plugin_run import MarkedItem


class Config:
    def __init__(self, workers: int, maxschedchunk: int | None = 1, dist: str = "load") -> None:
        self.values = {"tx": [f"{workers}*popen"], "dist": dist, "maxschedchunk": maxschedchunk}

    def getvalue(self, name: str):
        return self.values[name]

    getoption = getvalue


class Node:
    def __init__(self, name: str) -> None:
        self.name, self.shutting_down, self.stopped = name, False, False
        self.sent: list[int] = []
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indices) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = self.stopped = True


def config(workers: int, maxschedchunk: int | None = 1, dist: str = "load") -> pytest.Config:
    """The stand-in as the pytest.Config the scheduler reads (getvalue/getoption only)."""
    return cast(pytest.Config, Config(workers, maxschedchunk, dist))


def start(cls, tests: int, workers: int, maxschedchunk: int | None = 1):
    sched = cls(config(workers, maxschedchunk))
    nodes = [Node(f"gw{i}") for i in range(workers)]
    collection = [f"t{i}" for i in range(tests)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, collection)
    sched.schedule()
    return sched, nodes


def test_the_heaviest_tests_start_on_different_workers():
    # the collection is sorted heaviest first: t0 and t1 are the two launches
    sched, (a, b) = start(ClusterScheduling, tests=12, workers=2)
    assert a.sent == [0, 2] and b.sent == [1, 3]
    # xdist's own scheduler gives both to the first worker; this is what the class is for
    _, (xa, xb) = start(LoadScheduling, tests=12, workers=2)
    assert xa.sent == [0, 1] and xb.sent == [2, 3]


def test_after_the_first_hand_out_whoever_is_free_takes_the_next():
    sched, (a, b) = start(ClusterScheduling, tests=12, workers=2)
    sched.mark_test_complete(b, 1, duration=0.01)
    assert b.sent == [1, 3, 4]
    sched.mark_test_complete(a, 0, duration=0.01)
    assert a.sent == [0, 2, 5]


@pytest.mark.parametrize("tests,workers", [(3, 2), (1, 2), (5, 4), (5, 3)])
def test_fewer_than_two_tests_a_worker_all_go_out_in_turns_and_the_workers_stop(tests, workers):
    sched, nodes = start(ClusterScheduling, tests=tests, workers=workers)
    assert sorted(i for n in nodes for i in n.sent) == list(range(tests))
    assert [n.sent for n in nodes] == [list(range(k, tests, workers)) for k in range(workers)]
    assert all(n.stopped for n in nodes) and not sched.pending


@pytest.mark.parametrize("tests,workers,chunk,expect", [
    (12, 2, 1, 2), (400, 2, 1, 2), (400, 2, None, 50), (400, 2, 10, 10), (3, 2, 1, 2), (8, 4, 1, 2)])
def test_the_first_chunk_follows_xdists_rule(tests, workers, chunk, expect):
    assert initial_chunk(tests, workers, chunk if chunk is not None else tests) == expect
    sched, nodes = start(ClusterScheduling, tests=tests, workers=workers, maxschedchunk=chunk)
    assert [len(n.sent) for n in nodes] == [min(expect, len(range(k, tests, workers))) for k in range(workers)]


def test_an_empty_collection_sends_nothing():
    sched, nodes = start(ClusterScheduling, tests=0, workers=2)
    assert [n.sent for n in nodes] == [[], []]


def test_other_dist_modes_keep_xdists_scheduler():
    assert make_scheduler(config(2, dist="loadscope"), None) is None
    assert isinstance(make_scheduler(config(2), None), ClusterScheduling)


@pytest.mark.parametrize("hosts,workers,shares", [
    ("abcde", 2, ["abc", "de"]), ("abcd", 2, ["ab", "cd"]), ("abcdefg", 3, ["abc", "de", "fg"]), ("ab", 1, ["ab"])])
def test_host_shares_are_contiguous_disjoint_and_cover_every_host(hosts, workers, shares):
    got = ["".join(host_share(list(hosts), {"workerid": f"gw{i}", "workercount": workers})) for i in range(workers)]
    assert got == shares
    assert host_share(list(hosts), None) == list(hosts)  # no xdist: every host


def test_more_workers_than_hosts_is_a_usage_error():
    with pytest.raises(pytest.UsageError, match="-n 3 needs at least 3 hosts in the env"):
        host_share(["a", "b"], {"workerid": "gw0", "workercount": 3})



@pytest.mark.parametrize(("markers", "worlds", "weight"), [
    ({"ranks": (8,), "nodes": (2,)}, None, 8),  # the world size first
    ({"nodes": (2,)}, None, 2),
    ({"ranks": (8,)}, frozenset({4}), 0),  # a world --world-sizes leaves out is skipped at once
    ({"ranks": (4,)}, frozenset({4}), 4),
    ({"nodes": (3,)}, frozenset({4}), 3),  # --world-sizes judges worlds, not node counts
    ({"ranks": ("many",)}, None, 0),
    ({"ranks": ()}, None, 0),
    ({}, None, 0),
])
def test_cluster_weight(markers: dict[str, tuple[object, ...]], worlds: frozenset[int] | None,
                        weight: int) -> None:
    assert cluster_weight(cast(pytest.Item, MarkedItem(**markers)), worlds) == weight


def test_a_share_goes_to_its_worker_and_a_dead_workers_share_to_its_replacement() -> None:
    book = ShareBook(["a", "b", "c", "d", "e"], 2)
    assert (book.hand_out("gw0"), book.hand_out("gw1")) == (["a", "b", "c"], ["d", "e"])
    with pytest.raises(pytest.UsageError, match="no host share left for xdist worker gw2"):
        book.hand_out("gw2")
    book.give_back("gw1")
    assert book.hand_out("gw2") == ["d", "e"]
