"""The ``camit perf`` verb: ``camit perf compare RUN_A RUN_B`` (:mod:`framework.perf.compare`).

Only argparse at import: the parser of every ``camit`` command is built from it, and numpy, scipy and
ruptures are imported when the verb runs (``tests/unit/framework/test_cli_startup.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from framework import console
from framework.errors import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add ``perf`` and its actions to the ``camit`` subparsers ``sub``."""
    pf = sub.add_parser("perf", help="performance results: compare two runs")
    actions = pf.add_subparsers(dest="perf_command", metavar="ACTION")  # camit's parser class
    cmp = actions.add_parser("compare", help="every configuration of two runs with its delta and significance")
    cmp.add_argument("run_a", metavar="RUN_A", help="run folder (with perf-rows.jsonl) or a rows file")
    cmp.add_argument("run_b", metavar="RUN_B")
    cmp.add_argument("--out", metavar="DIR", default=".",
                     help="write perf-compare.md and perf-compare.json here (default: the current directory)")
    cmp.add_argument("--json", action="store_true", help="print the JSON instead of the table")


def run(args: argparse.Namespace) -> int:
    """Run ``camit perf ACTION``: the exit status (0: compared)."""
    if getattr(args, "perf_command", None) != "compare":
        raise UsageError("camit perf: give an action: compare")
    from framework.perf import compare  # numpy, scipy: only when the verb runs

    try:
        a, b = compare.load_run(Path(args.run_a)), compare.load_run(Path(args.run_b))
    except ValueError as exc:
        raise UsageError(f"camit perf compare: {exc}") from None
    deltas = compare.compare(a, b)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = compare.to_json(deltas, args.run_a, args.run_b)
    (out / "perf-compare.md").write_text(compare.markdown(deltas, args.run_a, args.run_b), encoding="utf-8")
    (out / "perf-compare.json").write_text(text, encoding="utf-8")
    if args.json:
        sys.stdout.write(text)
        return 0
    significant = sum(d.significant for d in deltas)
    console.print_table(compare.HEADERS, compare.table(deltas),
                        title=f"{len(deltas)} configuration(s), {significant} significant change(s)")
    return 0
