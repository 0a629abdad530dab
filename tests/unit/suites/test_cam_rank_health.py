"""The rank side's health probe (``Cam.check_healthy``, suites/cam/rank/conftest.py) on the hccl path.

Two real processes with the torch_npu stand-in (``standin_npu`` on PYTHONPATH, hccl on gloo over a
FileStore): the probe all-reduces a tensor on the device and the ranks stay; a probe left on the CPU (what
the suite did before) ends every rank as not healthy with c10d's text, as real torch_npu, which registers
hccl for ``npu`` only, would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[3]
CONFTEST = REPO / "suites" / "cam" / "rank" / "conftest.py"
SCRUB = ("CAMIT_", "ASCEND_", "HCCL_", "TORCH_HCCL_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_")

BODY = """
import importlib.util, sys, torch, torch_npu, torch.distributed as dist
rank, store, keep_on_cpu = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "cpu"
spec = importlib.util.spec_from_file_location("cam_rank_conftest", {conftest!r})
side = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = side  # (dataclasses look their module up)
spec.loader.exec_module(side)
torch.npu.set_device(rank)
dist.init_process_group("hccl", init_method="file://" + store, rank=rank, world_size=2)
group = dist.new_group(backend="hccl", ranks=[0, 1])


class OldCam(side.Cam):
    def to_device(self, t):
        return t  # the probe as the suite made it before: never moved to the device


cls = OldCam if keep_on_cpu else side.Cam
cam = cls(rank, 2, rank, torch.device("npu", rank), group, "", "hccl", 1, None)
cam.check_healthy("the probe test")
print("healthy", flush=True)
dist.destroy_process_group()
"""


def _ranks(tmp_path: Path, mode: str) -> list[tuple[int, str, str]]:
    script = tmp_path / f"rank_{mode}.py"
    script.write_text(textwrap.dedent(BODY.format(conftest=str(CONFTEST))))
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB) and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(REPO / "standin_npu"), CAMIT_EMU_NPU_COUNT="2", CAMIT_EMU_NPU_DIR=str(tmp_path / "occ"),
               ASCEND_PROCESS_LOG_PATH=str(tmp_path / "log"), HOME=str(tmp_path), OMP_NUM_THREADS="1")
    store = tmp_path / f"store_{mode}"
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(store), mode], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path) for r in range(2)]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        out.append((proc.returncode, stdout, stderr))
    return out


def test_the_probe_runs_on_the_device_and_a_cpu_probe_would_end_every_rank(tmp_path: Path) -> None:
    for rc, stdout, stderr in _ranks(tmp_path, "npu"):
        assert rc == 0 and stdout.split() == ["healthy"], stderr[-3000:]
    for rank, (rc, stdout, stderr) in enumerate(_ranks(tmp_path, "cpu")):
        assert rc == 3 and "healthy" not in stdout, (rc, stdout, stderr[-3000:])
        assert (f"camit: rank {rank} is not healthy after the probe test: RuntimeError: No backend type associated "
                "with device type cpu; ending this rank now") in stderr, stderr[-3000:]
