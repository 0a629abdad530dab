"""The launch runner: :class:`Launcher` ships the programs, starts one supervisor per node, feeds
the monitor, tears down everywhere and fetches each node's run folder."""

from __future__ import annotations

import json
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import __version__, remote, suspects
from framework.ascend import timeouts
from framework.ascend.nic import hccl_host_ports, rendezvous_ip
from framework.console import printable
from framework.cores import faultbundle
from framework.errors import CommandFailed, CommandTimedOut, FrameworkError, HostError
from framework.hosts import Cluster, Host, sha256_file
from framework.launch import cause, devices, fetch, stacks, timeline
from framework.launch.monitor import LaunchMonitor
from framework.launch.plan import (
    AUTO_CORE_LIMIT,
    FETCH_PATTERNS,
    HEARTBEAT,
    KILL_GRACE,
    LOST_AFTER,
    PORT_RETRIES,
    PYSPY_WAIT,
    STACK_WAIT,
    SUPERVISOR_SILENCE,
    NodePlan,
    Prepared,
    Target,
    backend_env,
    comm_env,
    deployed,
    devices_per_node,
    free_port_argv,
    launch_label,
    node_command,
    parse_net,
    parse_prepare_probe,
    plan_nodes,
    prepare_probe,
    prepared_for,
    secret_env,
    shipped_files,
    shipped_shas,
)
from framework.launch.result import LaunchResult, NodeResult, RankResult
from framework.phases import PhaseEvent, PhaseSink, discard, emit, rundir_sink
from framework.records.folder import write_atomic
from framework.records.scrub import Scrubber
from framework.remote import protocol
from framework.remote.layout import HostLayout, unsafe_message, unsafe_reason
from framework.transport.base import Process

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.records.folder import RunDir

log = logging.getLogger("camit.launch")

Events = queue.Queue[tuple[str, "str | None"]]


@dataclass
class _Node:
    host: Host
    plan: NodePlan
    proc: Process | None = None


