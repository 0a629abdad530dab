"""Shared parameters of the controller-side suite modules: the world sizes every CAM case runs at.

Why these sizes, and why A3 only: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def _contract() -> ModuleType:
    """The rank side's contract module (stdlib only; the one file the op stand-in ships too), loaded under a
    name of its own so the controller never shadows a rank-side import."""
    name = "camsuite_contract"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / "rank" / "camcontract.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module   # dataclasses resolve their module through sys.modules
        spec.loader.exec_module(module)
    return sys.modules[name]


#: the most ranks any CAM op takes (the prefill/layout tilings and pybind: [2, 384]; camcontract.MAX_RANKS)
MAX_RANKS: int = _contract().MAX_RANKS

#: the A3-only marks every CAM controller case carries (markers.SOC_MARKERS: skipped on an A2 env)
CAM_MARKS = (pytest.mark.a3_test,)


def worlds_of(config: pytest.Config) -> list[int]:
    """The world sizes of this run: the env's default worlds (with ``--world-sizes`` beside them)."""
    from framework import CONTEXT_KEY
    from framework.ranksuite import SMALL_WORLDS, default_worlds, slots_per_node

    ctx = config.stash.get(CONTEXT_KEY, None)
    if ctx is None or ctx.env is None:  # no env: the small sizes (each skips: "no env file")
        return list(SMALL_WORLDS)
    env = ctx.env
    return default_worlds(len(env.hosts), slots_per_node(env, ctx.options.slots), ctx.options.worlds)


def world_params(config: pytest.Config) -> list:
    """``world`` parameters: each with ``ranks(w)`` (its skip when the env is too small) and the A3 marks."""
    return [pytest.param(w, marks=[pytest.mark.ranks(w), *CAM_MARKS, *_too_big(w)], id=f"{w}ranks")
            for w in worlds_of(config)]


def _too_big(world: int) -> list:
    """A world no CAM op takes: skipped, naming the limit (camcontract LIMITS dispatch.ranks / layout.ranks)."""
    if world <= MAX_RANKS:
        return []
    return [pytest.mark.skip(reason=f"{world} ranks: the CAM ops take at most {MAX_RANKS} ranks "
                                    "(moe_dispatch_prefill.cpp:63, dispatch_layout_tiling.cpp:99)")]
#: launch env of the launches that run the prefill ops (dispatch/combine prefill): the CAM API guide requires a
#: 4096 MB HCCL buffer for them (npu-fidelity.md §3); every other launch keeps CANN's default
PREFILL_ENV = {"HCCL_BUFFSIZE": "4096"}


def fused_demand(world: int, full: bool) -> int:
    """Bytes of HCCL window test_fused_rank.py's largest case needs at ``world`` (fused_deep_moe_tiling.cpp:618-625,
    camcontract.fused_window): its shapes as rank/cases.py has them (tests/unit/suites/test_cam_contract.py keeps
    the two equal): full shapes L 4 (fewer past 512 experts), batch 32 (16 below world 8), H 7168; lab shapes L 2,
    batch 8, H 1024; the production case (L 4, batch 16, H 7168) at world 4; global_bs = batch x world."""
    contract = _contract()

    def local(per_rank: int) -> int:  # cases.experts: per_rank a rank, fewer past 512 experts
        return max(1, min(per_rank, contract.MAX_EXPERTS // world))

    if full:
        return contract.fused_window(local(4), (32 if world >= 8 else 16) * world, 7168)
    lab = contract.fused_window(local(2), 8 * world, 1024)
    return max(lab, contract.fused_window(4, 16 * world, 7168)) if world == 4 else lab


def sweep_env(configs: Sequence[Any]) -> dict[str, str]:
    """The perf sweep's launch env (``framework.perf.row.Config`` items): PREFILL_ENV when it times the prefill
    ops, and an HCCL_BUFFSIZE that holds its largest fused_deep_moe window (global_bs = batch x world,
    camcontract.fused_window) when that is more than the window the launch would have."""
    contract = _contract()
    env = dict(PREFILL_ENV) if any(c.op != "fused_deep_moe" for c in configs) else {}
    demand = max((contract.fused_window(c.experts // c.world, c.tokens * c.world, c.hidden)
                  for c in configs if c.op == "fused_deep_moe"), default=0)
    if not contract.fits(demand, contract.hccl_buffsize_mb(env)):
        env["HCCL_BUFFSIZE"] = str(contract.needed_mb(demand))
    return env


def fused_env(world: int, full: bool) -> dict[str, str]:
    """The fused launch's env: HCCL_BUFFSIZE when the window needs more than CANN's default 200 MB
    (mc2_tiling_utils.h:25), else nothing (the launch keeps the cluster's setting)."""
    contract = _contract()
    demand = fused_demand(world, full)
    if contract.fits(demand, contract.DEFAULT_HCCL_BUFFSIZE_MB):
        return {}
    return {"HCCL_BUFFSIZE": str(contract.needed_mb(demand))}
