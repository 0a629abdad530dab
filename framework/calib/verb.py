"""The ``camit calibrate`` verb: ``--env FILE [--out DIR]`` writes a bundle; ``--compare BUNDLE``
lists the facts where a bundle and the built-in profile disagree (exit 0: none, 1: some)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from framework import console

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add ``calibrate`` to the ``camit`` subparsers ``sub``."""
    cal = sub.add_parser(
        "calibrate", help="record the facts the emulation assumes; compare a bundle with them"
    )
    cal.add_argument(
        "--env",
        metavar="FILE",
        default=None,
        help="test_env.yaml (default: $CAMIT_ENV, else /etc/ubus_ci/test_env.yaml)",
    )
    cal.add_argument("--hosts", metavar="H1,H2", help="only these hosts (names from host_info)")
    cal.add_argument(
        "--out",
        metavar="DIR",
        default="calibration",
        help="the bundle folder to write (default: a folder named calibration, here)",
    )
    cal.add_argument(
        "--no-golden",
        action="store_true",
        help="skip the fused-vs-golden launch at CASE_4RANK (world 4 on hccl; 80 s on the "
        "emulated lab)",
    )
    cal.add_argument(
        "--compare",
        metavar="BUNDLE",
        help="compare this bundle (folder or calibration.json) with the built-in profile",
    )
    cal.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help="compare with this profile instead of the built-in one",
    )


def run(args: argparse.Namespace) -> int:
    from framework.calib import bundle, compare

    if args.compare:
        doc = bundle.load(Path(args.compare))
        profile = bundle.load_profile(Path(args.profile)) if args.profile else bundle.load_profile()
        diffs = compare.differences(bundle.values(doc), profile)
        for key in diffs:
            sys.stdout.write(console.printable(f"differs: {key} ({_source(doc, key)})") + "\n")
        sys.stderr.write(f"camit calibrate: {len(diffs)} fact(s) differ from the profile\n")
        return 1 if diffs else 0
    return _calibrate(args)


def _calibrate(args: argparse.Namespace) -> int:
    from framework.calib import bundle
    from framework.config import load, resolve_env_path
    from framework.hosts import Cluster
    from framework.records.scrub import Scrubber

    env = load(resolve_env_path(args.env)[0])
    only = [h for h in args.hosts.split(",") if h] if args.hosts else None
    with Cluster.from_env(env, only) as cluster:
        doc = bundle.collect(cluster, env, measure=not args.no_golden)
    path = bundle.write(doc, Path(args.out), Scrubber.from_env(env))
    sys.stdout.write(
        f"camit calibrate: {len(doc['facts'])} facts from {len(doc['hosts'])} host(s) in {path}\n"
    )
    return 0


def _source(doc: dict[str, Any], key: str) -> str:
    fact = doc["facts"].get(key)
    return (
        str(fact["source"])
        if isinstance(fact, dict) and "source" in fact
        else "absent from the bundle"
    )
