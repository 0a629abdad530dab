"""The timeline on the CPU lab holds the kernel's and the supervisors' lines of a rank's crash, in order."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.support.ascend_lab import run_script_failing

pytestmark = pytest.mark.lab

#: rank 1 (host1's second) dies of SIGSEGV without a core (limit 0: no core to write, a fast test); the kernel
#: logs ``python[pid]: segfault at 0`` for it; rank 0 waits in a barrier until the teardown
SEGV = textwrap.dedent("""\
    import ctypes, resource
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        ctypes.string_at(0)
    dist.barrier()
""")


def test_a_ranks_crash_reads_kernel_line_then_its_exit_then_its_supervisors_lines(lab_env_path, lab, tmp_path):
    script = tmp_path / "segv.py"
    script.write_text(SEGV)
    host = lab.hosts[0].name
    _proc, folder = run_script_failing(lab_env_path, host, script, tmp_path, nproc=2, job_timeout=60, timeout=200)
    pid = json.loads((folder / host / "rank1.json").read_text())["pid"]
    assert (folder / host / "dmesg-clock.json").is_file()
    data = json.loads((folder / "timeline.json").read_text())
    mine = [e for e in data["events"] if e["host"] == host and e["rank"] == 1]
    kernel = [e for e in mine if e["source"] == "dmesg" and f"[{pid}]: segfault at 0" in e["text"]]
    exits = [e for e in mine if e["source"] == "rank-exit"]
    told = [e for e in mine if e["source"] == "supervisor" and e["text"].startswith("RANK 1 SIG SIGSEGV")]
    assert len(kernel) == 1 and len(exits) == 1 and len(told) == 1, mine
    # one clock: the kernel saw the fault, then the rank's wrapper its death, then the controller the line
    assert kernel[0]["t"] <= exits[0]["t"] <= told[0]["t"] < kernel[0]["t"] + 5, mine
    killed = [e for e in data["events"] if e["source"] == "supervisor" and e["text"].startswith("KILLED")]
    assert killed and all(e["t"] >= told[0]["t"] - 0.5 for e in killed), killed  # the teardown after the crash
    assert (data["root_cause"]["rank"], data["root_cause"]["what"]) == (1, "crash")
    page = (folder / "index.html").read_text()
    assert "segfault at 0" in page and "RANK 1 SIG SIGSEGV" in page
