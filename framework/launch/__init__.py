"""Launch torchrun across the cluster: fail fast, tear down everywhere, leave nothing behind.

Pure plan: :func:`backend_env` and :func:`node_command` build, for each node, the
exact bash line (CANN and vendor ``set_env``, the backend's variables, the env's
and the test's own variables, ``ulimit -c``, then the supervisor running
``python -m torch.distributed.run ... --no-python <python> rankwrap.py ...``).

Executor: :class:`Launcher` ships the supervisor and rank wrapper (content-
addressed, once), picks a free master port on node 0 at launch time, starts one
supervisor per node over its own SSH channel and watches them all at once. The
first failing rank or node, a node that goes silent (heartbeats, not TCP
timeouts), the job timeout or Ctrl-C/SIGTERM → every supervisor is told to kill
its run (its process group and every process tagged with the run id), and we wait
for each to confirm. Then per-rank logs, status and JUnit files are fetched into
``<report>/<host>/``.
"""

from __future__ import annotations

import logging
import queue
import re
import secrets
import tarfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from framework import commands, remote
from framework.errors import FrameworkError, HostError, UsageError
from framework.hosts import Cluster, Host, sha256_file

log = logging.getLogger("camit.launch")

HEARTBEAT = 2.0
#: a node that said nothing for this long is lost (its supervisor stops the run after SUPERVISOR_SILENCE);
#: generous enough for a controller starved on a loaded 2-core machine (12 s was seen to misfire)
LOST_AFTER = 20.0
SUPERVISOR_SILENCE = 25.0
KILL_GRACE = 2.0
DEFAULT_CORE_LIMIT = "unlimited"
PORT_RETRIES = 3
#: files of a node's run folder that come back to the report folder
FETCH_PATTERNS = ("rank*.log", "rank*.json", "rank*.xml", "torchrun.log", "perf-*.json", "coverage-*")
_PORT_TAKEN = ("address already in use", "eaddrinuse", "errno 98")


# -- plan ---------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """What each worker runs: ``-m module args`` or ``script args`` (script already on the hosts)."""

    module: str | None = None
    script: str | None = None
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.module is None) == (self.script is None):
            raise UsageError("a launch target is either a module (-m NAME) or a script path")

    def python_args(self) -> list[str]:
        return ["-m", self.module, *self.args] if self.module else [str(self.script), *self.args]

    @classmethod
    def parse(cls, argv: Sequence[str]) -> Target:
        """``['-m', 'pkg', 'a']`` or ``['script.py', 'a']`` (the command line after ``--``)."""
        argv = list(argv)
        if argv[:1] == ["--"]:
            argv = argv[1:]
        if not argv:
            raise UsageError("no launch target: give a script.py or -m module")
        if argv[0] == "-m":
            if len(argv) < 2:
                raise UsageError("-m needs a module name")
            return cls(module=argv[1], args=tuple(argv[2:]))
        return cls(script=argv[0], args=tuple(argv[1:]))


def backend_env(spec: Any, backend: str) -> dict[str, str]:
    """The variables the communication backend needs on this node (ascend-hosts.md §7)."""
    nic = (spec.test_nic1.name if spec.test_nic1 is not None and spec.test_nic1.name else None) or spec.manage_nic.name
    if backend == "hccl":
        env = {"HCCL_IF_IP": spec.test_ip, "HCCL_SOCKET_IFNAME": f"={nic}" if nic else "",
               "HCCL_BUFFSIZE": "4096", "HCCL_CONNECT_TIMEOUT": "120"}
        if spec.npu.visible:
            env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(d) for d in spec.npu.visible)
        return {k: v for k, v in env.items() if v}
    if backend == "gloo":
        return {"GLOO_SOCKET_IFNAME": nic} if nic else {}
    if backend == "nccl":
        return {"NCCL_SOCKET_IFNAME": nic} if nic else {}
    raise UsageError(f"unknown backend {backend!r}")


@dataclass(frozen=True)
class NodePlan:
    """Everything one node's launch line needs."""

    host: str
    node_rank: int
    nnodes: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    python: str
    run_dir: str
    supervisor: str
    rankwrap: str
    launch_id: str
    env: Mapping[str, Any]
    cann_set_env: str | None = None
    vendor_set_env: str | None = None
    deadline: float = 3600.0
    core_limit: str | None = DEFAULT_CORE_LIMIT
    silence: float = SUPERVISOR_SILENCE


