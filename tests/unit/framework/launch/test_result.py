"""The launch record: what LaunchResult.to_json writes, LaunchResult.from_json reads back."""

from __future__ import annotations

import json

import pytest

from framework.launch.devices import HeldDevice
from framework.launch.result import LaunchResult, NodeResult, RankResult
from framework.launch.stacks import Frame, StackGroup


def full_record() -> LaunchResult:
    """Every field the record writes, set (``failure_tail`` is not written)."""
    node = NodeResult("node1", 0, exit_code=1, lost=None, left=[7], tree=[5, 7],
                      comm_env={"HCCL_CONNECT_TIMEOUT": "120"}, stacks=2)
    ranks = {0: RankResult(0, "node1", 0, log="node1/rank0.log"),
             1: RankResult(1, "node1", None, "SIGSEGV")}
    stack = (Frame("libc.so", 0, "poll"), Frame("/w/rank.py", 12, "wait"))
    return LaunchResult(
        "run-w2-ab12", {"node1": node}, ranks, 2, master="node1", duration=3.25,
        failure="rank 1 on node1 died of SIGSEGV", failure_kind="rank", failure_rank=1, failure_host="node1",
        cause="rank 1 on node1: Segfault", timed_out=False, teardown_seconds=0.5,
        held=[HeldDevice("node1", 0, 1, 7, "python", "run-w2-ab12")], notes=["cut"],
        stacks=[StackGroup(stack, [0, 1], {0: "node1", 1: "node1"})],
        test="suites/t.py::test_x", attempt=2, seq=1, retry_of="run-w2", port_try=2)


def test_a_written_record_reads_back_as_the_same_record():
    record = full_record()
    doc = json.loads(json.dumps(record.to_json()))
    assert LaunchResult.from_json(doc) == record
    where = LaunchResult.from_json(doc).stacks[0].where()
    assert where == "in poll (libc.so) from wait (rank.py:12)"


def test_an_older_record_gets_the_defaults_of_what_it_lacks():
    """No test, no stacks, a rank without its host, a node without its plan place: defaults, no
    error; a held device's entry without its pid is left out."""
    doc = {"world_size": 2, "failure": None, "nodes": {"node1": {"exit_code": 0}},
           "ranks": {"0": {"exit_code": 0}, "x": {"exit_code": 1}, "1": "not an object"},
           "stacks": ["not an object"],
           "held": [{"host": "node1", "npu": 0, "chip": 0, "pid": 3}, {"host": "node1"}],
           "written_by_a_newer_camit": True}
    record = LaunchResult.from_json(doc, launch_id="from-the-file-name")
    assert record.launch_id == "from-the-file-name"
    assert record.nodes == {"node1": NodeResult("node1", -1, exit_code=0)}
    assert record.ranks == {0: RankResult(0, "", 0)}
    assert (record.test, record.attempt, record.stacks, record.duration) == (None, None, [], 0.0)
    assert record.held == [HeldDevice("node1", 0, 0, 3)]


@pytest.mark.parametrize("doc", [[], "x", {"world_size": "2"}, {"world_size": True},
                                 {"launch_id": "a"}])
def test_a_document_without_an_integer_world_size_is_not_a_launch_record(doc):
    with pytest.raises(ValueError, match="not a launch record"):
        LaunchResult.from_json(doc)


def test_the_record_names_its_schema_and_a_newer_one_is_refused_by_name():
    """Written with ``schema``; a record without one (older camit) reads as schema 1; a newer camit's
    record is not guessed at."""
    doc = full_record().to_json()
    assert doc["schema"] == 1
    del doc["schema"]
    assert LaunchResult.from_json(doc) == full_record()
    for schema in (2, "1"):
        with pytest.raises(ValueError, match=f"launch record schema {schema!r}: this camit reads schema 1"):
            LaunchResult.from_json({**doc, "schema": schema})
