"""framework.config.legacy: keys the URMA harness accepts and ignores load with a warning naming
each."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.config.effective import load
from framework.config.legacy import tolerate
from framework.errors import ConfigError

DATA = Path(__file__).resolve().parents[3] / "data" / "envs"


def _names(name: str) -> str | None:
    return {"node2.example": "192.0.2.12"}.get(name)


def test_harness_ignored_keys_are_dropped_with_warnings() -> None:
    data = {
        "host_info": {
            "h1": {
                "manage_nic": {"name": "e", "ip": "n.example"},
                "test_nic3": {},
                "test_nic12": {},
                "bmc": {"ip": "x"},
            }
        },
        "timeouts": 30,
        "defualts": {},
    }
    warned = tolerate(data, lambda name: "192.0.2.5")
    assert data == {
        "host_info": {
            "h1": {"manage_nic": {"name": "e", "ip": "192.0.2.5"}, "ssh_ip": "n.example"}
        },
        "defualts": {},
    }  # a near-miss of a camit key stays for the usual error
    assert [w.split(":")[0] for w in warned] == [
        "timeouts",
        "host_info.h1.test_nic3",
        "host_info.h1.test_nic12",
        "host_info.h1.bmc",
        "host_info.h1.manage_nic.ip",
    ]


def test_unresolvable_host_name_is_left_for_the_usual_error() -> None:
    data = {"host_info": {"h1": {"manage_nic": {"name": "e", "ip": "nowhere.example"}}}}
    assert tolerate(data, lambda name: None) == []
    assert data["host_info"]["h1"]["manage_nic"]["ip"] == "nowhere.example"


def test_file_loads_with_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("framework.config.legacy._resolve", _names)
    env = load(DATA / "good" / "harness_ignored_keys.yaml", environ={"HOME": "/home/ci"})
    assert (
        env.hosts["host2"].ssh_ip == "node2.example"
        and env.hosts["host2"].manage_nic.ip == "192.0.2.12"
    )
    assert env.hosts["host1"].bmc is None
    assert len(env.warnings) == 4 and all("harness_ignored_keys.yaml: " in w for w in env.warnings)


def test_a_key_camit_reads_stays_strict(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "host_info:\n  h1:\n    manage_nic: {name: e, ip: 192.0.2.1}\n    test_nic1: {ip: nope}\n"
    )
    with pytest.raises(ConfigError, match=r"host_info.h1.test_nic1.ip.*not an IPv4 address"):
        load(path, environ={})
