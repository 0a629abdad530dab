"""``camit lease status`` and ``release`` (framework.cli.lease): a row and a JSON record per host,
on hosts that are this machine (LocalTransport)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from framework.cli import lease as cli_lease
from framework.config.effective import HostSpec, NicSpec
from framework.errors import EXIT_FAILED, EXIT_OK
from framework.hosts import Cluster, Host
from framework.lease import LEASE_FILE, Lease
from framework.transport.local import LocalTransport


def _hosts(tmp_path: Path) -> list[Host]:
    out = []
    for i in (1, 2):
        spec = HostSpec(name=f"h{i}", manage_nic=NicSpec("eth0", f"10.0.0.{i}"),
                        workdir=str(tmp_path / f"h{i}"))
        out.append(Host(spec.name, LocalTransport(spec.name), spec=spec, command_timeout=30))
    return out


def test_status_says_who_holds_each_host_and_json_has_the_record(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hs = _hosts(tmp_path)
    Lease(Cluster(hs[:1]), owner="someone-else", interval=0).acquire()
    (tmp_path / "h2").mkdir(exist_ok=True)
    (tmp_path / "h2" / LEASE_FILE).write_text("not json")
    assert cli_lease._status(argparse.Namespace(json=True), Cluster(hs)) == EXIT_OK
    doc = {d["host"]: d for d in json.loads(capsys.readouterr().out)}
    assert doc["h1"]["state"] == "held" and doc["h1"]["lease"]["owner"] == "someone-else"
    assert doc["h2"]["lease"] is None
    assert cli_lease._status(argparse.Namespace(json=False), Cluster(hs)) == EXIT_OK
    out = capsys.readouterr().out
    assert "someone-else" in out and "unreadable lease file" in out


def test_release_leaves_anothers_lease_and_says_so(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    hs = _hosts(tmp_path)
    Lease(Cluster(hs[:1]), owner="someone-else", interval=0).acquire()
    args = argparse.Namespace(json=True, token=None, force=False)
    assert cli_lease._release(args, Cluster(hs)) == EXIT_FAILED
    doc = {d["host"]: d["result"] for d in json.loads(capsys.readouterr().out)}
    assert doc["h1"].startswith("held by someone-else") and doc["h2"] == "free"
