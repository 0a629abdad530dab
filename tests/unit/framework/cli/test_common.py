"""What every verb shares (framework.cli.common): the env and its cluster, the command after
``--``, and a per-host result as a table or ``--json``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from framework.cli.common import command_words, env_cluster, print_rows
from framework.errors import UsageError

ENV = ("defaults:\n  user: root\n  key_file: key\n  known_hosts: known_hosts\n"
       "host_info:\n  node1:\n    manage_nic: {name: eth0, ip: 192.0.2.11}\n"
       "  node2:\n    manage_nic: {name: eth0, ip: 192.0.2.12}\n")


@pytest.mark.parametrize(("cmd", "words"), [(["--", "uname", "-r"], ["uname", "-r"]),
                                            (["true"], ["true"]), (["--", "--"], ["--"])])
def test_the_command_after_the_double_dash(cmd: list[str], words: list[str]) -> None:
    assert command_words(argparse.Namespace(cmd=cmd), "no command") == words


@pytest.mark.parametrize("cmd", [[], ["--"]])
def test_no_command_is_a_usage_error_in_the_verbs_words(cmd: list[str]) -> None:
    with pytest.raises(UsageError, match="^camit exec: no command given$"):
        command_words(argparse.Namespace(cmd=cmd), "camit exec: no command given")


def test_json_prints_the_payload_and_no_table(capsys: pytest.CaptureFixture[str]) -> None:
    print_rows(argparse.Namespace(json=True), ["host", "rc"], [["h1", "0"]], [{"host": "h1"}])
    assert json.loads(capsys.readouterr().out) == [{"host": "h1"}]
    print_rows(argparse.Namespace(json=False), ["host", "rc"], [["h1", "0"]], [{"host": "h1"}])
    out = capsys.readouterr().out
    assert "h1" in out and "rc" in out and "{" not in out


def test_env_cluster_reads_the_env_file_and_keeps_only_the_hosts_asked(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("never read\n")
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "env.yaml").write_text(ENV)
    env, cluster = env_cluster(argparse.Namespace(env=str(tmp_path / "env.yaml"), hosts=None))
    assert list(env.hosts) == ["node1", "node2"] and list(cluster.hosts) == ["node1", "node2"]
    _, one = env_cluster(argparse.Namespace(env=str(tmp_path / "env.yaml"), hosts=" node2 ,"))
    assert list(one.hosts) == ["node2"]
