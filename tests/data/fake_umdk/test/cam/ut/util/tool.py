def world():
    import torch.distributed as dist

    return dist.get_world_size()


def op_group():
    """A dedicated group for the op and its communicator name (the HCCL comm name on NPU hosts)."""
    import torch
    import torch.distributed as dist

    backend = dist.get_backend()
    group = dist.new_group(backend=backend, ranks=list(range(dist.get_world_size())))
    if backend == "hccl":
        return group, group._get_backend(torch.device("npu")).get_hccl_comm_name(dist.get_rank())
    return group, group.group_name
