"""Multi-process checks (gloo, spawn) of dispatch -> combine and fused_deep_moe.

Each test spawns one world and runs several scenarios in it (see
_cam_scenarios.py); the references there are float64 re-derivations of the
semantics documented in DECISIONS.md.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _cam_scenarios as sc  # noqa: E402
from _cam_harness import run_world  # noqa: E402


def test_world2():
    run_world(2, sc.suite, [
        ("dispatch_combine", (4, 2, 1024, False, [6, 4])),
        ("dispatch_combine", (4, 2, 1024, True, [5, 5])),
        ("dispatch_buffsize_too_small", ()),
        ("faults", ()),
        ("dispatch_tiling_after_notify", ()),
        ("fused", (4, 2, 512, 1024, [3, 2], True, True, True)),
        ("fused", (4, 2, 512, 1024, [3, 3], False, False, True)),
    ])


def test_world4():
    run_world(4, sc.suite, [
        ("dispatch_combine", (8, 2, 1024, False, [3, 4, 2, 5])),
        ("dispatch_combine", (8, 3, 1024, True, [4, 4, 1, 3])),
        ("fused", (8, 2, 512, 1024, [2, 1, 2, 2], True, False, False)),
    ])
