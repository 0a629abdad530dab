"""The ``hccl`` backend of torch.distributed, built on gloo, with HCCL's timeouts and failure mode.

The timeouts and failures as torch_npu has them: docs/internals/standin-npu.md.
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _world
from torch.utils._pytree import tree_flatten, tree_map

from .. import _env, _errors, _fault, _plog, _tensor

DEFAULT_PG_TIMEOUT_MS = 30 * 60 * 1000  # ProcessGroupHCCL.hpp: DEFAULT_TIMEOUT
NEVER_S = 10 * 365 * 24 * 3600.0
HANDSHAKE_S = 2.0
POLL_S = 0.2
JOINED = "camit_hccl_joined/"

_fail_lock = threading.Lock()
_failing = False


def _op_type(name: str) -> str:
    return name.strip("_").upper()


class Timeouts:
    """The three HCCL timeouts of one group, in seconds (``inf`` = never)."""

    def __init__(self, pg_timeout: datetime.timedelta, teardown: bool) -> None:
        self.exec_s = float(_env.exec_timeout() or float("inf"))
        self.connect_s = float(_env.connect_timeout())
        ms = int(pg_timeout.total_seconds() * 1000)
        exec_ms = _env.exec_timeout() * 1000
        if ms == DEFAULT_PG_TIMEOUT_MS:
            self.watchdog_s = float("inf") if exec_ms == 0 else exec_ms / 1000 + 1800
        else:
            self.watchdog_s = ms / 1000
            if teardown and exec_ms and ms <= exec_ms:
                _warn(f"The watchdog timeout {ms}ms(which is set by init_process_group) is less than or equal to "
                      f"HCCL execution timeout {exec_ms}ms! The plog may not be recorded.")
            elif teardown and exec_ms == 0:
                _warn(f"The HCCL execution timeout was set to 0(never timeout), so it is bigger than watchdog timeout "
                      f"{ms}ms which is set by init_process_group! The plog may not be recorded. You can disable "
                      "watchdog by 'export TORCH_HCCL_ASYNC_ERROR_HANDLING=0'.")

    @property
    def first_s(self) -> float:
        return min(self.exec_s, self.watchdog_s)

    @property
    def watchdog_first(self) -> bool:
        return self.watchdog_s <= self.exec_s


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, UserWarning, stacklevel=4)


class _Pending:
    def __init__(self, pg: ProcessGroupHCCL, seq: int, op: str, work: Any, numel: tuple[int, int]) -> None:
        self.pg, self.seq, self.op, self.work, self.numel = pg, seq, op, work, numel
        self.started = time.monotonic()
        #: a transfer of an op library's kernel (a CAM op): not an HCCL task, see :func:`_kernel_stuck`
        self.in_kernel = _tensor.in_device_op()


class HcclWork(dist.Work):
    """The Work of one collective: waits on gloo's and turns its failure into HCCL's."""

    def __init__(self, pending: _Pending) -> None:
        super().__init__()
        self._pending = pending

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        pending = self._pending
        try:
            if pending.in_kernel:  # bounded by the op-execute timeout, not HCCL's
                left = pending.started + _fault.op_timeout_s() - time.monotonic()
                pending.work.wait(datetime.timedelta(seconds=max(left, 0.001)))
            else:
                pending.work.wait()
        except RuntimeError as exc:
            if not pending.in_kernel:
                _fail(pending, exc)
            _kernel_stuck(pending)
        pending.pg._done(pending)
        return True

    def is_completed(self) -> bool:
        return bool(self._pending.work.is_completed())

    def is_success(self) -> bool:
        return bool(self._pending.work.is_success())

    def result(self) -> list[torch.Tensor]:
        return list(self._pending.work.result())

    def get_future(self) -> Any:
        return self._pending.work.get_future()

    def synchronize(self) -> None:
        self.wait()

    def exception(self) -> Any:
        return self._pending.work.exception()


class _Skipped(dist.Work):
    """A transfer of a kernel queued behind a spinning one on this process's stream: it never runs."""

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class _BackendView:
    """What ``group._get_backend(torch.device("npu"))`` returns: gloo's backend plus HCCL's comm name.

    It holds its group weakly: a group → view → group cycle kept every destroyed group, and its gloo worker
    threads, to a later garbage collection, often interpreter finalisation, where a worker freeing a work's
    tensor retakes the GIL and the process aborts ("terminate called without an active exception").
    """

    def __init__(self, pg: ProcessGroupHCCL) -> None:
        self._ref = weakref.ref(pg)

    @property
    def _pg(self) -> ProcessGroupHCCL:
        pg = self._ref()
        if pg is None:
            raise RuntimeError("ProcessGroupHCCL has been destroyed" + _errors.suffix("DIST", "VALUE"))
        return pg

    def get_hccl_comm_name(self, rankid: int, init_comm: bool = True) -> str:
        """The communicator name of this group (its c10d group name), as ProcessGroupHCCL::getHcclCommName."""
        from ..npu import _device

        if rankid < 0:
            raise RuntimeError(f"Invalid rank {rankid}" + _errors.suffix("DIST", "VALUE"))
        count = _device.device_count()
        if count <= 0:
            raise RuntimeError(f"Invalid device number{count}" + _errors.suffix("DIST", "VALUE"))
        if rankid % count != _device.current_device():
            _env.warn_once("comm-name-device", f"The indexFromRank {rankid % count}is not equal indexFromCurDevice "
                           f"{_device.current_device()} , which might be normal if the number of devices on your "
                           "collective communication server is inconsistent.Otherwise, you need to check if the "
                           "current device is correct when calling the interface.If it's incorrect, it might have "
                           "introduced an error.")
        return self._pg.group_name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pg._gloo, name)


