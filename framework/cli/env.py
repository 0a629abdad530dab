"""``camit env validate FILE``: load an environment file and print its summary (or, ``--json``, the
normalized and redacted environment)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from framework import console
from framework.cli.common import load_env
from framework.errors import EXIT_OK, EXIT_USAGE


def add_parser(sub: Any) -> None:
    env = sub.add_parser("env", help="environment files")
    actions = env.add_subparsers(dest="env_command", metavar="ACTION")
    val = actions.add_parser("validate", help="validate a test_env.yaml and print a summary")
    val.add_argument("file", metavar="FILE")
    val.add_argument("--json", action="store_true",
                     help="print the normalized, redacted environment as JSON")


def run(args: argparse.Namespace) -> int:
    if args.env_command != "validate":  # no action: camit's own help
        args.parser.print_help(sys.stderr)
        return EXIT_USAGE
    env = load_env(args.file)
    if args.json:
        console.print_json(env.redacted())
        return EXIT_OK
    rows = env.summary_rows()
    headers = list(rows[0].keys()) if rows else ["name"]
    console.print_table(headers, [[r[h] for h in headers] for r in rows],
                        title=f"{args.file}: valid, {len(rows)} host(s)")
    return EXIT_OK
