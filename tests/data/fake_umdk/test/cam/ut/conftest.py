import os

import pytest
import torch
import torch.distributed as dist

try:  # an NPU host (or the emulated lab's): torch_npu must come first, as upstream's conftest has it
    import torch_npu  # noqa: F401
except ImportError:
    torch_npu = None


@pytest.fixture(scope="session", autouse=True)
def init_dist():
    if all(v in os.environ for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        if torch_npu is not None:
            torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group("hccl")
        else:
            dist.init_process_group("gloo")
        yield
        dist.destroy_process_group()
    else:
        yield
