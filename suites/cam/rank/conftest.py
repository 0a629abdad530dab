"""Rank-side runtime: runs inside every torchrun worker on the hosts (needs no camit install).

Process group, seeds, the ranks' agreement after each test, the ``cam`` fixture and module
records: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import sys
import time
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
#: how long a rank waits for its peers once some rank reported a failed test (``CAMIT_AGREE_TIMEOUT`` seconds):
#: longer than a healthy peer's checks after the test's last collective (under a second at the lab shapes; raise
#: it through ``launch.env`` where the reference checks run longer), far below the case timeout a peer stuck in a
#: collective would otherwise wait
AGREE_TIMEOUT = float(os.environ.get("CAMIT_AGREE_TIMEOUT") or min(30.0, CASE_TIMEOUT / 4))
#: exit codes of a rank the harness ends: its device or group is broken / its peers never arrived
EXIT_UNHEALTHY, EXIT_PEERS_GONE = 3, 4


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

    def new_op_group(self) -> tuple[Any, str]:
        """A further group over all ranks and its ``group_ep`` (a second CAM communicator in this process, as
        upstream's fused UT builds ``ep_group`` and ``ep_group_small``). Every rank must call it, in step."""
        group = dist.new_group(backend=self.backend, ranks=list(range(self.world)))
        if self.backend == "hccl":
            return group, group._get_backend(torch.device("npu")).get_hccl_comm_name(self.rank)
        return group, group.group_name

    def sync(self) -> None:
        """Wait for the device: on NPU kernel faults (507015, 507035, ...) surface here, not at the call."""
        if self.backend == "hccl":
            torch.npu.synchronize()

    def check_healthy(self, after: str) -> None:
        """After ``after`` (a case that made an op fail): the device still runs and the op's group still
        talks. A rank that fails this prints why and exits at once (torchrun then ends its peers)."""
        try:
            self.sync()
            # on the device: torch_npu registers hccl for npu only (torch_npu/_init/registry/distributed.py),
            # a CPU probe fails there with "No backend type associated with device type cpu"
            probe = self.to_device(torch.ones(1, dtype=torch.float32))
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
                   "world(*sizes): world sizes the case supports",
                   "poisons_device: faults the device on purpose; the last case its process runs"):
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
            if _agreement.poisoned is None:
                dist.barrier()
            else:  # a device poisoned on purpose fails every collective: meet in the store only
                _agreement.meet("the end of the session", failed=False)
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
    # the ranks meet again after the test in agree_after (bounded), not in a barrier here


@pytest.fixture
def seed(_ranks_in_step: int) -> int:
    return _ranks_in_step


# -- agreement after every test (a failure on some ranks never leaves the others in a collective) --------------
def _say(line: str) -> None:
    print(f"camit: {line}", file=sys.stderr, flush=True)


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) or "none"


