"""The ``camit`` console script: manual cluster validation from a shell.

Exit codes (every sub-command, :data:`EXIT_CODES`, printed by every ``--help``): 0 ok; 1 a
command/test/rank/check failed or timed out; 2 usage or environment-file error; 3 infrastructure
(a host unreachable, authentication or host key refused, hosts leased by someone else); 130
interrupted (Ctrl-C, SIGTERM). User errors print one line, never a traceback (``-v`` adds logging,
``CAMIT_DEBUG=1`` re-raises). Every verb that changes hosts (``deploy``, ``run``, ``collect``,
``exec --lease``) holds the hosts' lease as the pytest path does; ``check``, ``exec`` and
``lease status`` work beside a holder. ``camit completion bash|zsh`` prints a completion script
generated from this parser (:mod:`framework.completion`).

Start-up is on the hot path of every command (``camit exec`` fans out in well under a second): building
the parser imports argparse and stdlib-only camit modules only; each command imports what it needs when
it runs (pydantic and yaml for the env file, paramiko to connect, rich only to print on a terminal).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import __version__, console
from framework.calib import verb as calib_verb
from framework.commands import ShellScript
from framework.errors import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    FrameworkError,
    UsageError,
    reason_of,
)
from framework.perf import verb as perf_verb

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster
    from framework.launch.result import LaunchResult, RankResult
    from framework.launch.runwatch import WatchOutcome
    from framework.lease import Lease
    from framework.records.folder import RunDir
    from framework.result import Result


#: ``collect --logs``: the newest files of ``~/ascend/log`` packed, up to this many bytes (uncompressed)
COLLECT_LOG_BYTES = 1 << 30

#: what each exit status of every ``camit`` command means (the ``--help`` epilogs print it)
EXIT_CODES = (
    (EXIT_OK, "ok"),
    (EXIT_FAILED, "failed: a command, test, rank or check failed or timed out"),
    (EXIT_USAGE, "usage or environment-file error (one line naming the option, or the file and key)"),
    (EXIT_INFRA, "infrastructure: a host unreachable or lost, authentication or host key refused, "
                 "hosts leased by someone else"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C, SIGTERM): torn down, report folder and lease handled"),
)

#: ``--help`` examples per command path
EXAMPLES: dict[str, tuple[str, ...]] = {
    "camit": ("camit check --env test_env.yaml", "camit deploy --env test_env.yaml",
              "camit run --env test_env.yaml --nproc-per-node 2 -- examples/hello_ranks.py",
              'eval "$(camit completion bash)"'),
    "camit env validate": ("camit env validate test_env.yaml", "camit env validate test_env.yaml --json"),
    "camit exec": ("camit exec --env e.yaml -- uname -r", "camit exec --env e.yaml --hosts node1,node2 -- 'npu-smi info | head'",
                   "camit exec --env e.yaml --lease --wait 600 -- 'rm -rf /var/tmp/camit/old'"),
    "camit deploy": ("camit deploy --env e.yaml",
                     "camit deploy --env e.yaml --hosts node1 --no-relay --wait 900",
                     "camit deploy --env e.yaml --dry-run   # what would go where; no host contacted"),
    "camit run": ("camit run --env e.yaml --nproc-per-node 2 -- examples/hello_ranks.py",
                  "camit run --env e.yaml --json -- -m my.module",
                  "camit run --env e.yaml --dry-run -- examples/hello_ranks.py   # each node's command; nothing started"),
    "camit check": ("camit check --env e.yaml", "camit check --env e.yaml --hosts node3 --json"),
    "camit collect": ("camit collect --env e.yaml", "camit collect --env e.yaml --logs --wait 600"),
    "camit lease status": ("camit lease status --env e.yaml",),
    "camit lease release": ("camit lease release --env e.yaml", "camit lease release --env e.yaml --hosts node2 --force"),
    "camit lease run": ("camit lease run --env e.yaml -- pytest suites/cam --env e.yaml",),
    "camit completion": ('eval "$(camit completion bash)"', 'eval "$(camit completion zsh)"',
                         "camit completion bash > /etc/bash_completion.d/camit"),
}


def epilog(path: str) -> str:
    """The ``--help`` epilog of a command: its examples, then the exit-code table."""
    lines = []
    if path in EXAMPLES:
        lines += ["examples:", *(f"  {e}" for e in EXAMPLES[path]), ""]
    lines += ["exit codes:", *(f"  {code:<4} {text}" for code, text in EXIT_CODES)]
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        if self.epilog is None and self.add_help:
            self.epilog = epilog(self.prog)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _env_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", metavar="FILE", default=None,
                   help="test_env.yaml (default: $CAMIT_ENV, else /etc/ubus_ci/test_env.yaml)")


def _hosts_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", metavar="H1,H2", help="only these hosts (names from host_info)")


def _lease_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for hosts another controller holds (default: fail naming the holder)")
    p.add_argument("--owner", default=None, help="lease owner (default: $BUILD_URL, else user@host)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="camit", description="Multi-host integration tests for CAM on Ascend clusters.")
    parser.add_argument("--version", action="version", version=f"camit {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: paramiko too)")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    env = sub.add_parser("env", help="environment files")
    env_sub = env.add_subparsers(dest="env_command", parser_class=_Parser, metavar="ACTION")
    val = env_sub.add_parser("validate", help="validate a test_env.yaml and print a summary")
    val.add_argument("file", metavar="FILE")
    val.add_argument("--json", action="store_true", help="print the normalized, redacted environment as JSON")

    ex = sub.add_parser("exec", help="run one command on every host")
    _env_arg(ex)
    _hosts_arg(ex)
    ex.add_argument("--timeout", type=float, default=None, metavar="S",
                    help="per-host wall-clock timeout (default: command_timeout of the env)")
    ex.add_argument("--json", action="store_true", help="machine-readable results")
    ex.add_argument("--tail", type=int, default=3, metavar="N", help="output lines shown per host")
    ex.add_argument("--lease", action="store_true",
                    help="hold the hosts' lease while the command runs (without it exec works beside a holder)")
    _lease_args(ex)
    ex.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...")

    dp = sub.add_parser("deploy", help="deploy the .run package and the wheel to every host")
    _env_arg(dp)
    _hosts_arg(dp)
    dp.add_argument("--no-relay", action="store_true", help="push directly from here to every host")
    dp.add_argument("--report-dir", metavar="D", default="reports", help="run folders go here (default: reports)")
    dp.add_argument("--json", action="store_true", help="print the manifest as JSON")
    dp.add_argument("--dry-run", action="store_true",
                    help="print what would be sent and run on each host; no connection, no lease, nothing changed")
    _lease_args(dp)

    rn = sub.add_parser("run", help="launch a torchrun target across the cluster")
    _env_arg(rn)
    _hosts_arg(rn)
    rn.add_argument("--nproc-per-node", type=int, default=None, metavar="P")
    rn.add_argument("--timeout", type=float, default=600.0, metavar="S", help="job timeout (default 600)")
    rn.add_argument("--report-dir", metavar="D", default="reports", help="run folders go here (default: reports)")
    rn.add_argument("--json", action="store_true", help="print the result as JSON")
    rn.add_argument("--dry-run", action="store_true",
                    help="print each node's exact command line; no connection, no lease, nothing started")
    rn.add_argument("--keep-remote", action="store_true", help="leave the run folders on the hosts")
    rn.add_argument("--core-policy", choices=("fail", "warn", "ignore"), default=None,
                    help="what a core dump during the run does: fail (default, or $CAMIT_CORE_POLICY), warn, ignore")
    _lease_args(rn)
    rn.add_argument("target", nargs=argparse.REMAINDER, metavar="-- SCRIPT|-m MODULE [ARGS]")

    from framework.preflight.limits import Limits  # stdlib-only: the probe module imports framework.launch

    ck = sub.add_parser("check", help="preflight: is every host ready? (a host x check table)")
    _env_arg(ck)
    _hosts_arg(ck)
    ck.add_argument("--json", action="store_true", help="machine-readable results")
    ck.add_argument("--min-free-gb", type=float, default=Limits.min_free_gb, metavar="G",
                    help=f"free space needed in the workdir (default {Limits.min_free_gb:g})")
    ck.add_argument("--max-skew", type=float, default=Limits.max_skew, metavar="S",
                    help=f"clock skew allowed between hosts and to this machine (default {Limits.max_skew:g})")
    ck.add_argument("--timeout", type=float, default=Limits.probe_timeout, metavar="S",
                    help=f"per-host probe timeout (default {Limits.probe_timeout:g})")
    ck.add_argument("--heal", action="store_true",
                    help="re-admit suspect hosts that pass the preflight and a two-node smoke run")
    ck.add_argument("--pairs", action="store_true",
                    help="instead of the preflight: time gloo send-recv round trips between node pairs "
                         "in rounds, name a slow node")
    ck.add_argument("--rounds", type=int, default=4, metavar="N",
                    help="--pairs: rounds to run (default 4)")

    co = sub.add_parser("collect", help="collect diagnostics (npu-smi, hccn_tool, versions, logs) from every host")
    _env_arg(co)
    _hosts_arg(co)
    co.add_argument("--report-dir", metavar="D", default="reports", help="run folders go here (default: reports)")
    co.add_argument("--logs", action="store_true", help="also fetch ~/ascend/log from every host (a tarball each)")
    co.add_argument("--json", action="store_true", help="print what was collected as JSON")
    co.add_argument("--diag", action="store_true",
                    help="also write fault-bundle/<host>/ in ascend-fd's input layout (and run ascend-fd if installed)")
    _lease_args(co)

    dg = sub.add_parser("diagnose", help="where the ranks of a running launch are: stacks grouped, odd ones named")
    _env_arg(dg)
    _hosts_arg(dg)
    dg.add_argument("launch_id", metavar="LAUNCH_ID",
                    help="a launch id, or its start (the run id): every running launch it begins")
    lb = sub.add_parser("lab", help="the network-namespace lab: up | down | status | fault (python -m framework.lab)",
                        add_help=False)
    lb.add_argument("lab_args", nargs=argparse.REMAINDER, metavar="up|down|status|fault ...")

    ls = sub.add_parser("lease", help="cluster leases: status, release, or run a command holding one")
    ls_sub = ls.add_subparsers(dest="lease_command", parser_class=_Parser, metavar="ACTION")
    lst = ls_sub.add_parser("status", help="who holds each host")
    lrl = ls_sub.add_parser("release", help="remove stale leases and the one of --token (--force: any)")
    lrn = ls_sub.add_parser("run", help="hold the lease on the hosts while a local command runs")
    for p in (lst, lrl, lrn):
        _env_arg(p)
        _hosts_arg(p)
    for p in (lst, lrl):
        p.add_argument("--json", action="store_true", help="machine-readable results")
    lrl.add_argument("--force", action="store_true", help="also remove a live lease of someone else")
    lrl.add_argument("--token", help="also remove the live lease holding this token (a lease's own id)")
    lrn.add_argument("--owner", default=None, help="lease owner (default: $BUILD_URL, else user@host)")
    lrn.add_argument("--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds for a held lease")
    lrn.add_argument("--ttl", type=float, default=300.0, metavar="S", help="lease validity after a heartbeat")
    lrn.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...")

    perf_verb.add_parser(sub, _Parser)
    calib_verb.add_parser(sub, _Parser)

    cp = sub.add_parser("completion", help="print a shell completion script (bash or zsh)")
    cp.add_argument("shell", choices=("bash", "zsh"))
    return parser


def _load_env(path: str | None) -> EnvConfig:
    from framework.config import load, resolve_env_path

    return load(resolve_env_path(path)[0])


def _split_hosts(value: str | None) -> list[str] | None:
    return [h.strip() for h in value.split(",") if h.strip()] if value else None


def cmd_env_validate(args: argparse.Namespace) -> int:
    env = _load_env(args.file)
    if args.json:
        console.print_json(env.redacted())
        return EXIT_OK
    rows = env.summary_rows()
    headers = list(rows[0].keys()) if rows else ["name"]
    console.print_table(headers, [[r[h] for h in headers] for r in rows],
                        title=f"{args.file}: valid, {len(rows)} host(s)")
    return EXIT_OK


def _exec_row(name: str, value: Result | BaseException, tail: int) -> tuple[list[str], dict[str, Any], int]:
    """One host of ``camit exec``: its table row, its JSON record and its exit status."""
    if isinstance(value, BaseException):
        code = getattr(value, "exit_code", EXIT_INFRA)
        status = "UNREACHABLE" if code == EXIT_INFRA else "ERROR"
        text = reason_of(value, name)
        return [name, status, "-", text], {"host": name, "status": status.lower(), "error": text}, code
    status = "TIMEOUT" if value.timed_out else str(value.rc)
    shown = "\n".join((value.stdout.strip() or value.stderr.strip()).splitlines()[-tail:])
    record = {"host": name, "rc": value.rc, "timed_out": value.timed_out,
              "duration": round(value.duration, 3), "stdout": value.stdout, "stderr": value.stderr}
    return [name, status, f"{value.duration:.2f}s", shown], record, EXIT_OK if value.ok else EXIT_FAILED


def cmd_exec(args: argparse.Namespace) -> int:
    from framework.hosts import Cluster

    argv = list(args.cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("camit exec: no command given (camit exec --env FILE -- CMD...)")
    # one word is a shell script as typed; several are joined like ssh does
    command = ShellScript(argv[0] if len(argv) == 1 else " ".join(argv))
    env = _load_env(args.env)
    cluster = Cluster.from_env(env, _split_hosts(args.hosts))
    with cluster, (_leased(args, cluster) if args.lease else contextlib.nullcontext()):
        group = cluster.run(command, timeout=args.timeout)
    rows, payload, worst = [], [], EXIT_OK
    for name, value in group.items():
        row, record, code = _exec_row(name, value, args.tail)
        rows.append(row)
        payload.append(record)
        worst = max(worst, code)
    if args.json:
        console.print_json(payload)
    else:
        console.print_table(["host", "rc", "duration", "output"], rows)
    return worst


def _cluster_run(args: argparse.Namespace) -> tuple[EnvConfig, Cluster, RunDir]:
    """The env, its (selected) cluster and a new run folder."""
    from framework.hosts import Cluster
    from framework.records.folder import RunDir

    env = _load_env(args.env)
    cluster = Cluster.from_env(env, _split_hosts(args.hosts))
    rundir = RunDir.create(args.report_dir)
    return env, cluster, rundir


def _progress(args: argparse.Namespace) -> contextlib.AbstractContextManager[Callable[[str, str], None]]:
    """The progress of a long command (:func:`framework.console.progress`: live on a terminal, plain lines
    otherwise); none with --json."""
    if args.json:
        return contextlib.nullcontext(lambda host, message: None)
    return console.progress()


def _dry_cluster(args: argparse.Namespace) -> tuple[EnvConfig, Cluster]:
    """The env and its (selected) cluster for a dry run: transports are made but never connected (a host is
    contacted on its first command, and a dry run sends none)."""
    from framework.hosts import Cluster

    env = _load_env(args.env)
    return env, Cluster.from_env(env, _split_hosts(args.hosts))


def _say(text: str, scrub: Callable[[str], str]) -> None:
    """One line of a dry run's plan: the env's secrets out (as values), control characters escaped."""
    print(console.printable(scrub(text)))


DRY_RUN_HEADER = "dry run: no host contacted, no lease taken, nothing changed"


def _say_host_plan(p: dict[str, Any], scrub: Callable[[str], str]) -> None:
    """One host's part of ``camit deploy --dry-run``: where, which .run, the uploads and the steps."""
    venv = f" (venv {p['venv']} on {p['python']})" if p["venv"] else ""
    _say(f"{p['host']}: workdir {p['workdir']}, install path {p['install_path']}, "
         f"interpreter {p['interpreter']}{venv}", scrub)
    if p["run_package_choice"]:
        _say(f"  .run: {p['run_package_choice']}", scrub)
    for a in p["artifacts"]:
        _say(f"  upload {a['name']} -> {a['remote']}", scrub)
    for st in p["steps"]:
        when = f" [when {st['when']}]" if st.get("when") else ""
        _say(f"  {st['step']}{when}: {_step_action(st)}", scrub)


