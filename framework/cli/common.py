"""What every ``camit`` verb shares: the parser class with its epilog, the common options,
loading the env file, picking hosts, the lease and the run folder.

Only argparse and stdlib-only camit modules at import (``tests/unit/framework/test_cli_startup.py``): the env
loader, the SSH transport and the lease are imported when a verb runs.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from framework import console
from framework.errors import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    reason_of,
)

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster
    from framework.lease import Lease
    from framework.records.folder import RunDir

#: what each exit status of every ``camit`` command means (the ``--help`` epilogs print it)
EXIT_CODES = (
    (EXIT_OK, "ok"),
    (EXIT_FAILED, "failed: a command, test, rank or check failed or timed out"),
    (EXIT_USAGE,
     "usage or environment-file error (one line naming the option, or the file and key)"),
    (EXIT_INFRA, "infrastructure: a host unreachable or lost, authentication or host key refused, "
                 "hosts leased by someone else"),
    (EXIT_INTERRUPTED,
     "interrupted (Ctrl-C, SIGTERM): torn down, report folder and lease handled"),
)

#: ``--help`` examples per command path
EXAMPLES: dict[str, tuple[str, ...]] = {
    "camit": ("camit check --env test_env.yaml", "camit deploy --env test_env.yaml",
              "camit run --env test_env.yaml --nproc-per-node 2 -- examples/hello_ranks.py",
              'eval "$(camit completion bash)"'),
    "camit env validate": ("camit env validate test_env.yaml",
                           "camit env validate test_env.yaml --json"),
    "camit exec": ("camit exec --env e.yaml -- uname -r",
                   "camit exec --env e.yaml --hosts node1,node2 -- 'npu-smi info | head'",
                   "camit exec --env e.yaml --lease --wait 600 -- 'rm -rf /var/tmp/camit/old'"),
    "camit deploy": ("camit deploy --env e.yaml",
                     "camit deploy --env e.yaml --hosts node1 --no-relay --wait 900",
                     "camit deploy --env e.yaml --dry-run"
                     "   # what would go where; no host contacted"),
    "camit run": ("camit run --env e.yaml --nproc-per-node 2 -- examples/hello_ranks.py",
                  "camit run --env e.yaml --json -- -m my.module",
                  "camit run --env e.yaml --dry-run -- examples/hello_ranks.py"
                  "   # each node's command; nothing started"),
    "camit check": ("camit check --env e.yaml", "camit check --env e.yaml --hosts node3 --json"),
    "camit collect": ("camit collect --env e.yaml", "camit collect --env e.yaml --logs --wait 600"),
    "camit lease status": ("camit lease status --env e.yaml",),
    "camit lease release": ("camit lease release --env e.yaml",
                            "camit lease release --env e.yaml --hosts node2 --force"),
    "camit lease run": ("camit lease run --env e.yaml -- pytest suites/cam --env e.yaml",),
    "camit completion": ('eval "$(camit completion bash)"', 'eval "$(camit completion zsh)"',
                         "camit completion bash > /etc/bash_completion.d/camit"),
}

#: the first line of every dry run
DRY_RUN_HEADER = "dry run: no host contacted, no lease taken, nothing changed"


def epilog(path: str) -> str:
    """The ``--help`` epilog of a command: its examples, then the exit-code table."""
    lines = []
    if path in EXAMPLES:
        lines += ["examples:", *(f"  {e}" for e in EXAMPLES[path]), ""]
    lines += ["exit codes:", *(f"  {code:<4} {text}" for code, text in EXIT_CODES)]
    return "\n".join(lines)


class Parser(argparse.ArgumentParser):
    """camit's parsers: examples and exit codes in every ``--help``; a usage error is a
    :class:`UsageError` (one line, exit 2), never argparse's exit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        if self.epilog is None and self.add_help:
            self.epilog = epilog(self.prog)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def env_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", metavar="FILE", default=None,
                   help="test_env.yaml (default: $CAMIT_ENV, else /etc/ubus_ci/test_env.yaml)")


def hosts_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", metavar="H1,H2", help="only these hosts (names from host_info)")


def lease_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for hosts another controller holds "
                        "(default: fail naming the holder)")
    p.add_argument("--owner", default=None,
                   help="lease owner (default: $BUILD_URL, else user@host)")


def load_env(path: str | None) -> EnvConfig:
    from framework.config import load, resolve_env_path

    return load(resolve_env_path(path)[0])


def split_hosts(value: str | None) -> list[str] | None:
    return [h.strip() for h in value.split(",") if h.strip()] if value else None


def host_error_text(name: str, err: BaseException) -> str:
    return reason_of(err, name)


def env_cluster(args: argparse.Namespace) -> tuple[EnvConfig, Cluster]:
    """The env file (``--env``) and its cluster, narrowed to ``--hosts``: transports are made but
    not connected (a host is contacted on its first command, and a dry run sends none)."""
    from framework.hosts import Cluster

    env = load_env(args.env)
    return env, Cluster.from_env(env, split_hosts(args.hosts))


def cluster_run(args: argparse.Namespace) -> tuple[EnvConfig, Cluster, RunDir]:
    """The env, its (selected) cluster and a new run folder (``--report-dir``)."""
    from framework.records.folder import RunDir

    env, cluster = env_cluster(args)
    return env, cluster, RunDir.create(args.report_dir)


def command_words(args: argparse.Namespace, usage: str) -> list[str]:
    """The command after ``--`` (``args.cmd``); none is a usage error that says ``usage``."""
    argv = list(args.cmd)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError(usage)
    return argv


def print_rows(args: argparse.Namespace, headers: Sequence[str], rows: Sequence[Sequence[object]],
               payload: object) -> None:
    """A verb's per-host result: ``payload`` as JSON with ``--json``, else the table."""
    if args.json:
        console.print_json(payload)
    else:
        console.print_table(headers, rows)


def progress(args: argparse.Namespace
             ) -> contextlib.AbstractContextManager[Callable[[str, str], None]]:
    """The progress of a long command (:func:`framework.console.progress`: live on a terminal, plain
    lines otherwise); none with --json."""
    if args.json:
        return contextlib.nullcontext(lambda host, message: None)
    return console.progress()


def leased(args: argparse.Namespace, cluster: Cluster) -> Lease:
    """The lease on ``cluster`` that ``run`` and ``deploy`` hold as the pytest path does
    (``--wait``, ``--owner``); ``LeaseHeld`` names the holder."""
    from framework.lease import Lease

    return Lease(cluster, owner=args.owner, wait=args.wait)


def say(text: str, scrub: Callable[[str], str]) -> None:
    """One line of a dry run's plan: the env's secrets out (as values), control characters
    escaped."""
    print(console.printable(scrub(text)))


def scrub_folder(rundir: RunDir, env: EnvConfig) -> None:
    """The env's secrets out of every file of the run folder (as values:
    framework.records.scrub)."""
    from framework.records.scrub import Scrubber, scrub_folder

    scrub_folder(rundir.path, Scrubber.from_env(env))
