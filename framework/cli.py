"""The ``camit`` console script: manual cluster validation from a shell.

Exit codes (every sub-command): 0 ok; 1 a command/test/check failed or timed
out; 2 usage or environment-file error; 3 infrastructure error (a host
unreachable, authentication or host key refused). User errors print one line,
never a traceback (``-v`` adds logging, ``CAMIT_DEBUG=1`` re-raises).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from framework import __version__, console
from framework.errors import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    EXIT_USAGE,
    FrameworkError,
    UsageError,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _env_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", metavar="FILE", default=os.environ.get("CAMIT_ENV"),
                   help="test_env.yaml (default: $CAMIT_ENV, else /etc/ubus_ci/test_env.yaml)")


def _hosts_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", metavar="H1,H2", help="only these hosts (names from host_info)")


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
    ex.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...")
    return parser


def _load_env(path: str | None) -> Any:
    from framework.config import DEFAULT_ENV_PATH, load

    return load(path or DEFAULT_ENV_PATH)


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


def cmd_exec(args: argparse.Namespace) -> int:
    from framework.hosts import Cluster

    argv = list(args.cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("camit exec: no command given (camit exec --env FILE -- CMD...)")
    # one word is a shell script as typed; several are joined like ssh does
    command = argv[0] if len(argv) == 1 else " ".join(argv)
    env = _load_env(args.env)
    cluster = Cluster.from_env(env, _split_hosts(args.hosts))
    with cluster:
        group = cluster.run(command, timeout=args.timeout)
    rows, payload, worst = [], [], EXIT_OK
    for name, value in group.items():
        if isinstance(value, BaseException):
            code = getattr(value, "exit_code", EXIT_INFRA)
            status = "UNREACHABLE" if code == EXIT_INFRA else "ERROR"
            text = str(value)
            text = text[len(name) + 2:] if text.startswith(name + ": ") else text
            rows.append([name, status, "-", text])
            payload.append({"host": name, "status": status.lower(), "error": text})
            worst = max(worst, code)
            continue
        status = "TIMEOUT" if value.timed_out else str(value.rc)
        tail = "\n".join((value.stdout.strip() or value.stderr.strip()).splitlines()[-args.tail:])
        rows.append([name, status, f"{value.duration:.2f}s", tail])
        payload.append({"host": name, "rc": value.rc, "timed_out": value.timed_out,
                        "duration": round(value.duration, 3), "stdout": value.stdout, "stderr": value.stderr})
        if not value.ok:
            worst = max(worst, EXIT_FAILED)
    if args.json:
        console.print_json(payload)
    else:
        console.print_table(["host", "rc", "duration", "output"], rows)
    return worst


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        console.setup_logging(args.verbose)
        if args.command == "env" and getattr(args, "env_command", None) == "validate":
            return cmd_env_validate(args)
        if args.command == "exec":
            return cmd_exec(args)
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    except FrameworkError as exc:
        if os.environ.get("CAMIT_DEBUG"):
            raise
        print(f"camit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("camit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