def _step_action(st: dict[str, Any]) -> str:
    """What a deploy step does: its command, or what it sends or writes."""
    if "command" in st:
        return str(st["command"])
    return f"sends {st['sends']}" if "sends" in st else f"writes {st['writes']}"


def _deploy_dry_run(args: argparse.Namespace) -> int:
    from framework.deploy import Deployer
    from framework.deploy.plan import mb
    from framework.records.scrub import Scrubber, scrub_doc

    env, cluster = _dry_cluster(args)
    plans = Deployer(env, cluster, relay=False if args.no_relay else None).plan_only()
    scrub = Scrubber.from_env(env)
    later = ["which artifacts each host has staged already (only the missing ones are sent)",
             "whether a host is unchanged (hashes and install record match: then nothing is sent or installed)",
             "which steps a host needs (the venv when its interpreter is not the host's python)",
             "the vendor the .run installs (the import check is shown for the default vendor)"]
    if any(p["run_package_choice"] for p in plans):
        later.append("which .run fits each host (its os-release ID and uname -m)")
    if args.json:
        console.print_json(scrub_doc({"dry_run": True, "hosts": plans, "resolved_at_run_time": later}, scrub))
        return EXIT_OK
    _say(DRY_RUN_HEADER, scrub)
    first: dict[str, Any] = plans[0] if plans else {"artifacts": [], "transfer": "-"}
    _say(f"deploy {len(first['artifacts'])} artifact(s) to {len(plans)} host(s); transfer: {first['transfer']}",
         scrub)
    for a in first["artifacts"]:
        _say(f"  {a['kind']} {a['name']} ({mb(a['size'])}, sha256 {a['sha256'][:12]}) from {a['local']}", scrub)
    for p in plans:
        _say_host_plan(p, scrub)
    _say("resolved at run time, by each host's probe: " + "; ".join(later), scrub)
    return EXIT_OK


