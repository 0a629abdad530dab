"""The cluster timeline on the emulated A3 lab: a device fault on rank 3, its peers' consequences after it."""

from __future__ import annotations

import json
import textwrap

import pytest

from framework.cores import faultbundle
from tests.support.ascend_lab import npu_lab_lock, run, variant

pytestmark = pytest.mark.lab

#: rank 3 (host2) faults its device at t0, says so at its synchronize and lingers; ranks 0-2 wait for it in
#: an all_reduce that HCCL's exec timeout (2 s) ends: their errors only report rank 3's absence
FAULT = textwrap.dedent("""\
    import os, time, traceback
    import torch, torch_npu
    import torch.distributed as dist

    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
    t = torch.ones(8).npu()
    dist.all_reduce(t)
    if dist.get_rank() == 3:
        torch_npu.npu._standin_fault(507035)
        try:
            torch.npu.synchronize()
        except RuntimeError:
            traceback.print_exc()
            time.sleep(6)
            raise
    dist.all_reduce(t)
    torch.npu.synchronize()
""")


def test_a_device_fault_on_rank_3_is_the_root_cause_and_its_peers_errors_are_consequences(npu_lab_env_path, tmp_path):
    path = npu_lab_env_path
    env = variant(path, tmp_path / "fault.yaml", lambda doc: doc.setdefault("launch", {}).setdefault(
        "env", {}).update({"HCCL_EXEC_TIMEOUT": "2"}))
    script = tmp_path / "fault.py"
    script.write_text(FAULT)
    with npu_lab_lock():
        proc = run("-m", "framework.cli", "run", "--env", str(env), "--hosts", "host1,host2",   # world 4
                   "--nproc-per-node", "2", "--timeout", "60",
                   "--report-dir", str(tmp_path / "r"), "--core-policy", "ignore", "--", str(script), timeout=200)
    assert proc.returncode != 0, proc.stdout[-3000:]
    folder = (tmp_path / "r" / "latest").resolve()
    launch = json.loads(next(folder.glob("launch-*.json")).read_text())
    host3 = launch["ranks"]["3"]["host"]
    data = json.loads((folder / "timeline.json").read_text())
    root = data["root_cause"]
    assert (root["host"], root["rank"], root["what"]) == (host3, 3, "device fault"), data
    assert "no preflight clock offsets" in data["clock"]["note"]
    peers = [e for e in data["consequences"] if e["rank"] != 3]
    assert peers and all(e["t"] > root["t"] for e in peers), data["consequences"]
    assert launch["cause"].startswith(f"rank 3 on {host3}: device fault:"), launch["cause"]
    causes = {(e["host"], e["rank"]) for e in data["events"] if e["kind"] == "cause"}
    assert causes == {(host3, 3)}, data["events"]  # the peers' watchdog aborts are consequences too
    head = (folder / "summary.txt").read_text().splitlines()[1]
    assert head.startswith("CAUSE ") and f"rank 3 on {host3}: device fault" in head, head
    assert "<section id='cluster-timeline'>" in (folder / "index.html").read_text()
    # the failed launch on NPU hosts left ascend-fd's input tree per host: rank 3's fault plog among host2's
    tree = folder / faultbundle.BUNDLE / host3
    assert faultbundle.check_tree(tree) == []
    assert any("retCode=507035" in p.read_text() for p in (tree / "process_log").rglob("plog-*.log"))
    assert (tree / "rank-3.txt").is_file() and (tree / "environment_check" / "npu_info_after.txt").is_file()
    assert (tree / "dmesg").is_file()  # collected after the launch, added to its bundle
    assert "npu-smi" in (tree / "environment_check" / "npu_info_before.txt").read_text()  # before the launch
