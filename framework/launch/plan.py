"""The pure half of launch: targets, backend variables, node plans and the exact node
command line."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import commands
from framework.ascend.nic import (
    DEFAULT_NIC,
    HostNet,
    net_from_records,
    net_script,
    rendezvous_ip,
    socket_ifname,
)
from framework.ascend.timeouts import PG_TIMEOUT_VAR, Timeouts, derive
from framework.ascend.tools import NPU_CORE_LIMIT
from framework.commands import ShellScript
from framework.errors import UsageError
from framework.records.modules import RECORD_FILE
from framework.remote import protocol
from framework.remote.layout import DeployState, HostLayout, sh_sha_ok, sh_verified
from framework.remote.sections import read_records, sh_tag
from framework.setenv import env_steps, extra_of, require_cann

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig, HostSpec

HEARTBEAT = 2.0
#: a node that said nothing for this long is lost (its supervisor stops the run after SUPERVISOR_SILENCE);
#: generous enough for a controller starved on a loaded 2-core machine (12 s was seen to misfire)
LOST_AFTER = 20.0
SUPERVISOR_SILENCE = 25.0
KILL_GRACE = 2.0
#: seconds between asking the ranks for their Python stacks (job timeout) and the kill
STACK_WAIT = 3.0
#: what the supervisor's py-spy dumps may take before the stacks' wait
PYSPY_WAIT = protocol.PYSPY_TIMEOUT + protocol.PLAIN_TIMEOUT
DEFAULT_CORE_LIMIT = "unlimited"
#: the launcher's default: :data:`NPU_CORE_LIMIT` on NPU hosts, :data:`DEFAULT_CORE_LIMIT` elsewhere
AUTO_CORE_LIMIT = "auto"
#: ``ulimit -c`` (1024-byte blocks) of ranks on NPU hosts: 4 GiB. An NPU process maps terabytes of device and
#: host-shared memory (a full core is ~100 GB); with :data:`NPU_COREDUMP_FILTER` the Python heap and stacks fit.
#: ``/proc/<pid>/coredump_filter`` of ranks on NPU hosts (bits per core(5): 0 anonymous private, 1 anonymous
#: shared, 2 file-backed private, 3 file-backed shared, 4 ELF headers, 5 private huge pages, 6 shared huge
#: pages, 7/8 DAX): anonymous private memory and ELF headers only, no shared or hugetlb mappings
NPU_COREDUMP_FILTER = "0x11"
PORT_RETRIES = 3
#: files of a node's run folder that come back to the report folder
FETCH_PATTERNS = ("rank*.log", "rank*.json", "rank*.xml", "rank*.pyspy", "torchrun.log", "perf-*.json", "coverage-*",
                  "hccl_trace_rank_*", RECORD_FILE.format(rank="*"))
#: folders of a node's run folder that come back whole: the plogs (``ASCEND_PROCESS_LOG_PATH``) and the
#: NPU state a failed launch saves (framework.launch.devices)
FETCH_DIRS = ("ascend", "npu-state")
#: the run folder's plog root (``ASCEND_PROCESS_LOG_PATH``)
ASCEND_LOG_DIR = "ascend"
#: a rendezvous that failed because another process had the master port
PORT_TAKEN = ("address already in use", "eaddrinuse", "errno 98")
#: an HCCL host-port clash at comm init (EI0019, or the plog's "listen on ip[...] ... fail"): retried the same way
#: (npu-fidelity.md §3, ascend-hosts.md §9)
HCCL_PORT_CLASH = ("ei0019", "listen on ip")



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


#: the variable that pins each other backend's sockets to the rendezvous NIC
SOCKET_IFNAME = {"gloo": "GLOO_SOCKET_IFNAME", "nccl": "NCCL_SOCKET_IFNAME"}


def backend_env(spec: HostSpec, backend: str, *, nic: str = DEFAULT_NIC, net: HostNet | None = None,
                timeouts: Timeouts | None = None) -> dict[str, str]:
    """The variables the communication backend needs on this node (ascend-hosts.md §7).

    ``nic`` is the NIC role of the rendezvous (``launch.rendezvous_nic``); ``net`` the host's
    devices and addresses (``ip -o link``/``ip -o addr``): a ``*_SOCKET_IFNAME`` only ever names a
    device listed there, none when the host was not probed. ``timeouts``: HCCL's connect and exec
    timeouts on hccl (:func:`framework.ascend.timeouts.derive`). ``HCCL_BUFFSIZE`` is not here: the
    CAM prefill launches ask for it (suites/cam/camsuite.py), every other launch keeps CANN's default.
    """
    ifname = socket_ifname(spec, nic, net)
    if backend == "hccl":
        return _hccl_env(spec, nic, ifname, timeouts)
    if backend not in SOCKET_IFNAME:
        raise UsageError(f"unknown backend {backend!r}")
    return {SOCKET_IFNAME[backend]: ifname} if ifname else {}


def _hccl_env(spec: HostSpec, nic: str, ifname: str | None, timeouts: Timeouts | None) -> dict[str, str]:
    """hccl's variables (torch_npu jobs also build gloo groups, the stand-in's transport: its NIC too)."""
    env = {"HCCL_IF_IP": rendezvous_ip(spec, nic)}
    if ifname:
        env.update(HCCL_SOCKET_IFNAME=f"={ifname}", GLOO_SOCKET_IFNAME=ifname)
    if timeouts is not None:
        env.update(HCCL_CONNECT_TIMEOUT=str(timeouts.connect), HCCL_EXEC_TIMEOUT=str(timeouts.exec))
    if spec.npu.visible:
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(d) for d in spec.npu.visible)
    return {k: v for k, v in env.items() if v}


def run_folder_env(spec: HostSpec, backend: str, run_dir: str) -> dict[str, str]:
    """Variables that keep a launch's diagnostics in its run folder, so they come back with it.

    NPU hosts: ``ASCEND_PROCESS_LOG_PATH`` (the plog root; CANN's priority is it > ``ASCEND_WORK_PATH`` >
    ``$HOME/ascend/log``, npu-fidelity.md). hccl: ``TORCH_HCCL_DUMP_ON_TIMEOUT=1`` — torch_npu reads it
    (torch_npu/csrc/distributed/ProcessGroupHCCL.hpp, ``TORCH_HCCL_DUMP_ON_TIMEOUT``; read in
    ProcessGroupHCCL.cpp) and dumps its flight recorder on a watchdog timeout to
    ``TORCH_HCCL_DEBUG_INFO_TEMP_FILE<rank>`` (default ``/tmp/hccl_trace_rank_``, HCCLUtils.cpp), here
    ``<run folder>/hccl_trace_rank_<rank>``. The env's ``launch.env`` overrides any of them.
    """
    env: dict[str, str] = {}
    if spec.npu.count:
        env["ASCEND_PROCESS_LOG_PATH"] = f"{run_dir}/{ASCEND_LOG_DIR}"
    if backend == "hccl":
        env["TORCH_HCCL_DUMP_ON_TIMEOUT"] = "1"
        env["TORCH_HCCL_DEBUG_INFO_TEMP_FILE"] = f"{run_dir}/hccl_trace_rank_"
    return env


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
    extra_set_env: tuple[str, ...] = ()
    coredump_filter: str | None = None
    #: remote path → sha256 of the shipped programs and script, verified before anything runs
    verify: Mapping[str, str] = field(default_factory=dict)


def secret_env(env: Mapping[str, Any]) -> dict[str, str]:
    """The secret variables of a node's env (values with ``reveal()``, such as ``config.Secret``), revealed.

    They never go into the command line (``/proc/<pid>/cmdline`` and ``ps`` show it to every local user for
    the whole job): :func:`node_command` starts the supervisor with ``--env-stdin`` and the launcher sends
    them as the first line on its stdin (:func:`framework.remote.protocol.env_line`).
    """
    return {k: str(v.reveal()) for k, v in env.items() if callable(getattr(v, "reveal", None))}


def node_command(plan: NodePlan, target: Target) -> commands.Line:
    """The bash line that starts this node's supervised torchrun (pure; tested line by line).

    Secret variables are left out of it: the supervisor reads them from its stdin (:func:`secret_env`).
    """
    q = commands.quote
    secret = secret_env(plan.env)
    public = {k: v for k, v in plan.env.items() if k not in secret}
    torchrun = [plan.python, "-m", "torch.distributed.run", "--nnodes", str(plan.nnodes),
                "--nproc-per-node", str(plan.nproc_per_node), "--node-rank", str(plan.node_rank),
                "--master-addr", plan.master_addr, "--master-port", str(plan.master_port),
                "--no-python", plan.python, plan.rankwrap, "--status-dir", plan.run_dir, "--", *target.python_args()]
    # the tag names the node too: the lab's hosts share one PID namespace, and a
    # sweep on one node must never reach another node's processes
    supervisor = [plan.python, plan.supervisor, "--run-id", f"{plan.launch_id}.{plan.host}",
                  "--status-dir", plan.run_dir,
                  "--deadline", f"{plan.deadline:g}", "--grace", f"{KILL_GRACE:g}",
                  "--heartbeat", f"{HEARTBEAT:g}", "--silence", f"{plan.silence:g}",
                  "--stack-wait", f"{STACK_WAIT:g}", *([protocol.ENV_STDIN_FLAG] if secret else []), "--", *torchrun]

    def assemble(redact: bool) -> str:
        # TMPDIR under the run folder: torchrun's torchelastic_* and torch's caches go there and
        # leave with the run folder instead of piling up in the host's /tmp
        # the run folder private (umask 077 while it is made); what it runs verified by hash first
        steps = [*(sh_verified(p, sha, "the shipped program") for p, sha in plan.verify.items()),
                 f"{{ _um=$(umask); umask 077; mkdir -p {q(plan.run_dir + '/tmp')}; umask \"$_um\"; }}",
                 f"cd {q(plan.run_dir)}"]
        if plan.core_limit:
            lim = q(plan.core_limit)
            steps.append(f"{{ ulimit -S -c {lim} 2>/dev/null || ulimit -S -c \"$(ulimit -H -c)\"; }}")
        if plan.coredump_filter:
            # inherited by the supervisor, torchrun and the ranks (kept across fork and execve, core(5))
            steps.append(f"{{ echo {q(plan.coredump_filter)} > /proc/self/coredump_filter; }} 2>/dev/null || true")
        steps += env_steps(plan.cann_set_env, plan.extra_set_env, plan.vendor_set_env)
        exported = commands.export_env({"TMPDIR": plan.run_dir + "/tmp", **public}, redact=redact)
        steps.append(exported)
        steps.append("exec " + commands.join(supervisor))
        return " && ".join(steps)

    return commands.Line(
        "bash -c " + q(assemble(False)), "bash -c " + q(assemble(True))
    )


def launch_label(name: str | None) -> str:
    """The part of a launch id taken from its name: safe in a path, a file name and an environment value.

    Test and module names can hold spaces, quotes, slashes or unicode; the launch id becomes a run
    folder, ``launch-<id>.json`` and the run tag, so only ``[A-Za-z0-9_.-]`` survive (32 at most).
    """
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", name or "").strip("_.-")[:32]
    return label or "launch"


def free_port_argv(python: str, addr: str, avoid: range = range(0)) -> list[str]:
    """argv printing a free TCP port on ``addr`` outside ``avoid`` (bound and released at once).

    A port the kernel hands out inside ``avoid`` (HCCL's host ports lie inside Linux's default
    ephemeral range, 32768-60999) stays bound while the next one is asked for.
    """
    code = ("import socket\nheld = []\nfor _ in range(200):\n    s = socket.socket()\n"
            f"    s.bind(({addr!r}, 0))\n    p = s.getsockname()[1]\n"
            f"    if not {avoid.start} <= p < {avoid.stop}:\n        print(p)\n        break\n    held.append(s)\n")
    return [python, "-c", code]


@dataclass(frozen=True)
class Prepared:
    """One host made ready for launches: its layout, the shipped programs, its deploy state."""

    layout: HostLayout
    supervisor: str
    rankwrap: str
    script: str | None = None
    state: DeployState = field(default_factory=DeployState)
    #: the host's devices and addresses (None: not probed)
    net: HostNet | None = None
    #: remote path → sha256 of what the node's command runs (checked right before it starts)
    shas: Mapping[str, str] = field(default_factory=dict)


def shipped_files(layout: HostLayout, programs: Mapping[str, tuple[Path, str]],
                  script: tuple[Path, str] | None = None) -> dict[str, Path]:
    """remote path → local path of what a host needs for launches (content-addressed).

    ``programs``: name → (local path, sha256) of the shipped programs; ``script``: a local target
    script and its sha256.
    """
    files = {layout.bin(name, sha): local for name, (local, sha) in programs.items()}
    if script is not None:
        local, sha = script
        files[layout.target(sha, local.name)] = local
    return files


def shipped_shas(layout: HostLayout, programs: Mapping[str, tuple[Path, str]],
                 script: tuple[Path, str] | None = None) -> dict[str, str]:
    """remote path → sha256 of :func:`shipped_files` (what the host's copies must hash to)."""
    shas = {layout.bin(name, sha): sha for name, (_local, sha) in programs.items()}
    if script is not None:
        shas[layout.target(script[1], script[0].name)] = script[1]
    return shas


def prepared_for(layout: HostLayout, programs: Mapping[str, tuple[Path, str]], script: tuple[Path, str] | None = None,
                 *, state: DeployState | None = None, net: HostNet | None = None) -> Prepared:
    """The :class:`Prepared` of a host with this layout once :func:`shipped_files` are there: the runner's after
    its probe (``state``, ``net`` from it), a dry run's without one (no deploy state, no devices known)."""
    paths = list(shipped_files(layout, programs, script))
    return Prepared(layout, supervisor=paths[0], rankwrap=paths[1], script=paths[2] if script is not None else None,
                    state=state if state is not None else DeployState(), net=net,
                    shas=shipped_shas(layout, programs, script))


#: the record of :func:`prepare_probe` for a file already on the host (``@@have <path>``)
HAVE_TAG = "have"


def prepare_probe(files: Mapping[str, str], layout: HostLayout) -> ShellScript:
    """sh: the workdir's guard (an unsafe one ends it with ``@@unsafe``), a ``@@have <path>`` record for each of
    ``files`` (remote path → sha256) on the host with that very content, then the deploy state's."""
    q = commands.quote
    probe = "; ".join(f"{{ {sh_sha_ok(p, sha)} && {sh_tag(HAVE_TAG, q(p))}; }}" for p, sha in files.items())
    return ShellScript(f"{layout.guard_script()}; {probe}; {DeployState.read_script(layout)}; {net_script()}")


def parse_prepare_probe(stdout: str) -> tuple[set[str], DeployState]:
    records = read_records(stdout)
    have = {r.value for r in records if r.tag == HAVE_TAG}
    return have, DeployState.from_doc(DeployState.from_records(records))


def parse_net(stdout: str) -> HostNet | None:
    """The host's devices and addresses from the prepare probe's ``@@links``/``@@addrs`` records."""
    return net_from_records(read_records(stdout))


def devices_per_node(env: EnvConfig) -> int:
    """Usable devices of the smallest NPU host (``npu.visible``, else ``npu.count``); 0 when no host declares any."""
    return min((h.npu.devices for h in env.hosts.values() if h.npu.devices), default=0)


def check_ranks_fit(specs: Sequence[HostSpec], nproc: int) -> None:
    """One rank per usable device: raise UsageError naming the first NPU host ``nproc`` ranks do not fit."""
    for spec in specs:
        if spec.npu.devices and nproc > spec.npu.devices:
            which = f"npu.visible {list(spec.npu.visible)}" if spec.npu.visible else f"npu.count {spec.npu.count}"
            raise UsageError(f"host {spec.name}: {nproc} ranks per node, but it has {spec.npu.devices} usable "
                             f"devices ({which}); one rank per device")


def rank_core_limit(spec: HostSpec, requested: str | None) -> str | None:
    """The ``ulimit -c`` of a node's ranks: ``auto`` is bounded on NPU hosts, unlimited elsewhere."""
    if requested != AUTO_CORE_LIMIT:
        return requested
    return NPU_CORE_LIMIT if spec.npu.soc != "cpu" else DEFAULT_CORE_LIMIT


def plan_nodes(env: EnvConfig, names: Sequence[str], prepared: Mapping[str, Prepared], *, nproc: int,
               backend: str, master_port: int, launch_id: str, extra_env: Mapping[str, Any],
               timeout: float, core_limit: str | None) -> dict[str, NodePlan]:
    """host → its :class:`NodePlan`, node 0 first (the hosts in ``names`` order)."""
    specs = [env.hosts[n] for n in names]
    check_ranks_fit(specs, nproc)
    nic = env.launch.rendezvous_nic
    master_addr = rendezvous_ip(specs[0], nic)
    timeouts = derive(timeout)
    plans = {}
    for i, spec in enumerate(specs):
        require_cann(env, spec)
        prep = prepared[spec.name]
        chosen = deployed(spec, prep.layout.workdir, prep.state)
        run_dir = prep.layout.run_dir(launch_id)
        base = backend_env(spec, backend, nic=nic, net=prep.net, timeouts=timeouts)
        plans[spec.name] = NodePlan(
            host=spec.name, node_rank=i, nnodes=len(specs), nproc_per_node=nproc, master_addr=master_addr,
            master_port=master_port, python=chosen.python,
            run_dir=run_dir, supervisor=prep.supervisor, rankwrap=prep.rankwrap,
            launch_id=launch_id,
            env={**base, PG_TIMEOUT_VAR: str(timeouts.pg), **run_folder_env(spec, backend, run_dir),
                 **dict(env.launch.env), **dict(extra_env)},
            cann_set_env=env.cann.set_env if env.cann else None,
            vendor_set_env=chosen.vendor_set_env,
            deadline=timeout + 60, core_limit=rank_core_limit(spec, core_limit), extra_set_env=extra_of(env),
            coredump_filter=NPU_COREDUMP_FILTER if spec.npu.soc != "cpu" else None, verify=dict(prep.shas),
        )
    return plans


@dataclass(frozen=True)
class Deployed:
    """What the ranks of a host run with: what deploy recorded there, the env's where it recorded
    nothing."""

    python: str
    install_path: str
    vendor: str | None = None
    #: the vendor package's ``set_env`` (None: no vendor package)
    vendor_set_env: str | None = None


def deployed(spec: HostSpec, workdir: str, state: DeployState) -> Deployed:
    """The interpreter and install path deploy recorded on the host (else the env's), and its
    vendor's ``set_env``: the same choice for a launch and for the coverage probe."""
    install_path = state.install_path or spec.install_path
    if not state.vendor:
        return Deployed(state.interpreter or spec.python, install_path)
    vendor_set_env = HostLayout(workdir, install_path).vendor_set_env(state.vendor)
    return Deployed(state.interpreter or spec.python, install_path, state.vendor, vendor_set_env)


#: variables of a node's env that the launch record shows (framework.launch.result.NodeResult.comm_env)
COMM_PREFIXES = ("HCCL_", "GLOO_", "NCCL_", "TP_SOCKET", "ASCEND_RT_VISIBLE", "CAMIT_PG_TIMEOUT")


def comm_env(env: Mapping[str, Any]) -> dict[str, str]:
    """The communication variables of a node's env, as strings (a secret-looking value stays redacted)."""
    return {k: (v if isinstance(v, str) else "***") for k, v in env.items() if k.startswith(COMM_PREFIXES)}


def host_of_rank(rank: int, plans: Mapping[str, NodePlan]) -> str:
    for p in plans.values():
        if p.node_rank * p.nproc_per_node <= rank < (p.node_rank + 1) * p.nproc_per_node:
            return p.host
    return "?"
