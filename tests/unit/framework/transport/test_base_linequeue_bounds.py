"""Issue 31 item 4 (security review 3, #12 as ``linequeue.py`` ran it): the line splitter fed a spawned
process's stdout (the supervisor's, over SSH) is bounded and linear. The review: 64 MiB without a newline
held 64 MiB and cost 19.5 s of CPU. Measured here: CPU by ``time.process_time``, memory by ``tracemalloc``."""

from __future__ import annotations

import time
import tracemalloc

from framework.transport.base import MAX_LINE, MAX_QUEUED, LineQueue

CHUNK = b"x" * 32768  # what SshProcess reads at a time


def test_64_mib_without_a_newline_costs_linear_time_and_one_line_of_memory():
    q = LineQueue()
    tracemalloc.start()
    cpu = time.process_time()
    for _ in range(64 * 1024 * 1024 // len(CHUNK)):
        q.feed(CHUNK)
    q.feed(b"tail\nnext line\n")
    spent = time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert spent < 1.0, f"{spent:.2f}s of CPU"
    assert peak < 4 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"
    first = q.readline(0)
    assert first is not None and first.startswith("x" * 100)
    assert first == "x" * MAX_LINE + f" [camit: {64 * 1024 * 1024 + 4 - MAX_LINE} bytes dropped]\n"
    assert q.readline(0) == "next line\n"


def test_unread_lines_are_capped_and_counted_and_short_lines_split_as_before():
    q = LineQueue()
    q.feed(b"a\nb")
    q.feed(b"c\n\n")
    assert [q.readline(0), q.readline(0), q.readline(0), q.readline(0)] == ["a\n", "bc\n", "\n", None]
    q.feed(b"z\n" * (MAX_QUEUED + 5))
    q.finish()
    assert q.dropped == 5
    got = 0
    while q.readline(0) == "z\n":
        got += 1
    assert got == MAX_QUEUED
    q2 = LineQueue()
    q2.feed(b"no newline at the end")
    q2.finish()
    assert q2.readline(0) == "no newline at the end" and q2.readline(0) == ""