def node_command(plan: NodePlan, target: Target) -> commands.Line:
    """The bash line that starts this node's supervised torchrun (pure; tested line by line)."""
    q = commands.quote
    torchrun = [plan.python, "-m", "torch.distributed.run", "--nnodes", str(plan.nnodes),
                "--nproc-per-node", str(plan.nproc_per_node), "--node-rank", str(plan.node_rank),
                "--master-addr", plan.master_addr, "--master-port", str(plan.master_port),
                "--no-python", plan.python, plan.rankwrap, "--status-dir", plan.run_dir, "--", *target.python_args()]
    # the tag names the node too: the lab's hosts share one PID namespace, and a
    # sweep on one node must never reach another node's processes
    supervisor = [plan.python, plan.supervisor, "--run-id", f"{plan.launch_id}.{plan.host}", "--status-dir", plan.run_dir,
                  "--deadline", f"{plan.deadline:g}", "--grace", f"{KILL_GRACE:g}",
                  "--heartbeat", f"{HEARTBEAT:g}", "--silence", f"{plan.silence:g}", "--", *torchrun]

    def assemble(redact: bool) -> str:
        # TMPDIR under the run folder: torchrun's torchelastic_* and torch's caches go there and
        # leave with the run folder instead of piling up in the host's /tmp
        steps = [f"mkdir -p {q(plan.run_dir + '/tmp')}", f"cd {q(plan.run_dir)}"]
        if plan.core_limit:
            lim = q(plan.core_limit)
            steps.append(f"{{ ulimit -S -c {lim} 2>/dev/null || ulimit -S -c \"$(ulimit -H -c)\"; }}")
        if plan.cann_set_env:
            steps.append(f". {q(plan.cann_set_env)}")
        if plan.vendor_set_env:
            steps.append(f". {q(plan.vendor_set_env)}")
        exported = commands.export_env({"TMPDIR": plan.run_dir + "/tmp", **plan.env}, redact=redact)
        steps.append(exported)
        steps.append("exec " + commands.join(supervisor))
        return " && ".join(steps)

    return commands.Line(
        "bash -c " + q(assemble(False)), "bash -c " + q(assemble(True))
    )


# -- results ------------------------------------------------------------------
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
    timed_out: bool = False
    teardown_seconds: float | None = None
    report_dir: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and len(self.ranks) == self.world_size and all(r.ok for r in self.ranks.values())

    def message(self) -> str:
        if self.ok:
            return f"{self.world_size} ranks on {len(self.nodes)} nodes passed in {self.duration:.1f}s"
        text = self.failure or "not every rank reported success"
        if self.failure_tail:
            text += "\n--- log tail ---\n" + self.failure_tail
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "launch_id": self.launch_id, "ok": self.ok, "world_size": self.world_size, "master": self.master,
            "duration": round(self.duration, 3), "failure": self.failure, "failure_kind": self.failure_kind,
            "failure_rank": self.failure_rank, "timed_out": self.timed_out,
            "teardown_seconds": self.teardown_seconds,
            "nodes": {h: asdict(n) for h, n in self.nodes.items()},
            "ranks": {str(r): asdict(v) for r, v in sorted(self.ranks.items())},
        }


class LaunchFailed(FrameworkError):
    """Raised by ``LaunchResult``-consuming code that wants an exception (``result`` attached)."""

    def __init__(self, result: LaunchResult) -> None:
        self.result = result
        self.exit_code = 3 if result.failure_kind in ("lost", "infra") else 1
        super().__init__(result.message())


# -- executor -----------------------------------------------------------------
@dataclass
class _Node:
    host: Host
    plan: NodePlan
    proc: Any = None
    result: NodeResult = field(default_factory=lambda: NodeResult("", 0))
    last_line: float = 0.0
    start: float = 0.0


def launch_label(name: str | None) -> str:
    """The part of a launch id taken from its name: safe in a path, a file name and an environment value.

    Test and module names can hold spaces, quotes, slashes or unicode; the launch id becomes a run
    folder, ``launch-<id>.json`` and the run tag, so only ``[A-Za-z0-9_.-]`` survive (32 at most).
    """
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", name or "").strip("_.-")[:32]
    return label or "launch"


