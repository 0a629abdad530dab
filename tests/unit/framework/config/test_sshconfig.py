"""ssh_config and jump hosts in the env loader: which file, what wins, what is refused (fake files, no network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework.config.effective import JumpSpec, load
from framework.errors import ConfigError

REPO = Path(__file__).resolve().parents[4]
SCHEMA_FILE = REPO / "env" / "test_env.schema.json"

HOSTS = (
    "host_info:\n"
    "  host1:\n"
    "    manage_nic: {name: eth0, ip: 192.0.2.11}\n"
    "    ssh_ip: node1\n"
    "  host2:\n"
    "    manage_nic: {name: eth0, ip: 192.0.2.12}\n"
)
SSH_CONFIG = (
    "Host node1\n"
    "  HostName 10.1.0.11\n"
    "  User ci\n"
    "  Port 2222\n"
    "  IdentityFile /keys/node1\n"
    "  ProxyJump bastion\n"
    "Host bastion\n"
    "  HostName 198.51.100.7\n"
    "  User jumper\n"
    "  Port 2200\n"
    "  IdentityFile /keys/bastion\n"
)


def env_file(tmp_path: Path, defaults: str = "", hosts: str = HOSTS, ssh_config: str | None = SSH_CONFIG) -> Path:
    if ssh_config is not None:
        (tmp_path / "ssh_config").write_text(ssh_config)
    body = ("defaults:\n" + "".join(f"  {line}\n" for line in defaults.splitlines())) if defaults else ""
    path = tmp_path / "test_env.yaml"
    path.write_text(body + hosts)
    return path


def error(path: Path, environ: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(path, environ=environ)
    return info.value


def test_ssh_config_fills_what_the_env_file_leaves_unset(tmp_path: Path) -> None:
    env = load(env_file(tmp_path, "ssh_config: ssh_config"), environ={"HOME": str(tmp_path)})
    h1, h2 = env.hosts["host1"], env.hosts["host2"]
    assert (h1.ssh_ip, h1.ssh_port, h1.user, h1.key_file) == ("10.1.0.11", 2222, "ci", Path("/keys/node1"))
    assert h1.jump == JumpSpec(address="198.51.100.7", port=2200, user="jumper", key_file=Path("/keys/bastion"),
                               origin=f"ProxyJump of Host node1 in ssh_config {tmp_path / 'ssh_config'}")
    assert (h2.ssh_ip, h2.ssh_port, h2.user, h2.key_file, h2.jump) == ("192.0.2.12", 22, "root", None, None)
    assert env.defaults.ssh_config == tmp_path / "ssh_config"
    assert env.summary_rows()[0]["address"] == "10.1.0.11:2222 via jumper@198.51.100.7:2200"


def test_explicit_env_values_win_over_ssh_config(tmp_path: Path) -> None:
    hosts = HOSTS.replace("    ssh_ip: node1\n", "    ssh_ip: node1\n    ssh_port: 22\n    user: admin\n"
                                                  "    key_file: /keys/mine\n    jump_host: none\n")
    h1 = load(env_file(tmp_path, "ssh_config: ssh_config", hosts), environ={"HOME": str(tmp_path)}).hosts["host1"]
    assert (h1.ssh_ip, h1.ssh_port, h1.user, h1.key_file, h1.jump) == ("10.1.0.11", 22, "admin", Path("/keys/mine"),
                                                                       None)
    # defaults: wins over ssh_config too, and defaults.jump_host over its ProxyJump
    h1 = load(env_file(tmp_path, "ssh_config: ssh_config\nuser: ops\nkey_file: /keys/all\njump_host: j.lab:2022"),
              environ={"HOME": str(tmp_path)}).hosts["host1"]
    assert (h1.user, h1.key_file) == ("ops", Path("/keys/all"))
    assert h1.jump == JumpSpec(address="j.lab", port=2022, user="ops", key_file=Path("/keys/all"),
                               origin="defaults.jump_host")


def test_which_file_default_env_variable_none(tmp_path: Path) -> None:
    path = env_file(tmp_path, ssh_config=None)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    assert load(path, environ={"HOME": str(home)}).hosts["host1"].ssh_ip == "node1"  # no ~/.ssh/config: none read
    (home / ".ssh" / "config").write_text(SSH_CONFIG)
    assert load(path, environ={"HOME": str(home)}).hosts["host1"].ssh_ip == "10.1.0.11"  # ~/.ssh/config
    other = tmp_path / "other_config"
    other.write_text("Host node1\n  HostName 10.2.0.1\n")
    assert load(path, environ={"HOME": str(home), "CAMIT_SSH_CONFIG": str(other)}).hosts["host1"].ssh_ip == "10.2.0.1"
    assert load(path, environ={"HOME": str(home), "CAMIT_SSH_CONFIG": "none"}).hosts["host1"].ssh_ip == "node1"
    # defaults.ssh_config wins over the variable
    path = env_file(tmp_path, "ssh_config: none", ssh_config=None)
    assert load(path, environ={"HOME": str(home), "CAMIT_SSH_CONFIG": str(other)}).hosts["host1"].ssh_ip == "node1"


def test_named_ssh_config_must_exist(tmp_path: Path) -> None:
    err = error(env_file(tmp_path, "ssh_config: missing_config"), {"HOME": str(tmp_path)})
    assert err.key_path == "defaults.ssh_config"
    assert f"ssh_config {tmp_path / 'missing_config'} does not exist" in str(err)
    err = error(env_file(tmp_path, ssh_config=None), {"HOME": str(tmp_path), "CAMIT_SSH_CONFIG": "/no/such/cfg"})
    assert "ssh_config /no/such/cfg (from $CAMIT_SSH_CONFIG) does not exist" in str(err)


@pytest.mark.parametrize(("text", "problem"), [
    ("Host node1\n  Port\n", "is not valid: Unparsable line Port"),
    ("Host node1\n  Port twenty\n", "(Host node1): Port 'twenty' is not a port number"),
    ("Host node1\n  ProxyCommand nc %h %p\n", "(Host node1): ProxyCommand is not supported"),
    ("Host node1\n  ProxyJump a,b\n", "(Host node1): ProxyJump 'a,b' has several hops"),
    ("Host node1\n  HostName bad_name!\n", "(Host node1): HostName 'bad_name!' is not an IPv4 address or host name"),
    ("Host node1\n  ProxyJump a@b@c\n", "ProxyJump of Host node1 in ssh_config"),
    ("Host node1\n  ProxyJump j1\nHost j1\n  ProxyJump j2\n", "has its own ProxyJump 'j2'"),
])
def test_bad_ssh_config_is_one_error_naming_the_file(tmp_path: Path, text: str, problem: str) -> None:
    err = error(env_file(tmp_path, "ssh_config: ssh_config", ssh_config=text), {"HOME": str(tmp_path)})
    assert str(tmp_path / "ssh_config") in str(err)
    assert problem in str(err)
    assert "\n" not in str(err)


@pytest.mark.parametrize(("where", "value", "problem"), [
    ("defaults", "a@b@c", "defaults.jump_host: 'a@b@c' is not a jump host like"),
    ("defaults", "bastion:0", "defaults.jump_host: 'bastion:0' has port 0, which is not between 1 and 65535"),
    ("host", "ci@bad_host", "host_info.host2.jump_host: 'ci@bad_host' is not a jump host like"),
    ("host", "ci@10.0.0.300:22", "host_info.host2.jump_host: 'ci@10.0.0.300:22' names '10.0.0.300', which is not"),
    ("host", "bastion:99999", "host_info.host2.jump_host: 'bastion:99999' has port 99999"),
])
def test_jump_host_is_validated_at_load_naming_the_key(tmp_path: Path, where: str, value: str, problem: str) -> None:
    if where == "defaults":
        path = env_file(tmp_path, f"jump_host: '{value}'", ssh_config=None)
    else:
        path = env_file(tmp_path, hosts=HOSTS + f"    jump_host: '{value}'\n", ssh_config=None)
    err = error(path, {"HOME": str(tmp_path)})
    assert problem in str(err)


def test_jump_host_forms_and_precedence(tmp_path: Path) -> None:
    hosts = HOSTS.replace("    ssh_ip: node1\n", "    jump_host: 10.9.0.1\n") + "    jump_host: none\n" \
        + "  host3:\n    manage_nic: {name: eth0, ip: 192.0.2.13}\n    user: u3\n"
    env = load(env_file(tmp_path, "jump_host: ci@bastion.example:2201\nkey_file: /k", hosts, ssh_config=None),
               environ={"HOME": str(tmp_path)})
    assert env.hosts["host1"].jump == JumpSpec(address="10.9.0.1", port=22, user="root", key_file=Path("/k"),
                                               origin="host_info.host1.jump_host")
    assert env.hosts["host2"].jump is None
    assert env.hosts["host3"].jump == JumpSpec(address="bastion.example", port=2201, user="ci", key_file=Path("/k"),
                                               origin="defaults.jump_host")


def test_same_address_behind_different_jumps_is_two_hosts(tmp_path: Path) -> None:
    hosts = ("host_info:\n"
             "  a:\n    manage_nic: {name: eth0, ip: 10.0.0.11}\n    jump_host: j1\n"
             "  b:\n    manage_nic: {name: eth0, ip: 10.0.0.11}\n    jump_host: j2\n")
    env = load(env_file(tmp_path, hosts=hosts, ssh_config=None), environ={"HOME": str(tmp_path)})
    assert [h.route for h in env.hosts.values()] == ["10.0.0.11:22 via root@j1:22", "10.0.0.11:22 via root@j2:22"]
    err = error(env_file(tmp_path, hosts=hosts.replace("j2", "j1"), ssh_config=None), {"HOME": str(tmp_path)})
    assert "have the same SSH address 10.0.0.11:22 via root@j1:22" in str(err)


def test_redacted_with_jump_validates_against_the_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    env = load(env_file(tmp_path, "ssh_config: ssh_config"), environ={"HOME": str(tmp_path)})
    doc = env.redacted()
    assert doc["host_info"]["host1"]["jump_host"] == "jumper@198.51.100.7:2200"
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    again = tmp_path / "again"
    again.mkdir()
    (again / "test_env.yaml").write_text(json.dumps(doc))
    jump = load(again / "test_env.yaml", environ={"HOME": str(again)}).hosts["host1"].jump
    assert jump is not None and jump.display == "jumper@198.51.100.7:2200"  # (its key file is not in the document)


def test_include_is_warned_about(tmp_path: Path) -> None:
    env = load(env_file(tmp_path, "ssh_config: ssh_config", ssh_config="Include other\n" + SSH_CONFIG),
               environ={"HOME": str(tmp_path)})
    assert any("Include is not followed" in w for w in env.warnings)


@pytest.mark.parametrize("line", ['Match exec "touch {marker}"', "match host node1 !EXEC 'touch {marker}'",
                                  "Match=exec 'touch {marker}'"])
def test_match_exec_is_refused_naming_file_and_line_and_never_runs(tmp_path: Path, line: str) -> None:
    """Security review 3, #9 as the review ran it: ``camit env validate`` of an env file whose ssh_config has
    ``Match exec`` once ran the command on the controller (paramiko, with invoke importable). Now: exit 2, one
    line naming the file and line, nothing run."""
    marker = tmp_path / "RAN"
    config = "Host node1\n  User ci\n" + line.format(marker=marker) + "\n  User x\n"
    path = env_file(tmp_path, "ssh_config: ssh_config", ssh_config=config)
    proc = subprocess.run([sys.executable, "-m", "framework.cli", "env", "validate", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(tmp_path)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert f"ssh_config {tmp_path / 'ssh_config'}:3: 'Match exec' runs a command" in proc.stderr + proc.stdout
    assert not marker.exists()
