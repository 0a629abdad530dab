import torch
import torch.distributed as dist

from ut.util import tool


def test_base_test():
    group, name = tool.op_group()
    assert name
    print(f"backend {dist.get_backend()} group {name}")
    t = torch.ones(1) * dist.get_rank()
    if dist.get_backend() == "hccl":
        import torch_npu

        torch_npu.npu.config.allow_internal_format = True
        w = torch_npu.npu_format_cast(torch.ones(2, 256, 512).npu(), torch_npu.Format.FRACTAL_NZ)
        assert torch_npu.get_npu_format(w) == torch_npu.Format.FRACTAL_NZ
        t = t.npu()
    dist.all_reduce(t, group=group)
    w = tool.world()
    assert w == 4
    assert t.item() == w * (w - 1) / 2
