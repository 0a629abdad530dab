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
from pathlib import Path
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

    dp = sub.add_parser("deploy", help="deploy the .run package and the wheel to every host")
    _env_arg(dp)
    _hosts_arg(dp)
    dp.add_argument("--no-relay", action="store_true", help="push directly from here to every host")
    dp.add_argument("--report-dir", metavar="D", default="reports", help="run folders go here (default: reports)")
    dp.add_argument("--json", action="store_true", help="print the manifest as JSON")

    rn = sub.add_parser("run", help="launch a torchrun target across the cluster")
    _env_arg(rn)
    _hosts_arg(rn)
    rn.add_argument("--nproc-per-node", type=int, default=None, metavar="P")
    rn.add_argument("--timeout", type=float, default=600.0, metavar="S", help="job timeout (default 600)")
    rn.add_argument("--report-dir", metavar="D", default="reports", help="run folders go here (default: reports)")
    rn.add_argument("--json", action="store_true", help="print the result as JSON")
    rn.add_argument("target", nargs=argparse.REMAINDER, metavar="-- script.py|-m module [args]")
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


def cmd_deploy(args: argparse.Namespace) -> int:
    from framework.deploy import Deployer
    from framework.hosts import Cluster
    from framework.rundir import RunDir

    env = _load_env(args.env)
    cluster = Cluster.from_env(env, _split_hosts(args.hosts))
    rundir = RunDir.create(args.report_dir)

    def event(host: str, message: str) -> None:
        if not args.json:
            console.event(host, message)

    with cluster:
        result = Deployer(env, cluster, relay=False if args.no_relay else None, rundir=rundir,
                          on_event=event).run()
    if args.json:
        console.print_json(result.to_json())
    else:
        rows = []
        for name, m in result.manifests.items():
            arts = "\n".join(f"{a.name} {a.sha256[:12]} ({a.via})" for a in m.artifacts) or "-"
            took = sum(m.durations.values())
            detail = m.error if m.error else f"{m.installed_version or '-'} @ {m.install_path}"
            rows.append([name, m.status.upper(), arts, detail, f"{took:.2f}s"])
        console.print_table(["host", "status", "artifacts", "version @ install path / error", "time"], rows)
        for note in result.notes:
            print(f"note: {note}")
        print(f"manifest: {rundir.path / 'deploy-manifest.json'}  ({result.duration:.2f}s)")
    return max((e.exit_code for e in result.errors.values()), default=EXIT_OK)


def cmd_run(args: argparse.Namespace) -> int:
    from framework.hosts import Cluster
    from framework.launch import Launcher, Target
    from framework.rundir import RunDir

    target = Target.parse(args.target)
    env = _load_env(args.env)
    cluster = Cluster.from_env(env, _split_hosts(args.hosts))
    rundir = RunDir.create(args.report_dir)

    def event(host: str, message: str) -> None:
        if not args.json:
            console.event(host, message)

    with cluster, console.terminate_as_interrupt():
        launcher = Launcher(env, cluster, rundir=rundir, nproc_per_node=args.nproc_per_node, on_event=event)
        result = launcher.run(target, timeout=args.timeout)
    if args.json:
        console.print_json(result.to_json())
    else:
        rows = [[r.rank, r.host, "ok" if r.ok else (r.signal or (f"exit {r.exit_code}" if r.exit_code is not None
                                                                     else "no report")),
                 Path(r.log).relative_to(rundir.path).as_posix() if r.log else "-"]
                for r in sorted(result.ranks.values(), key=lambda r: r.rank)]
        console.print_table(["rank", "host", "outcome", "log"], rows)
        print(("PASSED: " if result.ok else "FAILED: ") + result.message())
        print(f"report: {rundir.path}")
    if result.ok:
        return EXIT_OK
    return EXIT_INFRA if result.failure_kind in ("lost", "infra") else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        console.setup_logging(args.verbose)
        if args.command == "env" and getattr(args, "env_command", None) == "validate":
            return cmd_env_validate(args)
        if args.command == "exec":
            return cmd_exec(args)
        if args.command == "deploy":
            return cmd_deploy(args)
        if args.command == "run":
            return cmd_run(args)
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
