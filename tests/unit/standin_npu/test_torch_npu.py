"""The CPU torch_npu stand-in (standin_npu/): device API, formats, hccl on gloo, timeouts, plogs,
occupancy and the golden ops.

The stand-in is never installed here: every test runs it in a subprocess with ``standin_npu`` on
PYTHONPATH (this interpreter must keep seeing no torch_npu), with its own log, registry and store
folders under ``tmp_path``. Numerical references are numpy, computed in this process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

STANDIN = Path(__file__).resolve().parents[3] / "standin_npu"
SCRUB = ("CAMIT_EMU_", "ASCEND_", "HCCL_", "TORCH_HCCL_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB) and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(STANDIN), CAMIT_EMU_NPU_COUNT="8", CAMIT_EMU_NPU_DIR=str(tmp_path / "occ"),
               ASCEND_PROCESS_LOG_PATH=str(tmp_path / "log"), HOME=str(tmp_path / "home"),
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _script(tmp_path: Path, body: str, name: str = "snippet.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def run_py(tmp_path: Path, body: str, timeout: float = 50, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` with the stand-in importable; fail with its output unless it exits 0."""
    proc = subprocess.run([sys.executable, str(_script(tmp_path, body))], env=_env(tmp_path, **env), text=True,
                          capture_output=True, timeout=timeout, cwd=tmp_path)
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def start_ranks(tmp_path: Path, body: str, world: int = 2, **env: str) -> list[subprocess.Popen[str]]:
    """``world`` processes of ``body`` (rank in argv[1], FileStore path in argv[2])."""
    script = _script(tmp_path, body, "rank.py")
    store = tmp_path / "store"
    return [subprocess.Popen([sys.executable, str(script), str(r), str(store)], env=_env(tmp_path, RANK=str(r), **env),
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
            for r in range(world)]


def finish(procs: list[subprocess.Popen[str]], timeout: float = 50) -> list[tuple[int, str, str]]:
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        out.append((p.returncode, stdout, stderr))
    return out


def plog_text(tmp_path: Path, root: str = "log") -> str:
    files = sorted((tmp_path / root).rglob("plog-*.log"))
    return "".join(f.read_text() for f in files)


INIT = """
import sys, datetime, torch, torch_npu, torch.distributed as dist
rank, store = int(sys.argv[1]), sys.argv[2]
torch_npu.npu.set_device(rank)
dist.init_process_group(backend="hccl", init_method="file://" + store, rank=rank, world_size=2{timeout})
# every rank waits, on a store of its own, until all have made the group: gloo's full-mesh connect can return
# on one rank while its peer still reads the handshake, and a rank exiting then makes that peer's connect fail
# ("Connection closed by peer"), which is this test's start-up racing, not what it checks
_up = dist.FileStore(store + "-up", 2)
_up.set(f"up{{rank}}", "1")
_up.wait([f"up{{r}}" for r in range(2)])
"""


def test_this_interpreter_has_no_torch_npu():
    assert importlib.util.find_spec("torch_npu") is None  # the stand-in must not leak into the system Python


# -- device API ------------------------------------------------------------------------------------------
def test_device_api_applies_visible_devices(tmp_path):
    proc = run_py(tmp_path, """
        import json, os, torch, torch_npu
        out = {"npu_module": torch.npu is torch_npu.npu, "device": str(torch.device("npu", 3)),
               "available": torch.npu.is_available()}
        for visible in [None, "2,3,5", "0,9,1", "3,1", "1,2 3", "1,,2", ""]:
            if visible is None:
                os.environ.pop("ASCEND_RT_VISIBLE_DEVICES", None)
            else:
                os.environ["ASCEND_RT_VISIBLE_DEVICES"] = visible
            out[str(visible)] = torch.npu.device_count()
        os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "4,6"
        torch.npu.set_device(1)
        out["current"] = torch.npu.current_device()
        torch.npu.synchronize()
        print(json.dumps(out))
    """)
    out = json.loads(proc.stdout)
    assert out == {"npu_module": True, "device": "npu:3", "available": True, "None": 8, "2,3,5": 3,
                   "0,9,1": 1,  # cut at the first id the 8-NPU host lacks
                   "3,1": 0,  # not ascending: no device
                   "1,2 3": 2, "1,,2": 1, "": 0, "current": 1}


def test_device_count_from_the_emulation_file(tmp_path):
    (tmp_path / "host.json").write_text(json.dumps({"device_count": 4}))
    proc = run_py(tmp_path, "import torch, torch_npu; print(torch.npu.device_count())",
                  CAMIT_EMU_NPU_COUNT="", CAMIT_EMU_NPU=str(tmp_path / "host.json"))
    assert proc.stdout.strip() == "4"


def test_device_index_and_the_device_context_follow_torchs_semantics(tmp_path):
    """``_get_device_index`` as torch's CUDA one (int as is, the device's index, the current device when
    optional, -1 for the CPU when allowed); ``torch.npu.device`` switches inside its block and restores."""
    proc = run_py(tmp_path, """
        import torch, torch_npu
        from torch_npu.npu import _get_device_index as index
        torch_npu.npu.set_device(1)
        print(index(3), index("npu:2"), index(torch.device("npu", 0)), index("npu", optional=True),
              index(None, optional=True), index("cpu", allow_cpu=True))
        for bad in (lambda: index("npu"), lambda: index(None), lambda: index("cpu"), lambda: index(1.5)):
            try:
                bad()
            except ValueError as exc:
                print("bad", str(exc).splitlines()[0])
        with torch.npu.device(0):
            inside = torch.npu.current_device()
            with torch.npu.device(-1):
                unchanged = torch.npu.current_device()
        print(inside, unchanged, torch.npu.current_device())
    """, ASCEND_RT_VISIBLE_DEVICES="0,1,2,3")
    assert proc.stdout.splitlines() == [
        "3 2 0 1 1 -1",
        "bad Expected a torch.device with a specified index or an integer, but got:npu",
        "bad Expected a torch.device with a specified index or an integer, but got:None",
        "bad Expected a npu device, but got: cpu", "bad Invalid device: 1.5", "0 0 1"]


def test_set_device_past_the_visible_devices_fails_as_torch_npu(tmp_path):
    proc = run_py(tmp_path, """
        import torch, torch_npu
        try:
            torch_npu.npu.set_device(2)
        except RuntimeError as exc:
            print("ERR", exc)
        try:
            torch_npu.npu.set_device("cpu")
        except ValueError as exc:
            print("VAL", exc)
        torch_npu.npu.set_device(torch.device("npu", 1))
        print("current", torch_npu.npu.current_device())
    """, ASCEND_RT_VISIBLE_DEVICES="0,1")
    text = proc.stdout
    assert "ERR ExchangeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:349 NPU function error: " \
           "c10_npu::SetDevice(device), error code is 107001" in text
    assert re.search(r"\(PID:\d+, Device:-1, RankID:-1\) ERR00100 PTA call acl api failed", text)
    assert "[Error]: Invalid device ID." in text
    assert "VAL Expected a npu device, but got: cpu" in text
    assert "current 1" in text
    plog = plog_text(tmp_path)
    assert re.search(r"^\[ERROR\] RUNTIME\(\d+,\S+\):\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d\.\d{3}\.\d{3} "
                     r"\[api_error\.cc:\d+\] \d+ SetDevice:Set visible device failed, invalid device=2, "
                     r"input visible devices:0,1$", plog, re.M)


def test_npu_is_a_device_of_its_own(tmp_path):
    """Moves and factories give npu tensors; mixing devices, .numpy() before .cpu() fail with torch's texts."""
    proc = run_py(tmp_path, """
        import json, torch, torch_npu
        t = torch.arange(4.0)
        m = torch.nn.Linear(2, 2)
        dev = torch.device("npu", 0)
        moved = {"npu()": t.npu(), "to(str)": t.to("npu"), "to(dev)": t.to(dev), "to(kw)": t.to(device=dev),
                 "ones": torch.ones(2, device="npu"), "zeros": torch.zeros(2, device=dev),
                 "empty": torch.empty(2, device="npu:0"), "randn": torch.randn(2, device="npu"),
                 "tensor": torch.tensor([1, 2], device="npu"), "arange": torch.arange(3, device="npu"),
                 "full": torch.full((2,), 7.0, device="npu"), "param": next(m.npu().parameters()),
                 "view": t.npu()[1:], "sum": t.npu() + t.npu()}
        out = {"devices": {k: v.device.type for k, v in moved.items()}}
        out["is_npu"] = [t.is_npu, t.npu().is_npu]
        out["module_same"] = m.npu() is m
        out["npu_of_npu_same"] = moved["ones"].npu() is moved["ones"]
        out["cpu"] = [str(moved["sum"].cpu().device), type(moved["sum"].cpu()).__name__,
                      moved["sum"].cpu().numpy().tolist()]
        errors = {}
        for name, call in {"mix": lambda: moved["ones"] + torch.ones(2), "numpy": lambda: moved["ones"].numpy(),
                           "mix_cat": lambda: torch.cat([moved["ones"], torch.ones(2)])}.items():
            try:
                call()
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
        out["errors"] = errors
        out["scalar_ok"] = (moved["ones"] * torch.tensor(2.0)).device.type  # a 0-dim CPU scalar mixes, as in torch
        print(json.dumps(out))
    """)
    out = json.loads(proc.stdout)
    assert set(out["devices"].values()) == {"npu"} and len(out["devices"]) == 14, out["devices"]
    assert out["is_npu"] == [False, True] and out["module_same"] and out["npu_of_npu_same"]
    assert out["cpu"] == ["cpu", "Tensor", [0.0, 2.0, 4.0, 6.0]]
    same = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, npu:0 and cpu!"
    assert out["errors"] == {
        "mix": same, "mix_cat": same,
        "numpy": "TypeError: can't convert npu:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                 "to host memory first."}, out["errors"]
    assert out["scalar_ok"] == "npu"


# -- formats ---------------------------------------------------------------------------------------------
def test_format_cast_travels_with_the_storage(tmp_path):
    proc = run_py(tmp_path, """
        import warnings, torch, torch_npu
        F = torch_npu.Format
        w = torch.arange(24, dtype=torch.int8).reshape(2, 3, 4)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            off = torch_npu.npu_format_cast(w, F.FRACTAL_NZ)
        print("default", torch_npu.npu.config.allow_internal_format, torch_npu.get_npu_format(off).name,
              any("allow_internal_format=False" in str(c.message) for c in caught))
        torch_npu.npu.config.allow_internal_format = True
        nz = torch_npu.npu_format_cast(w, F.FRACTAL_NZ)
        p = torch.nn.Parameter(nz, requires_grad=False)
        print("nz", torch_npu.get_npu_format(nz).name, torch_npu.get_npu_format(p).name,
              torch_npu.get_npu_format(p.unbind(0)[1]).name, torch_npu.get_npu_format(p.clone()).name,
              torch_npu.get_npu_format(w).name, bool(torch.equal(nz, w)), nz is not w)
        x = torch.ones(2, 3, 4, 5)
        print("base", torch_npu.get_npu_format(x).name, torch_npu.npu_format_cast(x, F.NHWC) is x,
              torch_npu.get_npu_format(x).name)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            v = torch_npu.npu_format_cast(torch.ones(5), F.FRACTAL_NZ)
        print("1d", torch_npu.get_npu_format(v).name, any("dim < 2" in str(c.message) for c in caught),
              int(F.ND), int(F.FRACTAL_NZ), int(F.NCHW), int(F.FRACTAL_NZ_C0_32))
    """)
    lines = proc.stdout.splitlines()
    assert lines == ["default False ND True", "nz FRACTAL_NZ FRACTAL_NZ FRACTAL_NZ FRACTAL_NZ ND True True",
                     "base NCHW True NHWC", "1d ND True 2 29 0 51"]


# -- device faults (stand-in-only torch_npu.npu._standin_fault) -------------------------------------------
def test_a_device_fault_fails_every_later_sync_and_collective_of_that_process(tmp_path):
    """Rank 0's kernel fault surfaces at its next synchronize and collective, and for ever after; rank 1 is
    healthy. Texts: NPU_CHECK_ERROR of npuSynchronizeDevice with NPUErrorCodes.h's 507035 text."""
    body = INIT.format(timeout="") + """
import os
out = []
if rank == 0:
    torch_npu.npu._standin_fault(507035)          # raises nothing where the kernel ran
    for call in (torch.npu.synchronize, torch_npu.npu.synchronize,
                 lambda: dist.all_reduce(torch.ones(2).npu()), torch.npu.synchronize):
        try:
            call()
            out.append("ok")
        except RuntimeError as exc:
            out.append(str(exc).splitlines()[0] + " | " + str(exc).splitlines()[2])
else:
    torch.npu.synchronize()
    out.append("healthy")
print("\\n".join(out), flush=True)
os._exit(0)
"""
    (rc0, out0, err0), (rc1, out1, err1) = finish(start_ranks(tmp_path, body))
    assert rc0 == 0 and rc1 == 0, err0 + err1
    sync = ("npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:479 NPU function error: "
            "AclrtSynchronizeDeviceWithTimeout, error code is 507035 | "
            "[Error]: The vector core execution is abnormal. ")
    coll = ("query:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:859 NPU function error: "
            "acl::AclQueryEventRecordedStatus(event_, &currStatus), error code is 507035 | "
            "[Error]: The vector core execution is abnormal. ")
    assert out0.splitlines() == [sync, sync, coll, sync]
    assert out1.splitlines() == ["healthy"]
    plog = plog_text(tmp_path)
    assert "GetError:Stream Synchronize failed, retCode=507035, [vector core exception]." in plog
    assert "rtDeviceSynchronizeWithTimeout:ErrCode=507035" in plog


def test_a_stuck_kernel_fails_the_next_sync_after_the_op_execute_timeout(tmp_path):
    """A kernel that spins (``_standin_stuck``, e.g. a CAM op whose peer never came) raises nothing where it
    ran; the next synchronize waits out torch_npu's op-execute timeout (547 s by default, npu_sys_ctrl.cpp;
    here ``set_op_timeout_ms(1500)``, torch_npu/npu/utils.py) and fails with 507034 (NPUErrorCodes.h), and
    every later one at once; camit's signatures call it an op-execute timeout, not HCCL's EI0002."""
    proc = run_py(tmp_path, """
        import time, torch, torch_npu
        from torch_npu import _fault
        print("default", _fault.op_timeout_s())
        torch_npu.npu.set_op_timeout_ms(1500)
        torch.npu.synchronize()
        torch_npu.npu._standin_stuck()
        start = time.monotonic()
        for _ in range(2):
            try:
                torch.npu.synchronize()
                print("ok")
            except RuntimeError as exc:
                print(round(time.monotonic() - start, 1), "|", str(exc).splitlines()[0], "|",
                      str(exc).splitlines()[2])
        try:
            torch_npu.npu._standin_stuck(507035)
        except ValueError as exc:
            print("refused", "507035" in str(exc))
    """)
    lines = proc.stdout.splitlines()
    assert lines[0] == "default 547.0"
    first, again = (line.split(" | ") for line in lines[1:3])
    err = ("npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:479 NPU function error: "
           "AclrtSynchronizeDeviceWithTimeout, error code is 507034")
    assert first[1:] == again[1:] == [err, "[Error]: Vector core execution timed out. "], lines
    assert 1.4 <= float(first[0]) < 10 and float(again[0]) - float(first[0]) < 1.0, lines
    assert lines[3] == "refused True"
    from framework.cores import logs

    codes = [s.code for s in logs.scan_signatures(proc.stdout + plog_text(tmp_path))]
    assert codes[0] == "OP-EXECUTE-TIMEOUT" and "EI0002" not in codes, codes
    assert "retCode=507034, [vector core timeout]" in plog_text(tmp_path)


def test_a_cam_kernel_whose_peer_never_comes_ends_in_the_op_execute_timeout_not_hccls(tmp_path):
    """Rank 0 runs a device op (the golden dispatch: its transfers are the kernel's, as a CAM op's) that
    rank 1 never joins: no EI0002 and no abort at HCCL's exec timeout (it does not bound kernels); the op
    returns after the op-execute timeout (set_op_timeout_ms(2000)) and the next synchronize fails with 507034."""
    body = INIT.format(timeout="") + """
import os, time
g = dist.new_group(backend="hccl", ranks=[0, 1])
name = g._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
if rank == 0:
    torch_npu.npu.set_op_timeout_ms(2000)
    start = time.monotonic()
    torch_npu.npu_moe_distribute_dispatch_v2(
        x=torch.ones(2, 4).npu(), expert_ids=torch.zeros(2, 1, dtype=torch.int32).npu(), group_ep=name,
        ep_world_size=2, ep_rank_id=0, moe_expert_num=2)
    returned = time.monotonic() - start
    try:
        torch.npu.synchronize()
        print("sync ok", flush=True)
    except RuntimeError as exc:
        print(f"returned {returned:.1f} | {str(exc).splitlines()[0]}", flush=True)
    _up.set("done", "1")
else:
    _up.wait(["done"])
os._exit(0)
"""
    (rc0, out0, err0), (rc1, _, err1) = finish(start_ranks(tmp_path, body))
    assert rc0 == 0 and rc1 == 0, err0[-3000:] + err1[-3000:]
    returned, error = out0.strip().splitlines()[-1].split(" | ")
    assert 1.9 <= float(returned.split()[1]) < 15, out0
    assert error.endswith("NPU function error: AclrtSynchronizeDeviceWithTimeout, error code is 507034"), error
    assert "EI0002" not in plog_text(tmp_path) + err0 and "terminate called" not in err0, err0[-3000:]

def test_a_stuck_kernel_never_sizes_its_outputs_from_the_unwritten_count_buffer(tmp_path):
    """The counts transfer of a kernel whose peer never came leaves its buffer unwritten (on gloo, any bytes:
    the CI once saw a 2 PB allocation from them); the kernel's outputs are then undefined, never sized by it."""
    run_py(tmp_path, """
    import torch, torch.distributed as dist
    import torch_npu
    from torch_npu import _fault, _ops

    def never_written(out, inp, group=None):  # the peer never came: the buffer keeps garbage, the kernel spins
        out.fill_(2 ** 50)
        _fault.standin_stuck(507034)

    dist.all_to_all_single = never_written
    assert _ops._exchange_counts(torch.tensor([3, 1]), None) == [0, 0]
    _fault.clear()
    dist.all_to_all_single = lambda out, inp, group=None: out.copy_(inp)
    assert _ops._exchange_counts(torch.tensor([3, 1]), None) == [3, 1]
    """)


def test_standin_fault_refuses_a_non_fault_code(tmp_path):
    proc = run_py(tmp_path, """
        import torch, torch_npu
        try:
            torch_npu.npu._standin_fault(107001)
        except ValueError as exc:
            print("refused", "107001" in str(exc))
        torch.npu.synchronize()
        print("healthy")
    """)
    assert proc.stdout.split() == ["refused", "True", "healthy"]


# -- hccl ------------------------------------------------------------------------------------------------
def test_hccl_groups_and_comm_names_two_processes(tmp_path):
    procs = start_ranks(tmp_path, INIT.format(timeout="") + textwrap.dedent("""
        import json
        t = torch.ones(3).npu() * (rank + 1)
        dist.all_reduce(t)
        g = dist.new_group(backend="hccl", ranks=[0, 1])
        g2 = dist.new_group(backend="hccl", ranks=[0, 1])
        name = g._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
        name2 = g2._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
        resolved = torch_npu.distributed.resolve_hccl_comm_name(name)
        x = torch.arange(4.0).npu() + 10 * rank
        y = torch.empty(4, device="npu")
        dist.all_to_all_single(y, x, group=g)
        try:  # hccl is registered for npu only (torch_npu/_init/registry/distributed.py)
            dist.all_reduce(torch.ones(1), group=g)
            cpu = "accepted"
        except RuntimeError as exc:
            cpu = str(exc)
        dist.barrier()
        torch_npu.npu.synchronize()
        print(json.dumps({"sum": t.tolist(), "name": name, "names_differ": name != name2,
                          "resolves": resolved is g, "group_name": g.group_name, "backend": dist.get_backend(g),
                          "a2a": y.tolist(), "cpu": cpu, "devices": [t.device.type, y.device.type]}))
        dist.destroy_process_group()
    """))
    results = finish(procs)
    outs = []
    for rc, stdout, stderr in results:
        assert rc == 0, stderr
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    for r, out in enumerate(outs):
        assert out["sum"] == [3.0, 3.0, 3.0]
        assert out["name"] == out["group_name"] and out["names_differ"] and out["resolves"]
        assert out["backend"] == "hccl"
        assert out["a2a"] == ([0.0, 1.0, 10.0, 11.0] if r == 0 else [2.0, 3.0, 12.0, 13.0])
        assert out["cpu"] == "No backend type associated with device type cpu"  # c10d's own text
        assert out["devices"] == ["npu", "npu"]
    assert outs[0]["name"] == outs[1]["name"]


def test_timeouts_and_the_watchdog_warning(tmp_path):
    proc = run_py(tmp_path, """
        import datetime, warnings, torch, torch_npu, torch.distributed as dist
        from torch_npu.distributed import Timeouts
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            short = Timeouts(datetime.timedelta(seconds=5), teardown=True)
            default = Timeouts(datetime.timedelta(minutes=30), teardown=True)
            longer = Timeouts(datetime.timedelta(seconds=20), teardown=True)
        print([str(c.message) for c in caught])
        print(short.exec_s, short.watchdog_s, short.connect_s, default.watchdog_s, longer.watchdog_first)
    """, HCCL_EXEC_TIMEOUT="10")
    messages, values = proc.stdout.splitlines()
    assert messages == ("['The watchdog timeout 5000ms(which is set by init_process_group) is less than or equal to "
                        "HCCL execution timeout 10000ms! The plog may not be recorded.']")
    assert values == "10.0 5.0 120.0 1810.0 False"
    proc = run_py(tmp_path, """
        import datetime, torch_npu
        from torch_npu.distributed import Timeouts
        t = Timeouts(datetime.timedelta(minutes=30), teardown=True)
        print(t.exec_s, t.connect_s, t.watchdog_s)
    """, HCCL_CONNECT_TIMEOUT="300")
    assert proc.stdout.strip() == "1836.0 300.0 3636.0"


HANG = """
import time
t = torch.ones(2).npu()
dist.all_reduce(t)
print("warm", flush=True)
if rank == 1:
    time.sleep(40)  # never reaches the next collective while rank 0 waits
dist.all_reduce(t)
print("unreachable", flush=True)
"""


def _hang(tmp_path, timeout, **env):
    procs = start_ranks(tmp_path, INIT.format(timeout=timeout) + HANG, **env)
    t0 = time.monotonic()
    rc0, out0, err0 = finish(procs[:1], timeout=45)[0]
    elapsed = time.monotonic() - t0
    procs[1].kill()
    finish(procs[1:])
    return rc0, out0, err0, elapsed


def test_exec_timeout_writes_ei0002_then_aborts(tmp_path):
    rc, out, err, elapsed = _hang(tmp_path, "", HCCL_EXEC_TIMEOUT="3")
    assert rc == -signal.SIGABRT, (rc, out, err)
    assert "warm" in out and "unreachable" not in out
    assert elapsed < 40
    plog = plog_text(tmp_path)
    assert re.search(r"^\[ERROR\] HCCL\(\d+,\S+\):[\d:.-]+ \[task_exception_handler\.cc:\d+\] \[\d+\].*EI0002: .*"
                     r"remote rank: \[1\].*rankSize\[2\], rankId\[0\]", plog, re.M), plog
    assert "HCCL watchdog thread terminated with exception" in err
    assert "terminate called after throwing an instance of 'std::runtime_error'" in err
    assert "ERR02005 DIST internal error" in err and "error code is 507048" in err
    logs = pytest.importorskip("framework.cores.logs")
    sigs = {s.code: s for s in logs.scan_signatures(plog + err)}
    assert {"EI0002", "HCCL-WATCHDOG", "ACL-507048", "ERR02005", "TERMINATE"} <= set(sigs)
    assert sigs["EI0002"].detail == "remote rank 1"


def test_watchdog_first_aborts_without_a_plog(tmp_path):
    rc, out, err, _ = _hang(tmp_path, ", timeout=datetime.timedelta(seconds=3)", HCCL_EXEC_TIMEOUT="30")
    assert rc == -signal.SIGABRT, (rc, out, err)
    assert "The plog may not be recorded." in err  # the warning at group creation
    assert re.search(r"\[rank0\]:\[E\d{4} [\d:.]+ ProcessGroupHCCL\.cpp:\d+\] \[Rank 0\] Watchdog caught collective "
                     r"operation timeout: WorkHCCL\(SeqNum=2, OpType=ALLREDUCE, NumelIn=2, NumelOut=0, "
                     r"Timeout\(ms\)=3000\) ran for \d+ milliseconds before timing out\.", err), err
    assert "EI0002" not in plog_text(tmp_path)


def test_without_tear_down_the_hang_is_raised(tmp_path):
    procs = start_ranks(tmp_path, INIT.format(timeout="") + HANG.replace(
        "dist.all_reduce(t)\nprint(\"unreachable\"", "try:\n    dist.all_reduce(t)\nexcept RuntimeError as exc:\n"
        "    print(\"raised\", exc, flush=True)\nprint(\"unreachable\""), HCCL_EXEC_TIMEOUT="3",
        TORCH_HCCL_ASYNC_ERROR_HANDLING="0")
    rc0, out0, err0 = finish(procs[:1], timeout=45)[0]
    procs[1].kill()
    finish(procs[1:])
    assert rc0 == 0, err0
    assert "raised \n[ERROR]" in out0 and "ERR02005 DIST internal error" in out0
    assert "HCCL watchdog thread terminated" not in err0
    assert "remote rank: [1]" in plog_text(tmp_path)


def test_a_peer_missing_at_group_creation_gives_ei0006(tmp_path):
    procs = start_ranks(tmp_path, INIT.format(timeout="") + textwrap.dedent("""
        import time
        if rank == 1:
            time.sleep(40)  # never creates the group
        try:
            dist.new_group(backend="hccl", ranks=[0, 1])
        except RuntimeError as exc:
            print("raised", exc, flush=True)
    """), HCCL_CONNECT_TIMEOUT="3")
    rc0, out0, err0 = finish(procs[:1], timeout=45)[0]
    procs[1].kill()
    finish(procs[1:])
    assert rc0 == 0, err0
    assert "ERR02200 DIST call hccl api failed" in out0 and "EI0006: " in out0 and "dst_rank[1]" in out0
    plog = plog_text(tmp_path)
    assert "[Wait][LinkEstablish]wait socket establish timeout, role[1] rank[1] timeout[3]" in plog
    logs = pytest.importorskip("framework.cores.logs")
    sigs = {s.code: s for s in logs.scan_signatures(out0 + plog)}
    assert sigs["EI0006"].detail == "peer ranks 1"
    assert sigs["HCCL-LINK-TIMEOUT"].detail == "rank 1, role 1, timeout 3 s"


# -- plogs -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env, root", [
    ({"ASCEND_WORK_PATH": "work"}, "log/debug/plog"),  # ASCEND_PROCESS_LOG_PATH (set by _env) wins
    ({"ASCEND_PROCESS_LOG_PATH": "", "ASCEND_WORK_PATH": "work"}, "work/log/debug/plog"),
    ({"ASCEND_PROCESS_LOG_PATH": ""}, "home/ascend/log/debug/plog"),
], ids=["process-log-path", "work-path", "home"])
def test_plog_location_priority(tmp_path, env, root):
    env = {k: (str(tmp_path / v) if v else "") for k, v in env.items()}
    proc = run_py(tmp_path, """
        import os, torch_npu
        try:
            torch_npu.npu.set_device(99)
        except RuntimeError:
            pass
        print(os.getpid(), torch_npu._plog.current_path())
    """, **env)
    pid, path = proc.stdout.split()
    assert Path(path).parent == tmp_path / root
    assert re.fullmatch(rf"plog-{pid}_\d{{17}}\.log", Path(path).name)


