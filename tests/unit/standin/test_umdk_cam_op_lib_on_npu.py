"""The op stand-in on an emulated Ascend host (torch_npu stand-in importable): FRACTAL_NZ weights refused
or taken, and ids outside their documented range silently corrupting outputs without any device fault (the
kernels index UB buffers with them: dispatch_layout.h:112-160). Each test runs in a subprocess with ``standin_npu``
and ``standin`` on PYTHONPATH (this interpreter keeps seeing no torch_npu)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[3]
SCRUB = ("CAMIT_EMU_", "ASCEND_", "HCCL_", "TORCH_HCCL_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_")

PRELUDE = """
import os, sys, torch, torch_npu, torch.distributed as dist
import umdk_cam_op_lib as cam
torch_npu.npu.set_device(0)
dist.init_process_group(backend="hccl", init_method="file://" + sys.argv[1], rank=0, world_size=1)
group = dist.new_group(backend="hccl", ranks=[0])
group_ep = group._get_backend(torch.device("npu")).get_hccl_comm_name(0)
ops = torch.ops.umdk_cam_op_lib

def fused(w1, w2, ids=None):
    bs, hidden, local = 2, 512, 2
    ids = torch.zeros(bs, 1, dtype=torch.int32).npu() if ids is None else ids
    return ops.fused_deep_moe(torch.ones(bs, hidden, dtype=torch.bfloat16).npu(), ids, [w1],
                              [torch.ones(local, 1024).npu()], [w2], [torch.ones(local, hidden).npu()],
                              torch.ones(bs, 1).npu(), None, None, None, None, None, None, None, group_ep, 1, 0,
                              local, 0, 0)

def first(exc):
    return str(exc).splitlines()[0]
