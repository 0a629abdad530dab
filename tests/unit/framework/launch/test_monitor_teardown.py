"""Teardown that looks at what is left: rank stacks before a kill, ``LEFT`` pids, held NPUs, dirty hosts.

The shipped supervisor and rank wrapper run here as real processes (a rank that sleeps, a child that
escapes with ``setsid`` and a clean environment); the device check and the dirty-host state are pure
logic over ``npu-smi info`` text (captures in tests/data/ascend) and a fake clock.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from framework.ascend import tools
from framework.errors import HostError
from framework.launch import devices, fetch
from framework.launch.devices import DirtyHosts, HeldDevice, HostDirty
from framework.launch.plan import run_folder_env
from framework.remote import protocol, script
from tests.support.builders import ASCEND_CAPTURES
from tests.unit.framework.launch.test_monitor import monitor

ASCEND = ASCEND_CAPTURES


# -- the shipped programs, for real ------------------------------------------------------------------
def supervise(tmp_path: Path, rank_code: str, *extra: str) -> subprocess.Popen[str]:
    sup, _ = script("supervisor.py")
    wrap, _ = script("rankwrap.py")
    status = tmp_path / "run"
    argv = [sys.executable, str(sup), "--run-id", f"t-{os.getpid()}-{time.monotonic_ns()}", "--status-dir",
            str(status), "--heartbeat", "0.2", "--grace", "0.5", "--stack-wait", "1", *extra,
            "--", sys.executable, str(wrap), "--status-dir", str(status), "--", "-c", rank_code]
    return subprocess.Popen(argv, env=dict(os.environ, RANK="0", LOCAL_RANK="0"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def wait_for(path: Path, timeout: float = 30.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear")


def finish(proc: subprocess.Popen[str], send: str | None = None) -> list[str]:
    assert proc.stdin is not None and proc.stdout is not None
    if send:
        proc.stdin.write(send)
        proc.stdin.flush()
    out = "".join(iter(proc.stdout.readline, ""))
    proc.stdin.close()
    proc.wait(30)
    proc.stdout.close()
    return [line for line in out.splitlines() if line != protocol.HEARTBEAT]


SLEEPER = "import time\nopen({ready!r}, 'w').write('up')\ndef hang():\n    time.sleep(120)\nhang()\n"


def test_on_the_controllers_timeout_each_rank_prints_its_python_stacks_into_its_log_before_the_kill(tmp_path):
    ready = tmp_path / "ready"
    proc = supervise(tmp_path, SLEEPER.format(ready=str(ready)))
    wait_for(ready)
    lines = finish(proc, "STACKS\n")
    assert "KILLED stdin-kill" in lines and "STACKS 1" in lines, lines
    log = (tmp_path / "run" / "rank0.log").read_text()
    # faulthandler's dump (all threads): the frame the rank hangs in, by function name
    assert "most recent call first" in log and "in hang" in log, log
    status = json.loads((tmp_path / "run" / "rank0.json").read_text())
    assert status["signal"] == "SIGTERM", status  # then killed as before


def test_at_its_own_deadline_the_supervisor_asks_for_stacks_too(tmp_path):
    ready = tmp_path / "ready"
    proc = supervise(tmp_path, SLEEPER.format(ready=str(ready)), "--deadline", "3")
    lines = finish(proc)
    assert "KILLED deadline" in lines and "STACKS 1" in lines, lines
    assert "in hang" in (tmp_path / "run" / "rank0.log").read_text()


def test_a_plain_kill_asks_for_no_stacks(tmp_path):
    ready = tmp_path / "ready"
    proc = supervise(tmp_path, SLEEPER.format(ready=str(ready)))
    wait_for(ready)
    lines = finish(proc, "KILL\n")
    assert "KILLED stdin-kill" in lines and not any(line.startswith("STACKS") for line in lines), lines
    assert "most recent call first" not in (tmp_path / "run" / "rank0.log").read_text()


ESCAPER = textwrap.dedent("""\
    import subprocess, sys, time
    # a child that leaves the session (setsid) and drops the run's tag (a clean environment)
    subprocess.Popen([sys.executable, "-c", "import os, time; open({pidfile!r}, 'w').write(str(os.getpid())); "
                      "time.sleep(120)"], start_new_session=True, env={{}})
    time.sleep(120)