def _run_dry_run(args: argparse.Namespace, target: Any) -> int:
    from framework.launch import Launcher, node_command
    from framework.launch.plan import secret_env
    from framework.records.scrub import Scrubber, scrub_doc

    env, cluster = _dry_cluster(args)
    launcher = Launcher(env, cluster, nproc_per_node=args.nproc_per_node)
    plans, shipped, notes = launcher.plan_only(target, timeout=args.timeout)
    scrub = Scrubber.from_env(env)
    first = next(iter(plans.values()))
    port = str(first.master_port) if env.launch.master_port else "0"
    later = ["the interpreter: the one deploy recorded in each host's install record replaces the python shown "
             "(and the vendor set_env it installed is sourced)",
             "the *_SOCKET_IFNAME variables: from each host's network devices",
             "the launch id, and with it each node's run folder: a new one every run",
             "the shipped programs and script: uploaded where missing or not matching their sha256"]
    if not env.launch.master_port:
        later.insert(0, "the master port: a free port on node 0, picked at launch (0 in the commands: "
                        "launch.master_port is not set)")
    nodes: list[dict[str, Any]] = []
    for host, plan in plans.items():
        nodes.append({"host": host, "node_rank": plan.node_rank, "nproc_per_node": plan.nproc_per_node,
                      "python": plan.python, "run_dir": plan.run_dir, "ships": sorted(plan.verify),
                      "secret_env": sorted(secret_env(plan.env)),  # names only: their values go on stdin
                      "command": node_command(plan, shipped).display})
    doc = {"dry_run": True, "launch_id": first.launch_id, "backend": launcher.backend, "nnodes": len(plans),
           "world_size": first.nproc_per_node * len(plans), "master": f"{first.master_addr}:{port}",
           "target": shipped.python_args(), "nodes": nodes, "warnings": notes, "resolved_at_run_time": later}
    if args.json:
        console.print_json(scrub_doc(doc, scrub))
        return EXIT_OK
    _say(DRY_RUN_HEADER, scrub)
    _say(f"launch {first.launch_id}: {len(plans)} node(s) x {first.nproc_per_node} rank(s), backend "
         f"{launcher.backend}, master {first.master_addr}:{port}", scrub)
    for note in notes:
        _say(f"warning: {note}", scrub)
    for n in nodes:
        secret = f"; secret variables on the supervisor's stdin: {', '.join(n['secret_env'])}" \
            if n["secret_env"] else ""
        _say(f"{n['host']} (node {n['node_rank']}): ships {', '.join(n['ships'])}{secret}", scrub)
        _say(f"  {n['command']}", scrub)
    _say("resolved at run time: " + "; ".join(later), scrub)
    return EXIT_OK


