"""The ``camit`` console script: one module per verb, named in one dispatch table (:data:`VERBS`).

Each verb module has ``add_parser(subparsers)`` and ``run(args) -> int``; exit codes are
:data:`framework.cli.common.EXIT_CODES`. Building the parser imports stdlib-only modules; a verb
imports what it needs when it runs (``tests/unit/framework/test_cli_startup.py``).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from framework import __version__, console
from framework.calib import verb as calibrate
from framework.cli import (
    check,
    collect,
    completion,
    deploy,
    diagnose,
    env,
    execute,
    lab,
    lease,
    run,
)
from framework.cli.common import EXIT_CODES, Parser
from framework.errors import EXIT_INTERRUPTED, EXIT_USAGE, FrameworkError
from framework.perf import verb as perf

__all__ = ["EXIT_CODES", "VERBS", "Verb", "build_parser", "main"]


class Verb(Protocol):
    """A ``camit`` verb: adds its parser to camit's sub-commands, runs with the parsed arguments."""

    def add_parser(self, sub: Any) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


#: verb -> its module, in ``camit --help``'s order
VERBS: dict[str, Verb] = {
    "env": env,
    "exec": execute,
    "deploy": deploy,
    "run": run,
    "check": check,
    "collect": collect,
    "diagnose": diagnose,
    "lab": lab,
    "lease": lease,
    "perf": perf,
    "calibrate": calibrate,
    "completion": completion,
}


def build_parser() -> argparse.ArgumentParser:
    """``camit``'s parser: the global options and every verb of :data:`VERBS`."""
    parser = Parser(prog="camit",
                    description="Multi-host integration tests for CAM on Ascend clusters.")
    parser.add_argument("--version", action="version", version=f"camit {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-vv: paramiko too)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for verb in VERBS.values():
        verb.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``camit``: the exit status. Called without ``argv`` it is the process's entry (the console
    script, ``python -m framework.cli``) and leaves the objects it made out of the collections of
    interpreter exit (:func:`_skip_exit_collections`); a caller that passes ``argv`` (tests,
    scripts) keeps its collector."""
    if argv is None:
        try:
            return _main(sys.argv[1:])
        finally:
            _skip_exit_collections()
    return _main(argv)


def _skip_exit_collections() -> None:
    """Freeze every live object out of the garbage collector (``gc.freeze``) just before the process
    exits: Python's finalization would run full collections over pydantic's and paramiko's objects
    (0.1-0.3 s of a 0.8 s ``camit exec`` on two busy cores, ``bench/fanout.py --process``). Only
    reference cycles are left to the OS; everything camit writes is closed by then."""
    gc.freeze()


def _main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv[:1] == ["lab"]:  # argparse would keep a leading option (--help) from the lab's parser
        return lab.main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = argv  # the manifest's command line (camit run)
        args.parser = parser  # the help of a verb without its action; the completion's source
        console.setup_logging(args.verbose)
        verb = VERBS.get(args.command)
        if verb is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return verb.run(args)
    except FrameworkError as exc:
        if os.environ.get("CAMIT_DEBUG"):
            raise
        # the message may quote a host's output
        print(f"camit: error: {console.printable(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("camit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
