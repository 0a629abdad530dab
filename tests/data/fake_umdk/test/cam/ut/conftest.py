import os

import pytest
import torch.distributed as dist


@pytest.fixture(scope="session", autouse=True)
def init_dist():
    if all(v in os.environ for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        dist.init_process_group("gloo")
        yield
        dist.destroy_process_group()
    else:
        yield