def _scrub_folder(rundir: RunDir, env: EnvConfig) -> None:
    """The env's secrets out of every file of the run folder (as values: framework.records.scrub)."""
    from framework.records.scrub import Scrubber, scrub_folder

    scrub_folder(rundir.path, Scrubber.from_env(env))


def _leased(args: argparse.Namespace, cluster: Cluster) -> Lease:
    """The lease on ``cluster`` that ``run`` and ``deploy`` hold as the pytest path does (``--wait``,
    ``--owner``); ``LeaseHeld`` names the holder."""
    from framework.lease import Lease

    return Lease(cluster, owner=args.owner, wait=args.wait)


def cmd_deploy(args: argparse.Namespace) -> int:
    from framework.deploy import Deployer

    if args.dry_run:
        return _deploy_dry_run(args)
    env, cluster, rundir = _cluster_run(args)

    with cluster, console.terminate_as_interrupt(), _leased(args, cluster), _progress(args) as event:
        result = Deployer(env, cluster, relay=False if args.no_relay else None, rundir=rundir,
                          on_event=event).run()
    _scrub_folder(rundir, env)
    if args.json:
        console.print_json(result.to_json())
    else:
        _print_deploy(result, rundir)
    return max((e.exit_code for e in result.errors.values()), default=EXIT_OK)