class ProcessGroupHCCL(dist.ProcessGroup):
    """A process group of the ``hccl`` backend (see the module docstring)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: datetime.timedelta,
                 global_ranks: list[int] | None = None) -> None:
        super().__init__(rank, size)
        self._teardown = _env.async_error_handling() not in (0, 2)  # SHOULD_TEAR_DOWN
        self.timeouts = Timeouts(timeout, self._teardown)
        self._store = store
        self._global_ranks = list(global_ranks or range(size))
        try:
            store.set(f"{JOINED}{rank}", "1")
        except Exception:  # noqa: BLE001 - only used to name the missing peers on failure
            pass
        try:
            self._gloo = dist.ProcessGroupGloo(store, rank, size, datetime.timedelta(seconds=self.timeouts.connect_s))
        except RuntimeError as exc:
            raise _connect_failure(store, rank, size, self.timeouts.connect_s) from exc
        self._gloo.set_timeout(datetime.timedelta(seconds=min(self.timeouts.first_s, NEVER_S)))
        self._register_backend(torch.device("npu"), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)
        self._seq = 0
        self._lock = threading.Lock()
        self._inflight: list[_Pending] = []
        self._view = _BackendView(self)
        self._shut = False
        _Watchdog.watch(self)

    def getBackendName(self) -> str:  # noqa: N802 - c10d's name
        return "hccl"

    def name(self) -> str:
        return "hccl"

    def _get_backend(self, device: torch.device) -> Any:  # type: ignore[override]
        if torch.device(device).type == "npu":
            return self._view
        return super()._get_backend(device)

    def _issue(self, op: str, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _tensor.in_device_op() and _fault.stuck():
            return _Skipped()  # the kernel's later steps never run behind a spinning one (outputs undefined)
        # a kernel fault poisoned this process's stream: every collective fails (torch_npu._fault)
        _fault.check("acl::AclQueryEventRecordedStatus(event_, &currStatus)", "query", 859)
        with self._lock:
            self._seq += 1
            seq = self._seq
        numel = (_numel(args[:1]), _numel(args[1:2]))
        pending = _Pending(self, seq, op, call(*self._host_args(args), **kwargs), numel)
        with self._lock:
            self._inflight.append(pending)
        return HcclWork(pending)

    def _host_args(self, args: tuple[Any, ...]) -> Any:
        """The collective's tensors as host memory for gloo; a tensor not on the NPU fails as c10d does for a
        device type the backend was not registered for (``ProcessGroup::getBackend``). Inside an op running on
        the device (an op library's kernel, a golden op) its own host tensors are device memory."""
        leaves, _ = tree_flatten(args)
        for t in leaves:
            if isinstance(t, torch.Tensor) and not _tensor.is_device(t) and not _tensor.in_device_op():
                dist.ProcessGroup._get_backend(self, t.device)  # raises c10d's error for that device type
        return tree_map(lambda a: _tensor.host(a) if isinstance(a, torch.Tensor) else a, args)

    def _done(self, pending: _Pending) -> None:
        with self._lock:
            if pending in self._inflight:
                self._inflight.remove(pending)

    def _pending(self) -> list[_Pending]:
        with self._lock:
            return list(self._inflight)

    def shutdown(self) -> None:
        """Leave the watchdog and drop the in-flight works, then shut the inner gloo down.

        As ProcessGroupHCCL::shutdown (torch_npu/csrc/distributed/ProcessGroupHCCL.cpp) ends its watchdog
        thread: ``destroy_process_group`` calls it, and without it the watchdog kept the group (and gloo's
        works holding tensors) alive until interpreter finalisation, where gloo's threads could abort the
        process ("terminate called without an active exception").
        """
        if self._shut:  # once, as the C++ (terminateProcessGroup_.exchange(true))
            return
        self._shut = True
        _Watchdog.forget(self)
        with self._lock:
            self._inflight.clear()
        self._gloo.shutdown()
        super().shutdown()


def _numel(items: tuple[Any, ...]) -> int:
    total = 0
    for item in items:
        if isinstance(item, torch.Tensor):
            total += item.numel()
        elif isinstance(item, (list, tuple)):
            total += _numel(tuple(item))
    return total


def _make_collective(name: str) -> Callable[..., HcclWork]:
    def collective(self: ProcessGroupHCCL, *args: Any, **kwargs: Any) -> HcclWork:
        if name == "barrier" and args and hasattr(args[0], "device"):
            args[0].device = torch.device("cpu")  # dist.barrier picks the accelerator; gloo runs on CPU
        return self._issue(name, getattr(self._gloo, name), args, kwargs)

    collective.__name__ = name
    collective.__doc__ = f"``{name}`` on the inner gloo backend, under HCCL's timeouts."
    return collective


_COLLECTIVES = ("allreduce", "allreduce_coalesced", "allgather", "_allgather_base", "allgather_coalesced",
                "allgather_into_tensor_coalesced", "reduce_scatter", "_reduce_scatter_base",
                "reduce_scatter_tensor_coalesced", "alltoall", "alltoall_base", "barrier", "broadcast", "gather",
                "scatter", "reduce", "send", "recv", "recv_anysource")
for _name in _COLLECTIVES:
    if hasattr(dist.ProcessGroupGloo, _name):
        setattr(ProcessGroupHCCL, _name, _make_collective(_name))


class _Watchdog:
    """One thread per process: notices collectives that failed while nobody waits on them.

    It is stopped and joined when the last group shuts down and at interpreter exit (``atexit``), as
    ProcessGroupHCCL::shutdown joins its watchdog thread: a daemon thread still inside a C++ call (gloo's
    ``wait``) when the interpreter finalises is ended by ``pthread_exit`` as it retakes the GIL, and the
    forced unwind through a ``noexcept`` frame aborts the process ("terminate called without an active
    exception", seen in CI).
    """

    _groups: list[ProcessGroupHCCL] = []
    _thread: threading.Thread | None = None
    _stop = threading.Event()
    _lock = threading.Lock()

    @classmethod
    def watch(cls, pg: ProcessGroupHCCL) -> None:
        with cls._lock:
            cls._groups.append(pg)
            if cls._thread is None or not cls._thread.is_alive():
                cls._stop = threading.Event()
                cls._thread = threading.Thread(target=cls._run, args=(cls._stop,), name="hccl-watchdog",
                                               daemon=True)
                cls._thread.start()

    @classmethod
    def forget(cls, pg: ProcessGroupHCCL) -> None:
        with cls._lock:
            if pg in cls._groups:
                cls._groups.remove(pg)
            last = not cls._groups
        if last:
            cls.stop()

    @classmethod
    def stop(cls) -> None:
        """End the thread and wait for it (never from the thread itself)."""
        with cls._lock:
            thread, cls._thread = cls._thread, None
            cls._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    @classmethod
    def _run(cls, stop: threading.Event) -> None:
        while not stop.wait(POLL_S):
            with cls._lock:
                groups = list(cls._groups)
            for pg in groups:
                if stop.is_set():
                    return
                if not pg._teardown:
                    continue  # without tear-down the failure is raised to whoever waits on the work
                for pending in pg._pending():
                    if pending.in_kernel or not pending.work.is_completed():
                        continue  # (a kernel's transfer is judged by its own wait: _kernel_stuck)
                    try:
                        pending.work.wait()
                    except RuntimeError as exc:
                        _fail(pending, exc)
                    pg._done(pending)


atexit.register(_Watchdog.stop)


def _kernel_stuck(pending: _Pending) -> None:
    """An op library's kernel whose peers never came: on an NPU it spins in vector-core code outside HCCL
    (no EI0002, HCCL_EXEC_TIMEOUT does not apply) until torch_npu's op-execute timeout; the call returns,
    its outputs undefined, and the next synchronize fails with 507034 (``torch_npu._fault``)."""
    _fault.standin_stuck(507034, since=pending.started)


def _connect_failure(store: Any, rank: int, size: int, timeout_s: float) -> RuntimeError:
    """Peers that never joined within HCCL_CONNECT_TIMEOUT: HCCL's link-establish plog lines and EI0006.

    The texts follow the captured EI0006 / LINK_ERROR reports (camit's tests/data/ascend); HCCL connects
    at the first collective, the stand-in (gloo) when the group is created.
    """
    try:
        missing = [r for r in range(size) if r != rank and not store.check([f"{JOINED}{r}"])]
    except Exception:  # noqa: BLE001
        missing = []
    missing = missing or [r for r in range(size) if r != rank]
    tid = threading.get_native_id()
    for peer in missing:
        _plog.write("ERROR", "HCCL", "hccl_socket_manager.cc:778", f"[{tid}][Wait][LinkEstablish]wait socket "
                    f"establish timeout, role[1] rank[{peer}] timeout[{int(timeout_s)}]")
    links = "".join(f"\n        Transport init error. Reason: [Create][DestLink]Create Dest error! createLink "
                    f"para:rank[{rank}]-localUserrank[{rank}], dst_rank[{peer}]-remoteUserrank[{peer}]"
                    for peer in missing)
    return RuntimeError(
        "[ERROR] HCCL error in: torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64"
        + _errors.suffix("DIST", "HCCL")
        + f"\nEI0006: [PID: {os.getpid()}] {_plog.stamp()} Getting socket times out. Reason: Remote Rank did not "
        "send the data in time. Please check the reason for the rank being stuck\n        Solution: 1. Check the "
        "rank service processes with other errors or no errors in the cluster.2. If this error is reported for all "
        "NPUs, check whether the time difference between the earliest and latest errors is greater than the "
        f"connect timeout interval ({int(timeout_s)}s). If so, adjust the timeout interval by using the "
        "HCCL_CONNECT_TIMEOUT environment variable.\n        TraceBack (most recent call last):" + links)


def _missing_peers(pending: _Pending) -> list[int]:
    """The group ranks that never reached collective ``seq`` (store handshake; ring fallback)."""
    pg = pending.pg
    rank, size = pg.rank(), pg.size()
    key = f"camit_hccl_arrived/{pending.seq}/"
    try:
        pg._store.set(key + str(rank), "1")
        deadline = time.monotonic() + HANDSHAKE_S
        missing = [r for r in range(size) if r != rank]
        while missing and time.monotonic() < deadline:
            missing = [r for r in missing if not pg._store.check([key + str(r)])]
            if missing:
                time.sleep(0.1)
        if missing:
            return missing
    except Exception:  # noqa: BLE001 - the store may have died with its host rank
        pass
    return [(rank + 1) % size] if size > 1 else []


def ei0002_lines(pending: _Pending, peers: list[int]) -> list[str]:
    """HCCL's notify-wait timeout, one line per peer, with the fields of the captured EI0002 reports."""
    pg = pending.pg
    comm = pg.group_name
    tag = f"{pending.op.strip('_').title().replace('_', '')}_{comm}"
    return [
        f"EI0002: [PID: {os.getpid()}] {_plog.stamp()} The wait execution of the Notify register times out. "
        f"Reason: The Notify register has not received the Notify record from remote rank: [{peer}]. "
        f"base information: [streamID:[0], taskID[{pending.seq}], taskType[Notify Wait], tag[{tag}], "
        f"AlgType(level 0-1-2):[fullmesh-ring-ring].]. task information: [notify id:[0x{pending.seq:016x}], "
        f"stage:[0], remote rank:[{peer}]]. group information: [group:[{comm}], user define "
        f"information[Unspecified], rankSize[{pg.size()}], rankId[{pg.rank()}]]"
        for peer in peers
    ]


def _cpp_log_prefix(rank: int) -> str:
    """c10's LOG(ERROR) prefix with torch's rank tag: ``[rank0]:[E1201 18:00:00.123456789 file:line]``."""
    now = time.time()
    frac = int((now % 1) * 1_000_000_000)
    return f"[rank{rank}]:[E{time.strftime('%m%d %H:%M:%S', time.localtime(now))}.{frac:09d} ProcessGroupHCCL.cpp:1905]"


def _fail(pending: _Pending, exc: BaseException) -> None:
    """A collective outlived its timeout (or gloo gave up early): report it as HCCL does, then abort."""
    global _failing
    with _fail_lock:
        if _failing:
            while True:  # the first failing thread ends the process
                time.sleep(1)
        _failing = True
    pg, timeouts = pending.pg, pending.pg.timeouts
    remaining = pending.started + timeouts.first_s - time.monotonic()
    if remaining > 0 and timeouts.first_s < NEVER_S:
        time.sleep(remaining)  # a dead peer fails gloo at once; HCCL would still wait for the timeout
    grank = dist.get_rank() if dist.is_initialized() else pg.rank()
    device = _device_or_minus_one()
    lines: list[str] = []
    if timeouts.watchdog_first:
        ms = int((time.monotonic() - pending.started) * 1000)
        cause = (f"[Rank {pg.rank()}] Watchdog caught collective operation timeout: WorkHCCL(SeqNum={pending.seq}, "
                 f"OpType={_op_type(pending.op)}, NumelIn={pending.numel[0]}, NumelOut={pending.numel[1]}, "
                 f"Timeout(ms)={int(timeouts.watchdog_s * 1000)}) ran for {ms} milliseconds before timing out.")
        lines.append(f"{_cpp_log_prefix(grank)} {cause}")
    else:
        peers = _missing_peers(pending)
        ei = ei0002_lines(pending, peers)
        tid = threading.get_native_id()
        for line in ei:
            _plog.write("ERROR", "HCCL", "task_exception_handler.cc:226", f"[{tid}][TaskExceptionHandler]{line}")
        query = _errors.npu_function_error("query", 859, "acl::AclQueryEventRecordedStatus(event_, &currStatus)",
                                           507048, "\n".join(ei))
        lines.append(f"[{os.getpid()}] [{time.strftime('%Y-%m-%d %H:%M:%S')}:{int(time.time() * 1000) % 1000:03d}] "
                     f"torch.distributed: [ERROR] [{tid}] Find exception when finishedNPUExecutionInternal, {query}")
        cause = _errors.suffix("DIST", "INTERNAL", device=device, rank=-1)
    if not pg._teardown:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
        with _fail_lock:
            _failing = False
        raise RuntimeError(cause) from exc
    what = f"[Rank {pg.rank()}] HCCL watchdog thread terminated with exception: {cause}"
    lines += [
        f"{_cpp_log_prefix(grank)} Some HCCL operations have failed or timed out. Due to the asynchronous nature "
        "of ASCEND kernels, subsequent NPU operations might run on corrupted/incomplete data.",
        f"{_cpp_log_prefix(grank)} To avoid data inconsistency, we are taking the entire process down.",
        f"{_cpp_log_prefix(grank)} {what}",
        "terminate called after throwing an instance of 'std::runtime_error'",
        f"  what():  {what}",
    ]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    os.abort()


def _device_or_minus_one() -> int:
    from ..npu import _device

    return _device.current_or_minus_one()


def _create(opts: Any, backend_options: Any = None) -> ProcessGroupHCCL:
    return ProcessGroupHCCL(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                            list(opts.global_ranks_in_group or []))


def register() -> None:
    """Register the ``hccl`` backend with torch.distributed (once)."""
    if "HCCL" not in dist.Backend._plugins:
        dist.Backend.register_backend("hccl", _create, extended_api=True, devices=["npu"])
    dist.is_hccl_available = lambda: True  # type: ignore[attr-defined]


def resolve_hccl_comm_name(name: str) -> dist.ProcessGroup:
    """The live process group whose ``get_hccl_comm_name`` returned ``name``.

    For a CPU build of an op library that takes HCCL communicator names (``group_ep``): the name is the
    c10d group name, resolved with c10d's own table, so groups destroyed and recreated never go stale.

    Raises:
        RuntimeError: no group of this process has that name.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"HCCL comm '{name}': torch.distributed is not initialised")
    for pg, pg_name in _world.pg_names.items():
        if pg_name == name:
            return pg
    raise RuntimeError(f"HCCL comm '{name}' does not name a process group of this process")


__all__ = ["HcclWork", "ProcessGroupHCCL", "Timeouts", "ei0002_lines", "register", "resolve_hccl_comm_name"]
