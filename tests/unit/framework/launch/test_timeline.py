"""The cluster timeline (framework.launch.timeline): one clock, the earliest causal event, consequences aside."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from framework.launch import timeline
from framework.launch.timeline import CAUSE, CONSEQ
from framework.report.html import write_index

T0 = 1_800_000_000.0
#: host2's clock runs 30 s ahead of the controller's: its raw stamps look later than host1's consequences
OFFSETS = {"host1": 0.2, "host2": 30.0}


def _plog_stamp(epoch: float) -> str:
    micros = int(round(epoch * 1e6)) % 1_000_000
    return time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(epoch)) + f".{micros // 1000:03d}.{micros % 1000:03d}"


def _rank(folder: Path, rank: int, pid: int, end: float, log: str, *, code: int = 1, sig: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank{rank}.log").write_text(log)
    (folder / f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "pid": pid, "exit_code": None if sig else code, "signal": sig, "start": end - 5, "end": end}))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _run(root: Path, order: list[int], offsets: dict[str, float] | None = OFFSETS) -> dict[str, Path]:
    """Rank 3 (host2) faults at T0; ranks 0-2 report its absence after it. Files written in ``order``."""
    h1, h2 = root / "host1", root / "host2"
    gloo = ("Traceback (most recent call last):\n  File \"t.py\", line 9, in <module>\n"
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer\n")
    fault = ("Traceback (most recent call last):\n  File \"t.py\", line 7, in <module>\n"
             "RuntimeError: npuSynchronizeDevice:NPUFunctions.cpp:479 NPU function error: "
             "AclrtSynchronizeDeviceWithTimeout, error code is 507035\n")
    writers = [
        lambda: _rank(h1, 0, 100, T0 + 2 + 0.2, gloo),
        lambda: _rank(h1, 1, 101, T0 + 2.1 + 0.2, gloo),
        lambda: _rank(h2, 2, 200, T0 + 2.2 + 30, gloo),
        lambda: _rank(h2, 3, 201, T0 + 0.5 + 30, fault),
        lambda: _write(h2 / "ascend/debug/plog/plog-201_1.log",
            f"[ERROR] RUNTIME(201,python3):{_plog_stamp(T0 + 30)} [stream.cc:1245] 9 GetError:Stream "
            "Synchronize failed, retCode=507035, [vector core exception].\n"),
        lambda: _write(h1 / "ascend/debug/plog/plog-100_1.log",
            f"[ERROR] HCCL(100,python3):{_plog_stamp(T0 + 1 + 0.2)} [socket.cc:1] EI0006: remote rank did not "
            "send dst_rank[3]\n"),
    ]
    for i in order:
        writers[i]()
    if offsets is not None:
        (root / "preflight.json").write_text(json.dumps({"clock": {"offsets": offsets}}))
    (root / "phases.json").write_text(json.dumps([{"host": "host1", "phase": "run", "start": T0 - 5, "end": T0 + 3}]))
    return {"host1": h1, "host2": h2}


@pytest.mark.parametrize("seed", range(6))
def test_root_cause_is_rank3_whatever_the_file_order(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    order = list(range(6))
    rng.shuffle(order)
    folders = _run(tmp_path, order)
    items = list(folders.items())
    rng.shuffle(items)
    found = timeline.build(tmp_path, dict(items))
    root = found.root
    assert root is not None and (root.host, root.rank, root.what, root.source) == ("host2", 3, "device fault", "plog")
    assert root.t == pytest.approx(T0, abs=1e-3)  # on the controller's clock
    assert {e.rank for e in found.consequences} == {0, 1, 2}
    assert all(e.t > root.t for e in found.consequences)
    line = timeline.root_line(found)
    assert line is not None and line.startswith("rank 3 on host2: device fault: RUNTIME:")


def test_timeline_json_is_schema_versioned_and_names_root_and_consequences(tmp_path: Path) -> None:
    found = timeline.build(tmp_path, _run(tmp_path, list(range(6))))
    data = json.loads(timeline.write(tmp_path, found, "launch-9").read_text())
    assert data["launch"] == "launch-9"
    assert data["schema"] == timeline.SCHEMA and data["clock"]["offsets"] == OFFSETS
    assert data["root_cause"]["rank"] == 3 and data["t0"] == pytest.approx(T0, abs=1e-3)
    assert {e["source"] for e in data["events"]} == {"plog", "rank-exit", "phase"}
    assert [e["kind"] for e in data["consequences"]] == [CONSEQ] * 4
    assert data["events"] == sorted(data["events"], key=lambda e: e["t"])


def test_without_preflight_offsets_the_clocks_are_taken_as_is_and_it_says_so(tmp_path: Path) -> None:
    found = timeline.build(tmp_path, _run(tmp_path, list(range(6)), offsets=None))
    assert "offset taken as 0" in found.note
    root = found.root  # host2's raw stamps are 30 s late: rank 3's fault is no longer first among the causes
    assert root is not None and root.t == pytest.approx(T0 + 30, abs=1e-3)


def test_only_consequences_give_no_root_cause(tmp_path: Path) -> None:
    _rank(tmp_path / "h", 0, 1, T0, "Traceback (most recent call last):\n"
          "RuntimeError: EI0002: The wait execution of the Notify register times out\n")
    found = timeline.build(tmp_path, {"h": tmp_path / "h"})
    assert found.root is None and timeline.root_line(found) is None
    assert [e.kind for e in found.consequences] == [CONSEQ]


@pytest.mark.parametrize(("status", "dmesg", "what"), [
    ({"signal": "SIGSEGV"}, "", "crash"),
    ({"signal": "SIGKILL"}, "Out of memory: Killed process 42 (python3)", "oom kill"),
])
def test_a_crash_and_an_oom_kill_are_causes(status: dict[str, object], dmesg: str, what: str) -> None:
    event = timeline.exit_event({"rank": 1, "pid": 42, "end": T0, "exit_code": None, **status}, "h", None,
                                timeline.oom_pids(dmesg))
    assert event is not None and (event.kind, event.what) == (CAUSE, what)


def test_a_teardown_kill_is_no_cause() -> None:
    event = timeline.exit_event({"rank": 1, "pid": 42, "end": T0, "exit_code": None, "signal": "SIGKILL"}, "h", None,
                                set())
    assert event is not None and event.kind == "info"


def test_index_html_shows_the_cluster_timeline_with_its_root_cause(tmp_path: Path) -> None:
    timeline.write(tmp_path, timeline.build(tmp_path, _run(tmp_path, list(range(6)))))
    page = write_index(tmp_path).read_text()
    section = page[page.index("<section id='cluster-timeline'>"):]
    section = section[:section.index("</section>")]
    assert "<b>root cause</b>: rank 3 on host2, device fault: RUNTIME:" in section
    assert section.count("<tr") == 1 + 2 + 4  # header, rank 3 plog + exit, 4 consequences (the rest is info)
    assert "<tr class='root'><td>+0.000s</td><td>host2</td><td>3</td><td>plog</td>" in section


def test_an_abort_after_a_peers_absence_is_a_consequence() -> None:
    log = "Traceback (most recent call last):\nRuntimeError: EI0002: The wait execution of the Notify register\n"
    event = timeline.exit_event({"rank": 1, "pid": 42, "end": T0, "exit_code": None, "signal": "SIGABRT"}, "h", log,
                                set())
    assert event is not None and (event.kind, event.what) == (CONSEQ, "peer absence")


def test_a_watchdog_abort_whose_log_reports_a_peers_absence_is_a_consequence() -> None:
    log = ("EI0002: [PID: 7] The wait execution of the Notify register times out. remote rank: [3]\n"
           "terminate called after throwing an instance of 'std::runtime_error'\n")
    event = timeline.exit_event({"rank": 0, "pid": 7, "end": T0, "exit_code": None, "signal": "SIGABRT"}, "h", log,
                                set())
    assert event is not None and (event.kind, event.what) == (CONSEQ, "peer absence")
    assert event.text.startswith("died of SIGABRT: EI0002")


def test_an_exit_code_without_an_error_line_is_an_exit_not_a_cause() -> None:
    status = {"rank": 2, "end": T0, "exit_code": 3, "signal": None}
    event = timeline.exit_event(status, "h", "", set())
    assert event is not None
    assert (event.kind, event.what, event.text) == (timeline.INFO, "exit", "exited 3")


@pytest.mark.parametrize("clock", [{"now": 10.0}, {"now": True, "uptime": 1.0},
                                   {"now": 10.0, "uptime": -1.0}, {"now": "10", "uptime": 1.0}])
def test_a_dmesg_clock_without_two_non_negative_numbers_gives_no_boot_time(clock: dict) -> None:
    assert timeline.boot_time(clock) is None
    assert timeline.boot_time({"now": 10.5, "uptime": 0.5}) == 10.0


def test_received_lines_that_are_no_supervisor_event_are_skipped() -> None:
    lines = ["not json", json.dumps([1, 2]), json.dumps({"t": "5", "line": "DONE"}),
             json.dumps({"t": 5.0, "line": 7}), json.dumps({"t": 5.0, "line": "HB 3"}),
             json.dumps({"t": 5.0, "line": ""}), json.dumps({"t": 6.0, "line": "RANK x exit 0"})]
    events = timeline.supervisor_events("\n".join(lines), "h")
    assert [(e.t, e.rank, e.text) for e in events] == [(6.0, None, "RANK x exit 0")]


def test_phase_records_without_a_numeric_start_a_host_and_a_name_are_no_events() -> None:
    good: dict[str, object] = {"start": T0, "host": "h", "phase": "run"}
    bad: list[dict[str, object]] = [{"start": "x", "host": "h", "phase": "run"},
                                    {"start": T0, "host": 1, "phase": "run"},
                                    {"start": T0, "host": "h"}]
    assert [e.text for e in timeline.phase_events([*bad, good])] == ["run began"]