def _print_deploy(result: Any, rundir: RunDir) -> None:
    """The deploy table, its notes (which quote hosts: escaped) and where the manifest is."""
    rows = []
    for name, m in result.manifests.items():
        arts = "\n".join(f"{a.name} {a.sha256[:12]} ({a.via})" for a in m.artifacts) or "-"
        took = sum(m.durations.values())
        detail = m.error if m.error else f"{m.installed_version or '-'} @ {m.install_path}"
        rows.append([name, m.status.upper(), arts, detail, f"{took:.2f}s"])
    console.print_table(["host", "status", "artifacts", "version @ install path / error", "time"], rows)
    for note in result.notes:
        print(f"note: {console.printable(note)}")
    print(f"manifest: {rundir.path / 'deploy-manifest.json'}  ({result.duration:.2f}s)")


def cmd_run(args: argparse.Namespace) -> int:
    """Launch the target holding the lease; the report folder is finished (cluster.xml, manifest.json,
    index.html: :func:`framework.report.finalize`) however the run ends, a crash of camit or Ctrl-C too."""
    import time

    from framework.launch import Target

    target = Target.parse(args.target)
    if args.dry_run:
        return _run_dry_run(args, target)
    env, cluster, rundir = _cluster_run(args)
    started = time.time()
    state: dict[str, Any] = {"status": "error", "error": None, "cores": ()}
    try:
        code = _run_leased(args, env, cluster, rundir, target, state)
    except KeyboardInterrupt:
        state["status"], state["error"] = "interrupted", "interrupted (Ctrl-C/SIGTERM)"
        raise
    except BaseException as exc:
        state["status"], state["error"] = "error", exc
        raise
    finally:
        from framework.report import finalize

        finalize(rundir.path, cores=state["cores"], env=env, argv=["camit", *getattr(args, "argv", ["run"])],
                 started=started, ended=time.time(), status=state["status"], error=state["error"])
    if not args.json:
        print(f"report: {rundir.path}")
    return code


def _run_leased(args: argparse.Namespace, env: EnvConfig, cluster: Cluster, rundir: RunDir, target: Any,
                state: dict[str, Any]) -> int:
    from framework.launch import Launcher
    from framework.launch.runwatch import ClusterWatch

    with cluster, console.terminate_as_interrupt(), _leased(args, cluster), _progress(args) as event:
        watch = ClusterWatch(cluster, env, policy=args.core_policy, rundir=rundir)
        watch.begin()
        # the run folders go only after the core scan: a relative core_pattern puts a rank's core there
        launcher = Launcher(env, cluster, rundir=rundir, nproc_per_node=args.nproc_per_node, on_event=event,
                            keep_remote=args.keep_remote, defer_cleanup=True)
        try:
            try:
                result = launcher.run(target, timeout=args.timeout)
            except BaseException:  # interrupted or failed: the cores are scanned all the same, first
                state["cores"] = _scan_anyway(watch)
                raise
            watched = watch.end(ranks=[result], failed=not result.ok)
        finally:
            launcher.cleanup_remote()
    cores = watched.cores
    state["cores"] = cores
    if result.ok:
        code = EXIT_FAILED if watched.failed else EXIT_OK
    else:
        code = EXIT_INFRA if result.failure_kind in ("lost", "infra") else EXIT_FAILED
    state["status"] = "ok" if code == EXIT_OK else "failed"
    if args.json:
        console.print_json({**result.to_json(), "cores": [c.to_json() for c in cores],
                            "core_policy": watched.policy.value, "signatures": watched.log_summary,
                            "report": str(rundir.path)})
        return code
    _print_run(result, watched, rundir)
    return code


def _rank_outcome(rank: RankResult) -> str:
    """A rank's outcome cell: ok, its signal, its exit code, or no report."""
    if rank.ok:
        return "ok"
    return rank.signal or (f"exit {rank.exit_code}" if rank.exit_code is not None else "no report")


def _print_run(result: LaunchResult, watched: WatchOutcome, rundir: RunDir) -> None:
    """``camit run``'s terminal summary: the ranks, the verdict, notes, cores, signatures, dirty devices."""
    rows = [[r.rank, r.host, _rank_outcome(r), Path(r.log).relative_to(rundir.path).as_posix() if r.log else "-"]
            for r in sorted(result.ranks.values(), key=lambda r: r.rank)]
    console.print_table(["rank", "host", "outcome", "log"], rows)
    print(("PASSED: " if result.ok else "FAILED: ") + console.printable(result.message()))
    for note in result.notes:
        print(f"note: {console.printable(note)}")
    if watched.message:
        print(console.printable(watched.message))
    if watched.log_summary:
        print("failure signatures:\n" + console.printable(watched.log_summary.rstrip()))
    for held in result.held:
        print(f"DIRTY: {console.printable(held.describe())} (camit never resets a device)")


