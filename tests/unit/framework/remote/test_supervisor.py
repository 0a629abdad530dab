"""The shipped supervisor as a real process: the ways a run ends and the lines each prints.

The rank stacks, LEFT and TREE are in test_launch_teardown.py; here the other endings: the
controller goes silent or closes stdin, a signal, a command that ends by itself leaving a tagged
worker behind (SWEPT), and the RANK lines read from rank status files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from framework.remote import protocol, script

SUP, _ = script("supervisor.py")


def supervise(tmp_path: Path, code: str, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, str(SUP), "--run-id", f"s-{os.getpid()}-{time.monotonic_ns()}",
            "--status-dir", str(tmp_path / "run"), "--heartbeat", "0.2", "--grace", "0.5", *extra,
            "--", sys.executable, "-c", code]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def lines_of(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(30)
    proc.stdout.close()
    if proc.stdin is not None:
        proc.stdin.close()
    return [line for line in out.splitlines() if line != protocol.HEARTBEAT]


def kinds(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines]


def test_a_controller_that_goes_silent_gets_its_run_killed(tmp_path):
    proc = supervise(tmp_path, "import time; time.sleep(60)", "--silence", "0.6")
    lines = lines_of(proc)
    assert kinds(lines)[0] == "STARTED" and "KILLED silence" in lines, lines
    assert lines[-1] == "DONE" and proc.returncode == 1


def test_stdin_eof_ends_the_run(tmp_path):
    proc = supervise(tmp_path, "import time; time.sleep(60)")
    assert proc.stdin is not None
    proc.stdin.close()
    proc.stdin = None
    lines = lines_of(proc)
    assert "KILLED stdin-eof" in lines and proc.returncode == 1, lines


def test_a_term_signal_ends_the_run(tmp_path):
    proc = supervise(tmp_path, "import time; time.sleep(60)")
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("STARTED "), "no STARTED line"
    proc.send_signal(signal.SIGTERM)
    lines = lines_of(proc)
    assert "KILLED signal" in lines and lines[-1] == "DONE", lines


WORKER = ("import subprocess, sys\n"
          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
          " start_new_session=True)\n")


def test_a_tagged_worker_left_by_a_command_that_ended_is_swept(tmp_path):
    """The worker left its session but keeps the run's tag: swept after ``EXIT 0``."""
    lines = lines_of(supervise(tmp_path, WORKER))
    assert lines[1:3] == ["EXIT 0", "SWEPT 1"], lines
    assert lines[-1] == "DONE", lines


RANKS = ("import json, os, sys\n"
         "d = sys.argv[1]\n"
         "json.dump({'rank': 1, 'signal': 'SIGSEGV', 'pid': 7, 'end': 2}, open(d + '/rank1.json', 'w'))\n"
         "json.dump({'rank': 0, 'exit_code': 3, 'pid': 6, 'end': 1}, open(d + '/rank0.json', 'w'))\n"
         "sys.exit(3)\n")


def test_rank_status_files_become_rank_lines_in_the_order_the_ranks_ended(tmp_path):
    status = tmp_path / "run"
    argv = [sys.executable, str(SUP), "--run-id", f"r-{os.getpid()}", "--status-dir", str(status),
            "--", sys.executable, "-c", RANKS, str(status)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lines = lines_of(proc)
    ranks = [line for line in lines if line.startswith("RANK ")]
    assert ranks == ["RANK 0 exit 3 pid 6", "RANK 1 SIG SIGSEGV pid 7"], lines
    assert "EXIT 3" in lines and proc.returncode == 1
    assert json.loads((status / "rank0.json").read_text())["rank"] == 0


def test_no_command_is_exit_2_and_done(tmp_path):
    out = subprocess.run([sys.executable, str(SUP), "--run-id", "x", "--status-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert out.stdout.splitlines() == ["EXIT 2", "DONE"] and out.returncode == 2