class Launcher:
    """Launch targets on ``cluster`` (hosts in env order: the first is node 0).

    ``on_phase`` receives a :class:`~framework.phases.PhaseEvent` per host and phase; by default
    (with a ``rundir``) they go to the run folder's ``phases.json``.
    """

    def __init__(self, env: EnvConfig, cluster: Cluster, *, rundir: RunDir | None = None,
                 backend: str | None = None, nproc_per_node: int | None = None,
                 core_limit: str | None = AUTO_CORE_LIMIT, per_launch_dirs: bool = False,
                 keep_remote: bool = False, on_event: Callable[[str, str], None] | None = None,
                 on_phase: PhaseSink | None = None, defer_cleanup: bool = False,
                 owner: Callable[[], tuple[str, int] | None] | None = None) -> None:
        self.env = env
        self.cluster = cluster
        self.rundir = rundir
        self.backend = backend or env.launch.backend
        self.nproc = nproc_per_node or _default_nproc(env)
        self.core_limit = core_limit
        #: fetch into <report>/<host>/<launch_id>/ (several launches per run) instead of <report>/<host>/
        self.per_launch_dirs = per_launch_dirs
        #: leave each node's run folder on the host (debugging); by default it is removed once fetched
        self.keep_remote = keep_remote
        #: leave the run folders until :meth:`cleanup_remote` (a core watch scans them first: a relative
        #: core_pattern puts a rank's core there)
        self.defer_cleanup = defer_cleanup
        self.pending_cleanup: list[tuple[str, str]] = []
        self.on_event = on_event or (lambda host, msg: log.info("%s: %s", host, msg))
        self.on_phase = on_phase or _default_sink(rundir)
        self._count = 0
        #: the test launching now, as (pytest nodeid, attempt) (the plugin's; None: not a test): recorded in
        #: each launch record with the launch's place in that attempt, so the report's names stay stable
        self.owner = owner or (lambda: None)
        self._seq: dict[tuple[str, int, int], int] = {}
        #: hosts where a device is still held by one of this launcher's runs (the session's, in the plugin)
        self.dirty = devices.DirtyHosts()
        #: each NPU host's ``npu-smi info`` before the current launch (the fault bundle's npu_info_before)
        self.npu_before: dict[str, str] = {}
        self.programs = {name: remote.script(name) for name in ("supervisor.py", "rankwrap.py")}

    def cleanup_remote(self) -> None:
        """Remove the run folders left for the core watch (``defer_cleanup``); a host that fails is logged."""
        by_host: dict[str, list[str]] = {}
        for host, run_dir in self.pending_cleanup:
            by_host.setdefault(host, []).append(run_dir)
        self.pending_cleanup = []
        if not by_host:
            return
        got = self.cluster.map(lambda h: h.run(["rm", "-rf", "--", *by_host[h.name]], timeout=60), list(by_host))
        for h, err in got.failed.items():
            log.warning("%s: could not remove the run folder(s) %s: %s", h, ", ".join(by_host[h]), err)

    def _phases(self, events: Iterable[PhaseEvent]) -> None:
        """Every host's events at once (``emit``): one write of phases.json, not one per host."""
        emit(self.on_phase, events)

    @staticmethod
    def _local_script(target: Target) -> tuple[Path, str] | None:
        """(path, sha256) of a target script that is a file here (shipped to the hosts), else None."""
        local = Path(target.script) if target.script and Path(target.script).is_file() else None
        return (local, sha256_file(local)) if local is not None else None

    # preparing the hosts: scripts shipped once, deploy state read in the same round trip
    def _prepare(self, target: Target, names: Sequence[str]) -> tuple[dict[str, Prepared], Target]:
        script = self._local_script(target)

        def prep(host: Host) -> Prepared:
            layout = HostLayout.of(self.env.hosts[host.name])
            files = shipped_files(layout, self.programs, script)
            shas = shipped_shas(layout, self.programs, script)
            res = host.run(prepare_probe(shas, layout), timeout=60)
            why = unsafe_reason(res.stdout)
            if why is not None:
                raise HostError(host.name, unsafe_message(why))
            if not res.ok:
                raise CommandTimedOut(res, 60) if res.timed_out else CommandFailed(res)
            stdout = res.stdout
            have, state = parse_prepare_probe(stdout)
            for remote_path, local in files.items():
                if remote_path not in have:  # missing, or not what it must be: replaced, never run
                    host.put(local, remote_path, sha256=shas[remote_path])
            self._npu_before(host)
            return prepared_for(layout, self.programs, script, state=state, net=parse_net(stdout))

        prepared = self.cluster.map(prep, names).raise_on_failure().succeeded
        return prepared, _as_shipped(target, script, prepared)

    def _free_port(self, host: Host, python: str, addr: str) -> int:
        """A free port on node 0, outside HCCL's host ports (HCCL_IF_BASE_PORT and after)."""
        avoid = hccl_host_ports({k: str(v) for k, v in self.env.launch.env.items()})
        return int(host.check(free_port_argv(python, addr, avoid), timeout=30).stdout.strip())

    def run(self, target: Target, *, env: Mapping[str, Any] | None = None, timeout: float = 600.0,
            nproc_per_node: int | None = None, hosts: Sequence[str] | None = None,
            name: str | None = None) -> LaunchResult:
        """Launch ``target`` on every (selected) host and return when nothing of it runs anywhere."""
        launch_id = self._launch_id(name)
        names = self._names(hosts)
        self.dirty.check(names)  # fail fast, naming the held device, instead of at HCCL init
        t_prep = time.time()
        prepared, target = self._prepare(target, names)
        t_ready = time.time()
        self._phases(PhaseEvent(h, "launch", t_prep, t_ready) for h in prepared)
        nproc = nproc_per_node or self.nproc
        extra: Mapping[str, Any] = env or {}
        for note in self._timeout_notes(timeout, extra):
            self.on_event(names[0], f"warning: {note}")
        owner = self.owner()
        seq = self._next_seq(owner, nproc * len(names))

        def once(attempt: int) -> LaunchResult:
            return self._launch_once(target, names, prepared, nproc, extra, timeout, launch_id,
                                     attempt, owner=owner, seq=seq)

        attempt, result = 1, once(1)
        while self._worth_retry(result, attempt):
            self.on_event(names[0], f"master port {result.master} or an HCCL host port was taken; retrying "
                                    "with another master port")
            attempt += 1
            result = once(attempt)
        return result

    def _names(self, hosts: Sequence[str] | None) -> list[str]:
        """The hosts a launch runs on: those given, else the whole cluster (in env order)."""
        return list(hosts) if hosts is not None else list(self.cluster.hosts)

    def _next_seq(self, owner: tuple[str, int] | None, world: int) -> int | None:
        """The launch's place among its test attempt's launches of this world size (None: none)."""
        if owner is None:
            return None
        key = (owner[0], owner[1], world)
        self._seq[key] = self._seq.get(key, 0) + 1
        return self._seq[key]

    def _worth_retry(self, result: LaunchResult, attempt: int) -> bool:
        """A failed attempt with retries left whose master or HCCL host port was taken."""
        return not result.ok and attempt < PORT_RETRIES and self._port_taken(result)

    def _launch_id(self, name: str | None) -> str:
        self._count += 1
        run_id = getattr(self.rundir, "run_id", None) or secrets.token_hex(4)
        return f"{run_id}-{launch_label(name)}{self._count}-{secrets.token_hex(2)}"

    def plan_only(self, target: Target, *, env: Mapping[str, Any] | None = None, timeout: float = 600.0,
                  nproc_per_node: int | None = None, hosts: Sequence[str] | None = None,
                  name: str | None = None) -> tuple[dict[str, NodePlan], Target, list[str]]:
        """What :meth:`run` would start, decided here without contacting any host (``camit run --dry-run``):
        each node's plan (its command: :func:`node_command`), the target as the hosts would run it, and the
        timeout warnings. What only the hosts know is left as the plans have it without them: the interpreter
        and vendor ``set_env`` deploy recorded (the spec's python, none), the NIC names (none), and, unless
        ``launch.master_port`` is set, the master port node 0 picks at launch (0)."""
        names = self._names(hosts)
        script = self._local_script(target)
        prepared = {n: prepared_for(HostLayout.of(self.env.hosts[n]), self.programs, script)
                    for n in names}
        target = _as_shipped(target, script, prepared)
        extra: Mapping[str, Any] = env or {}
        plans = plan_nodes(self.env, names, prepared, nproc=nproc_per_node or self.nproc,
                           backend=self.backend, master_port=self.env.launch.master_port or 0,
                           launch_id=self._launch_id(name), extra_env=extra, timeout=timeout,
                           core_limit=self.core_limit)
        return plans, target, self._timeout_notes(timeout, extra)

    def _timeout_notes(self, timeout: float, extra_env: Mapping[str, Any]) -> list[str]:
        """Why this launch's timeouts cannot keep HCCL's order (a short timeout, or variables that break it)."""
        if self.backend != "hccl":
            return []
        derived = timeouts.derive(timeout)
        notes = [derived.note] if derived.note else []
        given = {k: str(v) for k, v in {**dict(self.env.launch.env), **dict(extra_env)}.items()}
        notes += timeouts.order_problems(given, timeout, where="launch env")
        return notes

    def _port_taken(self, result: LaunchResult) -> bool:
        """The master port was taken, or HCCL could not listen on its host port (EI0019): worth a retry."""
        if self.rundir is None or result.failure_kind not in ("rank", "node"):
            return False
        return any(fetch.port_taken(self._host_dir(h, result.launch_id)) for h in result.nodes)

    def _launch_once(self, target: Target, names: list[str], prepared: dict[str, Prepared], nproc: int,
                     extra_env: Mapping[str, Any], timeout: float, launch_id: str, attempt: int, *,
                     owner: tuple[str, int] | None = None, seq: int | None = None) -> LaunchResult:
        addr0, port = self._master(names[0], prepared[names[0]], attempt)
        lid = launch_id if attempt == 1 else f"{launch_id}-r{attempt}"
        plans = plan_nodes(self.env, names, prepared, nproc=nproc, backend=self.backend, master_port=port,
                           launch_id=lid, extra_env=extra_env, timeout=timeout, core_limit=self.core_limit)
        nodes = {h: _Node(self.cluster[h], p) for h, p in plans.items()}
        result = _new_result(lid, plans, world=nproc * len(plans), master=f"{addr0}:{port}",
                             owner=owner, seq=seq)
        if attempt > 1:
            result.retry_of, result.port_try = launch_id, attempt
        start = time.monotonic()
        monitor = LaunchMonitor(result, plans, deadline=start + timeout)
        events: Events = queue.Queue()
        try:
            self._start(nodes, target, monitor, events)
            if not monitor.stop:
                self._watch(nodes, monitor, events)
        except BaseException as exc:
            # Ctrl-C/SIGTERM, and pytest-timeout, pytest.exit, SystemExit: the same teardown
            monitor.fail("interrupted", f"{_stopped_by(exc)}: tearing down every node",
                         time.monotonic())
            raise
        finally:
            self._teardown(nodes, monitor, events)
            self._finish(nodes, monitor, start)
        return result

    def _master(self, host0: str, prepared0: Prepared, attempt: int) -> tuple[str, int]:
        """(address, port) of the rendezvous on node 0: the configured port on the first attempt,
        else a free one node 0 picks."""
        spec0 = self.env.hosts[host0]
        addr0 = rendezvous_ip(spec0, self.env.launch.rendezvous_nic)
        if self.env.launch.master_port and attempt == 1:
            return addr0, self.env.launch.master_port
        py0 = deployed(spec0, prepared0.layout.workdir, prepared0.state).python
        return addr0, self._free_port(self.cluster[host0], py0, addr0)

    def _start(self, nodes: dict[str, _Node], target: Target, monitor: LaunchMonitor, events: Events) -> None:
        """One supervisor per node, each with a thread pumping its lines into ``events``."""
        for h, node in nodes.items():
            line = node_command(node.plan, target)
            self.on_event(h, f"launch node {node.plan.node_rank}/{len(nodes)} x{node.plan.nproc_per_node} ranks, "
                             f"master {monitor.result.master}")
            log.debug("%s: %s", h, line.display)
            try:
                node.proc = node.host.spawn(line)
            except HostError as exc:
                monitor.fail("infra", f"{h}: cannot start the launch: {exc}", time.monotonic(), h)
                return
            monitor.started(h, time.monotonic())
            threading.Thread(target=_pump_lines, args=(h, node.proc, events), daemon=True,
                             name=f"camit-launch-{h}").start()
            secret = secret_env(node.plan.env)  # the supervisor's first stdin line, never in the command line
            if secret and not _write(node.proc, protocol.env_line(secret)):
                monitor.fail("infra", f"{h}: cannot send the launch's secret variables to its supervisor",
                             time.monotonic(), h)
                return

    def _watch(self, nodes: dict[str, _Node], monitor: LaunchMonitor, events: Events) -> None:
        while not monitor.finished:
            for h in monitor.heartbeats_due(time.monotonic()):
                _write(nodes[h].proc, protocol.heartbeat_line())
            try:
                host, line = events.get(timeout=0.2)
            except queue.Empty:
                pass
            else:
                self._deliver(nodes, monitor, host, line)
            monitor.tick(time.monotonic())
            if monitor.stop:
                return

    def _deliver(self, nodes: dict[str, _Node], monitor: LaunchMonitor, host: str, line: str | None,
                 teardown: bool = False) -> None:
        now = time.monotonic()
        if line is None:  # channel closed
            proc = nodes[host].proc
            monitor.closed(host, now, proc.lost if proc is not None else None, teardown=teardown)
        else:
            monitor.line(host, line, now)

    def _teardown(self, nodes: dict[str, _Node], monitor: LaunchMonitor, events: Events) -> None:
        """Tell every live supervisor to kill its run; wait for each DONE (bounded)."""
        live = [h for h in monitor.running() if nodes[h].proc is not None]
        t0 = time.monotonic()
        stacks = monitor.result.failure_kind == "timeout"  # ask the ranks where they hang, then kill
        self._stop(nodes, live, stacks)
        self._await_done(nodes, monitor, events, live, _done_by(t0, stacks))
        for n in nodes.values():
            _close(n.proc)
        _note_teardown_time(monitor, t0)

    def _stop(self, nodes: dict[str, _Node], live: list[str], stacks: bool) -> None:
        """Send each live supervisor its KILL line (``stacks``: ask the ranks for them first)."""
        asking = " (asking the ranks for their stacks first)" if stacks else ""
        for h in live:
            node = f"{nodes[h].plan.node_rank}/{len(nodes)}"
            self.on_event(h, f"teardown: stopping node {node}{asking}")
            if not _write(nodes[h].proc, protocol.kill_line(stacks=stacks)):
                _close(nodes[h].proc)  # stdin EOF does the same

    def _await_done(self, nodes: dict[str, _Node], monitor: LaunchMonitor, events: Events,
                    live: list[str], end: float) -> None:
        """Deliver the supervisors' lines until every live node is over, or until ``end``."""
        while any(not monitor.nodes[h].over for h in live) and time.monotonic() < end:
            try:
                host, line = events.get(timeout=0.1)
            except queue.Empty:
                continue
            self._deliver(nodes, monitor, host, line, teardown=True)

    def _finish(self, nodes: dict[str, _Node], monitor: LaunchMonitor, start: float) -> None:
        result = monitor.result
        now_mono, now_wall = time.monotonic(), time.time()
        _note_durations(monitor, now_mono)
        result.duration = now_mono - start
        self._check_devices(nodes, result)
        self._mark_suspects(result)
        if self.rundir is not None:
            self._record_and_fetch(nodes, monitor, now_mono, now_wall)
        self._say_ended(result, len(nodes))
        monitor.conclude(time.monotonic())
        self._failure_tail(monitor)
        self._find_cause(result)
        # the record written before the logs were read gets the cause too
        if self.rundir is not None and result.cause:
            self.rundir.write_json(f"launch-{result.launch_id}.json", result.to_json())

    def _say_ended(self, result: LaunchResult, n_nodes: int) -> None:
        """The end of the launch on each node, said as its start was."""
        how, why = ("ended", "") if result.failure is None else ("torn down", " (the launch failed)")
        fetched = ", run folder fetched" if self.rundir is not None else ""
        for h, node in result.nodes.items():
            self.on_event(h, f"teardown: node {node.node_rank}/{n_nodes} {how} "
                             f"after {node.duration:.1f}s{why}{fetched}")

    def _failure_tail(self, monitor: LaunchMonitor) -> None:
        """The failed rank's log tail, bound for pytest's failure text and the terminal: no secret,
        no control character."""
        failed = monitor.failed_rank()
        if failed is not None and failed.log:
            tail = Scrubber.from_env(self.env).text(fetch.log_tail(failed.log))
            monitor.result.failure_tail = printable(tail)

    def _record_and_fetch(self, nodes: dict[str, _Node], monitor: LaunchMonitor, now_mono: float,
                          now_wall: float) -> None:
        """The run folder's phases, the nodes' fetched folders, the launch record and the dirty hosts."""
        assert self.rundir is not None
        result = monitor.result
        self._record_run_phases(monitor, now_mono, now_wall)
        t_fetch = time.time()
        self._fetch(nodes, result)
        if result.failure is not None:  # the failed launch's timeline reads them
            self._write_transcript(monitor, now_mono, now_wall)
        t_fetched = time.time()
        self._phases(PhaseEvent(h, "collect", t_fetch, t_fetched) for h in nodes)
        self.rundir.write_json(f"launch-{result.launch_id}.json", result.to_json())
        self.dirty.write(Path(self.rundir.path))
        result.report_dir = str(self.rundir.path)

    def _find_cause(self, result: LaunchResult) -> None:
        """The failed launch's cause line: the ranks' first error, the timeline's root cause where it finds
        one (and the fault bundle), else a hang's stacks; scrubbed of secrets."""
        line = self._cause_line(result)
        # a rank's words: no secret
        result.cause = Scrubber.from_env(self.env).text(line) if line else None

    def _cause_line(self, result: LaunchResult) -> str | None:
        """The cause of a failed launch (None: it did not fail, or nothing says why)."""
        if result.failure is None:  # (a timeout is a failure too)
            return None
        line = _ranks_line(result)
        if self.rundir is not None:  # the timeline's root cause, when it finds one, wins
            line = self._timeline(result) or line
            self._fault_bundle(result)
        if line is not None:
            return line
        return _hang_line(result)

    def _timeline(self, result: LaunchResult) -> str | None:
        """Write the failed launch's ``timeline.json``; its root cause line (None when it found none)."""
        assert self.rundir is not None
        root = Path(self.rundir.path)
        try:
            folders = {h: self._host_dir(h, result.launch_id) for h in result.nodes}
            found = timeline.build(root, folders)
            timeline.write(root, found, result.launch_id, folders)
        except OSError as exc:
            log.warning("timeline: %s", exc)
            return None
        return timeline.root_line(found)

    def _npu_before(self, host: Host) -> None:
        """An NPU host's ``npu-smi info`` before the launch (bounded; a host that does not answer has none)."""
        self.npu_before.pop(host.name, None)
        if self.rundir is None or not self.env.hosts[host.name].npu.count:
            return
        try:
            res = host.run(devices.npu_smi_script(), timeout=30, max_output=1 << 16)
        except FrameworkError as exc:
            log.warning("%s: npu-smi before the launch: %s", host.name, exc)
            return
        self.npu_before[host.name] = res.stdout

    def _fault_bundle(self, result: LaunchResult) -> None:
        """A failed launch on NPU hosts: ascend-fd's input tree per host (and its verdict where installed)."""
        assert self.rundir is not None
        hosts = self._npu_hosts(result)
        if not hosts:
            return
        try:
            self._save_npu_before(hosts, result.launch_id)
            verdict = self._write_bundle(hosts, result)
        except OSError as exc:
            log.warning("fault bundle: %s", exc)
            return
        if verdict is not None:
            result.notes.append(f"ascend-fd: {verdict}")

    def _write_bundle(self, hosts: list[str], result: LaunchResult) -> str | None:
        """The fault bundle of ``hosts`` written into the run folder; ascend-fd's verdict (None: not
        installed here)."""
        assert self.rundir is not None
        lid = result.launch_id
        _, verdict = faultbundle.write_bundle(
            Path(self.rundir.path), {h: self._host_dir(h, lid) for h in hosts},
            scrub=Scrubber.from_env(self.env).text,
            env={h: result.nodes[h].comm_env for h in hosts},
            versions={"camit": __version__, "launch": lid})
        return verdict

    def _save_npu_before(self, hosts: list[str], launch_id: str) -> None:
        """Each host's ``npu-smi info`` from before the launch, into its fault bundle's tree."""
        for h in hosts:
            if h in self.npu_before:
                path = self._host_dir(h, launch_id) / faultbundle.BEFORE / "npu-smi-info.txt"
                write_atomic(path, self.npu_before[h])

    def _mark_suspects(self, result: LaunchResult) -> None:
        """Lost hosts and held devices make their host suspect (framework.suspects), marked on
        every host still here."""
        faults = result.host_faults()
        if not faults:
            return
        lost = {h for h, n in result.nodes.items() if n.lost}
        here = [h.name for h in self.cluster if h.name not in lost]
        suspects.mark(self.cluster, faults, on=here)

    def _npu_hosts(self, result: LaunchResult) -> list[str]:
        """The launch's NPU hosts that are still here (not lost)."""
        return [h for h, node in result.nodes.items()
                if self.env.hosts[h].npu.count and not node.lost]

    def _check_devices(self, nodes: dict[str, _Node], result: LaunchResult) -> None:
        """NPU hosts: wait (bounded) until no pid of the run holds a device; a failure saves the NPU state."""
        npu_hosts = self._npu_hosts(result)
        failed = result.failure is not None

        def one(host: Host) -> list[devices.HeldDevice]:
            node = result.nodes[host.name]
            held = devices.wait_released(devices.host_result(host.run), host.name, {*node.tree, *node.left},
                                         launch_id=result.launch_id)
            if failed:
                spec = self.env.hosts[host.name]
                host.run(devices.state_script(nodes[host.name].plan.run_dir, spec.npu.count), timeout=180)
            return held

        got = self.cluster.map(one, npu_hosts)
        for name, err in got.failed.items():
            log.warning("%s: device check failed: %s", name, err)
        for held in got.succeeded.values():
            result.held += held
        for dev in result.held:
            log.warning("%s", dev.describe())
        self.dirty.mark(result.held)

    def _record_run_phases(self, monitor: LaunchMonitor, now_mono: float, now_wall: float) -> None:
        def wall(mono: float) -> float:  # monotonic → epoch for the timeline
            return now_wall - (now_mono - mono)

        failed_at = monitor.failed_at if monitor.result.failure else None
        events = []
        for h, w in monitor.nodes.items():
            if w.start:
                events.append(PhaseEvent(h, "run", wall(w.start), wall(failed_at or now_mono)))
            if failed_at is not None:
                events.append(PhaseEvent(h, "teardown", wall(failed_at), now_wall))
        self._phases(events)

    def _write_transcript(self, monitor: LaunchMonitor, now_mono: float, now_wall: float) -> None:
        """Each host's supervisor lines, stamped on arrival (epoch), beside its fetched folder (the
        timeline's)."""
        lines: dict[str, list[str]] = {h: [] for h in monitor.nodes}
        for mono, host, text in monitor.transcript:
            stamp = round(now_wall - (now_mono - mono), 6)
            lines[host].append(json.dumps({"t": stamp, "line": printable(text)}))
        for host, got in lines.items():
            folder = self._host_dir(host, monitor.result.launch_id)
            folder.mkdir(parents=True, exist_ok=True)
            text = "".join(x + "\n" for x in got)
            (folder / timeline.SUPERVISOR_FILE).write_text(text, encoding="utf-8")

    def _host_dir(self, host: str, launch_id: str) -> Path:
        assert self.rundir is not None
        base = Path(self.rundir.path) / host
        return base / launch_id if self.per_launch_dirs else base

    def _fetch_node(self, host: Host, run_dir: str, launch_id: str) -> list[str]:
        """One node's run folder fetched (removed from the host unless kept or deferred); notes."""
        deferred = self.defer_cleanup and not self.keep_remote
        if deferred:  # removed by cleanup_remote(), after the core watch scanned it (cores in it)
            self.pending_cleanup.append((host.name, run_dir))
        local = self._host_dir(host.name, launch_id)
        return fetch.fetch_run_folder(host, run_dir, run_dir + ".tgz", local,
                                      keep_remote=self.keep_remote or deferred)

    def _fetch(self, nodes: dict[str, _Node], result: LaunchResult) -> None:
        """Bring each node's run folder back as ``<report>/<host>/`` (one tar stream per node)."""

        lid = result.launch_id
        got = self.cluster.map(lambda h: self._fetch_node(h, nodes[h.name].plan.run_dir, lid),
                               [h for h in nodes if not result.nodes[h].lost])
        for h, err in got.failed.items():
            log.warning("%s: could not fetch logs: %s", h, err)
        _keep_notes(result, [note for notes in got.succeeded.values() for note in notes])
        self._read_fetched(result)

    def _read_fetched(self, result: LaunchResult) -> None:
        """The ranks' records from the fetched folders, and their stacks when they dumped them."""
        for h in result.nodes:
            fetch.read_ranks(result, h, self._host_dir(h, result.launch_id))
        if any(n.stacks for n in result.nodes.values()):
            _read_stacks(result)