def _scan_anyway(watch: Any) -> list[Any]:
    """The cores of a ``camit run`` whose launch raised (an interrupt, a host error), scanned and fetched
    before its run folders go (a relative core_pattern puts a rank's core there); a failing scan is a
    warning, never the error the run ends with."""
    try:
        return list(watch.end(ranks=[], failed=True).cores)
    except Exception as exc:  # the launch's own error is what the run reports
        print(console.printable(f"warning: core scan after the failed launch: {exc}"), file=sys.stderr)
        return []


def _host_error_text(name: str, err: BaseException) -> str:
    return reason_of(err, name)


def cmd_check(args: argparse.Namespace) -> int:
    from framework.hosts import Cluster
    from framework.preflight.limits import Limits
    from framework.preflight.run import Preflight

    env = _load_env(args.env)
    if args.pairs:
        return _check_pairs(args, env)
    limits = Limits(min_free_gb=args.min_free_gb, max_skew=args.max_skew, probe_timeout=args.timeout)
    with Cluster.from_env(env, _split_hosts(args.hosts)) as cluster:
        report = Preflight(env, cluster, limits).run()
        verdicts = _suspects_after_check(env, cluster, report, args.heal)
    if args.json:
        console.print_json({**report.to_json(), "suspects": verdicts})
        return report.exit_code
    _print_check(report)
    for host, what in verdicts.items():
        print(f"suspect {host}: {console.printable(what)}")
    healed_all = all(w.startswith("re-admitted") for w in verdicts.values()) or not args.heal
    return report.exit_code or (EXIT_OK if healed_all else EXIT_FAILED)


def _check_pairs(args: argparse.Namespace, env: EnvConfig) -> int:
    """``check --pairs``: the pair rounds on the leased hosts (framework.pairs); exit 1 names a
    slow node."""
    from framework import pairs
    from framework.hosts import Cluster
    from framework.lease import Lease
    from framework.records.folder import RunDir

    rundir = RunDir.create("reports")
    with Cluster.from_env(env, _split_hosts(args.hosts)) as cluster, Lease(cluster):
        report = pairs.run_pairs(env, cluster, rundir, rounds=args.rounds)
    for line in report.lines():
        print(console.printable(line))
    print(f"report: {rundir.path}")
    return EXIT_INFRA if report.failure else EXIT_FAILED if report.slow else EXIT_OK


def _suspects_after_check(env: EnvConfig, cluster: Cluster, report: Any,
                          heal: bool) -> dict[str, str]:
    """Hosts the preflight failed become suspect; ``--heal`` re-admits the clean ones
    (framework.heal)."""
    from framework import heal as healing
    from framework import suspects

    suspects.mark(cluster, report.host_faults())
    marks = suspects.read(cluster)
    if not heal:
        return {n: f"{m.describe()} (camit check --heal re-admits it)" for n, m in marks.items()}
    return {v.host: ("re-admitted: " if v.healed else "still suspect: ") + v.why
            for v in healing.heal(env, cluster, report, marks)}


def _print_check(report: Any) -> None:
    """The preflight table, each problem, the clock and what was skipped why (a reason can quote a host)."""
    from framework.preflight.checks import SKIP, WARN

    headers, rows = report.table()
    console.print_table(headers, rows, title=f"preflight of {len(report.hosts)} host(s)")
    for r in report.problems:
        print(f"{r.host} {r.check}: {'warning' if r.status == WARN else r.status.upper()}: "
              f"{console.printable(r.summary)}")
    if report.clock is not None and report.clock.pair:
        a, b = report.clock.pair
        print(f"clock: max pairwise skew {report.clock.max_pairwise:.3f}s ({a} vs {b})")
    skipped: dict[str, dict[str, list[str]]] = {}  # reason -> check -> hosts
    for r in report.results.values():
        if r.status == SKIP:
            skipped.setdefault(r.summary, {}).setdefault(r.check, []).append(r.host)
    for reason, by_check in skipped.items():
        hosts = sorted({h for hs in by_check.values() for h in hs}, key=report.hosts.index)
        print(f"skipped {', '.join(by_check)} on {', '.join(hosts)}: {console.printable(reason)}")
    skipped_n = sum(len(hs) for by in skipped.values() for hs in by.values())
    verdict = {EXIT_OK: "all checks passed", EXIT_FAILED: "some checks FAILED", EXIT_INFRA: "host(s) UNREACHABLE"}
    print(f"{verdict[report.exit_code]} ({skipped_n} skipped) in {report.duration:.2f}s")


def _safe_name(section: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in section).strip("_") + ".txt"


def cmd_diagnose(args: argparse.Namespace) -> int:
    """Ask the ranks of a running launch for their stacks (no lease: the launch holds it; nothing stops)."""
    from framework.hosts import Cluster
    from framework.launch.diagnose import diagnose

    env = _load_env(args.env)
    with Cluster.from_env(env, _split_hosts(args.hosts)) as cluster:
        found = diagnose(env, cluster, args.launch_id)
    for d in found:
        print(console.printable(d.describe()))
    return 0 if any(d.groups for d in found) else 1


