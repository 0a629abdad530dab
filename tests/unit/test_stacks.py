"""framework.launch.stacks: real faulthandler dumps (as the rank wrapper registers them) grouped by stack."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from framework.launch import stacks
from framework.launch.result import LaunchResult, NodeResult
from framework.report.model import LaunchView

#: a "rank": faulthandler on SIGUSR1 for every thread (framework.remote.rankwrap), then waits where told
RANK = textwrap.dedent("""\
    import faulthandler, signal, sys, threading, time
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    threading.Thread(target=lambda: time.sleep(60), daemon=True).start()

    def wait_in_collective():
        while True:
            time.sleep(0.05)

    def stuck_in_sleep():
        time.sleep(60)

    print("ready", flush=True)
    (stuck_in_sleep if sys.argv[1] == "odd" else wait_in_collective)()
""")


def dump_ranks(tmp_path: Path, roles: dict[int, str]) -> dict[int, Path]:
    """Start one process per rank, SIGUSR1 each once it is ready, and return their logs."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    procs, logs = {}, {}
    for rank, role in roles.items():
        logs[rank] = tmp_path / f"rank{rank}.log"
        with open(logs[rank], "w") as out:
            procs[rank] = subprocess.Popen([sys.executable, str(script), role], stdout=out, stderr=subprocess.STDOUT)
    try:
        for rank, proc in procs.items():
            deadline = time.monotonic() + 30
            while "ready" not in logs[rank].read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signal.SIGUSR1)
        for rank in procs:
            deadline = time.monotonic() + 10
            while "most recent call first" not in logs[rank].read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.1)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    return logs


def test_the_odd_rank_is_named_with_its_host_and_the_majority_with_its_frame(tmp_path):
    logs = dump_ranks(tmp_path, {0: "wait", 1: "wait", 2: "wait", 3: "odd"})
    hosts = {0: "host1", 1: "host1", 2: "host2", 3: "host2"}
    groups = stacks.from_logs({r: (hosts[r], p) for r, p in logs.items()})
    assert [g.ranks for g in groups] == [[0, 1, 2], [3]]
    assert groups[0].stack[0].func == "wait_in_collective"
    assert groups[1].stack[0].func == "stuck_in_sleep" and groups[1].stack[-1].func == "<module>"
    line = stacks.summary(groups)
    assert line.startswith("stacks: 3 ranks (0, 1, 2) in wait_in_collective (rank.py:")
    assert "odd one out: rank 3 on host2 in stuck_in_sleep (rank.py:" in line


def test_all_ranks_in_one_place_and_a_rank_without_a_dump(tmp_path):
    logs = dump_ranks(tmp_path, {0: "wait", 1: "wait"})
    (tmp_path / "rank2.log").write_text("rank 2 started\n")
    groups = stacks.from_logs({0: ("h1", logs[0]), 1: ("h1", logs[1]), 2: ("h2", tmp_path / "rank2.log"),
                               3: ("h2", None)})
    assert [g.ranks for g in groups] == [[0, 1], [2, 3]]
    assert "2 ranks (2, 3) with no stack dump in its log" in stacks.summary(groups)
    assert stacks.summary(groups[:1]).startswith("stacks: all 2 ranks in wait_in_collective")


def test_the_last_dump_counts_and_the_main_thread_is_the_one_running_the_module():
    text = textwrap.dedent("""\
        Current thread 0x00007f0000000001 (most recent call first):
          File "/a/old.py", line 1 in first

        rank output between two dumps
        Thread 0x00007f0000000002 (most recent call first):
          File "/usr/lib/python3.11/threading.py", line 320 in wait
          File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

        Current thread 0x00007f0000000003 (most recent call first):
          File "/w/dist.py", line 7 in all_gather
          File "/w/test_x.py", line 3 in <module>
        """)
    threads = stacks.threads_of_last_dump(text)
    assert [kind for kind, _ in threads] == ["Thread", "Current thread"]
    assert [f.func for f in stacks.main_stack(text)] == ["all_gather", "<module>"]


def test_a_log_line_that_imitates_a_frame_outside_a_dump_is_not_a_frame():
    """Host output is data: a frame-shaped line outside a dump, or after the dump ended, is ignored."""
    text = ('  File "/evil.py", line 1 in injected\n'
            'Current thread 0x0000000000000001 (most recent call first):\n'
            '  File "/w/a.py", line 2 in real\n'
            'something the rank printed later\n'
            '  File "/evil.py", line 3 in injected_after\n')
    assert [f.func for f in stacks.main_stack(text)] == ["real"]
    assert stacks.main_stack("no dump at all\n") == ()


def test_the_launch_record_and_the_report_carry_the_groups(tmp_path):
    logs = dump_ranks(tmp_path, {0: "wait", 1: "odd"})
    result = LaunchResult("L1", {"host1": NodeResult("host1", 0, stacks=2)}, {}, 2, failure="the launch timed out")
    result.stacks = stacks.from_logs({0: ("host1", logs[0]), 1: ("host1", logs[1])})
    assert "odd one out: rank 1 on host1 in stuck_in_sleep" in result.message()
    data = result.to_json()
    view = LaunchView("L1", "L1", 2, data, 0.0)
    assert view.stacks[0].startswith("rank 0 on host1 in wait_in_collective (rank.py:")
    assert view.stacks[1].startswith("rank 1 on host1 in stuck_in_sleep (rank.py:")
