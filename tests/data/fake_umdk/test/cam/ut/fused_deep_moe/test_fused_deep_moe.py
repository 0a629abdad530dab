import torch
import torch.distributed as dist

from ut.util import tool


def test_base_test():
    t = torch.ones(1) * dist.get_rank()
    dist.all_reduce(t)
    w = tool.world()
    assert w == 4
    assert t.item() == w * (w - 1) / 2
