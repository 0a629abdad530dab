"""``camit lab ...`` is ``python -m framework.lab ...``: the network-namespace lab, with its own
options (``--help`` included)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def add_parser(sub: Any) -> None:
    lb = sub.add_parser("lab", help="the network-namespace lab: up | down | status | fault "
                                    "(python -m framework.lab)", add_help=False)
    lb.add_argument("lab_args", nargs=argparse.REMAINDER, metavar="up|down|status|fault ...")


def main(lab_args: Sequence[str]) -> int:
    """The lab's own command line (framework.lab.manage)."""
    from framework.lab.manage import main as lab_main

    return lab_main(list(lab_args))


def run(args: argparse.Namespace) -> int:
    return main(args.lab_args)
