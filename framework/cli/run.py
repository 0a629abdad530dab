"""``camit run -- TARGET``: a torchrun target across the cluster, holding the lease, its cores
scanned; the run folder is finished however the run ends. ``--dry-run`` prints each node's
command and starts nothing."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import console
from framework.cli.common import (
    DRY_RUN_HEADER,
    cluster_run,
    env_arg,
    env_cluster,
    hosts_arg,
    lease_args,
    leased,
    progress,
    say,
)
from framework.errors import EXIT_FAILED, EXIT_INFRA, EXIT_OK

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster
    from framework.launch import NodePlan, Target
    from framework.launch.result import LaunchResult, RankResult
    from framework.launch.runwatch import WatchOutcome
    from framework.records.folder import RunDir


def add_parser(sub: Any) -> None:
    rn = sub.add_parser("run", help="launch a torchrun target across the cluster")
    env_arg(rn)
    hosts_arg(rn)
    rn.add_argument("--nproc-per-node", type=int, default=None, metavar="P")
    rn.add_argument("--timeout", type=float, default=600.0, metavar="S",
                    help="job timeout (default 600)")
    rn.add_argument("--report-dir", metavar="D", default="reports",
                    help="run folders go here (default: reports)")
    rn.add_argument("--json", action="store_true", help="print the result as JSON")
    rn.add_argument("--dry-run", action="store_true",
                    help="print each node's exact command line; no connection, no lease, "
                         "nothing started")
    rn.add_argument("--keep-remote", action="store_true", help="leave the run folders on the hosts")
    rn.add_argument("--core-policy", choices=("fail", "warn", "ignore"), default=None,
                    help="what a core dump during the run does: fail (default, or "
                         "$CAMIT_CORE_POLICY), warn, ignore")
    lease_args(rn)
    rn.add_argument("target", nargs=argparse.REMAINDER, metavar="-- SCRIPT|-m MODULE [ARGS]")


def run(args: argparse.Namespace) -> int:
    """Launch the target holding the lease; the report folder is finished (cluster.xml,
    manifest.json, index.html: :func:`framework.report.finalize`) however the run ends, a crash of
    camit or Ctrl-C too."""
    from framework.launch import Target

    target = Target.parse(args.target)
    if args.dry_run:
        return dry_run(args, target)
    env, cluster, rundir = cluster_run(args)
    started = time.time()
    state: dict[str, Any] = {"status": "error", "error": None, "cores": ()}
    try:
        code = run_leased(args, env, cluster, rundir, target, state)
    except KeyboardInterrupt:
        state["status"], state["error"] = "interrupted", "interrupted (Ctrl-C/SIGTERM)"
        raise
    except BaseException as exc:
        state["status"], state["error"] = "error", exc
        raise
    finally:
        from framework.report import finalize

        finalize(rundir.path, cores=state["cores"], env=env,
                 argv=["camit", *getattr(args, "argv", ["run"])], started=started,
                 ended=time.time(), status=state["status"], error=state["error"])
    if not args.json:
        print(f"report: {rundir.path}")
    return code


def run_leased(args: argparse.Namespace, env: EnvConfig, cluster: Cluster, rundir: RunDir,
               target: Any, state: dict[str, Any]) -> int:
    from framework.launch import Launcher
    from framework.launch.runwatch import ClusterWatch

    with cluster, console.terminate_as_interrupt(), leased(args, cluster), progress(args) as event:
        watch = ClusterWatch(cluster, env, policy=args.core_policy, rundir=rundir)
        watch.begin()
        # the run folders go only after the core scan: a relative core_pattern puts a rank's core
        # there
        launcher = Launcher(env, cluster, rundir=rundir, nproc_per_node=args.nproc_per_node,
                            on_event=event, keep_remote=args.keep_remote, defer_cleanup=True)
        try:
            try:
                result = launcher.run(target, timeout=args.timeout)
            except BaseException:  # interrupted or failed: the cores are scanned first all the same
                state["cores"] = _scan_anyway(watch)
                raise
            watched = watch.end(ranks=[result], failed=not result.ok)
        finally:
            launcher.cleanup_remote()
    state["cores"] = watched.cores
    code = _exit_code(result, watched)
    state["status"] = "ok" if code == EXIT_OK else "failed"
    if args.json:
        console.print_json({**result.to_json(), "cores": [c.to_json() for c in watched.cores],
                            "core_policy": watched.policy.value, "signatures": watched.log_summary,
                            "report": str(rundir.path)})
        return code
    _print_run(result, watched, rundir)
    return code


def _exit_code(result: LaunchResult, watched: WatchOutcome) -> int:
    """``camit run``'s exit status: a failed launch's (infra when a host was lost or refused), else
    the core watch's verdict."""
    if result.ok:
        return EXIT_FAILED if watched.failed else EXIT_OK
    return EXIT_INFRA if result.failure_kind in ("lost", "infra") else EXIT_FAILED


def _rank_outcome(rank: RankResult) -> str:
    """A rank's outcome cell: ok, its signal, its exit code, or no report."""
    if rank.ok:
        return "ok"
    return rank.signal or (f"exit {rank.exit_code}" if rank.exit_code is not None else "no report")


