"""``camit lease status|release|run``: who holds each host, removing stale (or ``--force``: live)
leases, and holding the lease while a local command runs."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from framework import console
from framework.cli.common import (
    command_words,
    env_arg,
    env_cluster,
    host_error_text,
    hosts_arg,
    print_rows,
)
from framework.errors import EXIT_FAILED, EXIT_INFRA, EXIT_OK, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from framework.hosts import Cluster
    from framework.lease import LeaseState


def add_parser(sub: Any) -> None:
    ls = sub.add_parser("lease",
                        help="cluster leases: status, release, or run a command holding one")
    actions = ls.add_subparsers(dest="lease_command", metavar="ACTION")
    lst = actions.add_parser("status", help="who holds each host")
    lrl = actions.add_parser("release",
                             help="remove stale leases and the one of --token (--force: any)")
    lrn = actions.add_parser("run", help="hold the lease on the hosts while a local command runs")
    for p in (lst, lrl, lrn):
        env_arg(p)
        hosts_arg(p)
    for p in (lst, lrl):
        p.add_argument("--json", action="store_true", help="machine-readable results")
    lrl.add_argument("--force", action="store_true",
                     help="also remove a live lease of someone else")
    lrl.add_argument("--token",
                     help="also remove the live lease holding this token (a lease's own id)")
    lrn.add_argument("--owner", default=None,
                     help="lease owner (default: $BUILD_URL, else user@host)")
    lrn.add_argument("--wait", type=float, default=0.0, metavar="S",
                     help="wait up to S seconds for a held lease")
    lrn.add_argument("--ttl", type=float, default=300.0, metavar="S",
                     help="lease validity after a heartbeat")
    lrn.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...")


def run(args: argparse.Namespace) -> int:
    action = ACTIONS.get(args.lease_command)
    if action is None:
        raise UsageError("camit lease: give an action: status, release or run")
    _, cluster = env_cluster(args)
    with cluster:
        return action(args, cluster)


def _status(args: argparse.Namespace, cluster: Cluster) -> int:
    from framework.lease import lease_status

    rows: list[list[str]] = []
    payload: list[dict[str, Any]] = []
    worst = EXIT_OK
    for name, st in lease_status(cluster).items():
        if isinstance(st, BaseException):
            worst = max(worst, getattr(st, "exit_code", EXIT_INFRA))
            rows.append([name, "UNREACHABLE", "-", host_error_text(name, st)])
            payload.append({"host": name, "error": host_error_text(name, st)})
            continue
        row, record = _status_row(name, st)
        rows.append(row)
        payload.append(record)
    print_rows(args, ["host", "state", "holder", "stale because"], rows, payload)
    return worst


def _status_row(name: str, st: LeaseState) -> tuple[list[str], dict[str, Any]]:
    """A reachable host's lease: its table row (who holds it, why it is stale) and JSON record."""
    rec = st.record
    if rec:
        who = rec.describe(st.now)
    else:
        who = "-" if st.content is None else "unreadable lease file"
    row = [name, st.state, who, st.stale or ""]
    return row, {"host": name, "state": st.state, "path": st.path, "stale": st.stale,
                 "host_time": st.now, "lease": rec.to_json() if rec else None}


def _release(args: argparse.Namespace, cluster: Cluster) -> int:
    from framework.lease import release_leases

    rows, payload, worst = [], [], EXIT_OK
    for name, what in release_leases(cluster, token=args.token, force=args.force).items():
        if isinstance(what, BaseException):
            worst = max(worst, getattr(what, "exit_code", EXIT_INFRA))
            what = "UNREACHABLE: " + host_error_text(name, what)
        elif what.startswith("held by"):
            worst = max(worst, EXIT_FAILED)
        rows.append([name, what])
        payload.append({"host": name, "result": what})
    print_rows(args, ["host", "result"], rows, payload)
    return worst


def _run(args: argparse.Namespace, cluster: Cluster) -> int:
    from framework.lease import Lease

    argv = command_words(
        args, "camit lease run: no command given (camit lease run --env FILE -- CMD...)")
    command = ["/bin/sh", "-c", argv[0]] if len(argv) == 1 else argv
    with console.terminate_as_interrupt(), \
            Lease(cluster, owner=args.owner, ttl=args.ttl, wait=args.wait) as lease:
        proc = subprocess.Popen(command)
        try:
            print(held_line(lease.held, lease.owner), file=sys.stderr, flush=True)
            return proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise


def held_line(held: Iterable[str], owner: str) -> str:
    """What ``camit lease run`` says once it holds the lease; the owner comes from --owner or
    $BUILD_URL."""
    return console.printable(f"camit: lease held on {', '.join(held)} by {owner}")


#: ``camit lease ACTION``
ACTIONS: dict[str, Callable[[argparse.Namespace, Cluster], int]] = {
    "status": _status,
    "release": _release,
    "run": _run,
}