def _default_nproc(env: EnvConfig) -> int:
    """Ranks per node when the caller names none: launch.nproc_per_node, else one per usable
    device of the smallest NPU host (npu.visible, else npu.count), else 1."""
    return env.launch.nproc_per_node or devices_per_node(env) or 1


def _default_sink(rundir: RunDir | None) -> PhaseSink:
    """Where the phases go when the caller names no sink: the run folder's phases.json, else
    nowhere."""
    return rundir_sink(rundir) if rundir is not None else discard


def _as_shipped(target: Target, script: tuple[Path, str] | None,
                prepared: Mapping[str, Prepared]) -> Target:
    """The target as the hosts run it: a local script replaced by its shipped copy."""
    if script is None:
        return target
    return Target(script=next(iter(prepared.values())).script, args=target.args)


def _new_result(launch_id: str, plans: Mapping[str, NodePlan], *, world: int, master: str,
                owner: tuple[str, int] | None, seq: int | None) -> LaunchResult:
    """An attempt's result before it starts: its nodes, world and master, and the test it runs
    for."""
    nodes = {h: NodeResult(h, p.node_rank, comm_env=comm_env(p.env)) for h, p in plans.items()}
    result = LaunchResult(launch_id, nodes, {}, world_size=world, master=master)
    if owner is not None:
        result.test, result.attempt, result.seq = owner[0], owner[1], seq
    return result


