"""What a launch came to: per rank, per node and for the whole launch (``launch-<id>.json``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeGuard, TypeVar

from framework.launch.devices import HeldDevice
from framework.launch.stacks import Frame, StackGroup
from framework.launch.stacks import summary as stack_summary

#: the launch record's format version (records written before it had none: read as 1)
SCHEMA = 1

_Row = TypeVar("_Row")


@dataclass
class RankResult:
    rank: int
    host: str
    exit_code: int | None = None
    signal: str | None = None
    log: str | None = None
    junit: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.signal is None

    def describe(self) -> str:
        if self.signal:
            return f"rank {self.rank} on {self.host} died of {self.signal}"
        if self.exit_code is None:
            return f"rank {self.rank} on {self.host} did not report (killed or lost)"
        return f"rank {self.rank} on {self.host} exited {self.exit_code}"


@dataclass
class NodeResult:
    host: str
    node_rank: int
    exit_code: int | None = None
    killed: str | None = None
    lost: str | None = None
    swept: int = 0
    duration: float = 0.0
    done: bool = False
    #: ranks asked for their Python stacks before the kill (None: not asked)
    stacks: int | None = None
    #: pids of the run alive after the supervisor's KILL (``LEFT``)
    left: list[int] = field(default_factory=list)
    #: every pid the node's process tree had (``TREE``)
    tree: list[int] = field(default_factory=list)
    #: the communication variables this node's ranks got (HCCL_*, GLOO_*, NCCL_*, the process-group timeout)
    comm_env: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchResult:
    launch_id: str
    nodes: dict[str, NodeResult]
    ranks: dict[int, RankResult]
    world_size: int
    master: str = ""
    duration: float = 0.0
    failure: str | None = None  # the first failure, as a sentence
    failure_kind: str | None = None  # rank | node | lost | timeout | interrupted | infra
    failure_tail: str = ""  # tail of the failed rank's log
    failure_rank: int | None = None  # the rank whose failure came first
    #: the host the first failure happened on: the failed rank's, the lost host, the torchrun that exited
    failure_host: str | None = None
    #: why, in a rank's own words: "rank 3 on host2: AssertionError: ..." (framework.launch.cause)
    cause: str | None = None
    timed_out: bool = False
    teardown_seconds: float | None = None
    report_dir: str | None = None
    #: NPUs a pid of this run still held when the bounded post-launch check gave up (framework.launch.devices)
    held: list[HeldDevice] = field(default_factory=list)
    #: what a fetch cap cut (host, file, cap) — framework.fetchcaps
    notes: list[str] = field(default_factory=list)
    #: where the ranks were when they were asked for their stacks (identical stacks grouped, largest first)
    stacks: list[StackGroup] = field(default_factory=list)
    #: the pytest test that launched it (nodeid), its attempt (pytest-rerunfailures: 1, 2, ...) and the
    #: launch's place among that attempt's launches of the same world size (1, 2, ...): the report names
    #: the launch from these, never from the launcher's counter (None: no test, e.g. ``camit run``)
    test: str | None = None
    attempt: int | None = None
    seq: int | None = None
    #: a retry after a taken master port: the first attempt's launch id and this try's number (2, 3, ...)
    retry_of: str | None = None
    port_try: int = 1

    @property
    def ok(self) -> bool:
        return self.failure is None and len(self.ranks) == self.world_size and all(r.ok for r in self.ranks.values())

    def message(self) -> str:
        if self.ok:
            return f"{self.world_size} ranks on {len(self.nodes)} nodes passed in {self.duration:.1f}s"
        return "\n".join([self.failure or "not every rank reported success", *self._evidence()])

    def _evidence(self) -> list[str]:
        """A failure's lines after its sentence: cause, leftovers, held devices, stacks, tail."""
        out = [f"cause: {self.cause}"] if self.cause else []
        out += self._leftovers() + [h.describe() for h in self.held]
        if self.stacks:
            out.append(stack_summary(self.stacks))
        if self.failure_tail:
            out.append("--- log tail ---\n" + self.failure_tail)
        return out

    def _leftovers(self) -> list[str]:
        """A line per node where processes of the run outlived the supervisor's KILL."""
        return [f"{n.host}: processes of the run left after the kill: pid "
                f"{', '.join(map(str, n.left))}" for n in self.nodes.values() if n.left]

    def host_faults(self, oom_hosts: Iterable[str] = ()) -> dict[str, tuple[str, str]]:
        """The host-level failures (host → kind, why) that make a host suspect (framework.suspects):
        lost hosts, held devices, OOM kills; never a rank's own failure."""
        out = {h: ("oom", "the kernel's OOM killer ended a process") for h in oom_hosts}
        for held in self.held:
            out[held.host] = ("held-device", held.describe())
        for name, node in self.nodes.items():
            if node.lost:
                out[name] = ("lost", f"lost during launch {self.launch_id}: {node.lost}")
        return out

    def _optional_json(self) -> dict[str, Any]:
        """The record's keys that are there only when set: notes, stacks, the test that launched
        it."""
        out: dict[str, Any] = {}
        if self.notes:
            out["notes"] = list(self.notes)
        if self.stacks:
            out["stacks"] = [g.to_json() for g in self.stacks]
        if self.test is not None:
            out.update(test=self.test, attempt=self.attempt, seq=self.seq)
        if self.retry_of is not None:
            out.update(retry_of=self.retry_of, port_try=self.port_try)
        return out

    @property
    def first_id(self) -> str:
        """The launch id of the first try (this launch's own, unless it retried a taken port)."""
        return self.launch_id if self.retry_of is None else self.retry_of

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "launch_id": self.launch_id, "ok": self.ok, "world_size": self.world_size,
            "master": self.master,
            "duration": round(self.duration, 3), "failure": self.failure, "failure_kind": self.failure_kind,
            "failure_rank": self.failure_rank, "failure_host": self.failure_host, "cause": self.cause,
            "timed_out": self.timed_out,
            "teardown_seconds": self.teardown_seconds,
            "held": [asdict(h) for h in self.held],
            **self._optional_json(),
            "nodes": {h: asdict(n) for h, n in self.nodes.items()},
            "ranks": {str(r): asdict(v) for r, v in sorted(self.ranks.items())},
        }

    @classmethod
    def from_json(cls, doc: object, launch_id: str = "") -> LaunchResult:
        """The record :meth:`to_json` wrote, parsed once (``launch_id`` when the file names none).

        Tolerant of older files: a missing key gets the field's default, an entry that is not an
        object is left out; a document without an integer ``world_size``, or of a newer ``schema``,
        raises ValueError."""
        if not _is_record(doc):
            raise ValueError("not a launch record")
        schema = doc.get("schema", 1)
        if type(schema) is not int or schema > SCHEMA:
            raise ValueError(f"launch record schema {schema!r}: this camit reads schema {SCHEMA} and older")
        scalars = _known(cls, doc, skip=("nodes", "ranks", "held", "stacks", "notes"))
        return cls(**{**scalars, "launch_id": str(doc.get("launch_id") or launch_id)},
                   nodes=_nodes(doc.get("nodes")), ranks=_ranks(doc.get("ranks")),
                   held=_held(doc.get("held")),
                   notes=[str(n) for n in _list(doc.get("notes"))],
                   stacks=[_stack_group(g) for g in _entries(doc.get("stacks"))])