""")


def test_a_child_that_escaped_session_and_tag_survives_the_kill_and_is_reported_left(tmp_path):
    pidfile = tmp_path / "escaped.pid"
    proc = supervise(tmp_path, ESCAPER.format(pidfile=str(pidfile)))
    pid = int(wait_for(pidfile))
    try:
        time.sleep(0.8)  # the supervisor follows its tree every 0.25 s
        lines = finish(proc, "KILL\n")
        os.kill(pid, 0)  # still alive: neither in the group nor tagged
        left = next(line for line in lines if line.startswith("LEFT "))
        assert protocol.parse_supervisor_line(left).pids == (pid,), lines
        tree = protocol.parse_supervisor_line(next(line for line in lines if line.startswith("TREE "))).pids
        assert pid in tree and len(tree) >= 3, lines  # wrapper, rank, escaper
        assert lines[-1] == "DONE", lines
    finally:
        os.kill(pid, signal.SIGKILL)
    mon = monitor(["host1"], nproc=1)
    for line in lines:
        mon.line("host1", line, 1.0)
    assert mon.result.nodes["host1"].left == [pid]
    assert f"pid {pid}" in mon.result.message()


def test_a_run_that_leaves_nothing_reports_no_left(tmp_path):
    proc = supervise(tmp_path, "pass")
    lines = finish(proc)
    assert "EXIT 0" in lines and not any(line.startswith("LEFT") for line in lines), lines


def test_the_monitor_records_stacks_left_and_tree():
    mon = monitor(["host1"], nproc=1)
    for line in ("KILLED stdin-kill", "STACKS 2", "LEFT 41 42", "TREE 40 41 42", "DONE"):
        mon.line("host1", line, 1.0)
    node = mon.result.nodes["host1"]
    assert (node.stacks, node.left, node.tree, node.done) == (2, [41, 42], [40, 41, 42], True)
    assert mon.result.to_json()["nodes"]["host1"]["left"] == [41, 42]


# -- held devices --------------------------------------------------------------------------------------
def npu_smi(name: str) -> str:
    lines = (ASCEND / name).read_text().splitlines()
    return "\n".join(lines[1:] if lines and lines[0].startswith("# source:") else lines)


def test_held_by_keeps_the_runs_pids_only():
    text = npu_smi("npu-smi-info-a3-busy.txt")
    from framework.ascend.parse import parse_npu_smi_info

    procs = parse_npu_smi_info(text).processes
    assert procs, "the busy capture lists processes"
    mine = procs[0]
    held = devices.held_by("host1", parse_npu_smi_info(text), {mine.pid, 1}, "L1")
    assert {(h.npu, h.chip, h.pid) for h in held} == {(p.npu, p.chip, p.pid) for p in procs if p.pid == mine.pid}
    assert all(h.launch_id == "L1" and h.host == "host1" for h in held)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_wait_released_polls_until_the_runs_pids_hold_nothing():
    busy, idle = npu_smi("npu-smi-info-a3-busy.txt"), npu_smi("npu-smi-info-910b2c-16npu-idle.txt")
    from framework.ascend.parse import parse_npu_smi_info

    pid = parse_npu_smi_info(busy).processes[0].pid
    answers = [busy, busy, idle]
    clock = Clock()
    calls = []

    def run(cmd):
        calls.append(clock.now)
        return 0, answers.pop(0) if answers else idle

    assert devices.wait_released(run, "host1", [pid], clock=clock, sleep=clock.sleep) == []
    assert calls == [0.0, 0.5, 1.0]


def test_wait_released_gives_up_after_its_bound_and_returns_what_is_held():
    busy = npu_smi("npu-smi-info-a3-busy.txt")
    from framework.ascend.parse import parse_npu_smi_info

    pid = parse_npu_smi_info(busy).processes[0].pid
    clock = Clock()
    calls = []

    def run(cmd):
        calls.append(clock.now)
        return 0, busy

    held = devices.wait_released(run, "host1", [pid], launch_id="L", clock=clock, sleep=clock.sleep)
    assert held and all(h.pid == pid for h in held)
    assert clock.now <= devices.RELEASE_TIMEOUT and len(calls) == int(devices.RELEASE_TIMEOUT / 0.5) + 1, calls
    assert devices.wait_released(lambda c: (127, ""), "host1", [pid], clock=clock, sleep=clock.sleep) == []
    assert devices.wait_released(run, "host1", [], clock=clock, sleep=clock.sleep) == []


def test_the_reset_command_is_npu_smis_own_syntax_per_card_and_chip():
    held = HeldDevice("host1", 3, 1, 4242, "python3", "L7")
    assert held.reset_command() == "npu-smi set -t reset -i 3 -c 1"
    assert held.describe() == ("host1: NPU 3 chip 1 still held by pid 4242 (python3) after launch L7; "
                               "an operator may reset it: npu-smi set -t reset -i 3 -c 1")


def test_a_dirty_host_fails_later_launches_at_once_naming_device_pid_and_reset(tmp_path):
    dirty = DirtyHosts()
    dirty.check(["host1", "host2"])  # clean: nothing raised
    dev = HeldDevice("host2", 0, 1, 777, "python3", "L1")
    dirty.mark([dev, dev])
    assert dirty.held == {"host2": [dev]}
    dirty.check(["host1"])
    with pytest.raises(HostDirty) as err:
        dirty.check(["host1", "host2"])
    assert isinstance(err.value, HostError) and err.value.host == "host2"
    text = str(err.value)
    assert text.startswith("host2: dirty since launch L1: NPU 0 chip 1 held by pid 777"), text
    assert "npu-smi set -t reset -i 0 -c 1" in text
    # the report file, merged across writers (xdist workers share the folder)
    (tmp_path / devices.DIRTY_FILE).write_text(json.dumps({"host9": [{"npu": 1, "chip": 0, "pid": 5,
                                                                      "reset": "npu-smi set -t reset -i 1 -c 0"}]}))
    dirty.write(tmp_path)
    got = devices.read_dirty(tmp_path)
    assert set(got) == {"host2", "host9"} and got["host2"][0]["reset"] == "npu-smi set -t reset -i 0 -c 1"
    assert devices.reset_lines({"host2": got["host2"]}) == [
        "host2: NPU 0 chip 1 held by pid 777 — reset (operator): npu-smi set -t reset -i 0 -c 1"]
    assert DirtyHosts().write(tmp_path / "nope") is None


def test_the_summary_prints_the_reset_command_of_each_dirty_host(tmp_path):
    from framework.report.summary import terminal_summary

    DirtyHosts().write(tmp_path)
    d = DirtyHosts()
    d.mark([HeldDevice("host1", 0, 1, 99, "python3", "L")])
    d.write(tmp_path)
    text = terminal_summary(tmp_path)
    assert "DIRTY  host1: NPU 0 chip 1 held by pid 99 — reset (operator): npu-smi set -t reset -i 0 -c 1" in text


# -- what a failure saves, and what comes back --------------------------------------------------------
def test_the_state_script_notes_missing_tools_and_never_fails(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {"PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["sh", "-c", str(tools.state_script(str(run_dir), 2))], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    notes = (run_dir / tools.STATE_DIR / "notes.txt").read_text()
    if not Path(tools.HCCN_TOOL).exists():
        assert "hccn_tool: not installed" in notes
    assert "npu-smi: not installed" in notes and "msnpureport: not installed" in notes, notes


def test_the_state_script_saves_each_tools_output(tmp_path):
    bin_dir, run_dir = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    run_dir.mkdir()
    for name, body in {"npu-smi": 'echo "npu-smi $*"', "hccn_tool": 'echo "hccn $*"',
                       "msnpureport": 'mkdir -p 20260101/host1/device-0; echo exported'}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    proc = subprocess.run(["sh", "-c", str(tools.state_script(str(run_dir), 2))],
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    state = run_dir / tools.STATE_DIR
    assert (state / "npu-smi-info.txt").read_text() == "npu-smi info\n"
    hccn = (state / "hccn.txt").read_text()
    for i in (0, 1):
        assert f"hccn -i {i} -link -g" in hccn and f"hccn -i {i} -net_health -g" in hccn, hccn
    assert (state / "msnpureport.txt").read_text() == "exported\n"
    assert (state / "msnpureport" / "20260101" / "host1" / "device-0").is_dir()
    assert not (state / "notes.txt").exists()


def test_the_run_folder_brings_plogs_and_the_npu_state_back_with_their_paths(tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "local"
    (run_dir / "ascend" / "debug" / "plog").mkdir(parents=True)
    (run_dir / "npu-state").mkdir()
    (run_dir / "ascend" / "debug" / "plog" / "plog-1_2.log").write_text("EI0002\n")
    (run_dir / "npu-state" / "hccn.txt").write_text("link status: UP\n")
    (run_dir / "rank0.log").write_text("r\n")
    (run_dir / "hccl_trace_rank_0").write_text("trace\n")
    (run_dir / "core.123").write_text("no\n")
    tgz = tmp_path / "r.tgz"
    subprocess.run(["sh", "-c", str(fetch.pack_script(str(run_dir), str(tgz)))], check=True, timeout=60)
    out.mkdir()
    fetch.unpack(tgz, out)
    got = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert got == ["ascend/debug/plog/plog-1_2.log", "hccl_trace_rank_0", "npu-state/hccn.txt", "rank0.log"]


def test_unpack_keeps_nothing_outside_the_local_folder(tmp_path):
    tgz = tmp_path / "evil.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        for name in ("./ascend/../../x.log", "/abs/ascend/y.log", "./ascend/.hidden", "./other/deep/z.log"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    out = tmp_path / "out"
    out.mkdir()
    fetch.unpack(tgz, out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == ["z.log"]


def test_a_launchs_diagnostics_point_into_its_run_folder():
    from framework.config.effective import HostSpec, NicSpec, NpuSpec

    npu = HostSpec(name="h", manage_nic=NicSpec("eth0", "10.0.0.1"), npu=NpuSpec(count=16, soc="ascend910_93"))
    cpu = HostSpec(name="c", manage_nic=NicSpec("eth0", "10.0.0.2"))
    assert run_folder_env(npu, "hccl", "/w/runs/L") == {
        "ASCEND_PROCESS_LOG_PATH": "/w/runs/L/ascend", "TORCH_HCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_HCCL_DEBUG_INFO_TEMP_FILE": "/w/runs/L/hccl_trace_rank_"}
    assert run_folder_env(cpu, "gloo", "/w/runs/L") == {}


def test_the_run_folder_is_read_through_the_host_program_never_through_a_link(tmp_path):
    """Issue 31: the run folder comes back through the host program (every fetched artifact does): a
    plog folder that is a symlink is not followed, a hard-linked rank log is refused (``tar`` packed
    both), the rest comes back as before."""
    import os

    run_dir, out = tmp_path / "run", tmp_path / "local"
    run_dir.mkdir()
    outside = tmp_path / "outside"
    (outside / "debug").mkdir(parents=True)
    (outside / "debug" / "plog-9.log").write_text("SECRET\n")
    (run_dir / "ascend").symlink_to(outside)
    (tmp_path / "shadow").write_text("SECRET\n")
    os.link(tmp_path / "shadow", run_dir / "rank1.log")
    (run_dir / "rank0.log").write_text("r\n")
    tgz = tmp_path / "r.tgz"
    subprocess.run(["sh", "-c", str(fetch.pack_script(str(run_dir), str(tgz)))], check=True, timeout=60)
    out.mkdir()
    fetch.unpack(tgz, out)
    got = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()}
    assert got == {"rank0.log": "r\n"}