def _done_by(t0: float, stacks: bool) -> float:
    """When a teardown begun at ``t0`` stops waiting for the DONE lines (longer when the ranks
    dump their stacks first)."""
    dumps = STACK_WAIT + PYSPY_WAIT if stacks else 0
    return t0 + KILL_GRACE + 8 + dumps


def _note_durations(monitor: LaunchMonitor, now: float) -> None:
    """Each node's time from its start to ``now`` (0 for a node that never started)."""
    for h, w in monitor.nodes.items():
        monitor.result.nodes[h].duration = round(now - w.start, 3) if w.start else 0.0


def _note_teardown_time(monitor: LaunchMonitor, t0: float) -> None:
    """A failed launch's teardown time: from its failure (or, with none recorded, ``t0``) to now."""
    if monitor.result.failure is None:
        return
    failed_at = t0 if monitor.failed_at is None else monitor.failed_at
    monitor.result.teardown_seconds = round(time.monotonic() - failed_at, 3)


def _ranks_line(result: LaunchResult) -> str | None:
    """The ranks' first error, described (None: no rank said one)."""
    found = cause.of_ranks(result.ranks.values(), result.failure_rank)
    return found.describe() if found else None


def _hang_line(result: LaunchResult) -> str | None:
    """A timed-out launch's cause when nothing else names one: where the ranks stood."""
    if not (result.timed_out and result.stacks):
        return None
    return "hang: " + stacks.summary(result.stacks).removeprefix("stacks: ")


