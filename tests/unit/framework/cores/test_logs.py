"""collect_logs (framework.cores.logs) over a scripted transport: what it writes and returns."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from framework.cores.logs import collect_logs
from framework.cores.scan import Baseline, HostScan
from framework.errors import FrameworkError
from framework.hosts import Cluster, Host
from framework.testing import FakeTransport

OOM = (
    "[13.0] Out of memory: Killed process 42 (python3) total-vm:1kB, anon-rss:2048kB, file-rss:0kB"
)
LOGS_OUTPUT = (
    f"@@clock 1796546520.5 12.25\n@@dmesg\n[10.0] before the test\n{OOM}\n\n@@end-dmesg\n"
    "@@ascend-none no file changed\n"
)


def test_collect_logs_writes_dmesg_clock_and_signatures_and_marks_the_oom_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAMIT_SUSPECT_TTL", "600")
    ok = FakeTransport("h1").on(re.compile("@@dmesg"), stdout=LOGS_OUTPUT)
    ok.on(re.compile("camit-suspects"), stdout="RESULT marked\n")
    broken = FakeTransport("h2").on(
        re.compile("@@dmesg"), raises=FrameworkError("h2: connection lost")
    )
    cluster = Cluster([Host("h1", ok), Host("h2", broken)])
    now = time.time()
    (tmp_path / "h1" / "old").mkdir(parents=True)
    (tmp_path / "h1" / "rank0.log").write_text("RuntimeError: EI0002 remote rank: [3]\n")
    (tmp_path / "h1" / "old" / "rank1.log").write_text("EI0006 from an earlier launch\n")
    os.utime(tmp_path / "h1" / "old" / "rank1.log", (now - 3600, now - 3600))
    (tmp_path / "h1" / "notes.log").write_text("EI0019 in a file that is no launch log\n")
    baseline = Baseline(
        {"h1": HostScan("h1", now=now - 5, uptime=12.5), "h2": HostScan("h2", error="x")}, now - 5
    )

    files, summary = collect_logs(cluster, tmp_path, baseline, label="test_x")

    assert files["h2"] == []
    assert [p.name for p in files["h1"]] == ["dmesg.txt", "signatures.txt"]
    assert (tmp_path / "h1" / "dmesg.txt").read_text() == OOM + "\n"
    assert json.loads((tmp_path / "h1" / "dmesg-clock.json").read_text()) == {
        "now": 1796546520.5,
        "uptime": 12.25,
    }
    host_sigs = (tmp_path / "h1" / "signatures.txt").read_text()
    assert host_sigs.startswith("== test_x ==\nh1:\n") and "h1/rank0.log:1" in host_sigs
    assert "EI0006" not in host_sigs and "EI0019" not in host_sigs
    assert "pid 42 (python3), 2 MiB resident" in summary
    assert (tmp_path / "signatures.txt").read_text() == "== test_x ==\n" + summary
    assert any("camit-suspects" in c for c in ok.calls)
    assert not any("camit-suspects" in c for c in broken.calls)


def test_unreadable_dmesg_and_no_signature_write_no_summary(tmp_path: Path) -> None:
    out = "@@clock x y\n@@dmesg\ndmesg: Operation not permitted\n\n@@dmesg-failed\n\n@@end-dmesg\n"
    fake = FakeTransport("h1").on(re.compile("@@dmesg"), stdout=out)
    files, summary = collect_logs(Cluster([Host("h1", fake)]), tmp_path, Baseline({}, time.time()))
    assert summary == "" and not (tmp_path / "signatures.txt").exists()
    assert [p.name for p in files["h1"]] == ["dmesg.txt"]
    assert (
        (tmp_path / "h1" / "dmesg.txt").read_text().startswith("# dmesg is not readable on h1:\n")
    )
    assert not (tmp_path / "h1" / "dmesg-clock.json").exists()
