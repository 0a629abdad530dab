"""Progress lines (``framework.console.event``) from many host threads at once stay one line each."""

from __future__ import annotations

import io
import re
import threading
import time

from framework import console


class SlowStream(io.StringIO):
    """A terminal that takes its time over every write, as a busy pty or pipe does: writes of different
    threads interleave wherever a line is written in more than one piece."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        time.sleep(0.002)
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_lines_of_concurrent_hosts_never_glue_together():
    stream = SlowStream()
    start = threading.Barrier(8)

    def host(n: int) -> None:
        start.wait()
        for i in range(10):
            console.event(f"host{n}", f"unchanged {i} (hashes match)", stream=stream)

    threads = [threading.Thread(target=host, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = "".join(stream.parts).splitlines()
    assert len(lines) == 80
    bad = [ln for ln in lines if not re.fullmatch(r"\d\d:\d\d:\d\d host\d: unchanged \d \(hashes match\)", ln)]
    assert bad == []


def test_host_text_is_escaped_in_the_line():
    stream = SlowStream()
    console.event("host1\x1b[2J", "done\x1b]0;title\x07", stream=stream)
    line = "".join(stream.parts)
    assert "\x1b" not in line and "\x07" not in line
    assert line.endswith("host1\\x1b[2J: done\\x1b]0;title\\x07\n")