def _keep_notes(result: LaunchResult, notes: list[str]) -> None:
    """What the fetch caps cut, logged and kept in the launch record."""
    for note in notes:
        log.warning("%s", note)
    result.notes.extend(notes)


def _read_stacks(result: LaunchResult) -> None:
    """The ranks' stacks from their fetched logs (they dumped them at the teardown)."""
    result.stacks = stacks.from_logs({r: (rr.host, Path(rr.log) if rr.log else None)
                                      for r, rr in result.ranks.items()})
    log.warning("%s", stacks.summary(result.stacks))


def _stopped_by(exc: BaseException) -> str:
    """Why a launch stopped midway: Ctrl-C/SIGTERM, or the exception that went through it."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C/SIGTERM)"
    return f"stopped ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"


def _write(proc: Process | None, data: bytes) -> bool:
    """Write to a supervisor's stdin; False when its channel refuses."""
    if proc is None:
        return False
    try:
        proc.write(data)
    except HostError:
        return False
    return True


def _close(proc: Process | None) -> None:
    if proc is not None:
        proc.close()


def _pump_lines(host: str, proc: Process, events: Events) -> None:
    while True:
        line = proc.readline(timeout=None)
        if not line:
            events.put((host, None))
            return
        events.put((host, line.strip()))


__all__ = ["FETCH_PATTERNS", "HEARTBEAT", "LOST_AFTER", "SUPERVISOR_SILENCE", "LaunchResult", "Launcher", "NodePlan",
           "NodeResult", "RankResult", "Target", "backend_env", "launch_label", "node_command"]