# -- occupancy -------------------------------------------------------------------------------------------
def _reader():
    spec = importlib.util.spec_from_file_location("camit_occupancy", STANDIN / "torch_npu" / "_occupancy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


HOLD = """
import sys, torch, torch_npu
torch_npu.npu.set_device(int(sys.argv[1]))
print("ready", flush=True)
sys.stdin.readline()
"""


def _hold(tmp_path, device, **env):
    script = _script(tmp_path, HOLD, f"hold{device}.py")
    proc = subprocess.Popen([sys.executable, str(script), str(device)], env=_env(tmp_path, **env), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def test_occupancy_lists_holders_until_exit_or_linger(tmp_path):
    reader = _reader()  # stdlib only: loads without torch_npu's package
    folder = tmp_path / "occ"
    normal = _hold(tmp_path, 1, ASCEND_RT_VISIBLE_DEVICES="4,5")
    killed = _hold(tmp_path, 0, CAMIT_EMU_NPU_LINGER="3")
    listed = {o.pid: o for o in reader.occupants(folder)}
    assert listed[normal.pid].devices == (5,) and listed[normal.pid].alive  # the host's NPU 5
    assert listed[killed.pid].devices == (0,) and listed[killed.pid].alive

    normal.communicate("\n", timeout=30)  # normal exit: released at once
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=30)
    listed = {o.pid: o for o in reader.occupants(folder)}
    assert normal.pid not in listed
    assert not listed[killed.pid].alive  # a killed holder lingers ...
    later = time.time() + 3 + reader.HEARTBEAT_S + 0.5
    assert killed.pid not in {o.pid for o in reader.occupants(folder, now=later)}  # ... for linger_s
    assert not (folder / f"{killed.pid}.json").exists()  # and the reader prunes it


# -- golden ops ------------------------------------------------------------------------------------------
def _quant_np(x):
    amax = np.abs(x).max(axis=-1)
    scale = amax / 127.0
    q = np.clip(np.rint(x / np.where(scale > 0, scale, 1)[..., None]), -128, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def test_single_rank_golden_ops_match_numpy(tmp_path):
    run_py(tmp_path, """
        import numpy as np, torch, torch_npu
        rng = np.random.default_rng(7)
        E, K, N, counts = 3, 8, 6, [2, 0, 3]
        M = sum(counts) + 1  # one row past the groups
        x = rng.integers(-20, 20, (M, K)).astype(np.int8)
        w = rng.integers(-16, 16, (E, K, N)).astype(np.int8)
        ws = (rng.random((E, N)) * 0.01 + 0.001).astype(np.float32)
        pts = (rng.random(M) * 0.1 + 0.01).astype(np.float32)
        gl = torch.tensor(counts, dtype=torch.int64).npu()
        y3 = torch_npu.npu_grouped_matmul(x=[torch.from_numpy(x).npu()], weight=[torch.from_numpy(w).npu()], split_item=3,
                                          group_list_type=1, group_type=0, group_list=gl, output_dtype=torch.int32)[0]
        y2 = torch_npu.npu_grouped_matmul(x=[torch.from_numpy(x).npu()], weight=[torch.from_numpy(w).npu()],
                                          scale=[torch.from_numpy(ws).npu()], per_token_scale=[torch.from_numpy(pts).npu()],
                                          split_item=2, group_list_type=1, group_type=0, group_list=gl,
                                          output_dtype=torch.float32)[0]
        h = rng.integers(-3000, 3000, (M, 2 * N)).astype(np.int32)
        hs = (rng.random((E, 2 * N)) * 0.01).astype(np.float32)
        acts = (rng.random(M) * 0.5).astype(np.float32)
        q, s = torch_npu.npu_dequant_swiglu_quant(x=torch.from_numpy(h).npu(), weight_scale=torch.from_numpy(hs).npu(),
                                                  activation_scale=torch.from_numpy(acts).npu(), bias=None, quant_scale=None,
                                                  quant_offset=None, group_index=gl, activate_left=True, quant_mode=1)
        f = rng.standard_normal((4, K)).astype(np.float32)
        sm = (rng.random(K) + 0.5).astype(np.float32)
        dq, ds = torch_npu.npu_dynamic_quant(torch.from_numpy(f).npu(), smooth_scales=torch.from_numpy(sm).npu())
        w1 = rng.integers(-16, 16, (K, N)).astype(np.int8)
        s1 = (rng.random(N) * 0.01).astype(np.float32)
        mm32 = torch_npu.npu_quant_matmul(dq, torch.from_numpy(w1).npu(), torch.from_numpy(s1).npu(), pertoken_scale=None,
                                          output_dtype=torch.int32)
        mmf = torch_npu.npu_quant_matmul(dq, torch.from_numpy(w1).npu(), torch.from_numpy(s1).npu(), pertoken_scale=ds,
                                         output_dtype=torch.float32)
        np.savez("ops.npz", x=x, w=w, ws=ws, pts=pts, y3=y3.cpu().numpy(), y2=y2.cpu().numpy(), h=h, hs=hs, acts=acts,
                 q=q.cpu().numpy(), s=s.cpu().numpy(), f=f, sm=sm, dq=dq.cpu().numpy(), ds=ds.cpu().numpy(), w1=w1, s1=s1,
                 mm32=mm32.cpu().numpy(), mmf=mmf.cpu().numpy(), counts=np.array(counts))
    """)
    d = np.load(tmp_path / "ops.npz")
    counts = d["counts"]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    ref3 = np.zeros_like(d["y3"])
    ref2 = np.zeros_like(d["y2"])
    for g in range(len(counts)):
        a, b = bounds[g], bounds[g + 1]
        acc = d["x"][a:b].astype(np.int64) @ d["w"][g].astype(np.int64)
        ref3[a:b] = acc
        ref2[a:b] = acc * d["ws"][g] * d["pts"][a:b, None]
    assert d["y3"].dtype == np.int32 and np.array_equal(d["y3"], ref3)  # the row past the groups stays 0
    np.testing.assert_allclose(d["y2"], ref2, rtol=1e-5, atol=1e-5)

    rows = int(counts.sum())
    group_of = np.repeat(np.arange(len(counts)), counts)
    hf = d["h"][:rows].astype(np.float64) * d["hs"][group_of] * d["acts"][:rows, None]
    n = hf.shape[1] // 2
    act = hf[:, :n] / (1 + np.exp(-hf[:, :n])) * hf[:, n:]
    rq, rs = _quant_np(act)
    np.testing.assert_allclose(d["s"][:rows], rs, rtol=1e-5)
    assert np.abs(d["q"][:rows].astype(int) - rq).max() <= 1  # float32 vs float64 at a rounding edge

    fq, fs = _quant_np(d["f"].astype(np.float64) * d["sm"])
    np.testing.assert_allclose(d["ds"], fs, rtol=1e-5)
    assert np.abs(d["dq"].astype(int) - fq).max() <= 1
    acc = d["dq"].astype(np.int64) @ d["w1"].astype(np.int64)
    assert np.array_equal(d["mm32"], acc)
    np.testing.assert_allclose(d["mmf"], acc * d["s1"] * d["ds"][:, None], rtol=1e-5, atol=1e-5)


DISPATCH = """
import numpy as np
rng = np.random.default_rng(100 + rank)
bs, H, K, E = 5, 8, 3, 4
x = rng.standard_normal((bs, H)).astype(np.float32)
ids = np.stack([rng.choice(E, K, replace=False) for _ in range(bs)]).astype(np.int32)
scales = rng.random((bs, K)).astype(np.float32)
mask = torch.tensor([True] * 4 + [False]).npu()  # 4 active tokens
g = dist.new_group(backend="hccl", ranks=[0, 1])
name = g._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
res = {}
for quant_mode in (0, 2):
    out = torch_npu.npu_moe_distribute_dispatch_v2(
        x=torch.from_numpy(x).npu(), expert_ids=torch.from_numpy(ids).npu(), expert_scales=torch.from_numpy(scales).npu(),
        scales=None, x_active_mask=mask, group_ep=name, ep_world_size=2, ep_rank_id=rank, moe_expert_num=E,
        group_tp="", tp_world_size=1, tp_rank_id=0, expert_shard_type=0, shared_expert_num=1,
        shared_expert_rank_num=0, quant_mode=quant_mode, global_bs=bs * 2, expert_token_nums_type=1)
    expand_x, dyn, assist, counts, ep_counts, tp_counts, expand_scales = out
    local = torch.repeat_interleave(torch.arange(2).npu(), counts)
    if quant_mode == 2:
        rows = expand_x.float() * dyn.unsqueeze(-1)
    else:
        rows = expand_x
    y = rows * (local + 1 + 2 * rank).float().unsqueeze(-1)  # "expert" e multiplies by e + 1
    comb = torch_npu.npu_moe_distribute_combine_v2(
        expand_x=y, expert_ids=torch.from_numpy(ids).npu(), assist_info_for_combine=assist, ep_send_counts=ep_counts,
        expert_scales=torch.from_numpy(scales).npu(), x_active_mask=mask, group_ep=name, ep_world_size=2,
        ep_rank_id=rank, moe_expert_num=E, tp_send_counts=tp_counts, expand_scales=expand_scales, group_tp="",
        tp_world_size=1, tp_rank_id=0, expert_shard_type=0, shared_expert_num=1, shared_expert_rank_num=0,
        global_bs=bs * 2)
    res[f"comb{quant_mode}"] = comb.cpu().numpy()
    res[f"counts{quant_mode}"] = counts.cpu().numpy()
    res[f"dtype{quant_mode}"] = np.array(str(expand_x.dtype))
np.savez(f"dispatch{rank}.npz", x=x, ids=ids, scales=scales, **res)
dist.destroy_process_group()
"""


def test_dispatch_combine_round_trip_world_2(tmp_path):
    for rc, _, stderr in finish(start_ranks(tmp_path, INIT.format(timeout="") + DISPATCH)):
        assert rc == 0, stderr
    data = [np.load(tmp_path / f"dispatch{r}.npz") for r in range(2)]
    active = 4
    for r, d in enumerate(data):
        factor = d["ids"].astype(np.float64) + 1  # expert e (local l on rank e // 2) multiplies by e + 1
        ref = (d["scales"][:, :, None] * factor[:, :, None] * d["x"][:, None, :]).sum(axis=1)
        ref[active:] = 0
        np.testing.assert_allclose(d["comb0"], ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(d["comb2"], ref, rtol=0.02, atol=0.05)  # int8 round trip
        owned = np.concatenate([e["ids"][:active].reshape(-1) for e in data])
        ref_counts = np.bincount(owned[owned // 2 == r] % 2, minlength=2)
        assert np.array_equal(d["counts0"], ref_counts) and np.array_equal(d["counts2"], ref_counts)
        assert str(d["dtype0"]) == "torch.float32" and str(d["dtype2"]) == "torch.int8"


# -- torchair --------------------------------------------------------------------------------------------
def test_torchair_backend_compiles_on_cpu(tmp_path):
    proc = run_py(tmp_path, """
        import torch, torch_npu, torchair
        from torchair.configs.compiler_config import CompilerConfig
        torch_npu.npu.set_compile_mode(jit_compile=True)
        config = CompilerConfig()
        config.experimental_config.frozen_parameter = True
        backend = torchair.get_npu_backend(compiler_config=config)
        mod = torch.compile(torch.nn.Linear(3, 2).npu(), backend=backend)
        x = torch.ones(4, 3).npu()
        print(bool(torch.allclose(mod(x), mod._orig_mod(x))), backend.compiler_config is config)
    """, timeout=55)
    assert proc.stdout.strip().splitlines()[-1] == "True True"


def test_torchair_takes_cam_ops_in_aclgraph_mode_only(tmp_path):
    """Graph mode as CAM supports it (umdk doc/en/cam/CAM API Guide.md: aclgraph only, no fullgraph=True, no
    GE mode): a module whose forward only calls the op is one FX graph holding the op (its Meta kernel gives
    Dynamo the shapes); torchair's backend runs it with ``config.mode = "reduce-overhead"`` and refuses it in
    the default GE mode ("max-autotune") and under fullgraph=True, citing the guide; a graph without CAM ops
    still compiles in GE mode."""
    proc = run_py(tmp_path, """
        import torch, torch_npu, torchair
        import torch.distributed as dist
        import umdk_cam_op_lib as cam
        from torchair.configs.compiler_config import CompilerConfig
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        torch_npu.npu.config.allow_internal_format = True
        nz = lambda t: torch_npu.npu_format_cast(t.npu(), torch_npu.Format.FRACTAL_NZ)
        g = torch.Generator().manual_seed(3)
        bs, hidden, inter, local = 4, 1024, 512, 2
        args = ((torch.rand(bs, hidden, generator=g) - 0.5).to(torch.bfloat16).npu(),
                torch.randint(0, local, (bs, 1), generator=g, dtype=torch.int32).npu(),
                [nz(torch.randint(-8, 8, (local, hidden, 2 * inter), generator=g, dtype=torch.int8))],
                [(torch.rand(local, 2 * inter, generator=g) * 0.003).npu()],
                [nz(torch.randint(-8, 8, (local, inter, hidden), generator=g, dtype=torch.int8))],
                [(torch.rand(local, hidden, generator=g) * 0.003).npu()], torch.ones(bs, 1).npu(),
                None, None, None, None, None, None, None, cam.group_name(), 1, 0, local, 0, bs)

        class Op(torch.nn.Module):
            def forward(self, *a):
                return torch.ops.umdk_cam_op_lib.fused_deep_moe(*a)

        class Leaky(torch.nn.Module):
            def forward(self, *a):
                out = torch.ops.umdk_cam_op_lib.fused_deep_moe(*a)
                torch._dynamo.graph_break()  # what a Python-side step between op and output does
                return out

        aclgraph = CompilerConfig()
        aclgraph.mode = "reduce-overhead"
        graphs = []
        def backend_of(config):
            npu_backend = torchair.get_npu_backend(compiler_config=config)
            def backend(gm, example_inputs):
                graphs.append([str(n.target) for n in gm.graph.nodes if "umdk" in str(n.target)])
                return npu_backend(gm, example_inputs)
            return backend
        ex = torch._dynamo.explain(Op())(*args)
        print("explain", ex.graph_count, ex.graph_break_count)
        out = torch.compile(Op(), backend=backend_of(aclgraph))(*args)
        eager = cam.fused_deep_moe(*args)
        # output and expert_token_nums; share_output is undefined without a shared expert (stand-in garbage)
        print("graphs", graphs, all(torch.equal(out[i], eager[i]) for i in (0, 2)), out[0].device.type)
        for name, config, fullgraph in (("GE", CompilerConfig(), False), ("fullgraph", aclgraph, True)):
            torch._dynamo.reset()
            try:
                torch.compile(Op(), backend=torchair.get_npu_backend(compiler_config=config), fullgraph=fullgraph)(*args)
                print(name, "accepted")
            except Exception as exc:
                print(name, "refused |", [ln for ln in str(exc).splitlines() if "torchair:" in ln][0])
        torch._dynamo.reset()
        lin = torch.nn.Linear(3, 2).npu()
        ge = torch.compile(lin, backend=torchair.get_npu_backend(compiler_config=CompilerConfig()), fullgraph=True)
        print("no CAM op in GE", bool(torch.allclose(ge(torch.ones(2, 3).npu()), lin(torch.ones(2, 3).npu()))))
    """, timeout=170, PYTHONPATH=f"{STANDIN}:{STANDIN.parent / 'standin'}", CAMIT_STANDIN_NO_OPAPI_CHECK="1")
    lines = proc.stdout.strip().splitlines()[-5:]
    assert lines[0] == "explain 1 0"
    assert lines[1] == "graphs [['umdk_cam_op_lib.fused_deep_moe']] True npu", lines
    assert lines[2].startswith("GE refused |") and "in mode 'max-autotune' (GE)" in lines[2], lines
    assert "config.mode = 'reduce-overhead'" in lines[2] and "CAM API Guide.md" in lines[2], lines
    assert lines[3].startswith("fullgraph refused |") and "compile without fullgraph=True" in lines[3], lines
    assert lines[4] == "no CAM op in GE True", lines


def test_torch_manual_seed_seeds_through_torch_npu_without_recursing(tmp_path: Path) -> None:
    """``torch.manual_seed`` also seeds every registered device (torch/random.py): the npu one must not loop."""
    proc = run_py(tmp_path, """
        import torch, torch_npu
        torch.manual_seed(7)
        a = torch.rand(3)
        torch.npu.manual_seed(7)
        b = torch.rand(3)
        torch.npu.manual_seed_all(7)
        c = torch.rand(3)
        print(bool(torch.equal(a, b) and torch.equal(b, c)))
    """)
    assert proc.stdout.strip() == "True"


SHUTDOWN = """
import os, threading, time, weakref
g = dist.new_group(backend="hccl", ranks=[0, 1])
t = torch.ones(3).npu()
dist.all_reduce(t, group=g)
refs = [weakref.ref(g), weakref.ref(dist.distributed_c10d._get_default_group())]
dist.destroy_process_group()
del g  # no gc.collect(): a reference cycle would leave gloo's threads to interpreter finalisation
deadline = time.monotonic() + 10
while any(th.name == "hccl-watchdog" for th in threading.enumerate()) and time.monotonic() < deadline:
    time.sleep(0.1)
gloo = sum(open(f"/proc/self/task/{task}/comm").read().startswith("pt_gloo") for task in os.listdir("/proc/self/task"))
print("alive", sum(r() is not None for r in refs), "watchdog",
      any(th.name == "hccl-watchdog" for th in threading.enumerate()), "gloo threads", gloo, "sum", t.tolist())
"""


def test_destroy_process_group_releases_the_groups_and_ends_the_watchdog(tmp_path):
    # ProcessGroupHCCL::shutdown ends the watchdog; a watchdog (or a reference cycle) that kept a group left gloo's
    # worker threads and works to interpreter finalisation, where freeing a work's tensor retakes the GIL and the
    # process aborts ("terminate called without an active exception": CI, rank 3 in pt_gloo_runloop)
    for rc, stdout, stderr in finish(start_ranks(tmp_path, INIT.format(timeout="") + SHUTDOWN)):
        assert rc == 0, stderr
        assert "alive 0 watchdog False gloo threads 0 sum [2.0, 2.0, 2.0]" in stdout, stdout + stderr