def _print_run(result: LaunchResult, watched: WatchOutcome, rundir: RunDir) -> None:
    """``camit run``'s terminal summary: the ranks, the verdict, notes, cores, signatures, dirty
    devices."""
    rows = [_rank_row(r, rundir) for r in sorted(result.ranks.values(), key=lambda r: r.rank)]
    console.print_table(["rank", "host", "outcome", "log"], rows)
    print(("PASSED: " if result.ok else "FAILED: ") + console.printable(result.message()))
    for note in result.notes:
        print(f"note: {console.printable(note)}")
    _print_watch(watched)
    for held in result.held:
        print(f"DIRTY: {console.printable(held.describe())} (camit never resets a device)")


def _print_watch(watched: WatchOutcome) -> None:
    """What the core watch found: its verdict on the cores, then the failure signatures."""
    if watched.message:
        print(console.printable(watched.message))
    if watched.log_summary:
        print("failure signatures:\n" + console.printable(watched.log_summary.rstrip()))


def _rank_row(rank: RankResult, rundir: RunDir) -> list[object]:
    """A rank's row of the summary: rank, host, outcome, its log below the run folder."""
    log = Path(rank.log).relative_to(rundir.path).as_posix() if rank.log else "-"
    return [rank.rank, rank.host, _rank_outcome(rank), log]


def _scan_anyway(watch: Any) -> list[Any]:
    """The cores of a ``camit run`` whose launch raised (an interrupt, a host error), scanned and
    fetched before its run folders go (a relative core_pattern puts a rank's core there); a failing
    scan is a warning, never the error the run ends with."""
    try:
        return list(watch.end(ranks=[], failed=True).cores)
    except Exception as exc:  # the launch's own error is what the run reports
        print(console.printable(f"warning: core scan after the failed launch: {exc}"),
              file=sys.stderr)
        return []


#: what a launch's dry run cannot know: decided when the launch runs
_LATER = (
    "the interpreter: the one deploy recorded in each host's install record replaces the python "
    "shown (and the vendor set_env it installed is sourced)",
    "the *_SOCKET_IFNAME variables: from each host's network devices",
    "the launch id, and with it each node's run folder: a new one every run",
    "the shipped programs and script: uploaded where missing or not matching their sha256",
)
_NO_PORT = ("the master port: a free port on node 0, picked at launch (0 in the commands: "
            "launch.master_port is not set)")


def dry_run(args: argparse.Namespace, target: Any) -> int:
    from framework.launch import Launcher
    from framework.records.scrub import Scrubber, scrub_doc

    env, cluster = env_cluster(args)
    launcher = Launcher(env, cluster, nproc_per_node=args.nproc_per_node)
    plans, shipped, notes = launcher.plan_only(target, timeout=args.timeout)
    scrub = Scrubber.from_env(env)
    first = next(iter(plans.values()))
    port, later = _port_and_later(env.launch.master_port, first.master_port)
    nodes = [_node_doc(host, plan, shipped) for host, plan in plans.items()]
    doc = {"dry_run": True, "launch_id": first.launch_id, "backend": launcher.backend,
           "nnodes": len(plans), "world_size": first.nproc_per_node * len(plans),
           "master": f"{first.master_addr}:{port}", "target": shipped.python_args(),
           "nodes": nodes, "warnings": notes, "resolved_at_run_time": later}
    if args.json:
        console.print_json(scrub_doc(doc, scrub))
        return EXIT_OK
    say(DRY_RUN_HEADER, scrub)
    say(f"launch {first.launch_id}: {len(plans)} node(s) x {first.nproc_per_node} rank(s), "
        f"backend {launcher.backend}, master {first.master_addr}:{port}", scrub)
    for note in notes:
        say(f"warning: {note}", scrub)
    for n in nodes:
        _say_node(n, scrub)
    say("resolved at run time: " + "; ".join(later), scrub)
    return EXIT_OK


def _port_and_later(configured: int | None, planned: int) -> tuple[str, list[str]]:
    """The master port a dry run shows, and what it leaves to the launch: the port too (0 shown)
    unless ``launch.master_port`` is set."""
    if configured:
        return str(planned), list(_LATER)
    return "0", [_NO_PORT, *_LATER]


def _node_doc(host: str, plan: NodePlan, shipped: Target) -> dict[str, Any]:
    """One node of ``camit run --dry-run --json``: its place, interpreter, folder, shipped files,
    secret variable names (their values go on stdin) and exact command."""
    from framework.launch import node_command
    from framework.launch.plan import secret_env

    return {"host": host, "node_rank": plan.node_rank, "nproc_per_node": plan.nproc_per_node,
            "python": plan.python, "run_dir": plan.run_dir, "ships": sorted(plan.verify),
            "secret_env": sorted(secret_env(plan.env)),
            "command": node_command(plan, shipped).display}


def _say_node(n: dict[str, Any], scrub: Callable[[str], str]) -> None:
    """One node's lines of the dry run: what it ships (and its secret variables' names), then its
    command."""
    secret = (f"; secret variables on the supervisor's stdin: {', '.join(n['secret_env'])}"
              if n["secret_env"] else "")
    say(f"{n['host']} (node {n['node_rank']}): ships {', '.join(n['ships'])}{secret}", scrub)
    say(f"  {n['command']}", scrub)