def _is_record(doc: object) -> TypeGuard[dict[str, Any]]:
    """A JSON object with an integer ``world_size`` (the one key every launch record had)."""
    if not isinstance(doc, dict):
        return False
    size = doc.get("world_size")
    return isinstance(size, int) and not isinstance(size, bool)


def _nodes(value: object) -> dict[str, NodeResult]:
    """The record's nodes by host (an older record's node without its place in the plan: -1)."""
    return {h: _row(NodeResult, n, host=h, node_rank=-1) for h, n in _objects(value)}


def _ranks(value: object) -> dict[int, RankResult]:
    """The record's ranks by number (an older record's rank without its host: '')."""
    return {int(r): _row(RankResult, v, rank=int(r), host="")
            for r, v in _objects(value) if r.isdigit()}


def _held(value: object) -> list[HeldDevice]:
    """The devices still held (an entry without one of a device's keys is left out)."""
    return [_row(HeldDevice, h) for h in _entries(value) if h.keys() >= _HELD_KEYS]


#: what a held device's entry must name
_HELD_KEYS = frozenset({"host", "npu", "chip", "pid"})


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _entries(value: object) -> list[dict[str, Any]]:
    """The JSON objects of a list (anything else in it left out)."""
    return [v for v in _list(value) if isinstance(v, dict)]


def _mapping(value: object) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _objects(value: object) -> list[tuple[str, dict[str, Any]]]:
    """The (key, object) items of a JSON object (items whose value is not an object left out)."""
    return [(str(k), v) for k, v in _mapping(value).items() if isinstance(v, dict)]


def _known(cls: type, doc: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keys of ``doc`` that are fields of the dataclass ``cls`` (a newer writer's extras left
    out)."""
    names = {f.name for f in fields(cls)} - set(skip)
    return {k: v for k, v in doc.items() if k in names}


def _row(cls: type[_Row], doc: Mapping[str, Any], **defaults: Any) -> _Row:
    """A dataclass row from its JSON object: ``defaults`` for keys an older writer left out."""
    return cls(**{**defaults, **_known(cls, doc)})


def _stack_group(doc: Mapping[str, Any]) -> StackGroup:
    """A stack group from :meth:`StackGroup.to_json` (its frames as ``file:line in func``)."""
    hosts = {int(r): str(h) for r, h in _mapping(doc.get("hosts")).items() if str(r).isdigit()}
    return StackGroup(tuple(_frame(str(f)) for f in _list(doc.get("stack"))),
                      [int(r) for r in _list(doc.get("ranks"))], hosts)


def _frame(text: str) -> Frame:
    """``file:line in func`` back into a frame (line 0: a native frame)."""
    where, _, func = text.rpartition(" in ")
    file, _, line = where.rpartition(":")
    return Frame(file, int(line) if line.isdigit() else 0, func)
