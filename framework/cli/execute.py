"""``camit exec -- CMD``: one command on every host (``--lease`` to hold the hosts while it runs), a
table or ``--json`` of each host's status and output."""

from __future__ import annotations

import argparse
import contextlib
from typing import TYPE_CHECKING, Any

from framework.cli.common import (
    command_words,
    env_arg,
    env_cluster,
    hosts_arg,
    lease_args,
    leased,
    print_rows,
)
from framework.commands import ShellScript
from framework.errors import EXIT_FAILED, EXIT_INFRA, EXIT_OK, reason_of

if TYPE_CHECKING:  # pragma: no cover
    from framework.result import Result


def add_parser(sub: Any) -> None:
    ex = sub.add_parser("exec", help="run one command on every host")
    env_arg(ex)
    hosts_arg(ex)
    ex.add_argument("--timeout", type=float, default=None, metavar="S",
                    help="per-host wall-clock timeout (default: command_timeout of the env)")
    ex.add_argument("--json", action="store_true", help="machine-readable results")
    ex.add_argument("--tail", type=int, default=3, metavar="N", help="output lines shown per host")
    ex.add_argument("--lease", action="store_true",
                    help="hold the hosts' lease while the command runs "
                         "(without it exec works beside a holder)")
    lease_args(ex)
    ex.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...")


def exec_row(name: str, value: Result | BaseException,
             tail: int) -> tuple[list[str], dict[str, Any], int]:
    """One host of ``camit exec``: its table row, its JSON record and its exit status."""
    if isinstance(value, BaseException):
        return _error_row(name, value)
    status = "TIMEOUT" if value.timed_out else str(value.rc)
    shown = "\n".join((value.stdout.strip() or value.stderr.strip()).splitlines()[-tail:])
    record = {"host": name, "rc": value.rc, "timed_out": value.timed_out,
              "duration": round(value.duration, 3), "stdout": value.stdout, "stderr": value.stderr}
    row = [name, status, f"{value.duration:.2f}s", shown]
    return row, record, EXIT_OK if value.ok else EXIT_FAILED


def _error_row(name: str, exc: BaseException) -> tuple[list[str], dict[str, Any], int]:
    """A host the command could not run on: unreachable (infra) or another error, and why."""
    code = getattr(exc, "exit_code", EXIT_INFRA)
    status = "UNREACHABLE" if code == EXIT_INFRA else "ERROR"
    text = reason_of(exc, name)
    error: dict[str, Any] = {"host": name, "status": status.lower(), "error": text}
    return [name, status, "-", text], error, code


def run(args: argparse.Namespace) -> int:
    argv = command_words(args, "camit exec: no command given (camit exec --env FILE -- CMD...)")
    # one word is a shell script as typed; several are joined like ssh does
    command = ShellScript(argv[0] if len(argv) == 1 else " ".join(argv))
    _, cluster = env_cluster(args)
    with cluster, (leased(args, cluster) if args.lease else contextlib.nullcontext()):
        group = cluster.run(command, timeout=args.timeout)
    rows, payload, worst = [], [], EXIT_OK
    for name, value in group.items():
        row, record, code = exec_row(name, value, args.tail)
        rows.append(row)
        payload.append(record)
        worst = max(worst, code)
    print_rows(args, ["host", "rc", "duration", "output"], rows, payload)
    return worst
