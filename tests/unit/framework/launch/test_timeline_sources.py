"""The timeline's kernel and supervisor events (framework.launch.timeline), from formats captured on the lab.

``tests/data/timeline/``: a rank's SIGSEGV on the CPU lab (rank 1, pid 12056): host1's ``dmesg.txt`` with the
host's clock read with it (``dmesg-clock.json``), the supervisor's lines as the controller received them, and
the ranks' status files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import cast

from framework.cores.logs import logs_script, parse_clock
from framework.launch import timeline
from framework.launch.timeline import CAUSE, INFO
from framework.report.html import _cluster_timeline
from framework.report.model import RunView

DATA = Path(__file__).parents[3] / "data" / "timeline"
KERNEL = Path(__file__).parents[3] / "data" / "kernel"
CLOCK = json.loads((DATA / "dmesg-clock.json").read_text())
BOOT = CLOCK["now"] - CLOCK["uptime"]
SEGV_END = json.loads((DATA / "rank1.json").read_text())["end"]


def _run_folder(root: Path, offset: float | None = None) -> Path:
    """The captured crash as a run folder: host1's files, its dmesg and clock; preflight's offset if given."""
    host = root / "host1"
    host.mkdir(parents=True)
    for name in ("rank0.json", "rank1.json", "dmesg-clock.json"):
        shutil.copy(DATA / name, host / name)
    shutil.copy(DATA / "dmesg-segfault.txt", host / "dmesg.txt")
    shutil.copy(DATA / "supervisor-lines.jsonl", host / timeline.SUPERVISOR_FILE)
    if offset is not None:
        (root / "preflight.json").write_text(json.dumps({"clock": {"offsets": {"host1": offset}}}))
    return host


def test_a_kernel_segfault_line_is_placed_by_the_hosts_boot_time_and_names_the_rank_by_its_pid():
    events = timeline.dmesg_events((DATA / "dmesg-segfault.txt").read_text(), "host1", BOOT, {12056: 1})
    segv = [e for e in events if "segfault at 0" in e.text]
    assert len(segv) == 1 and segv[0].rank == 1 and segv[0].source == "dmesg"
    assert segv[0].t == round(BOOT + 12277.888467, 6)
    # the kernel saw the fault before the rank's wrapper saw it die (its core was being written in between)
    assert 0 < SEGV_END - segv[0].t < 2.0
    # the other lab namespaces' bridge chatter is neither about a rank nor a host's trouble
    assert not [e for e in events if "entered" in e.text]


def test_an_oom_kill_of_a_ranks_pid_is_a_cause_placed_in_time_and_of_another_pid_only_context():
    text = (KERNEL / "dmesg-oom.txt").read_text()
    as_rank = [e for e in timeline.dmesg_events(text, "host16", 1000.0, {21182: 15}) if e.what == "oom kill"]
    assert as_rank and all(e.kind == CAUSE and e.rank == 15 for e in as_rank)
    assert min(e.t for e in as_rank) > 1000.0 + 11794.0
    stranger = [e for e in timeline.dmesg_events(text, "host16", 1000.0, {}) if e.what == "oom kill"]
    assert stranger and all(e.kind == INFO for e in stranger)


def test_supervisor_lines_become_events_on_the_controllers_clock_and_heartbeats_do_not():
    text = (DATA / "supervisor-lines.jsonl").read_text() + json.dumps({"t": 1.0, "line": "HB"}) + "\nnot json\n"
    events = timeline.supervisor_events(text, "host1")
    assert [e.text.split()[0] for e in events] == ["STARTED", "RANK", "KILLED", "RANK", "DONE"]
    assert events[1].rank == 1 and events[1].text.startswith("RANK 1 SIG SIGSEGV")
    assert all(e.kind == INFO for e in events)
    lost = timeline.supervisor_events(json.dumps({"t": 5.0, "line": "CLOSED its SSH channel closed"}), "h")
    assert [(e.kind, e.what) for e in lost] == [(CAUSE, "host lost")]
    assert timeline.supervisor_events(json.dumps({"t": 5.0, "line": "CLOSED during teardown"}), "h")[0].kind == INFO


def test_the_crash_reads_in_order_kernel_then_rank_exit_then_supervisor(tmp_path):
    host = _run_folder(tmp_path)
    found = timeline.build(tmp_path, {"host1": host})
    order = [(e.source, e.text.split(":")[0].split()[0]) for e in found.events if e.rank == 1]
    assert order == [("dmesg", "python[12056]"), ("rank-exit", "died"), ("supervisor", "RANK")], order
    assert found.root is not None and (found.root.source, found.root.rank) == ("rank-exit", 1)


def test_host_stamps_move_by_preflights_offset_and_the_controllers_own_do_not(tmp_path):
    plain = timeline.build(tmp_path / "a", {"host1": _run_folder(tmp_path / "a")})
    moved = timeline.build(tmp_path / "b", {"host1": _run_folder(tmp_path / "b", offset=5.0)})
    by = {(e.source, e.text): e.t for e in plain.events}
    for e in moved.events:
        shift = 0.0 if e.source == "supervisor" else 5.0
        assert abs(by[(e.source, e.text)] - shift - e.t) < 1e-5, e


def test_without_the_hosts_clock_dmesg_lines_are_not_placed(tmp_path):
    host = _run_folder(tmp_path)
    (host / "dmesg-clock.json").unlink()
    assert not [e for e in timeline.build(tmp_path, {"host1": host}).events if e.source == "dmesg"]


def test_refresh_adds_the_dmesg_collected_after_the_launch_and_the_report_shows_it(tmp_path):
    host = _run_folder(tmp_path)
    (host / "dmesg.txt").rename(tmp_path / "later.txt")
    timeline.write(tmp_path, timeline.build(tmp_path, {"host1": host}), "L1", {"host1": host})
    before = json.loads((tmp_path / timeline.FILE).read_text())
    assert not [e for e in before["events"] if e["source"] == "dmesg"]
    (tmp_path / "later.txt").rename(host / "dmesg.txt")
    assert timeline.refresh(tmp_path) is not None
    after = json.loads((tmp_path / timeline.FILE).read_text())
    assert after["launch"] == "L1" and after["folders"] == {"host1": "host1"}
    assert [e["rank"] for e in after["events"] if e["source"] == "dmesg"] == [1]

    class Run:
        path = tmp_path

    html = _cluster_timeline(cast(RunView, Run()))  # the folder is all the timeline reads of the run
    assert "segfault at 0" in html and "RANK 1 SIG SIGSEGV" in html and "STARTED" not in html


def test_refresh_of_a_run_without_a_timeline_does_nothing(tmp_path):
    assert timeline.refresh(tmp_path) is None
    (tmp_path / timeline.FILE).write_text(json.dumps({"launch": "x"}))
    assert timeline.refresh(tmp_path) is None


def test_the_hosts_clock_is_read_in_the_same_script_as_dmesg_and_garbage_is_no_clock():
    script = logs_script(0.0, "/tmp/x", ())
    assert script.index("/proc/uptime") < script.index("dmesg 2>&1")
    assert parse_clock("@@clock 1796546520.9903038 12311.76\n@@dmesg\n[1.0] x\n") == {
        "now": 1796546520.9903038, "uptime": 12311.76}
    for bad in ("@@clock 17965 \n", "@@clock nan 3\n", "@@clock a b\n", "@@clock 1 -2\n", "no records\n"):
        assert parse_clock(bad) is None, bad


def test_an_oom_kill_only_the_kernel_shows_becomes_the_launch_records_cause_on_refresh(tmp_path):
    """The launch wrote its cause ("died of SIGKILL") before the hosts' dmesg came back: the refresh that
    places the kernel's OOM kill first puts it in the launch record, which the summary reads."""
    host = tmp_path / "host16"
    host.mkdir()
    boot = 1_796_500_000.0
    (host / "dmesg-clock.json").write_text(json.dumps({"now": boot + 12000.0, "uptime": 12000.0}))
    (host / "rank15.json").write_text(json.dumps({"rank": 15, "pid": 21182, "exit_code": None, "signal": "SIGKILL",
                                                  "start": boot + 11700.0, "end": boot + 11794.5}))
    record = tmp_path / "launch-L7.json"
    record.write_text(json.dumps({"launch_id": "L7", "cause": "rank 15 on host16: died of SIGKILL"}))
    timeline.write(tmp_path, timeline.build(tmp_path, {"host16": host}), "L7", {"host16": host})
    assert json.loads(record.read_text())["cause"] == "rank 15 on host16: died of SIGKILL"
    shutil.copy(KERNEL / "dmesg-oom.txt", host / "dmesg.txt")
    found = timeline.refresh(tmp_path)
    assert found is not None and found.root is not None and found.root.what == "oom kill"
    cause = json.loads(record.read_text())["cause"]
    assert cause.startswith(found.root.describe()) and "host16" in cause, cause