class Agreement:
    """The ranks' meeting after each test, through the rendezvous store (c10d's default store).

    Why the store and not a collective: a rank whose test failed before one of the op's collectives leaves
    its peers inside that collective; any collective it enters next waits for them for the process-group
    timeout (the case timeout). ``dist.monitored_barrier`` bounds the wait on rank 0 only: measured on torch
    2.13 gloo, with rank 0 stuck the other ranks waited past a 3 s ``timeout`` until rank 0 died. The store
    is served by its own thread (torchrun's agent or rank 0's TCPStore), so a stuck peer does not block it.

    Each rank writes ``pass``/``fail`` under the meeting's key and bumps the arrival (and failure) counters.
    While no arrived rank failed, the wait is the one a barrier had (the launch's case timeout bounds it);
    from the first reported failure on, at most ``timeout`` seconds. The result: who failed, who is missing.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.count = 0
        #: the test that poisoned this process's device on purpose (``poisons_device``), if any
        self.poisoned: str | None = None

    def meet(self, what: str, failed: bool, store: Any = None, rank: int | None = None,
             world: int | None = None) -> tuple[list[int], list[int]]:
        """(ranks whose test failed, ranks that did not arrive in time) after ``what``; by default on
        c10d's default store, this process's rank and the world size."""
        if store is None:
            from torch.distributed.distributed_c10d import _get_default_store

            store = _get_default_store()
        rank = dist.get_rank() if rank is None else rank
        world = dist.get_world_size() if world is None else world
        self.count += 1
        base = f"camit/agree/{self.count}/"
        store.set(f"{base}{rank}", "fail" if failed else "pass")
        if failed:
            store.add(base + "failed", 1)
        if store.add(base + "arrived", 1) == world:
            store.set(base + "all", "1")
        bounded_since = time.monotonic() if failed else None
        while True:
            wait = 1.0 if bounded_since is None else min(1.0, bounded_since + self.timeout - time.monotonic())
            if wait < 0.01:  # (a wait of 0 ms would be c10d's "no timeout")
                break
            try:
                store.wait([base + "all"], datetime.timedelta(milliseconds=int(wait * 1000)))
                break
            except RuntimeError:  # DistStoreError (a RuntimeError): not everyone yet
                if bounded_since is None and store.add(base + "failed", 0) > 0:
                    bounded_since = time.monotonic()
        if store.add(base + "arrived", 0) >= world and store.add(base + "failed", 0) == 0:
            return [], []  # the usual case: two reads, not two per rank
        present = {r: store.check([f"{base}{r}"]) for r in range(world)}
        missing = [r for r, here in present.items() if not here]
        failed_ranks = [r for r, here in present.items() if here and store.get(f"{base}{r}") == b"fail"]
        return failed_ranks, missing


_agreement = Agreement(AGREE_TIMEOUT)
_failed_tests: set[str] = set()


class ModuleRecord:
    """This rank's progress by module, one JSON line per event appended (and flushed) as it happens."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.module: str | None = None
        #: test id -> (outcome, message) from its reports; a failure wins over a skip, a skip over a pass
        self.outcomes: dict[str, tuple[str, str]] = {}

    def _write(self, **event: Any) -> None:
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({**event, "ts": time.time()}) + "\n")

    def note(self, report: pytest.TestReport) -> None:
        had = self.outcomes.get(report.nodeid, ("passed", ""))
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            lines = str(report.longrepr).strip().splitlines()
            self.outcomes[report.nodeid] = ("failed", getattr(crash, "message", None) or (lines[-1] if lines else ""))
        elif report.skipped and had[0] == "passed":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.outcomes[report.nodeid] = ("skipped", str(reason))

    def begin(self, item: pytest.Item) -> None:
        module = item.nodeid.split("::")[0]
        if module != self.module:
            self.module = module
            self._write(event="start", module=module)

    def end(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        module = item.nodeid.split("::")[0]
        outcome, message = self.outcomes.get(item.nodeid, ("passed", ""))
        self._write(event="test", module=module, test=item.nodeid, outcome=outcome, message=message[:500])
        if nextitem is None or nextitem.nodeid.split("::")[0] != module:
            self._write(event="done", module=module)


_record = ModuleRecord(f"camit-modules-rank{os.environ.get('RANK', '0')}.jsonl"
                       if os.environ.get("CAMIT_MODULE_RECORD") == "1" and UNDER_TORCHRUN else None)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _failed_tests.add(report.nodeid)
    _record.note(report)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _agreement.poisoned is not None:
        pytest.skip(f"this process's device was poisoned on purpose by {_agreement.poisoned}: nothing runs after "
                    "it here (run such a case alone, in a launch of its own)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _record.begin(item)
    yield
    if _cam is not None:
        agree_after(item.nodeid, item.nodeid in _failed_tests, item.get_closest_marker("poisons_device") is not None)
    _record.end(item, nextitem)


def agree_after(test: str, failed: bool, poisons: bool) -> None:
    """Meet the other ranks after ``test``; end this rank at once when they cannot all meet.

    - a peer missing ``AGREE_TIMEOUT`` s after a reported failure: the line names the test, the missing
      ranks and those that failed it, and the rank exits (``EXIT_PEERS_GONE``); torchrun then ends the rest;
    - everyone here, some failed: a line says which ranks failed, the session goes on;
    - then (not after a ``poisons_device`` test) an all-reduce of the failure flags on WORLD and a device
      synchronize: a rank whose device or group fails here exits with the error (``EXIT_UNHEALTHY``).
    """
    assert _cam is not None
    if poisons and _agreement.poisoned is None:
        _agreement.poisoned = test
    failed_ranks, missing = _agreement.meet(test, failed)
    if missing:
        _say(f"rank {_cam.rank}: after {test} rank(s) {_ranks(missing)} of {_cam.world} did not arrive within "
             f"{_agreement.timeout:g}s of a failure (failed on rank(s) {_ranks(failed_ranks)}); they are stuck "
             "where the failing rank(s) left them (an op's collective): ending the launch now")
        os._exit(EXIT_PEERS_GONE)
    if failed_ranks and _cam.rank == min(failed_ranks):
        _say(f"{test} failed on rank(s) {_ranks(failed_ranks)} of {_cam.world}; every rank arrived, going on")
    if _agreement.poisoned is None:
        _flags_all_reduce(test, failed_ranks)


def _flags_all_reduce(test: str, failed_ranks: list[int]) -> None:
    """All-reduce of the per-rank failure flags on WORLD, then synchronize; must agree with the store."""
    assert _cam is not None
    try:
        flags = torch.zeros(_cam.world, dtype=torch.int32)
        flags[_cam.rank] = int(_cam.rank in failed_ranks)
        flags = _cam.to_device(flags)
        dist.all_reduce(flags)
        _cam.sync()
        got = [r for r, f in enumerate(flags.cpu().tolist()) if f]
        why = "" if got == failed_ranks else f"the flags all-reduce says ranks {got} failed, the store {failed_ranks}"
    except Exception as exc:  # noqa: BLE001 - any failure here is the evidence
        why = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    if why:
        _say(f"rank {_cam.rank} is not healthy after {test}: {why}; ending this rank now")
        os._exit(EXIT_UNHEALTHY)