class Launcher:
    """Launch targets on ``cluster`` (hosts in env order: the first is node 0)."""

    def __init__(self, env: Any, cluster: Cluster, *, rundir: Any = None, backend: str | None = None,
                 nproc_per_node: int | None = None, core_limit: str | None = DEFAULT_CORE_LIMIT,
                 per_launch_dirs: bool = False, keep_remote: bool = False,
                 on_event: Callable[[str, str], None] | None = None) -> None:
        self.env = env
        self.cluster = cluster
        self.rundir = rundir
        self.backend = backend or env.launch.backend
        self.nproc = nproc_per_node or env.launch.nproc_per_node or 1
        self.core_limit = core_limit
        #: fetch into <report>/<host>/<launch_id>/ (several launches per run) instead of <report>/<host>/
        self.per_launch_dirs = per_launch_dirs
        #: leave each node's run folder on the host (debugging); by default it is removed once fetched
        self.keep_remote = keep_remote
        self.on_event = on_event or (lambda host, msg: log.info("%s: %s", host, msg))
        self._count = 0
        self.sup_path, self.sup_sha = remote.script("supervisor.py")
        self.wrap_path, self.wrap_sha = remote.script("rankwrap.py")

    # preparing the hosts: scripts shipped once, deploy state read in the same round trip
    def _prepare(self, target: Target, names: Sequence[str]) -> tuple[dict[str, dict[str, Any]], Target]:
        import json

        local_script = Path(target.script) if target.script and Path(target.script).is_file() else None
        script_sha = None
        if local_script is not None:
            script_sha = sha256_file(local_script)

        def prep(host: Host) -> dict[str, Any]:
            spec = self.env.hosts[host.name]
            wd = spec.workdir.rstrip("/")
            files = {f"{wd}/bin/supervisor-{self.sup_sha[:12]}.py": self.sup_path,
                     f"{wd}/bin/rankwrap-{self.wrap_sha[:12]}.py": self.wrap_path}
            if local_script is not None and script_sha:
                files[f"{wd}/targets/{script_sha[:12]}/{local_script.name}"] = local_script
            q = commands.quote
            probe = "; ".join(f"[ -f {q(p)} ] && echo HAVE {q(p)}" for p in files)
            probe += f"; [ -f {q(wd + '/deploy-state.json')} ] && printf 'STATE %s\\n' \"$(tr -d '\\n' < {q(wd + '/deploy-state.json')})\"; true"
            out = host.check(commands.ShellScript(probe), timeout=60).stdout
            have = {line[5:] for line in out.splitlines() if line.startswith("HAVE ")}
            state: dict[str, Any] = {}
            for line in out.splitlines():
                if line.startswith("STATE "):
                    try:
                        state = json.loads(line[6:])
                    except ValueError:
                        state = {}
            for remote_path, local in files.items():
                if remote_path not in have:
                    host.put(local, remote_path)
            return {"workdir": wd, "supervisor": next(p for p in files if "/supervisor-" in p),
                    "rankwrap": next(p for p in files if "/rankwrap-" in p),
                    "script": next((p for p in files if "/targets/" in p), None), "state": state}

        prepared = self.cluster.map(prep, names)
        prepared.raise_on_failure()
        out = {h: v for h, v in prepared.items()}  # type: ignore[misc]
        if local_script is not None:
            first = next(iter(out.values()))
            target = Target(script=first["script"], args=target.args)
        return out, target  # type: ignore[return-value]

    def _free_port(self, host: Host, python: str, addr: str) -> int:
        code = ("import socket; s = socket.socket(); s.bind((%r, 0)); print(s.getsockname()[1])" % addr)
        return int(host.check([python, "-c", code], timeout=30).stdout.strip())

    def run(self, target: Target, *, env: Mapping[str, Any] | None = None, timeout: float = 600.0,
            nproc_per_node: int | None = None, hosts: Sequence[str] | None = None,
            name: str | None = None) -> LaunchResult:
        """Launch ``target`` on every (selected) host and return when nothing of it runs anywhere."""
        self._count += 1
        run_id = getattr(self.rundir, "run_id", None) or secrets.token_hex(4)
        launch_id = f"{run_id}-{launch_label(name)}{self._count}-{secrets.token_hex(2)}"
        names = list(hosts) if hosts is not None else list(self.cluster.hosts)
        t_prep = time.time()
        prepared, target = self._prepare(target, names)
        if self.rundir is not None:
            from framework.report import record_phase

            for h in prepared:
                record_phase(self.rundir.path, h, "launch", t_prep, time.time())
        nproc = nproc_per_node or self.nproc
        attempt = 0
        while True:
            attempt += 1
            result = self._launch_once(target, names, prepared, nproc, env or {}, timeout, launch_id, attempt)
            if result.ok or attempt >= PORT_RETRIES or not self._port_taken(result):
                return result
            self.on_event(names[0], f"master port {result.master} was taken; retrying with another")

    def _port_taken(self, result: LaunchResult) -> bool:
        if self.rundir is None or result.failure_kind not in ("rank", "node"):
            return False
        for host in result.nodes:
            p = self._host_dir(host, result.launch_id) / "torchrun.log"
            if p.exists() and any(s in p.read_text(errors="replace").lower() for s in _PORT_TAKEN):
                return True
        return False

    def _launch_once(self, target: Target, names: list[str], prepared: dict[str, dict[str, Any]], nproc: int,
                     extra_env: Mapping[str, Any], timeout: float, launch_id: str, attempt: int) -> LaunchResult:
        specs = [self.env.hosts[n] for n in names]
        node0 = self.cluster[names[0]]
        py0 = prepared[names[0]]["state"].get("interpreter") or specs[0].python
        master_addr = specs[0].test_ip
        port = self.env.launch.master_port if (self.env.launch.master_port and attempt == 1) else \
            self._free_port(node0, py0, master_addr)
        lid = launch_id if attempt == 1 else f"{launch_id}-r{attempt}"
        nodes: dict[str, _Node] = {}
        for i, spec in enumerate(specs):
            prep = prepared[spec.name]
            state = prep["state"]
            vendor = state.get("vendor")
            plan = NodePlan(
                host=spec.name, node_rank=i, nnodes=len(specs), nproc_per_node=nproc, master_addr=master_addr,
                master_port=port, python=state.get("interpreter") or spec.python,
                run_dir=f"{prep['workdir']}/runs/{lid}", supervisor=prep["supervisor"], rankwrap=prep["rankwrap"],
                launch_id=lid, env={**backend_env(spec, self.backend), **dict(self.env.launch.env), **dict(extra_env)},
                cann_set_env=self.env.cann.set_env if self.env.cann else None,
                vendor_set_env=f"{state.get('install_path', spec.install_path)}/vendors/{vendor}/bin/set_env.bash"
                if vendor else None,
                deadline=timeout + 60, core_limit=self.core_limit,
            )
            nodes[spec.name] = _Node(self.cluster[spec.name], plan, result=NodeResult(spec.name, i))
        result = LaunchResult(lid, {h: n.result for h, n in nodes.items()}, {}, world_size=nproc * len(specs),
                              master=f"{master_addr}:{port}")
        events: queue.Queue[tuple[str, str | None]] = queue.Queue()
        start = time.monotonic()
        try:
            for h, node in nodes.items():
                line = node_command(node.plan, target)
                self.on_event(h, f"launch node {node.plan.node_rank}/{len(nodes)} x{nproc} ranks, master {result.master}")
                log.debug("%s: %s", h, line.display)
                try:
                    node.proc = node.host.transport.spawn(line.text, display=line.display)  # type: ignore[attr-defined]
                except HostError as exc:
                    self._record_failure(result, "infra", f"{h}: cannot start the launch: {exc}")
                    break
                node.start = node.last_line = time.monotonic()
                threading.Thread(target=_pump_lines, args=(h, node.proc, events), daemon=True,
                                 name=f"camit-launch-{h}").start()
            if result.failure is None:
                self._watch(nodes, result, events, start + timeout)
        except KeyboardInterrupt:
            self._record_failure(result, "interrupted", "interrupted (Ctrl-C/SIGTERM): tearing down every node")
            self._teardown(nodes, result, events)
            self._finish(nodes, result, start)
            raise
        self._teardown(nodes, result, events)
        self._finish(nodes, result, start)
        return result

    def _record_failure(self, result: LaunchResult, kind: str, text: str) -> None:
        if result.failure is None:
            result.failure, result.failure_kind = text, kind
            self._failed_at = time.monotonic()
            log.warning("%s", text)

    def _handle(self, node: _Node, line: str, result: LaunchResult) -> None:
        h = node.plan.host
        words = line.split()
        if not words:
            return
        tag = words[0]
        if tag == "RANK" and len(words) >= 3:
            rank = int(words[1]) if words[1].isdigit() else -1
            rr = result.ranks.setdefault(rank, RankResult(rank, h))
            if words[2] == "SIG":
                rr.signal = words[3]
            else:
                rr.exit_code = int(words[3]) if words[3].lstrip("-").isdigit() else None
            if not rr.ok:
                # a rank killed by TERM/KILL is usually a consequence (torchrun or our teardown
                # stopping it); a rank that failed on its own, reported later, is the root cause
                current = result.ranks.get(result.failure_rank) if result.failure_rank is not None else None
                if result.failure is None or (result.failure_kind == "rank" and current is not None
                                              and _secondary(current) and not _secondary(rr)):
                    result.failure_rank = rank
                    if result.failure is None:
                        self._record_failure(result, "rank", rr.describe())
                    else:
                        result.failure = rr.describe()
        elif tag == "EXIT":
            node.result.exit_code = int(words[1])
            if node.result.exit_code != 0:
                self._record_failure(result, "node", f"torchrun on {h} exited {node.result.exit_code}")
        elif tag == "KILLED":
            node.result.killed = words[1] if len(words) > 1 else "?"
        elif tag == "SWEPT":
            node.result.swept = int(words[1])
        elif tag == "DONE":
            node.result.done = True

    def _watch(self, nodes: dict[str, _Node], result: LaunchResult, events: queue.Queue, deadline: float) -> None:
        last_hb = 0.0
        while not all(n.result.done or n.result.lost for n in nodes.values()):
            now = time.monotonic()
            if now - last_hb >= HEARTBEAT:
                last_hb = now
                for n in nodes.values():
                    if not (n.result.done or n.result.lost):
                        try:
                            n.proc.write(b"HB\n")
                        except HostError:
                            pass
            try:
                host, line = events.get(timeout=0.2)
            except queue.Empty:
                host, line = None, None
            if host is not None:
                node = nodes[host]
                node.last_line = time.monotonic()
                if line is None:  # channel closed
                    if not node.result.done:
                        why = getattr(node.proc, "lost", None) or "its SSH channel closed"
                        node.result.lost = why
                        self._record_failure(result, "lost", f"lost {host}: {why}")
                else:
                    self._handle(node, line, result)
            now = time.monotonic()
            for n in nodes.values():
                if not (n.result.done or n.result.lost) and now - n.last_line > LOST_AFTER:
                    n.result.lost = f"no heartbeat for {now - n.last_line:.0f}s"
                    self._record_failure(result, "lost", f"lost {n.plan.host}: {n.result.lost}")
            if now > deadline and result.failure is None:
                result.timed_out = True
                self._record_failure(result, "timeout", f"job timeout after {deadline - min(n.start for n in nodes.values()):.0f}s")
            if result.failure is not None:
                return

    def _teardown(self, nodes: dict[str, _Node], result: LaunchResult, events: queue.Queue) -> None:
        """Tell every live supervisor to kill its run; wait for each DONE (bounded)."""
        live = [n for n in nodes.values() if n.proc is not None and not n.result.done and not n.result.lost]
        t0 = time.monotonic()
        for n in live:
            try:
                n.proc.write(b"KILL\n")
            except HostError:
                n.proc.close()  # stdin EOF does the same
        end = t0 + KILL_GRACE + 8
        while any(not (n.result.done or n.result.lost) for n in live) and time.monotonic() < end:
            try:
                host, line = events.get(timeout=0.1)
            except queue.Empty:
                continue
            node = nodes[host]
            if line is None:
                if not node.result.done:
                    node.result.lost = node.result.lost or "channel closed during teardown"
            else:
                self._handle(node, line, result)
        for n in nodes.values():
            if n.proc is not None:
                n.proc.close()
        if result.failure is not None:
            result.teardown_seconds = round(time.monotonic() - getattr(self, "_failed_at", t0), 3)

    def _finish(self, nodes: dict[str, _Node], result: LaunchResult, start: float) -> None:
        now_mono, now_wall = time.monotonic(), time.time()
        wall = lambda mono: now_wall - (now_mono - mono)  # noqa: E731  monotonic → epoch for the timeline
        for n in nodes.values():
            n.result.duration = round(now_mono - n.start, 3) if n.start else 0.0
        result.duration = now_mono - start
        if self.rundir is not None:
            from framework.report import record_phase

            failed_at = getattr(self, "_failed_at", None) if result.failure else None
            for h, n in nodes.items():
                if n.start:
                    record_phase(self.rundir.path, h, "run", wall(n.start), wall(failed_at or now_mono))
                if failed_at is not None:
                    record_phase(self.rundir.path, h, "teardown", wall(failed_at), now_wall)
            t_fetch = time.time()
            self._fetch(nodes, result)
            for h in nodes:
                record_phase(self.rundir.path, h, "collect", t_fetch, time.time())
            self.rundir.write_json(f"launch-{result.launch_id}.json", result.to_json())
            result.report_dir = str(self.rundir.path)
        for r in range(result.world_size):
            result.ranks.setdefault(r, RankResult(r, self._host_of(r, nodes)))
        if result.failure is None and not result.ok:
            missing = [r.describe() for r in result.ranks.values() if not r.ok]
            self._record_failure(result, "rank", "; ".join(missing[:4]))
        failed = result.ranks.get(result.failure_rank) if result.failure_rank is not None else None
        if failed is None:
            failed = next((r for r in sorted(result.ranks.values(), key=lambda r: r.rank) if not r.ok and r.log), None)
        if failed is not None and failed.log and Path(failed.log).exists():
            lines = Path(failed.log).read_text(errors="replace").splitlines()
            result.failure_tail = "\n".join(lines[-20:])

    def _host_of(self, rank: int, nodes: dict[str, _Node]) -> str:
        for n in nodes.values():
            p = n.plan
            if p.node_rank * p.nproc_per_node <= rank < (p.node_rank + 1) * p.nproc_per_node:
                return p.host
        return "?"

    def _host_dir(self, host: str, launch_id: str) -> Path:
        base = Path(self.rundir.path) / host
        return base / launch_id if self.per_launch_dirs else base

    def _fetch(self, nodes: dict[str, _Node], result: LaunchResult) -> None:
        """Bring each node's run folder back as ``<report>/<host>/`` (one tar stream per node)."""

        def fetch(host: Host) -> None:
            node = nodes[host.name]
            run_dir = node.plan.run_dir
            tgz = run_dir + ".tgz"
            q = commands.quote
            # only what a rank leaves for us — never raw cores (a relative core_pattern drops them
            # here; the core-dump collector fetches those compressed and capped)
            names = " -o ".join(f"-name {q(p)}" for p in FETCH_PATTERNS)
            host.check(commands.ShellScript(f"cd {q(run_dir)} && find . -maxdepth 1 -type f \\( {names} \\) -print0 | "
                                           f"tar czf {q(tgz)} --null -T -"), timeout=120)
            local_dir = self._host_dir(host.name, result.launch_id)
            local_dir.mkdir(parents=True, exist_ok=True)
            tmp = local_dir / ".fetch.tgz"
            host.get(tgz, tmp)
            host.run(["rm", "-rf", "--", tgz] + ([] if self.keep_remote else [run_dir]), timeout=60)
            with tarfile.open(tmp) as tar:
                for member in tar.getmembers():
                    name = Path(member.name).name
                    if not member.isfile() or not name or name.startswith("."):
                        continue
                    data = tar.extractfile(member)
                    if data is not None:
                        (local_dir / name).write_bytes(data.read())
            tmp.unlink(missing_ok=True)

        got = self.cluster.map(fetch, [h for h, n in nodes.items() if not n.result.lost])
        for h, value in got.items():
            if isinstance(value, BaseException):
                log.warning("%s: could not fetch logs: %s", h, value)
        for h in nodes:
            d = self._host_dir(h, result.launch_id)
            for status in sorted(d.glob("rank*.json")):
                try:
                    import json

                    st = json.loads(status.read_text())
                except ValueError:
                    continue
                rank = st.get("rank")
                if not isinstance(rank, int):
                    continue
                rr = result.ranks.setdefault(rank, RankResult(rank, h))
                rr.exit_code, rr.signal = st.get("exit_code"), st.get("signal")
            for rank_log in d.glob("rank*.log"):
                stem = rank_log.stem[4:]
                if stem.isdigit():
                    rr = result.ranks.setdefault(int(stem), RankResult(int(stem), h))
                    rr.log = str(rank_log)
                    junit = d / f"rank{stem}.xml"
                    rr.junit = str(junit) if junit.exists() else None


def _secondary(rank: RankResult) -> bool:
    return rank.signal in ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP")


def _pump_lines(host: str, proc: Any, events: queue.Queue) -> None:
    while True:
        line = proc.readline(timeout=None)
        if not line:
            events.put((host, None))
            return
        events.put((host, line.strip()))


__all__ = ["LaunchFailed", "LaunchResult", "Launcher", "NodePlan", "RankResult", "Target", "backend_env",
           "node_command"]