def cmd_collect(args: argparse.Namespace) -> int:
    from framework.cores import logs as hostlogs
    from framework.fetchcaps import FetchCapError
    from framework.hosts import Cluster, Host
    from framework.preflight.checks import evaluate
    from framework.preflight.run import Preflight
    from framework.records.folder import RunDir
    from framework.remote.layout import UNSAFE_RC, HostLayout, unsafe_message, unsafe_reason

    env = _load_env(args.env)
    rundir = RunDir.create(args.report_dir)
    cluster = Cluster.from_env(env, _split_hosts(args.hosts))
    with cluster, console.terminate_as_interrupt(), _leased(args, cluster):
        pre = Preflight(env, cluster)
        plans = pre.plans()
        samples = pre.samples(plans)
        logs: dict[str, str] = {}
        if args.logs:
            def fetch(host: Host) -> str:
                remote = f"{plans[host.name].workdir}/camit-ascend-log.tgz"
                # the archive goes into the workdir: made and checked as deploy and launch do (issue 17)
                guard = HostLayout.of(env.hosts[host.name]).guard_script()
                # read through the host program (framework.remote.hostfile): no folder followed through
                # a symlink, each file opened once and judged by its descriptor
                made = host.run(hostlogs.home_logs_script(guard, remote, COLLECT_LOG_BYTES), timeout=600)
                if made.rc == UNSAFE_RC:
                    return f"error: {unsafe_message(unsafe_reason(made.stdout) or plans[host.name].workdir)}"
                if made.rc == 3:
                    return "no ~/ascend/log"
                if not made.ok:
                    return f"packing failed: {made.tail(2)}"
                local = rundir.file("collect", host.name, "ascend-log.tgz")
                try:  # bounded (framework.fetchcaps): a cut archive keeps its first part
                    host.get(remote, local, keep_partial=True)
                except FetchCapError as exc:
                    return f"{local.stat().st_size // 1024} KiB, cut: {exc.reason}"
                finally:
                    host.run(["rm", "-f", "--", remote], timeout=60)
                return f"{local.stat().st_size // 1024} KiB"

            logs = {h: (v if isinstance(v, str) else f"error: {_host_error_text(h, v)}")
                    for h, v in cluster.map(fetch).items()}
        if args.diag:
            _collect_diag(env, cluster, rundir.path, plans)
    report = evaluate(plans, samples)
    rundir.write_json("preflight.json", report.to_json())
    rows: list[list[str]] = []
    payload: list[dict[str, Any]] = []
    for name, sample in samples.items():
        if isinstance(sample, BaseException):
            rows.append([name, "UNREACHABLE", _host_error_text(name, sample), "-"])
            payload.append({"host": name, "error": _host_error_text(name, sample)})
            continue
        for section in sample.sections.values():
            rundir.write_text(f"collect/{name}/{_safe_name(section.name)}", section.text + "\n")
        rows.append([name, "ok", f"{len(sample.sections)} sections", logs.get(name, "-")])
        payload.append({"host": name, "sections": sorted(sample.sections), "logs": logs.get(name)})
    _scrub_folder(rundir, env)
    if args.json:
        console.print_json({"report": str(rundir.path), "hosts": payload})
    else:
        console.print_table(["host", "status", "collected", "ascend logs"], rows)
        print(f"collected into {rundir.path / 'collect'} (checks: {rundir.path / 'preflight.json'})")
    return max((getattr(s, "exit_code", EXIT_INFRA) for s in samples.values() if isinstance(s, BaseException)),
               default=EXIT_OK)


def _collect_diag(env: Any, cluster: Any, root: Path, plans: Any) -> None:
    """``collect --diag``: the fault bundle of every host (framework.cores.diagcollect)."""
    from framework.cores.diagcollect import collect_diag
    from framework.records.scrub import Scrubber
    from framework.remote.layout import HostLayout

    bundle, verdict, failed = collect_diag(
        cluster, root, lambda h: plans[h.name].workdir, lambda h: env.hosts[h.name].npu.count,
        guard_of=lambda h: HostLayout.of(env.hosts[h.name]).guard_script(), scrub=Scrubber.from_env(env).text)
    for host, why in sorted(failed.items()):
        print(console.printable(f"{host}: no diagnostics: {why}"), file=sys.stderr)
    print(f"fault bundle (ascend-fd input, one tree per host): {bundle}", file=sys.stderr)
    print(console.printable(f"ascend-fd: {verdict}" if verdict is not None else
                            "ascend-fd: not installed on this machine (run it on the bundle by hand)"), file=sys.stderr)


