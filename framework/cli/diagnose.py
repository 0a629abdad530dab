"""``camit diagnose LAUNCH_ID``: where the ranks of a running launch are (stacks grouped, odd ones
named); no lease (the launch holds it) and nothing stops."""

from __future__ import annotations

import argparse
from typing import Any

from framework import console
from framework.cli.common import env_arg, env_cluster, hosts_arg


def add_parser(sub: Any) -> None:
    dg = sub.add_parser("diagnose", help="where the ranks of a running launch are: stacks grouped, "
                                         "odd ones named")
    env_arg(dg)
    hosts_arg(dg)
    dg.add_argument("launch_id", metavar="LAUNCH_ID",
                    help="a launch id, or its start (the run id): every running launch it begins")


def run(args: argparse.Namespace) -> int:
    """Ask the ranks of a running launch for their stacks."""
    from framework.launch.diagnose import diagnose

    env, cluster = env_cluster(args)
    with cluster:
        found = diagnose(env, cluster, args.launch_id)
    for d in found:
        print(console.printable(d.describe()))
    return 0 if any(d.groups for d in found) else 1
