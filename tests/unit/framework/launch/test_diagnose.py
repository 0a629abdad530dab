"""framework.launch.diagnose: the host program signals only the launch's tagged ranks; its answer is data."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from framework.hosts import Cluster, Host
from framework.launch import diagnose, stacks
from framework.remote.protocol import RUN_TAG
from framework.testing import FakeTransport
from tests.support.builders import local_env

RANK = textwrap.dedent("""\
    import faulthandler, signal, sys, time
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    def waiting_for_peers():
        while True:
            time.sleep(0.05)
    print("ready", flush=True)
    waiting_for_peers()
""")


def start(tmp_path: Path, launch: str, rank: int, tag: str | None) -> subprocess.Popen[bytes]:
    run = tmp_path / "runs" / launch
    run.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != RUN_TAG}
    if tag is not None:
        env[RUN_TAG] = tag
    with open(run / f"rank{rank}.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-c", RANK], stdout=log, stderr=subprocess.STDOUT, env=env)
    (run / f"rank{rank}.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 30
    while "ready" not in (run / f"rank{rank}.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def test_only_the_launchs_tagged_ranks_are_asked_and_they_go_on(tmp_path):
    ours = [start(tmp_path, "run1-t1-ab", r, "run1-t1-ab.hostA") for r in (0, 1)]
    # a pid file in the launch's folder whose process is not the launch's (the pid was reused): never signalled
    stranger = start(tmp_path, "run1-t1-ab", 2, None)
    other = start(tmp_path, "run2-t1-cd", 0, "run2-t1-cd.hostA")  # another launch: not named
    try:
        out = subprocess.run([sys.executable, "-I", "-c", diagnose.HOST_PROGRAM, str(tmp_path / "runs"), "run1",
                              "hostA", "1", str(stacks.TAIL_BYTES), RUN_TAG, "5", "2"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        found = diagnose.parse(out)
        assert sorted(found) == ["run1-t1-ab"] and sorted(found["run1-t1-ab"]) == [0, 1]
        for log, spy in found["run1-t1-ab"].values():
            assert stacks.main_stack(log)[0].func == "waiting_for_peers"
            # py-spy (installed with camit's test extra) names the native frame and the Python one
            native = stacks.pyspy_main(spy)
            assert native and native[0].native and "waiting_for_peers" in [f.func for f in native], spy
        assert "most recent call first" not in (tmp_path / "runs" / "run1-t1-ab" / "rank2.log").read_text()
        assert all(p.poll() is None for p in [*ours, stranger, other])  # nobody stopped
    finally:
        for p in [*ours, stranger, other]:
            p.kill()
            p.wait()


@pytest.mark.parametrize("stdout", ["", "[]", '{"L": 1}', '{"L": {"logs": {"0": "%%%"}, "spy": {}}}',
                                    '{"L": {"logs": {}}}', "not json"])
def test_a_malformed_answer_is_refused(stdout):
    with pytest.raises(ValueError):
        diagnose.parse(stdout)


def test_the_answer_is_decoded_as_data():
    text = 'Current thread 0x1 (most recent call first):\n  File "/w/x.py", line 3 in f\n'
    import base64
    line = json.dumps({"L-1": {"asked": [0], "logs": {"0": base64.b64encode(text.encode()).decode(),
                                                      "../x": "AAAA"}, "spy": {}}})
    assert diagnose.parse("noise before\n" + line) == {"L-1": {0: (text, "")}}


def test_the_diagnosis_says_how_long_the_dump_of_its_ranks_took():
    group = stacks.StackGroup((stacks.Frame("t.py", 3, "sleep"),), [0, 1, 2], {0: "h1", 1: "h1", 2: "h2"})
    text = diagnose.Diagnosis("L1", [group], seconds=3.24).describe()
    assert text.splitlines()[-1] == "  3 rank(s) dumped in 3.2s", text
    assert "dumped" not in diagnose.Diagnosis("L1", [], {"h": "exit 1"}, seconds=1.0).describe()


SLOW_RANK = textwrap.dedent("""\
    import faulthandler, signal, sys, time
    def late_dump(signum, frame):  # a rank the signal reaches late (a loaded host): its dump comes 0.6 s on
        time.sleep(0.6)
        faulthandler.dump_traceback(all_threads=True)
    signal.signal(signal.SIGUSR1, late_dump)
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
""")

#: a py-spy that says whether the rank's log already held its faulthandler dump when it was started
SPY = """#!/bin/sh
if grep -q "most recent call first" "$CAMIT_TEST_LOG"; then echo "dump was there"; else echo "dump was not there"; fi
"""


def test_py_spy_attaches_only_after_the_rank_has_printed_its_dump(tmp_path):
    """py-spy stops the process by ptrace; a SIGUSR1 still pending then is at the tracer's mercy, and the two
    dumps would race for the same moment. The host program waits for each log's faulthandler dump (at most
    WAIT) before py-spy starts."""
    run = tmp_path / "runs" / "run1-t1-ab"
    run.mkdir(parents=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    (bindir / "py-spy").write_text(SPY)
    (bindir / "py-spy").chmod(0o755)
    env = {**os.environ, RUN_TAG: "run1-t1-ab.hostA", "CAMIT_TEST_LOG": str(run / "rank0.log")}
    with open(run / "rank0.log", "w") as log:
        rank = subprocess.Popen([sys.executable, "-c", SLOW_RANK], stdout=log, stderr=subprocess.STDOUT, env=env)
    (run / "rank0.pid").write_text(f"{rank.pid}\n")
    try:
        deadline = time.monotonic() + 30
        while "ready" not in (run / "rank0.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        out = subprocess.run([str(bindir / "python3"), "-I", "-c", diagnose.HOST_PROGRAM, str(tmp_path / "runs"),
                              "run1", "hostA", "2", str(stacks.TAIL_BYTES), RUN_TAG, "5", "2"],
                             capture_output=True, text=True, timeout=60, check=True, env=env).stdout
        rank_log, spy = diagnose.parse(out)["run1-t1-ab"][0]
        assert spy.strip() == "dump was there"
        assert stacks.main_stack(rank_log), rank_log
    finally:
        rank.kill()
        rank.wait()


def _answer(launch: str, rank: int, func: str) -> str:
    """One host's JSON line: ``rank`` of ``launch`` stopped in ``func`` (a faulthandler dump, no py-spy)."""
    dump = ("Current thread 0x00007f (most recent call first):\n"
            f'  File "t.py", line 3 in {func}\n  File "t.py", line 9 in <module>\n')
    logs = {str(rank): base64.b64encode(dump.encode()).decode()}
    return json.dumps({launch: {"logs": logs, "spy": {}}}) + "\n"


