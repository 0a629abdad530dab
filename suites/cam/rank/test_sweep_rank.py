"""The perf sweep, rank side: every configuration of ``CAMIT_SWEEP`` timed, hashed and compared
with all_to_all.

The ``CAMIT_SWEEP`` format and what is timed: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from camref import FusedCase, PrefillCase, fused_inputs, prefill_inputs
from test_fused_rank import fused_args

SPEC = os.environ.get("CAMIT_SWEEP", "1;3;16:1024:2:0")
DRIVER_INFO = Path("/usr/local/Ascend/driver/version.info")


def _key_value(path: Path, key: str) -> str:
    """``key=value`` out of an Ascend info file ("unknown" when the file or the key is not there)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "unknown"
    values = [line.split("=", 1)[1].strip() for line in lines if line.split("=", 1)[0].strip().lower() == key]
    return values[0] if values else "unknown"


def _op_lib() -> tuple[str, str]:
    """The op library's version and the sha256 over its package's files (name and bytes, sorted)."""
    import umdk_cam_op_lib

    try:
        version = importlib.metadata.version("umdk_cam_op_lib")
    except importlib.metadata.PackageNotFoundError:
        version = str(getattr(umdk_cam_op_lib, "__version__", "unknown"))
    digest = hashlib.sha256()
    root = Path(umdk_cam_op_lib.__file__).parent
    for f in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return version, digest.hexdigest()


def environment() -> dict[str, object]:
    """CANN (``<toolkit home>/<arch>-linux/ascend_toolkit_install.info``, what camit's preflight reads), driver,
    op library and HCCL settings as this rank sees them."""
    home = Path(os.environ.get("ASCEND_TOOLKIT_HOME", "/usr/local/Ascend/ascend-toolkit/latest"))
    version, digest = _op_lib()
    records = [home / f"{platform.machine()}-linux" / "ascend_toolkit_install.info",
               home / "ascend_toolkit_install.info"]
    cann = next((v for v in (_key_value(r, "version") for r in records) if v != "unknown"), "unknown")
    return {"cann": cann,
            "driver": _key_value(DRIVER_INFO, "version"), "op_lib_version": version, "op_lib_hash": digest,
            "hccl": {k: v for k, v in sorted(os.environ.items()) if k.startswith("HCCL_")}}


def _shapes(spec: str) -> tuple[int, int, list[PrefillCase], list[FusedCase]]:
    warmup, iterations, shapes, *fused = spec.split(";")
    cases, fused_cases = [], []
    for item in filter(None, shapes.split(",")):
        tokens, hidden, top_k, experts = (int(v) for v in item.split(":"))
        cases.append(PrefillCase(tokens=tokens, hidden=hidden, experts=experts, top_k=top_k))
    for item in filter(None, (fused or [""])[0].split(",")):
        batch, hidden, top_k, experts, inter = (int(v) for v in item.split(":"))
        fused_cases.append(FusedCase(batch=batch, hidden=hidden, inter=inter, experts=experts, top_k=top_k))
    return int(warmup), int(iterations), cases, fused_cases