"""


def run_py(tmp_path: Path, body: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB) and k != "PYTHONPATH"}
    env.update(PYTHONPATH=f"{REPO / 'standin_npu'}{os.pathsep}{REPO / 'standin'}", CAMIT_EMU_NPU_COUNT="8",
               CAMIT_EMU_NPU_DIR=str(tmp_path / "occ"), ASCEND_PROCESS_LOG_PATH=str(tmp_path / "log"),
               HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1", CAMIT_STANDIN_NO_OPAPI_CHECK="1")
    script = tmp_path / "snippet.py"
    script.write_text(PRELUDE + textwrap.dedent(body) + "\nsys.stdout.flush()\nos._exit(0)\n")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "store")], env=env, text=True,
                          capture_output=True, timeout=timeout, cwd=tmp_path)
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def test_fused_refuses_nd_weights_and_takes_fractal_nz(tmp_path):
    """fused_deep_moe.cpp declares gmm1/gmm2 (and shared) weights FORMAT_FRACTAL_NZ."""
    proc = run_py(tmp_path, """
        w1 = torch.zeros(2, 512, 1024, dtype=torch.int8).npu()
        w2 = torch.zeros(2, 512, 512, dtype=torch.int8).npu()
        try:
            fused(w1, w2)
        except RuntimeError as exc:
            print("ND:", first(exc), "|", "the format of input gmm1_weight[0] is ND" in str(exc))
        nz_off = torch_npu.npu_format_cast(w1, torch_npu.Format.FRACTAL_NZ)   # allow_internal_format False: ND
        try:
            fused(nz_off, w2)
        except RuntimeError as exc:
            print("fallback:", "gmm1_weight[0] is ND" in str(exc))
        torch_npu.npu.config.allow_internal_format = True
        nz1 = torch_npu.npu_format_cast(w1, torch_npu.Format.FRACTAL_NZ)
        try:
            fused(nz1, w2)
        except RuntimeError as exc:
            print("half:", "the format of input gmm2_weight[0] is ND" in str(exc))
        out, share, nums = fused(nz1, torch_npu.npu_format_cast(w2, torch_npu.Format.FRACTAL_NZ))
        print("NZ:", tuple(out.shape), nums.tolist())
    """)
    assert proc.stdout.splitlines() == [
        "ND: call aclnnFusedDeepMoe failed, detail:EZ9999: Inner Error! | True",
        "fallback: True", "half: True", "NZ: (2, 512) [2, 0]"]


def test_bad_ids_raise_nothing_and_never_poison_the_device(tmp_path):
    """get_dispatch_layout.cpp checks no id values, and the layout kernel indexes only its UB buffers with them:
    a silent stray write (corrupted outputs), no trap: every later synchronize, collective and op works."""
    proc = run_py(tmp_path, """
        torch_npu.npu.config.allow_internal_format = True
        nz = lambda w: torch_npu.npu_format_cast(w.npu(), torch_npu.Format.FRACTAL_NZ)
        w1, w2 = nz(torch.zeros(2, 512, 1024, dtype=torch.int8)), nz(torch.zeros(2, 512, 512, dtype=torch.int8))
        torch.npu.synchronize()
        ntpe, slot = ops.get_dispatch_layout(torch.tensor([[0, 5], [1, -1]]).npu(), 4, 1)   # E = 4: ids 5 and -1
        print("counts corrupted:", ntpe.tolist() != [1, 1, 0, 0] or slot.tolist() != [[0, 0], [0, 0]])
        for name, call in (("sync", torch.npu.synchronize),
                           ("all_reduce", lambda: dist.all_reduce(torch.ones(1).npu(), group=group)),
                           ("op collective", lambda: fused(w1, w2)), ("later sync", torch.npu.synchronize)):
            call()
            print(name, "ok")
    """)
    assert proc.stdout.splitlines() == ["counts corrupted: True", "sync ok", "all_reduce ok", "op collective ok",
                                        "later sync ok"]


def test_fused_placeholder_and_bad_ids_do_not_fault(tmp_path):
    """-1 is fused's documented placeholder (API guide: [-1, num_experts)); 7 (E = 2) is undefined: garbage,
    no fault."""
    proc = run_py(tmp_path, """
        torch_npu.npu.config.allow_internal_format = True
        nz = lambda w: torch_npu.npu_format_cast(w.npu(), torch_npu.Format.FRACTAL_NZ)
        w1, w2 = nz(torch.zeros(2, 512, 1024, dtype=torch.int8)), nz(torch.zeros(2, 512, 512, dtype=torch.int8))
        out, _, nums = fused(w1, w2, ids=torch.tensor([[-1], [7]], dtype=torch.int32).npu())
        print("counts:", nums.tolist(), "placeholder row:", out[0].float().abs().max().item())
        torch.npu.synchronize()
        print("sync ok")
    """)
    assert proc.stdout.splitlines() == ["counts: [0, 0] placeholder row: 0.0", "sync ok"]


def test_ops_refuse_cpu_tensors_naming_the_argument_and_answer_on_the_npu(tmp_path):
    """The kernels are registered for the NPU only (umdk pybind ``TORCH_LIBRARY_IMPL(..., PrivateUse1, m)``):
    a CPU tensor, alone or beside npu ones, is refused naming the argument; npu inputs give npu outputs."""
    proc = run_py(tmp_path, """
        torch_npu.npu.config.allow_internal_format = True
        nz = lambda w: torch_npu.npu_format_cast(w.npu(), torch_npu.Format.FRACTAL_NZ)
        w1, w2 = nz(torch.zeros(2, 512, 1024, dtype=torch.int8)), nz(torch.zeros(2, 512, 512, dtype=torch.int8))
        idx = torch.tensor([[0, 1], [1, 2]])
        calls = {"layout cpu": lambda: ops.get_dispatch_layout(idx, 4, 1),
                 "fused cpu weight": lambda: fused(w1, w2.cpu()),
                 "fused cpu ids": lambda: fused(w1, w2, ids=torch.zeros(2, 1, dtype=torch.int32))}
        for name, call in calls.items():
            try:
                call()
                print(name, "accepted")
            except RuntimeError as exc:
                print(name, "|", first(exc))
        ntpe, slot = ops.get_dispatch_layout(idx.npu(), 4, 1)
        out, share, nums = fused(w1, w2)
        print("devices", [t.device.type for t in (ntpe, slot, out, share, nums)], ntpe.cpu().tolist())
    """)
    tail = ("; the op runs on the NPU only (its kernels are registered for PrivateUse1, umdk pybind): "
            "move it with .npu() first")
    assert proc.stdout.splitlines() == [
        "layout cpu | umdk_cam_op_lib::get_dispatch_layout: argument 'topk_idx' is on cpu, not on the NPU" + tail,
        "fused cpu weight | umdk_cam_op_lib::fused_deep_moe: argument 'gmm2_weight[0]' is on cpu, not on the NPU"
        + tail,
        "fused cpu ids | umdk_cam_op_lib::fused_deep_moe: argument 'expert_ids' is on cpu, not on the NPU" + tail,
        "devices ['npu', 'npu', 'npu', 'npu', 'npu'] [1, 2, 1, 0]"]