def test_every_hosts_ranks_are_grouped_per_launch_and_a_silent_host_is_named(tmp_path: Path) -> None:
    fakes = {"h1": FakeTransport("h1").on(re.compile(r"-I -c"), stdout=_answer("L7-a", 0, "spin")),
             "h2": FakeTransport("h2").on(re.compile(r"-I -c"), stdout=_answer("L7-a", 1, "spin")),
             "h3": FakeTransport("h3").on(re.compile(r"-I -c"), rc=1, stderr="boom")}
    env = local_env(tmp_path, ["h1", "h2", "h3"])
    cluster = Cluster([Host(h, fakes[h], spec=env.hosts[h], command_timeout=5) for h in fakes])
    (found,) = diagnose.diagnose(env, cluster, "L7", wait=0)
    assert found.launch_id == "L7-a" and found.ranks == 2 and set(found.problems) == {"h3"}
    assert [(g.ranks, g.hosts) for g in found.groups] == [([0, 1], {0: "h1", 1: "h2"})]


def test_no_running_launch_is_said_for_the_prefix_asked(tmp_path: Path) -> None:
    fake = FakeTransport("h1").on(re.compile(r"-I -c"), stdout="{}\n")
    env = local_env(tmp_path, ["h1"])
    (found,) = diagnose.diagnose(env, Cluster([Host("h1", fake, spec=env.hosts["h1"])]), "L9", wait=0)
    assert found.launch_id == "L9" and found.problems == {"*": "no running launch with that id on any host"}