def _fused_rows(seed: int, world: int, case: FusedCase) -> list[list[int]]:
    """rows[i][j]: the (token, expert) rows fused_deep_moe's dispatch sends from rank i to rank j."""
    per_rank = case.experts // world
    return [np.bincount((fused_inputs(seed, src, case)["ids"] // per_rank).ravel(), minlength=world)
            .astype(int).tolist() for src in range(world)]


def _measure_fused(cam, seed: int, case: FusedCase, warmup: int, iterations: int) -> dict:
    rows = _fused_rows(seed, cam.world, case)
    args = fused_args(cam, seed, case)  # built once, on the device: only the op is timed

    def step() -> tuple[dict[str, float], Callable[[], dict[str, str]]]:
        t0 = time.perf_counter()
        out, _, counts = cam.ops.fused_deep_moe(*args)
        cam.sync()
        return ({"fused_deep_moe_us": (time.perf_counter() - t0) * 1e6},
                lambda: {"fused_deep_moe_hash": _digest(out) + _digest(counts)})

    got = _timed_loop(cam, _reference_buffers(cam, rows, case.hidden), warmup, iterations, step)
    got["rows"] = rows
    got["shape"] = {"tokens": case.batch, "hidden": case.hidden, "top_k": case.top_k, "experts": case.experts,
                    "inter": case.inter}
    return got


def _timed_loop(cam, buffers: tuple, warmup: int, iterations: int,
                step: Callable[[], tuple[dict[str, float], Callable[[], dict[str, str]]]]) -> dict:
    """The timed loop both sweeps share: per iteration ``step`` (the op(s): their microseconds, and how to hash
    their outputs), the hashes (after the warm-up), then the reference behind its barrier. One barrier an
    iteration: the reference's all_to_all itself lines the ranks up for the next op. After the warm-up each
    time and hash is kept under its name. ``segments_each_us`` holds each iteration's [op(s), reference]:
    each lasts as long as its slowest rank, so the bench's critical path is the sum of the per-segment maxima;
    ``loop_us`` minus that path is what the harness added (``section_us``: this rank's op(s) and reference)."""
    got: dict = {"reference_us": [], "segments_each_us": []}
    section = 0.0
    dist.barrier()  # the set-up ends at different times on each rank: not the loop's to wait for
    loop0 = time.perf_counter()
    for it in range(warmup + iterations):
        times, digests = step()
        kept = list(times.items()) + (list(digests().items()) if it >= warmup else [])
        ref = _reference(cam, buffers, got)
        op_us = sum(times.values())
        section += op_us + ref
        got["segments_each_us"].append([op_us, ref])
        if it >= warmup:
            for key, value in [*kept, ("reference_us", ref)]:
                got.setdefault(key, []).append(value)
    got["loop_us"] = (time.perf_counter() - loop0) * 1e6
    got["section_us"] = section
    got["section_each_us"] = [sum(seg) for seg in got["segments_each_us"]]
    return got


def _rows(seed: int, world: int, case: PrefillCase) -> list[list[int]]:
    """rows[i][j]: the (token, expert) rows rank i sends rank j (experts in contiguous blocks per rank)."""
    per_rank = case.experts // world
    out = []
    for src in range(world):
        _, topk, _ = prefill_inputs(seed, src, case)
        out.append(np.bincount((topk // per_rank).ravel(), minlength=world).astype(int).tolist())
    return out


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _reference_buffers(cam, rows: list[list[int]], hidden: int) -> tuple:
    """The reference's device buffers and split sizes, made once per configuration (outside the loop)."""
    send = [rows[cam.rank][j] * hidden * 2 for j in range(cam.world)]
    recv = [rows[i][cam.rank] * hidden * 2 for i in range(cam.world)]
    src = cam.to_device(torch.ones(sum(send), dtype=torch.uint8))
    dst = cam.to_device(torch.empty(sum(recv), dtype=torch.uint8))
    return dst, src, recv, send


def _barrier(got: dict) -> None:
    """``dist.barrier()``, its time added to ``got["barrier_us"]`` (the bench tells it from the rest)."""
    t0 = time.perf_counter()
    dist.barrier()
    got["barrier_us"] = got.get("barrier_us", 0.0) + (time.perf_counter() - t0) * 1e6


def _reference(cam, buffers: tuple, got: dict) -> float:
    """One all_to_all_single of the dispatch's bytes over the op's group: microseconds."""
    dst, src, recv, send = buffers
    _barrier(got)
    t0 = time.perf_counter()
    dist.all_to_all_single(dst, src, recv, send, group=cam.group)
    cam.sync()
    return (time.perf_counter() - t0) * 1e6


def _measure(cam, seed: int, case: PrefillCase, warmup: int, iterations: int) -> dict:
    x, topk, w = prefill_inputs(seed, cam.rank, case)
    xt = cam.to_device(torch.from_numpy(x).to(torch.bfloat16))
    topk_t, w_t = cam.to_device(torch.from_numpy(topk)), cam.to_device(torch.from_numpy(w))
    ntpe, sti = cam.ops.get_dispatch_layout(topk_t, case.experts, cam.world)
    rows = _rows(seed, cam.world, case)

    def step() -> tuple[dict[str, float], Callable[[], dict[str, str]]]:
        t0 = time.perf_counter()
        recv_x, _, expand, recv_count, _ = cam.ops.moe_dispatch_prefill(
            xt, topk_t, w_t, ntpe, sti, cam.group_ep, cam.rank, cam.world, False)
        cam.sync()
        t1 = time.perf_counter()
        out = cam.ops.moe_combine_prefill(recv_x, topk_t, w_t, expand, recv_count, cam.group_ep, cam.rank, cam.world)
        cam.sync()
        t2 = time.perf_counter()
        rows_in = recv_x[: int(recv_count[-1])] if recv_count.numel() else recv_x
        return ({"dispatch_us": (t1 - t0) * 1e6, "combine_us": (t2 - t1) * 1e6},
                lambda: {"dispatch_hash": _digest(rows_in), "combine_hash": _digest(out)})

    got = _timed_loop(cam, _reference_buffers(cam, rows, case.hidden), warmup, iterations, step)
    got["rows"] = rows
    got["shape"] = case.__dict__
    return got


def _sized(case: PrefillCase, world: int) -> PrefillCase:
    """The default spec's experts (0) follow the world: two a rank."""
    if case.experts:
        return case
    return PrefillCase(tokens=case.tokens, hidden=case.hidden, experts=2 * world, top_k=case.top_k)


def _walled(measure, *args) -> dict:
    """``measure(*args)`` with ``wall_us``: the whole shape, its inputs (built once, before the timed
    loop), barriers and hashes included (``bench/perf_overhead.py`` sets it against ``loop_us`` and
    ``section_us``)."""
    t0 = time.perf_counter()
    got = measure(*args)
    got["wall_us"] = (time.perf_counter() - t0) * 1e6
    return got


def test_sweep(cam, seed):
    warmup, iterations, cases, fused_cases = _shapes(SPEC)
    dist.barrier()  # the ranks start seconds apart: line them up before any shape's wall clock starts
    t0 = time.perf_counter()
    if cases:  # the process's first calls (lazy imports, first allocations, first collectives) once per launch
        _measure(cam, seed, _sized(cases[0], cam.world), 1, 0)
    if fused_cases:  # and fused_deep_moe's own
        _measure_fused(cam, seed, fused_cases[0], 1, 0)
    launch_us = (time.perf_counter() - t0) * 1e6
    results = []
    for case in cases:
        results.append(_walled(_measure, cam, seed, _sized(case, cam.world), warmup, iterations))
    fused = [_walled(_measure_fused, cam, seed, case, warmup, iterations) for case in fused_cases]
    with open(f"perf-sweep-rank{cam.rank}.json", "w") as fh:
        json.dump({"rank": cam.rank, "world": cam.world, "seed": seed, "warmup": warmup, "iterations": iterations,
                   "environment": environment(), "shapes": results, "fused": fused,
                   "launch_us": launch_us}, fh)
    checks = [(r, op) for r in results for op in ("dispatch", "combine")] + [(r, "fused_deep_moe") for r in fused]
    for r, op in checks:
        assert len(set(r[f"{op}_hash"])) == 1, \
            f"rank {cam.rank}: {op} {r['shape']} gave {len(set(r[f'{op}_hash']))} different outputs " \
            f"over {iterations} iterations of one seed (not deterministic)"
