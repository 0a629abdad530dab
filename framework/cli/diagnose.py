"""``camit diagnose LAUNCH_ID``: where the ranks of a running launch are (stacks grouped, odd ones
named); no lease (the launch holds it) and nothing stops."""

from __future__ import annotations

import argparse
from typing import Any

from framework import console
from framework.cli.common import env_arg, hosts_arg, load_env, split_hosts


def add_parser(sub: Any) -> None:
    dg = sub.add_parser("diagnose", help="where the ranks of a running launch are: stacks grouped, "
                                         "odd ones named")
    env_arg(dg)
    hosts_arg(dg)
    dg.add_argument("launch_id", metavar="LAUNCH_ID",
                    help="a launch id, or its start (the run id): every running launch it begins")


def run(args: argparse.Namespace) -> int:
    """Ask the ranks of a running launch for their stacks."""
    from framework.hosts import Cluster
    from framework.launch.diagnose import diagnose

    env = load_env(args.env)
    with Cluster.from_env(env, split_hosts(args.hosts)) as cluster:
        found = diagnose(env, cluster, args.launch_id)
    for d in found:
        print(console.printable(d.describe()))
    return 0 if any(d.groups for d in found) else 1
