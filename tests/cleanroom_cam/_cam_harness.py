"""Test harness: a tiny fake ``torch_npu`` and a gloo multi-process launcher."""
import os
import socket
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

_GROUPS = {}
_FORMATS = {}


def install_fake_torch_npu():
    mod = sys.modules.get("torch_npu")
    if mod is not None and getattr(mod, "_CLEANROOM_FAKE", False):
        return mod
    mod = types.ModuleType("torch_npu")
    mod._CLEANROOM_FAKE = True
    mod.STANDIN = False
    dist_mod = types.ModuleType("torch_npu.distributed")

    def resolve_hccl_comm_name(name):
        return _GROUPS[name]

    dist_mod.resolve_hccl_comm_name = resolve_hccl_comm_name
    mod.distributed = dist_mod

    def get_npu_format(t):
        return _FORMATS.get(id(t), 2)

    mod.get_npu_format = get_npu_format
    npu_mod = types.ModuleType("torch_npu.npu")

    def _standin_fault(code):
        raise RuntimeError("standin fault %d" % code)

    npu_mod._standin_fault = _standin_fault
    mod.npu = npu_mod
    sys.modules["torch_npu"] = mod
    sys.modules["torch_npu.distributed"] = dist_mod
    sys.modules["torch_npu.npu"] = npu_mod
    return mod


def tag_format(t, fmt):
    _FORMATS[id(t)] = fmt


def register_group(name, group):
    _GROUPS[name] = group


def allow_host_tensors():
    from umdk_cam_op_lib import _common
    _common.ALLOW_HOST_TENSORS = True


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _entry(rank, world, port, fn_module, fn_name, args):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import importlib

    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    install_fake_torch_npu()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    try:
        register_group("hccl_world_%d" % port, dist.group.WORLD)
        allow_host_tensors()
        fn = getattr(importlib.import_module(fn_module), fn_name)
        fn(rank, world, "hccl_world_%d" % port, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_world(world, fn, *args):
    import torch.multiprocessing as mp
    port = free_port()
    mp.spawn(_entry, args=(world, port, fn.__module__, fn.__name__, args), nprocs=world, join=True)
