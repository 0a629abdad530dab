"""Phase events into ``phases.json``: a whole cluster's at once (issue 18: one rewrite of the growing file per host
made recording N hosts' phases O(N²): 0.22 s of CPU for a 128-host deploy's 256 entries, 2.2 s for 1024)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from framework import deploy
from framework.hosts import Cluster, Host
from framework.phases import PhaseEvent, emit, rundir_sink
from framework.records import folder
from framework.records.folder import RunDir
from framework.testing.fake import FakeTransport
from tests.support.builders import make_env

T0 = 1_700_000_000.0


@pytest.fixture
def phase_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many entries each write of a ``phases.json`` held, in order."""
    writes: list[int] = []
    real = folder.write_atomic

    def counting(path: Path, data: bytes | str) -> Path:
        if path.name == "phases.json":
            writes.append(len(json.loads(data)))
        return real(path, data)

    monkeypatch.setattr(folder, "write_atomic", counting)
    return writes


def test_a_128_host_deploy_writes_phases_json_once(tmp_path: Path, phase_writes: list[int]) -> None:
    """Deployer.run on 128 fake hosts (every probe answers rc 1, so each host fails there): both phases of every
    host are recorded, in one write of phases.json rather than 256 rewrites of a growing file."""
    run = tmp_path / "CAM_cpu_debian_x86_64.run"
    run.write_bytes(b"#!/bin/sh\n")
    names = [f"host{i}" for i in range(1, 129)]
    env = make_env(names, artifacts={"run_package": str(run)}, relay=False)
    hosts = [Host(n, FakeTransport(n).on(re.compile(".*"), rc=1, stderr="no"), spec=env.hosts[n]) for n in names]
    rundir = RunDir.create(tmp_path / "reports")
    with Cluster(hosts) as cluster:
        result = deploy.Deployer(env, cluster, rundir=rundir, on_event=lambda h, m: None).run()
    assert sorted(result.errors) == sorted(names)
    assert phase_writes == [256]
    phases = json.loads((rundir.path / "phases.json").read_text())
    assert [(p["host"], p["phase"]) for p in phases] == [(n, ph) for n in names for ph in ("connect", "deploy")]


def test_batches_add_to_what_is_there_in_order(tmp_path: Path, phase_writes: list[int]) -> None:
    sink = rundir_sink(RunDir(tmp_path, "r"))
    sink(PhaseEvent("node0", "launch", T0, T0 + 1))
    emit(sink, [PhaseEvent(f"node{i}", "run", T0 + 1, T0 + 2) for i in range(3)])
    emit(sink, [PhaseEvent("node1", "teardown", T0 + 5, T0 + 4)])  # clock trouble: zero length, as one by one
    emit(sink, [])  # nothing: no write
    assert phase_writes == [1, 4, 5]
    phases = json.loads((tmp_path / "phases.json").read_text())
    assert [(p["host"], p["phase"]) for p in phases] == [
        ("node0", "launch"), ("node0", "run"), ("node1", "run"), ("node2", "run"), ("node1", "teardown")]
    assert phases[-1] == {"host": "node1", "phase": "teardown", "start": T0 + 5, "end": T0 + 5}


def test_a_plain_callable_sink_still_gets_every_event_one_by_one() -> None:
    got: list[Any] = []
    events = [PhaseEvent(f"node{i}", "collect", T0, T0 + 1) for i in range(4)]
    emit(got.append, iter(events))
    assert got == events
