"""Rank-side runtime: runs inside every torchrun worker on the hosts (needs no camit install).

- initialises the process group for the backend — hccl with torch_npu on NPU (device =
  LOCAL_RANK), gloo on CPU — with the case timeout, and destroys it at the end (gloo
  can SIGABRT at exit otherwise; torchrun-notes.md);
- imports the op library after torch_npu, as the real one requires;
- a barrier before and after every test, and seeds derived from the controller's
  ``CAMIT_SEED`` and the test id (identical on every rank);
- the ``cam`` fixture: rank, world size, device, the op's own group and ``group_ep``. As upstream's UTs
  do (umdk ``test/cam/ut/fused_deep_moe/test_fused_deep_moe.py``, ``dist.new_group(backend="hccl",
  ranks=...)``), the ops get a dedicated group over all ranks, not WORLD: on NPU ``group_ep`` is that
  group's HCCL communicator name (``get_hccl_comm_name``), on CPU the gloo group's c10d name. The
  harness's barriers stay on WORLD;
- ``cam.nz(t)``: a gmm weight as the kernels declare it (FRACTAL_NZ on NPU, with
  ``allow_internal_format`` on, as upstream's fused UT sets it), the ND tensor on CPU;
- ``cam.sync()`` (the device's synchronize on NPU, where asynchronous kernel faults surface) and
  ``cam.check_healthy(after)``: sync plus a small collective on the op's group; a rank whose device
  is poisoned ends its process at once with the evidence, so its peers do not wait in a barrier
  until the case timeout.

Under plain pytest (no torchrun variables) every test is skipped with a reason that says
so — never silently, unlike upstream's SKIP_ENV_RANKSIZE_UNEQUAL.
"""

from __future__ import annotations

import datetime
import os
import random
import sys
import traceback
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
UNDER_TORCHRUN = all(v in os.environ for v in TORCHRUN_VARS)
BACKEND = os.environ.get("CAMIT_BACKEND", "gloo")
SEED = int(os.environ.get("CAMIT_SEED", "1234"))
CASE_TIMEOUT = float(os.environ.get("CAMIT_CASE_TIMEOUT", "300"))


@dataclass
class Cam:
    rank: int
    world: int
    local_rank: int
    device: torch.device
    group: Any
    group_ep: str
    backend: str
    seed: int
    ops: Any  # torch.ops.umdk_cam_op_lib

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.device)

    def nz(self, t: torch.Tensor) -> torch.Tensor:
        """A gmm weight on the device in the format the fused op declares for it: FRACTAL_NZ on NPU
        (umdk fused_deep_moe/op_host/fused_deep_moe.cpp; the UT casts with npu_format_cast), ND on CPU."""
        t = self.to_device(t)
        if self.backend != "hccl":
            return t
        import torch_npu

        return torch_npu.npu_format_cast(t, torch_npu.Format.FRACTAL_NZ)

    def sync(self) -> None:
        """Wait for the device: on NPU kernel faults (507015, 507035, ...) surface here, not at the call."""
        if self.backend == "hccl":
            torch.npu.synchronize()

    def check_healthy(self, after: str) -> None:
        """After ``after`` (a case that made an op fail): the device still runs and the op's group still
        talks. A rank that fails this prints why and exits at once (torchrun then ends its peers)."""
        try:
            self.sync()
            probe = torch.ones(1, dtype=torch.float32)
            dist.all_reduce(probe, group=self.group)
            self.sync()
            ok = int(probe.item()) == self.world
            why = f"all_reduce of ones gave {probe.item()}, expected {self.world}"
        except Exception as exc:  # noqa: BLE001 - any failure here is the evidence
            ok, why = False, "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if not ok:
            print(f"camit: rank {self.rank} is not healthy after {after}: {why}; ending this rank now",
                  file=sys.stderr, flush=True)
            os._exit(3)


_cam: Cam | None = None


def pytest_configure(config: pytest.Config) -> None:
    for marker in ("author(name): who wrote the case", "multi_process_test: needs torchrun",
                   "single_process_test: one process", "a2_test: runs on A2", "a3_test: runs on A3",
                   "world(*sizes): world sizes the case supports"):
        config.addinivalue_line("markers", marker)
    global _cam
    if not UNDER_TORCHRUN:
        return
    rank, world, local = (int(os.environ[v]) for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    # the process-group (watchdog) timeout camit derived: above HCCL_EXEC_TIMEOUT, below the case timeout
    timeout = datetime.timedelta(seconds=float(os.environ.get("CAMIT_PG_TIMEOUT") or CASE_TIMEOUT))
    if BACKEND == "hccl":
        import torch_npu  # (must precede the op library)

        # gmm weights go to fused_deep_moe as FRACTAL_NZ (umdk test_fused_deep_moe.py sets this at import)
        torch_npu.npu.config.allow_internal_format = True
        torch.npu.set_device(local)
        device = torch.device("npu", local)
        dist.init_process_group("hccl", rank=rank, world_size=world, timeout=timeout)
        group = dist.new_group(backend="hccl", ranks=list(range(world)))
        group_ep = group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
    else:
        device = torch.device("cpu")
        dist.init_process_group(BACKEND, rank=rank, world_size=world, timeout=timeout)
        group = dist.new_group(backend=BACKEND, ranks=list(range(world)))
        group_ep = group.group_name
    import umdk_cam_op_lib  # noqa: F401  (registers torch.ops.umdk_cam_op_lib)

    _cam = Cam(rank, world, local, device, group, group_ep, BACKEND, SEED, torch.ops.umdk_cam_op_lib)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not UNDER_TORCHRUN:
        skip = pytest.mark.skip(reason="rank-side test: run it under torchrun through camit "
                                       "(pytest suites/cam --env FILE), not directly")
        for item in items:
            item.add_marker(skip)
        return
    assert _cam is not None
    for item in items:
        marker = item.get_closest_marker("world")
        if marker and _cam.world not in marker.args:
            item.add_marker(pytest.mark.skip(reason=f"needs world size in {marker.args}, have {_cam.world}"))


def pytest_unconfigure(config: pytest.Config) -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


@pytest.fixture(scope="session")
def cam() -> Cam:
    if _cam is None:
        pytest.skip("not under torchrun")
    return _cam


def case_seed(nodeid: str) -> int:
    """Same on every rank: the controller's seed and the test id."""
    return (SEED * 1000003 + zlib.crc32(nodeid.encode())) % (2**31)


@pytest.fixture(autouse=True)
def _ranks_in_step(request: pytest.FixtureRequest) -> Any:
    seed = case_seed(request.node.nodeid)
    random.seed(seed)
    np.random.seed(seed % (2**32))
    # the CPU generator only: every input is drawn on the CPU (numpy or torch), and torch.manual_seed would
    # also seed the device module's generators (torch_npu's manual_seed_all; the stand-in's recurses)
    torch.random.default_generator.manual_seed(seed)
    if _cam is not None:
        dist.barrier()
    yield seed
    if _cam is not None:
        dist.barrier()


@pytest.fixture
def seed(_ranks_in_step: int) -> int:
    return _ranks_in_step
