import torch.distributed as dist

from ut.util import tool


def test_base_test():
    assert dist.get_world_size() == 16
    _, name = tool.op_group()
    assert name
