"""The launch monitor judged from supervisor transcripts (tests/data/launch/), without any host.

A transcript is ``<seconds> <host> <supervisor line>`` per line (``<EOF>``: the channel closed,
``<TICK>``: only time passes). :func:`replay` does what ``Launcher`` does with live channels:
feed each line at its time and let time pass; once the monitor stops the launch, the rest of
the transcript is the teardown (KILL answered, ranks reporting their end).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework.launch.monitor import LaunchMonitor
from framework.launch.plan import NodePlan
from framework.launch.result import LaunchResult, NodeResult
from framework.remote import protocol, script

DATA = Path(__file__).resolve().parents[3] / "data" / "launch"


def plans(hosts: list[str], nproc: int) -> dict[str, NodePlan]:
    return {h: NodePlan(host=h, node_rank=i, nnodes=len(hosts), nproc_per_node=nproc, master_addr="10.77.0.11",
                        master_port=29500, python="python3", run_dir=f"/w/runs/t.{h}", supervisor="/w/bin/s.py",
                        rankwrap="/w/bin/r.py", launch_id="t", env={})
            for i, h in enumerate(hosts)}


def monitor(hosts: list[str] = ["host1", "host2"], nproc: int = 2, timeout: float = 600.0) -> LaunchMonitor:  # noqa: B006
    p = plans(hosts, nproc)
    result = LaunchResult("t", {h: NodeResult(h, n.node_rank) for h, n in p.items()}, {}, world_size=nproc * len(p))
    mon = LaunchMonitor(result, p, deadline=timeout)
    for h in p:
        mon.started(h, 0.0)
    return mon


def events(name: str) -> list[tuple[float, str, str]]:
    out = []
    for raw in (DATA / name).read_text().splitlines():
        if raw.strip() and not raw.startswith("#"):
            t, host, text = raw.split(" ", 2)
            out.append((float(t), host, text))
    return out


def replay(mon: LaunchMonitor, name: str) -> LaunchResult:
    teardown = False
    for t, host, text in events(name):
        if text == "<EOF>":
            mon.closed(host, t, teardown=teardown)
        elif text != "<TICK>":
            mon.line(host, text, t)
        if not teardown:
            mon.tick(t)
            teardown = mon.stop
    mon.conclude(events(name)[-1][0])
    return mon.result


def test_clean_pass():
    result = replay(monitor(), "clean-pass.txt")
    assert result.ok and result.failure is None and result.failure_kind is None
    assert sorted(result.ranks) == [0, 1, 2, 3] and all(r.exit_code == 0 for r in result.ranks.values())
    assert [r.host for _, r in sorted(result.ranks.items())] == ["host1", "host1", "host2", "host2"]
    assert all(n.done and n.exit_code == 0 and n.lost is None and n.killed is None for n in result.nodes.values())


def test_rank_failure_names_the_root_cause_not_the_rank_killed_after_it():
    mon = monitor()
    result = replay(mon, "rank-failure.txt")
    assert not result.ok
    assert (result.failure_kind, result.failure_rank, result.failure_host) == ("rank", 2, "host2")
    assert result.failure == "rank 2 on host2 died of SIGSEGV"
    assert mon.failed_at == pytest.approx(3.90)  # the first bad line stopped the launch
    assert result.ranks[3].signal == "SIGTERM" and result.ranks[0].signal == "SIGTERM"
    assert result.nodes["host1"].killed == "stdin-kill" and result.nodes["host1"].done
    assert result.nodes["host2"].exit_code == 1 and result.nodes["host2"].done


def test_a_silent_host_is_lost_by_its_missing_heartbeats():
    mon = monitor()
    result = replay(mon, "lost-silence.txt")
    assert (result.failure_kind, result.failure_host) == ("lost", "host2")
    assert result.failure == "lost host2: no heartbeat for 20s"
    assert result.nodes["host2"].lost == "no heartbeat for 20s" and not result.nodes["host2"].done
    assert mon.failed_at == pytest.approx(24.30)
    # host2's ranks never reported: they stay without an outcome
    assert result.ranks[2].exit_code is None and result.ranks[2].signal is None
    assert result.nodes["host1"].done and result.nodes["host1"].killed == "stdin-kill"


def test_a_closed_channel_loses_its_host_at_once():
    result = replay(monitor(), "lost-eof.txt")
    assert (result.failure_kind, result.failure) == ("lost", "lost host2: its SSH channel closed")
    assert result.failure_host == "host2"  # the report attributes the other hosts' teardown to it
    assert result.nodes["host1"].done


def test_the_transport_reason_is_kept_for_a_closed_channel():
    mon = monitor()
    mon.closed("host2", 1.0, "SSH connection lost: reset by peer")
    assert mon.result.failure == "lost host2: SSH connection lost: reset by peer"


def test_timeout():
    result = replay(monitor(timeout=10.0), "timeout.txt")
    assert result.timed_out and result.failure_kind == "timeout"
    assert result.failure == "job timeout after 10s"
    assert result.failure_rank is None  # ranks killed by the teardown are consequences, not the failure
    assert {r: v.signal for r, v in result.ranks.items()} == {0: "SIGTERM", 1: "SIGTERM", 2: "SIGTERM",
                                                              3: "SIGKILL"}
    assert result.nodes["host2"].swept == 1


def test_heartbeats_go_every_interval_to_running_nodes_only():
    mon = monitor()
    assert mon.heartbeats_due(100.0) == ["host1", "host2"]
    assert mon.heartbeats_due(101.0) == []
    mon.line("host1", "DONE", 101.5)
    assert mon.heartbeats_due(102.0) == ["host2"]


def test_teardown_close_does_not_replace_the_failure():
    mon = monitor()
    mon.fail("interrupted", "interrupted (Ctrl-C/SIGTERM): tearing down every node", 1.0)
    mon.closed("host2", 2.0, teardown=True)
    assert mon.result.failure_kind == "interrupted"
    assert mon.result.nodes["host2"].lost == "channel closed during teardown"


def test_unreported_ranks_fail_a_launch_that_ended_cleanly():
    mon = monitor()
    for h in ("host1", "host2"):
        mon.line(h, "EXIT 0", 1.0)
        mon.line(h, "DONE", 1.0)
    mon.conclude(2.0)
    failure = mon.result.failure
    assert mon.result.failure_kind == "rank" and failure is not None
    assert failure.startswith("rank 0 on host1 did not report (killed or lost)")


def test_a_real_supervisor_and_rank_wrapper_transcript(tmp_path):
    """The shipped programs on this machine: supervisor → rankwrap → a rank exiting 3; the monitor reads it."""
    sup, _ = script("supervisor.py")
    wrap, _ = script("rankwrap.py")
    status = tmp_path / "run"
    argv = [sys.executable, str(sup), "--run-id", f"t-{os.getpid()}", "--status-dir", str(status),
            "--heartbeat", "0.2", "--deadline", "30",
            "--", sys.executable, str(wrap), "--status-dir", str(status), "--", "-c", "import sys; sys.exit(3)"]
    # stdin stays open (an EOF would be the controller going away: the supervisor would kill the run)
    proc = subprocess.Popen(argv, env=dict(os.environ, RANK="0", LOCAL_RANK="0"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        out = "".join(iter(proc.stdout.readline, ""))
    finally:
        proc.stdin.close()
        proc.wait(30)
        proc.stdout.close()
    lines = [line for line in out.splitlines() if line != protocol.HEARTBEAT]
    assert lines[0].startswith("STARTED ") and lines[-1] == "DONE", out
    mon = monitor(["host1"], nproc=1)
    for line in lines:
        mon.line("host1", line, 1.0)
    mon.conclude(2.0)
    assert (mon.result.failure_kind, mon.result.failure) == ("rank", "rank 0 on host1 exited 3")
    assert mon.result.nodes["host1"].exit_code == 3 and mon.result.nodes["host1"].done
    assert (status / protocol.rank_file(0, "json")).exists() and (status / protocol.TORCHRUN_LOG).exists()
