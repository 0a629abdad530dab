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
            signal.pause()  # blocked in one native call: every dump of it reads the same

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
    view = LaunchView("L1", LaunchResult.from_json(data), 0.0)
    assert view.stacks[0].startswith("rank 0 on host1 in wait_in_collective (rank.py:")
    assert view.stacks[1].startswith("rank 1 on host1 in stuck_in_sleep (rank.py:")


def test_py_spy_native_dumps_are_grouped_with_native_and_python_frames(tmp_path):
    """The supervisor's native_stacks runs the real py-spy on each rank; addresses (ASLR) do not split groups."""
    from framework.remote import supervisor

    spy = supervisor.find_pyspy()
    assert spy is not None, "py-spy is part of camit's test extra"
    logs = dump_ranks_alive(tmp_path, {0: "wait", 1: "wait", 2: "odd"})
    try:
        supervisor.native_stacks(spy, {r: p.pid for r, (p, _) in logs.items()}, str(tmp_path), 10)
    finally:
        for p, _ in logs.values():
            p.kill()
            p.wait()
    groups = stacks.from_logs({r: ("host1" if r < 2 else "host2", log) for r, (_, log) in logs.items()})
    assert [g.ranks for g in groups] == [[0, 1], [2]], [g.stack for g in groups]
    odd = groups[1]
    assert odd.stack[0].native and "stuck_in_sleep" in [f.func for f in odd.stack]
    assert odd.describe().startswith("rank 2 on host2 in ") and " from stuck_in_sleep (rank.py:" in odd.describe()


def test_without_py_spy_each_rank_gets_a_plain_note_and_faulthandlers_dump_counts(tmp_path):
    from framework.remote import supervisor

    logs = dump_ranks(tmp_path, {0: "odd"})
    supervisor.native_stacks(None, {0: 1}, str(tmp_path), 1)
    assert "py-spy is not installed on this host" in (tmp_path / "rank0.pyspy").read_text()
    [g] = stacks.from_logs({0: ("h", logs[0])})
    assert g.stack[0].func == "stuck_in_sleep" and not g.stack[0].native


def test_a_py_spy_dump_is_parsed_as_data():
    text = textwrap.dedent("""\
        Process 8433: python x.py
        Python v3.11.7 (/usr/bin/python3.11)

        Thread 8434 (idle): "Thread-1"
            wait (threading.py:320)
        Thread 8433 (idle): "MainThread"
            clock_nanosleep (libc.so.6)
            stuck (x.py:4)
            <module> (x.py:5)
            0x7f255804524a (libc.so.6)
        Thread 8435 (active): "worker"
            run (y.py:1)
        """)
    main = stacks.pyspy_main(text)
    assert [(f.func, f.file, f.line) for f in main] == [("clock_nanosleep", "libc.so.6", 0), ("stuck", "x.py", 4),
                                                        ("<module>", "x.py", 5)]
    assert stacks.pyspy_main("py-spy is not installed on this host\n") == ()


def dump_ranks_alive(tmp_path: Path, roles: dict[int, str]) -> dict[int, tuple[subprocess.Popen[bytes], Path]]:
    """Processes ready to be read, still running (the caller ends them)."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    out = {}
    for rank, role in roles.items():
        log = tmp_path / f"rank{rank}.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen([sys.executable, str(script), role], stdout=fh, stderr=subprocess.STDOUT)
        out[rank] = (proc, log)
    for _, log in out.values():
        deadline = time.monotonic() + 30
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    return out


def test_a_native_dump_not_done_in_time_is_replaced_by_a_python_only_one(tmp_path):
    """A py-spy that hangs on --native (a slow symbol load) is stopped; the plain dump takes its place."""
    from framework.remote import supervisor

    spy = tmp_path / "py-spy"
    spy.write_text('#!/bin/sh\ncase "$*" in *--native*) sleep 30;; *) echo "Thread 1 (idle): \\"MainThread\\""; '
                   'echo "    stuck (x.py:4)";; esac\n')
    spy.chmod(0o755)
    t0 = time.monotonic()
    supervisor.native_stacks(str(spy), {0: 1}, str(tmp_path), 0.5)
    assert time.monotonic() - t0 < 5
    assert [f.func for f in stacks.pyspy_main((tmp_path / "rank0.pyspy").read_text())] == ["stuck"]


def test_a_py_spy_stack_and_a_faulthandler_stack_of_the_same_place_are_one_group():
    """One rank read by py-spy (relative path, qualified name, native frames), another by faulthandler only
    (its py-spy dump did not finish in time): same place, one group."""
    spy = textwrap.dedent("""\
        Thread 26306 (idle): "MainThread"
            pthread_cond_wait (libc.so.6)
            c10d::Work::wait (libtorch_cpu.so)
            barrier (torch/distributed/distributed_c10d.py:5356)
            _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
            <module> (alltoall.py:44)
            _run_code (<frozen runpy>:88)
            <module> (<string>:13)
        """)
    fh = textwrap.dedent("""\
        Current thread 0x00007fc201611b80 (most recent call first):
          File "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier
          File "/usr/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
          File "/var/tmp/camit/targets/b325d524fdae/alltoall.py", line 44 in <module>
          File "<frozen runpy>", line 88 in _run_code
          File "<string>", line 13 in <module>
        """)
    groups = stacks.group({0: stacks.main_stack(fh), 3: stacks.pyspy_main(spy)}, {0: "host1", 3: "host2"})
    assert [g.ranks for g in groups] == [[0, 3]]
