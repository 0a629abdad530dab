"""The pure half of watching a launch: supervisor lines in, decisions out (no process, no clock)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from framework.launch.plan import HEARTBEAT, LOST_AFTER, NodePlan, host_of_rank
from framework.launch.result import LaunchResult, NodeResult, RankResult
from framework.remote import protocol

log = logging.getLogger("camit.launch")

#: signals a rank usually dies of as a consequence (torchrun or our teardown stopping it)
SECONDARY_SIGNALS = ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP")


def secondary(rank: RankResult) -> bool:
    return rank.signal in SECONDARY_SIGNALS


@dataclass
class NodeWatch:
    """One node as the monitor sees it."""

    plan: NodePlan
    result: NodeResult
    start: float = 0.0
    last_line: float = 0.0

    @property
    def over(self) -> bool:
        return self.result.done or self.result.lost is not None


class LaunchMonitor:
    """Judges one launch from its supervisors' lines; ``result`` is the launch's result, filled as lines come."""

    def __init__(self, result: LaunchResult, plans: Mapping[str, NodePlan], *, deadline: float,
                 lost_after: float = LOST_AFTER, heartbeat: float = HEARTBEAT) -> None:
        self.result = result
        self.nodes = {h: NodeWatch(p, result.nodes[h]) for h, p in plans.items()}
        self.deadline = deadline
        self.lost_after = lost_after
        self.heartbeat = heartbeat
        self.failed_at: float | None = None
        self._last_hb: float | None = None
        #: (when, host, line) of every supervisor line but heartbeats, and each channel's end
        #: (the timeline's)
        self.transcript: list[tuple[float, str, str]] = []

    # -- facts in -------------------------------------------------------------------------------
    def started(self, host: str, now: float) -> None:
        node = self.nodes[host]
        node.start = node.last_line = now

    def fail(self, kind: str, text: str, now: float, host: str | None = None) -> None:
        """Record the launch's first failure and the host it happened on (later ones are consequences
        and only logged by the caller)."""
        if self.result.failure is None:
            self.result.failure, self.result.failure_kind = text, kind
            self.result.failure_host = host
            self.failed_at = now
            log.warning("%s", text)

    def line(self, host: str, text: str, now: float) -> None:
        """One line of ``host``'s supervisor."""
        node = self.nodes[host]
        node.last_line = now
        msg = protocol.parse_supervisor_line(text)
        if msg.kind not in (protocol.HEARTBEAT, protocol.TREE):
            self.transcript.append((now, host, text))
        handle = _HANDLERS.get(msg.kind)
        if handle is not None:
            handle(self, host, msg, now)

    # -- one handler per supervisor line kind (_HANDLERS) -------------------------------------------
    def _exit(self, host: str, msg: protocol.SupervisorLine, now: float) -> None:
        node = self.nodes[host].result
        node.exit_code = msg.exit_code
        if node.exit_code != 0:
            self.fail("node", f"torchrun on {host} exited {node.exit_code}", now, host)

    def _killed(self, host: str, msg: protocol.SupervisorLine, now: float) -> None:
        self.nodes[host].result.killed = msg.reason

    def _swept(self, host: str, msg: protocol.SupervisorLine, now: float) -> None:
        self.nodes[host].result.swept = msg.count

    def _stacks(self, host: str, msg: protocol.SupervisorLine, now: float) -> None:
        self.nodes[host].result.stacks = msg.count

    def _left(self, host: str, msg: protocol.SupervisorLine, now: float) -> None:
        self.nodes[host].result.left = list(msg.pids)
        pids = ", ".join(map(str, msg.pids))
        log.warning("%s: processes of the run survived the kill: pid %s", host, pids)

    def _tree(self, host: str, msg: protocol.SupervisorLine, now: float) -> None:
        self.nodes[host].result.tree = list(msg.pids)

    def _done(self, host: str, msg: protocol.SupervisorLine, now: float) -> None:
        self.nodes[host].result.done = True

    def closed(self, host: str, now: float, why: str | None = None, *, teardown: bool = False) -> None:
        """``host``'s channel ended (``why``: the transport's reason, when it knows one)."""
        node = self.nodes[host]
        node.last_line = now
        if node.result.done:
            return
        closed = "during teardown" if teardown else why or "channel closed"
        self.transcript.append((now, host, f"CLOSED {closed}"))
        if teardown:
            node.result.lost = node.result.lost or "channel closed during teardown"
            return
        node.result.lost = why or "its SSH channel closed"
        self.fail("lost", f"lost {host}: {node.result.lost}", now, host)

    def _rank(self, host: str, msg: protocol.SupervisorLine, now: float) -> None:
        result = self.result
        rank = -1 if msg.rank is None else msg.rank
        rr = result.ranks.setdefault(rank, RankResult(rank, host))
        if msg.signal is not None:
            rr.signal = msg.signal
        else:
            rr.exit_code = msg.exit_code
        if rr.ok or not self._root_so_far(rr):
            return
        result.failure_rank = rank
        if result.failure is None:
            self.fail("rank", rr.describe(), now, host)
        else:
            result.failure, result.failure_host = rr.describe(), host

    def _root_so_far(self, rr: RankResult) -> bool:
        """Failed rank ``rr`` is the launch's cause so far: the first failure, or a rank that failed on
        its own after one killed by TERM/KILL (usually a consequence: torchrun or our teardown)."""
        if self.result.failure is None:
            return True
        current = self._first_failed()
        if self.result.failure_kind != "rank" or current is None:
            return False
        return secondary(current) and not secondary(rr)

    def _first_failed(self) -> RankResult | None:
        """The rank that failed first, as recorded (None: no rank failed yet)."""
        first = self.result.failure_rank
        return None if first is None else self.result.ranks.get(first)

    # -- time passing ---------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Declare silent nodes lost and the job timed out, as of ``now``."""
        for host in self._silent(now):
            node = self.nodes[host].result
            node.lost = f"no heartbeat for {now - self.nodes[host].last_line:.0f}s"
            self.fail("lost", f"lost {host}: {node.lost}", now, host)
        if now > self.deadline and self.result.failure is None:
            self.result.timed_out = True
            first = min(n.start for n in self.nodes.values())
            self.fail("timeout", f"job timeout after {self.deadline - first:.0f}s", now)

    def _silent(self, now: float) -> list[str]:
        """The running nodes whose last line is older than ``lost_after``."""
        return [h for h, n in self.nodes.items()
                if not n.over and now - n.last_line > self.lost_after]

    def heartbeats_due(self, now: float) -> list[str]:
        """The nodes to send ``HB`` to now (every ``heartbeat`` seconds, to every node still running)."""
        if self._last_hb is not None and now - self._last_hb < self.heartbeat:
            return []
        self._last_hb = now
        return self.running()

    # -- questions --------------------------------------------------------------------------------
    def running(self) -> list[str]:
        return [h for h, n in self.nodes.items() if not n.over]

    @property
    def finished(self) -> bool:
        """Every node is done or lost."""
        return all(n.over for n in self.nodes.values())

    @property
    def stop(self) -> bool:
        """A failure is recorded: the runner tears the launch down."""
        return self.result.failure is not None

    # -- the end ------------------------------------------------------------------------------------
    def conclude(self, now: float) -> None:
        """After the fetch: every rank of the world has an entry; unreported ranks fail the launch."""
        result = self.result
        self._fill_world()
        if result.failure is None and not result.ok:
            missing = [r.describe() for r in result.ranks.values() if not r.ok]
            self.fail("rank", "; ".join(missing[:4]), now)

    def _fill_world(self) -> None:
        """An entry for every rank of the world: one no line reported is placed on its node's host
        (and is not ok: it never said how it ended)."""
        plans = {h: n.plan for h, n in self.nodes.items()}
        for r in range(self.result.world_size):
            self.result.ranks.setdefault(r, RankResult(r, host_of_rank(r, plans)))

    def failed_rank(self) -> RankResult | None:
        """The rank whose log tail explains the failure: the first failing one, else the lowest failed with a log."""
        failed = self._first_failed()
        if failed is not None:
            return failed
        ranks = sorted(self.result.ranks.values(), key=lambda r: r.rank)
        return next((r for r in ranks if not r.ok and r.log), None)


_Handler = Callable[[LaunchMonitor, str, protocol.SupervisorLine, float], None]
#: what a supervisor line of each kind does (``HB``, ``STARTED`` and unknown lines: nothing)
_HANDLERS: dict[str, _Handler] = {
    protocol.RANK: LaunchMonitor._rank,
    protocol.EXIT: LaunchMonitor._exit,
    protocol.KILLED: LaunchMonitor._killed,
    protocol.SWEPT: LaunchMonitor._swept,
    protocol.STACKS: LaunchMonitor._stacks,
    protocol.LEFT: LaunchMonitor._left,
    protocol.TREE: LaunchMonitor._tree,
    protocol.DONE: LaunchMonitor._done,
}