def cmd_completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``camit completion bash|zsh``: the script, generated from this very parser."""
    from framework.completion import script

    sys.stdout.write(script(args.shell, parser))
    return EXIT_OK


def cmd_lab(lab_args: Sequence[str]) -> int:
    """``camit lab ...`` is ``python -m framework.lab ...`` (its own options, --help included)."""
    from framework.lab.manage import main as lab_main

    return lab_main(list(lab_args))


def cmd_lease(args: argparse.Namespace) -> int:
    from framework.hosts import Cluster

    action = getattr(args, "lease_command", None)
    if action is None:
        raise UsageError("camit lease: give an action: status, release or run")
    env = _load_env(args.env)
    with Cluster.from_env(env, _split_hosts(args.hosts)) as cluster:
        if action == "status":
            return _lease_status(args, cluster)
        if action == "release":
            return _lease_release(args, cluster)
        return _lease_run(args, cluster)


def _lease_status(args: argparse.Namespace, cluster: Cluster) -> int:
    from framework.lease import lease_status

    rows: list[list[str]] = []
    payload: list[dict[str, Any]] = []
    worst = EXIT_OK
    for name, st in lease_status(cluster).items():
        if isinstance(st, BaseException):
            worst = max(worst, getattr(st, "exit_code", EXIT_INFRA))
            rows.append([name, "UNREACHABLE", "-", _host_error_text(name, st)])
            payload.append({"host": name, "error": _host_error_text(name, st)})
            continue
        rec = st.record
        who = rec.describe(st.now) if rec else ("-" if st.content is None else "unreadable lease file")
        rows.append([name, st.state, who, st.stale or ""])
        payload.append({"host": name, "state": st.state, "path": st.path, "stale": st.stale, "host_time": st.now,
                        "lease": rec.to_json() if rec else None})
    if args.json:
        console.print_json(payload)
    else:
        console.print_table(["host", "state", "holder", "stale because"], rows)
    return worst


def _lease_release(args: argparse.Namespace, cluster: Cluster) -> int:
    from framework.lease import release_leases

    rows, payload, worst = [], [], EXIT_OK
    for name, what in release_leases(cluster, token=args.token, force=args.force).items():
        if isinstance(what, BaseException):
            worst = max(worst, getattr(what, "exit_code", EXIT_INFRA))
            what = "UNREACHABLE: " + _host_error_text(name, what)
        elif what.startswith("held by"):
            worst = max(worst, EXIT_FAILED)
        rows.append([name, what])
        payload.append({"host": name, "result": what})
    if args.json:
        console.print_json(payload)
    else:
        console.print_table(["host", "result"], rows)
    return worst


def _lease_run(args: argparse.Namespace, cluster: Cluster) -> int:
    import subprocess

    from framework.lease import Lease

    argv = list(args.cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("camit lease run: no command given (camit lease run --env FILE -- CMD...)")
    command = ["/bin/sh", "-c", argv[0]] if len(argv) == 1 else argv
    with console.terminate_as_interrupt(), Lease(cluster, owner=args.owner, ttl=args.ttl, wait=args.wait) as lease:
        proc = subprocess.Popen(command)
        try:
            print(_held_line(lease.held, lease.owner), file=sys.stderr, flush=True)
            return proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise


def _held_line(held: Iterable[str], owner: str) -> str:
    """What ``camit lease run`` says once it holds the lease; the owner comes from --owner or $BUILD_URL."""
    return console.printable(f"camit: lease held on {', '.join(held)} by {owner}")


def main(argv: Sequence[str] | None = None) -> int:
    """``camit``: the exit status. Called without ``argv`` it is the process's entry (the console script,
    ``python -m framework.cli``) and leaves the objects it made out of the collections of interpreter exit
    (:func:`_skip_exit_collections`); a caller that passes ``argv`` (tests, scripts) keeps its collector."""
    if argv is None:
        try:
            return _main(sys.argv[1:])
        finally:
            _skip_exit_collections()
    return _main(argv)


def _skip_exit_collections() -> None:
    """Freeze every live object out of the garbage collector (``gc.freeze``) just before the process exits.

    Python's finalization runs full collections over every object still alive — pydantic's schemas,
    paramiko's and camit's modules — which took 0.1-0.3 s of a 0.8 s ``camit exec`` on two busy cores
    (``bench/fanout.py --process``). Objects still held are freed by reference counting as the modules
    are torn down, as before; only reference cycles are left to the OS, whose finalizers Python does not
    promise to run at exit anyway. Everything camit writes is closed by then (``with`` blocks), leases
    are released, logging is flushed at ``atexit`` and the standard streams by the interpreter.
    """
    import gc

    gc.freeze()


#: the verbs that take their parsed arguments alone (``env validate`` and ``completion`` are dispatched by _main)
_VERBS: dict[str, Callable[[argparse.Namespace], int]] = {
    "exec": cmd_exec,
    "deploy": cmd_deploy,
    "run": cmd_run,
    "check": cmd_check,
    "collect": cmd_collect,
    "diagnose": cmd_diagnose,
    "lab": lambda args: cmd_lab(args.lab_args),
    "lease": cmd_lease,
    "perf": perf_verb.run,
    "calibrate": calib_verb.run,
}


def _main(argv: Sequence[str]) -> int:
    parser = build_parser()
    argv = list(argv)
    if argv[:1] == ["lab"]:  # argparse would keep a leading option (--help) from the lab's own parser
        return cmd_lab(argv[1:])
    try:
        args = parser.parse_args(argv)
        args.argv = argv  # the manifest's command line (camit run)
        console.setup_logging(args.verbose)
        if args.command == "env" and getattr(args, "env_command", None) == "validate":
            return cmd_env_validate(args)
        if args.command == "completion":
            return cmd_completion(args, parser)
        verb = _VERBS.get(args.command)
        if verb is not None:
            return verb(args)
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    except FrameworkError as exc:
        if os.environ.get("CAMIT_DEBUG"):
            raise
        print(f"camit: error: {console.printable(str(exc))}", file=sys.stderr)  # may quote a host's output
        return exc.exit_code
    except KeyboardInterrupt:
        print("camit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
