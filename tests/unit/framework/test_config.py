"""Tests for framework.config (effective, document, envfile): loading, inheritance, paths, ${VAR}, redaction,
schema, bad files."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import cast

import pytest
import yaml

from framework.config import (
    DEFAULT_ENV_PATH,
    SCHEMA_VERSION,
    HostSpec,
    NicSpec,
    Secret,
    load,
)
from framework.config import document as config_schema
from framework.config.document import main
from framework.config.yaml_text import parse_yaml
from framework.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "envs"
EXAMPLE = REPO / "env" / "test_env.example.yaml"
SCHEMA_FILE = REPO / "env" / "test_env.schema.json"
BAD = sorted((DATA / "bad").glob("*.yaml"))
ENVIRON = {"HOME": "/home/ci", "CAMIT_HOST1_PASSWD": "Ex-Pw-One-17", "CAMIT_HOST2_PASSWD": "Ex-Pw-Two-42"}
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f"
PASSWORD = "Zq9-distinctive-Pw-7731"


def write(tmp_path: Path, text: str, name: str = "test_env.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def two_hosts(host1_extra: str = "", tail: str = "") -> str:
    lines = "".join(f"    {line}\n" for line in host1_extra.strip("\n").splitlines())
    return (
        "host_info:\n"
        "  host1:\n"
        "    manage_nic: {name: eth0, ip: 192.0.2.11}\n"
        f"{lines}"
        "  host2:\n"
        "    manage_nic: {name: eth0, ip: 192.0.2.12}\n"
        f"{tail}"
    )


def config_error(path: Path, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(str(path), environ=ENVIRON if environ is None else environ)
    return info.value


# --------------------------------------------------------------------------- good files


def test_public_constants() -> None:
    assert DEFAULT_ENV_PATH == "/etc/ubus_ci/test_env.yaml"
    assert SCHEMA_VERSION == 1


def test_legacy_urma_file_loads_with_every_legacy_key() -> None:
    env = load(DATA / "good" / "legacy_urma.yaml", environ=ENVIRON)
    assert list(env.hosts) == ["host1", "host2"]
    h1, h2 = env.hosts["host1"], env.hosts["host2"]
    assert h1.user == "root"
    assert isinstance(h1.password, Secret) and h1.password.reveal() == "Legacy-Pw-1"
    assert h2.password == Secret("123456")  # YAML integer password keeps its text
    assert h1.manage_nic == NicSpec(name="enp1s0", ip="192.0.2.11", mac="52:54:00:12:34:56")  # unquoted MAC
    assert (h1.ssh_ip, h1.ssh_port, h1.address) == ("192.0.2.111", 2222, "192.0.2.111:2222")
    assert h1.test_nic1 is not None and h1.test_nic2 is not None
    assert (h1.test_nic1.name, h1.test_nic1.dev, h1.test_nic1.gid) == ("bonding_dev_0", "udma0", "3")
    assert (h1.test_nic1.ip, h1.test_nic1.ipv6) == ("198.51.100.11", "2001:db8::11")
    assert h1.test_nic1.eid == "4245:4944:0000:0000:0000:0000:0200:0000"
    assert h1.test_nic2.gid == "0"
    assert (h1.bmc, h1.env_type, h1.arch) == ("192.0.2.211", "physical", "aarch64")
    assert h1.isolcpu == "1-10,20,30"
    assert h1.isolcpu_list == (*range(1, 11), 20, 30)
    assert h1.test_ip == "198.51.100.11"
    # built-in defaults for everything the old format does not know
    assert (h2.ssh_ip, h2.ssh_port) == ("192.0.2.12", 22)
    assert h2.test_nic2 is None and h2.isolcpu is None and h2.isolcpu_list == ()
    h2_paths = (h2.workdir, h2.python, h2.venv, h2.install_path)
    assert h2_paths == ("/var/tmp/camit", "python3", True, "/var/tmp/camit/opp")
    assert (h2.npu.count, h2.npu.soc, h2.npu.visible) == (0, "cpu", None)
    assert (h2.key_file, h2.host_key, h2.host_key_policy) == (None, None, "strict")
    assert h2.known_hosts == Path("/home/ci/.ssh/known_hosts")
    assert (h2.connect_timeout, h2.command_timeout, env.max_parallel) == (10.0, 600.0, 32)
    assert env.cann is None
    assert (env.artifacts.run_package, env.artifacts.wheel, env.artifacts.install_path) == (None, None, None)
    assert (env.launch.backend, env.launch.master_port, env.launch.nproc_per_node, dict(env.launch.env)) == (
        "hccl",
        None,
        None,
        {},
    )
    assert env.relay is True


def test_urma_sample_shape_loads() -> None:
    env = load(DATA / "good" / "urma_sample_shape.yaml", environ={})
    assert [h.address for h in env.select(None)] == ["192.0.2.11:22", "192.0.2.12:22"]
    assert env.hosts["host2"].test_nic1 is not None
    assert env.hosts["host2"].test_nic1.eid == "4245:4944:0000:0000:0000:0000:0200:0001"
    assert env.hosts["host1"].password == Secret("xxx")


def test_example_file_loads() -> None:
    env = load(EXAMPLE, environ=ENVIRON)
    assert list(env.hosts) == ["host1", "host2"]
    for host in env.hosts.values():
        assert (host.npu.count, host.npu.soc) == (16, "ascend910_93")
        assert host.npu.visible == tuple(range(16))
        assert host.key_file == Path("/home/ci/.ssh/camit_ed25519")
    assert env.hosts["host1"].password == Secret("Ex-Pw-One-17")
    assert env.hosts["host2"].password == Secret("Ex-Pw-Two-42")
    assert env.hosts["host1"].host_key == ED25519
    assert env.launch.backend == "hccl" and env.launch.nproc_per_node == 16
    assert env.launch.env["HCCL_DETERMINISTIC"] == "false"
    assert env.cann is not None and env.cann.set_env == "/usr/local/Ascend/ascend-toolkit/set_env.sh"
    assert env.artifacts.run_package == str(EXAMPLE.parent / "output/cam/comm_operator/run/CAM_*.run")
    assert env.artifacts.wheel == str(EXAMPLE.parent / "output/cam/comm_operator/dist/umdk_cam_op_lib*.whl")


def test_defaults_are_inherited_key_by_key() -> None:
    path = DATA / "good" / "defaults_inheritance.yaml"
    env = load(path, environ=ENVIRON)
    n1, n2, n3 = env.select(["node1", "node2", "node3"])
    base = path.parent
    # node1 sets nothing: everything from defaults:
    assert n1.user == "ci"
    assert n1.key_file == base / "keys/id_ed25519"
    assert n1.host_key == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/"
    assert (n1.workdir, n1.install_path) == ("/opt/camit", "/opt/camit/opp")
    assert (n1.python, n1.venv) == ("python3.11", False)
    assert (n1.npu.count, n1.npu.soc, n1.npu.visible) == (8, "ascend910b", (0, 1, 2, 3))
    assert n1.known_hosts == base / "state/known_hosts"
    assert (n1.host_key_policy, n1.connect_timeout, n1.command_timeout) == ("accept-new", 2.5, 120.0)
    # node2 overrides single keys
    n2_login = (n2.user, n2.key_file, n2.workdir, n2.install_path)
    assert n2_login == ("admin", Path("/abs/node2_key"), "/data/camit", "/data/camit/opp")
    assert n2.venv is True and n2.python == "python3.11"
    assert (n2.npu.count, n2.npu.soc, n2.npu.visible) == (16, "ascend910_93", (8, 9))
    assert n2.address == "node2.lab.example:2202"
    # node3 overrides one npu sub-key only
    assert (n3.npu.count, n3.npu.soc, n3.npu.visible) == (8, "cpu", (0, 1, 2, 3))
    # effective defaults object and cluster settings
    assert env.defaults.user == "ci" and env.defaults.max_parallel == 4 and env.max_parallel == 4
    assert env.defaults.known_hosts == base / "state/known_hosts"
    assert env.artifacts.run_package == str(base.parent / "build/CAM_*.run")
    assert env.artifacts.wheel == "/home/ci/wheels/umdk_cam_op_lib*.whl"
    assert (env.launch.backend, env.launch.master_port, env.launch.nproc_per_node) == ("gloo", 29500, 2)
    assert dict(env.launch.env) == {
        "GLOO_SOCKET_IFNAME": "eth0",
        "HCCL_BUFFSIZE": "200",
        "HCCL_DETERMINISTIC": "true",
        "RATIO": "0.5",
    }
    assert env.relay is False


def test_artifacts_install_path_overrides_workdir_default(tmp_path: Path) -> None:
    env = load(write(tmp_path, two_hosts(tail="artifacts:\n  install_path: /opt/opp/\n")), environ={})
    assert [h.install_path for h in env.hosts.values()] == ["/opt/opp", "/opt/opp"]


def test_relative_paths_resolve_against_the_yaml_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = "defaults:\n  known_hosts: kh\nartifacts:\n  wheel: dist/*.whl\n"
    write(tmp_path / "conf", two_hosts("key_file: ../keys/id", extra))
    monkeypatch.chdir(tmp_path)
    env = load("conf/test_env.yaml", environ={})
    assert env.source == "conf/test_env.yaml"
    assert env.path == tmp_path / "conf" / "test_env.yaml" and env.path.is_absolute()
    assert env.hosts["host1"].key_file == tmp_path / "keys" / "id"
    assert env.hosts["host2"].key_file is None
    assert env.defaults.known_hosts == tmp_path / "conf" / "kh"
    assert env.artifacts.wheel == str(tmp_path / "conf" / "dist" / "*.whl")


def test_yaml_anchors_and_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    text = (
        "host_info:\n"
        "  host1: &h\n"
        "    user: ci\n"
        "    manage_nic: {name: eth0, ip: 192.0.2.11}\n"
        "  host2:\n"
        "    <<: *h\n"
        "    manage_nic: {name: eth0, ip: 192.0.2.12}\n"
    )
    env = load(write(tmp_path, text), environ={})
    assert [h.user for h in env.hosts.values()] == ["ci", "ci"]


def test_yaml_11_number_forms_stay_strings(tmp_path: Path) -> None:
    env = load(write(tmp_path, two_hosts("bmc: 0755\narch: 1:30\nenv_type: 2024-01-01")), environ={})
    h1 = env.hosts["host1"]
    assert (h1.bmc, h1.arch, h1.env_type) == ("0755", "1:30", "2024-01-01")


def test_host_spec_can_be_built_directly() -> None:
    host = HostSpec(name="n1", manage_nic=NicSpec(name="lo", ip="127.0.0.1"), workdir="/w", isolcpu="2-3")
    got = (host.ssh_ip, host.address, host.install_path, host.isolcpu_list)
    assert got == ("127.0.0.1", "127.0.0.1:22", "/w/opp", (2, 3))
    assert host.test_ip == "127.0.0.1"


def test_loaded_objects_are_frozen() -> None:
    env = load(DATA / "good" / "legacy_urma.yaml", environ={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(env.hosts["host1"], "user", "x")  # noqa: B010 - what the type forbids, refused at run time too
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(env, "relay", False)  # noqa: B010
    with pytest.raises(TypeError):
        cast(dict[str, HostSpec], env.hosts)["host3"] = env.hosts["host1"]


def test_default_path_is_used_when_none_given() -> None:
    if os.path.exists(DEFAULT_ENV_PATH):
        pytest.skip("a real /etc/ubus_ci/test_env.yaml exists here")
    with pytest.raises(ConfigError) as info:
        load()
    assert str(info.value) == f"{DEFAULT_ENV_PATH}: file not found"


# --------------------------------------------------------------------------- select


def test_select_keeps_the_requested_order_and_rejects_unknown_names() -> None:
    env = load(DATA / "good" / "defaults_inheritance.yaml", environ=ENVIRON)
    assert [h.name for h in env.select(None)] == ["node1", "node2", "node3"]
    assert [h.name for h in env.select(["node3", "node1", "node3"])] == ["node3", "node1"]
    with pytest.raises(ConfigError) as info:
        env.select(["node1", "nodeX"])
    assert info.value.key_path == "host_info"
    assert str(info.value).endswith("host_info: unknown host 'nodeX' (known: node1, node2, node3)")


# --------------------------------------------------------------------------- ${VAR}


def test_var_expansion_and_escape(tmp_path: Path) -> None:
    text = two_hosts(
        "ssh_ip: ${NODE}.${DOMAIN}\nssh_port: ${PORT}\nbmc: $${NOT_A_VAR}\nenv_type: cost $5 and $HOME\narch: a$$b",
        "cann:\n  set_env: ${ASCEND}/set_env.sh\n",
    )
    environ = {"NODE": "n1", "DOMAIN": "lab.example", "PORT": "2200", "ASCEND": "/opt/A"}
    env = load(write(tmp_path, text), environ=environ)
    h1 = env.hosts["host1"]
    assert (h1.ssh_ip, h1.ssh_port) == ("n1.lab.example", 2200)
    assert h1.bmc == "${NOT_A_VAR}"
    assert h1.env_type == "cost $5 and $HOME"  # only the ${VAR} form expands
    assert h1.arch == "a$$b"
    assert env.cann is not None and env.cann.set_env == "/opt/A/set_env.sh"


def test_var_expansion_reads_os_environ_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAMIT_TEST_PW", PASSWORD)
    env = load(write(tmp_path, two_hosts("passwd: ${CAMIT_TEST_PW}")))
    assert env.hosts["host1"].password == Secret(PASSWORD)


def test_missing_var_names_key_path_and_variable(tmp_path: Path) -> None:
    path = write(tmp_path, two_hosts(tail="launch:\n  env:\n    HCCL_IF_IP: ${MISSING_IP}\n"))
    err = config_error(path, environ={})
    assert err.key_path == "launch.env.HCCL_IF_IP"
    assert str(err) == f"{path}: launch.env.HCCL_IF_IP: environment variable 'MISSING_IP' is not set"


# --------------------------------------------------------------------------- secrets


def test_secret_hides_its_value() -> None:
    secret = Secret(PASSWORD)
    assert repr(secret) == str(secret) == f"{secret}" == format(secret, ">30") == "***"
    assert secret.reveal() == PASSWORD
    assert secret == Secret(PASSWORD) and secret != Secret("other") and secret != PASSWORD
    assert len({secret, Secret(PASSWORD)}) == 1


def test_launch_env_secrets_by_name_or_expansion(tmp_path: Path) -> None:
    env_block = (
        "launch:\n  env:\n"
        "    HCCL_BUFFSIZE: 200\n    api_token: t0k\n    DB_Password: pw\n    MY_SECRET: s\n"
        "    SSH_KEY_PATH: k\n    GIT_CREDENTIALS: c\n    FROM_ENV: ${SOME_VALUE}\n    LITERAL: $${X}\n"
    )
    env = load(write(tmp_path, two_hosts(tail=env_block)), environ={"SOME_VALUE": "v4lue-from-env"})
    values = env.launch.env
    assert values["HCCL_BUFFSIZE"] == "200" and values["LITERAL"] == "${X}"
    for name in ("api_token", "DB_Password", "MY_SECRET", "SSH_KEY_PATH", "GIT_CREDENTIALS", "FROM_ENV"):
        assert isinstance(values[name], Secret), name
    secret = values["FROM_ENV"]
    assert isinstance(secret, Secret) and secret.reveal() == "v4lue-from-env"
    redacted = env.redacted()["launch"]["env"]
    assert redacted["FROM_ENV"] == "***" and redacted["HCCL_BUFFSIZE"] == "200"
    assert "v4lue-from-env" not in repr(env.launch)


def test_password_never_appears_in_repr_summary_or_redacted(tmp_path: Path) -> None:
    env = load(write(tmp_path, two_hosts(f'passwd: "{PASSWORD}"')), environ={})
    host = env.hosts["host1"]
    assert host.password is not None and host.password.reveal() == PASSWORD
    for text in (repr(host), str(host), repr(env), repr(env.hosts), json.dumps(env.redacted()),
                 repr(env.summary_rows())):
        assert PASSWORD not in text
    assert env.redacted()["host_info"]["host1"]["passwd"] == "***"
    assert env.summary_rows()[0]["auth"] == "password ***"


@pytest.mark.parametrize(
    "host1_extra",
    [
        pytest.param(f'passwd: "{PASSWORD}"\nssh_port: 0', id="sibling-key"),
        pytest.param(f'passwd: "{PASSWORD}"\nmanage_nic_typo: 1', id="unknown-sibling"),
        pytest.param(f'passed: "{PASSWORD}"', id="passed-typo"),
        pytest.param(f"passwd: [{PASSWORD}]", id="passwd-wrong-type"),
        pytest.param(f'passwd: "{PASSWORD}\n', id="yaml-error-on-passwd-line"),
        pytest.param(f'passwd: "{PASSWORD}"\nuser: root\nuser: again', id="duplicate-key"),
        pytest.param(f'passwd: "{PASSWORD}"\nnpu: {{count: 2, visible: [5]}}', id="cross-check"),
    ],
)
def test_password_never_appears_in_errors(tmp_path: Path, host1_extra: str) -> None:
    err = config_error(write(tmp_path, two_hosts(host1_extra)), environ={})
    assert PASSWORD not in str(err) and PASSWORD not in repr(err)
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


def test_secret_from_env_never_appears_in_errors(tmp_path: Path) -> None:
    text = two_hosts(tail="launch:\n  env:\n    HCCL_TOKEN: ${TOK}\n    OTHER: ${TOK}\n  backend: mpi\n")
    err = config_error(write(tmp_path, text), environ={"TOK": PASSWORD})
    assert "launch.backend" in str(err) and PASSWORD not in str(err)


def test_secret_reused_in_a_plain_key_is_scrubbed_from_errors(tmp_path: Path) -> None:
    text = two_hosts("ssh_port: ${TOK}", "launch:\n  env:\n    HCCL_TOKEN: ${TOK}\n")
    err = config_error(write(tmp_path, text), environ={"TOK": PASSWORD})
    assert str(err).endswith("host_info.host1.ssh_port: expected an integer, got '***'")


def test_password_of_wrong_type_is_not_quoted(tmp_path: Path) -> None:
    err = config_error(write(tmp_path, two_hosts("passwd: 98765.4321")), environ={})
    assert str(err).endswith("host_info.host1.passwd: expected a string (quote the value), got a float (hidden)")


# --------------------------------------------------------------------------- summary and redacted


def test_summary_rows_describe_auth_host_key_and_npu(tmp_path: Path) -> None:
    text = (
        "host_info:\n"
        "  a:\n    manage_nic: {name: eth0, ip: 192.0.2.1}\n    key_file: /k/id\n"
        f"    host_key: {ED25519}\n    npu: {{count: 16, soc: ascend910_93}}\n"
        "  b:\n    manage_nic: {name: eth0, ip: 192.0.2.2}\n    passwd: pw\n    ssh_port: 2022\n"
        "  c:\n    manage_nic: {name: eth0, ip: 192.0.2.3}\n    user: ci\n    workdir: /w\n"
    )
    rows = load(write(tmp_path, text), environ={}).summary_rows()
    assert rows == [
        {"name": "a", "address": "192.0.2.1:22", "user": "root", "auth": "key /k/id", "host_key": "pinned",
         "workdir": "/var/tmp/camit", "npu": "16 x ascend910_93"},
        {"name": "b", "address": "192.0.2.2:2022", "user": "root", "auth": "password ***", "host_key": "known_hosts",
         "workdir": "/var/tmp/camit", "npu": "cpu"},
        {"name": "c", "address": "192.0.2.3:22", "user": "ci", "auth": "agent", "host_key": "known_hosts",
         "workdir": "/w", "npu": "cpu"},
    ]


@pytest.mark.parametrize("name", ["legacy_urma.yaml", "defaults_inheritance.yaml", "urma_sample_shape.yaml"])
def test_redacted_round_trips_through_schema_and_load(tmp_path: Path, name: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    env = load(DATA / "good" / name, environ=ENVIRON)
    doc = json.loads(json.dumps(env.redacted()))  # JSON-serialisable
    assert doc["schema_version"] == SCHEMA_VERSION
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    again = load(write(tmp_path, yaml.safe_dump(doc, sort_keys=False)), environ=ENVIRON)
    assert again.summary_rows() == env.summary_rows()
    for host, copy in zip(env.hosts.values(), again.hosts.values(), strict=True):
        assert dataclasses.replace(copy, password=host.password) == host


# --------------------------------------------------------------------------- schema


def test_committed_schema_is_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    generated = capsys.readouterr().out
    assert generated == config_schema.schema_json()
    assert SCHEMA_FILE.read_text() == generated, "run: python -m framework.config schema > env/test_env.schema.json"


def test_example_validates_against_schema_and_schema_rejects_unknown_keys() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    example = yaml.safe_load(EXAMPLE.read_text())
    assert list(validator.iter_errors(example)) == []
    # our loader, not yaml.safe_load: YAML 1.1 reads the unquoted MAC in this file as an integer
    text = (DATA / "good" / "legacy_urma.yaml").read_text()
    legacy = parse_yaml(text, lambda key_path, problem: ConfigError("legacy", key_path, problem))
    assert list(validator.iter_errors(legacy)) == []
    typos = ((example, "lanuch"), (example["host_info"]["host1"], "passed"), (example["defaults"]["npu"], "cnt"))
    for where, key in typos:
        where[key] = 1
        assert not validator.is_valid(example)
        del where[key]
    example["host_info"]["bad name"] = example["host_info"]["host2"]
    assert not validator.is_valid(example)


# --------------------------------------------------------------------------- errors


def test_several_problems_are_listed_one_per_line(tmp_path: Path) -> None:
    path = write(tmp_path, two_hosts("ssh_port: 0\nworkdir: rel", "launch:\n  backend: mpi\n"))
    err = config_error(path)
    lines = str(err).splitlines()
    assert err.key_path == "host_info.host1.ssh_port"
    assert lines == [
        f"{path}: host_info.host1.ssh_port: must be >= 1, got 0",
        f"{path}: host_info.host1.workdir: 'rel' is not an absolute path on the host",
        f"{path}: launch.backend: 'mpi' is not allowed (expected 'hccl', 'nccl' or 'gloo')",
    ]


def test_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert str(config_error(missing)) == f"{missing}: file not found"
    assert str(config_error(tmp_path)) == f"{tmp_path}: is a directory, not a file"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"host_info:\n  \xff\xfe: 1\n")
    assert str(config_error(binary)) == f"{binary}: not UTF-8 text (bad byte at offset 13)"
    if os.geteuid() != 0:
        locked = write(tmp_path, "host_info: {}\n", "locked.yaml")
        locked.chmod(0)
        assert str(config_error(locked)) == f"{locked}: permission denied"


def test_error_carries_file_and_key_path(tmp_path: Path) -> None:
    path = write(tmp_path, two_hosts("manage_nic_x: 1").replace("192.0.2.12", "10.0.0.300"))
    err = config_error(path)
    assert err.file == str(path) and err.key_path == "host_info.host1"
    path = write(tmp_path, two_hosts().replace("192.0.2.12", "10.0.0.300"))
    err = config_error(path)
    assert (err.key_path, err.problem) == ("host_info.host2.manage_nic.ip", "'10.0.0.300' is not an IPv4 address")
    assert str(err) == f"{path}: host_info.host2.manage_nic.ip: '10.0.0.300' is not an IPv4 address"


def test_bad_corpus_covers_at_least_30_files() -> None:
    assert len(BAD) >= 30


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_env_file(path: Path) -> None:
    first = path.read_text().partition("\n")[0]
    assert first.startswith("# expect: "), "first line must be '# expect: <substring>'"
    expect = first.removeprefix("# expect: ")
    err = config_error(path, environ={"HOME": "/home/ci"})
    text = str(err)
    assert expect in text
    assert path.name in text and err.file == str(path)
    assert all(line.startswith(f"{path}: ") for line in text.splitlines()), "every line names the file"
    for noise in ("Traceback", "For further information visit", "Input should be", "pydantic", "validation error"):
        assert noise not in text
    assert err.__cause__ is None


# --------------------------------------------------------------------------- which env file


@pytest.mark.parametrize(("explicit", "environ", "ini", "default", "expect"), [
    ("/opt.yaml", {"CAMIT_ENV": "/var.yaml"}, "/ini.yaml", DEFAULT_ENV_PATH, ("/opt.yaml", "option")),
    (None, {"CAMIT_ENV": "/var.yaml"}, "/ini.yaml", DEFAULT_ENV_PATH, ("/var.yaml", "CAMIT_ENV")),
    (None, {}, "/ini.yaml", DEFAULT_ENV_PATH, ("/ini.yaml", "camit_env")),
    (None, {"CAMIT_ENV": ""}, "", DEFAULT_ENV_PATH, (DEFAULT_ENV_PATH, "default")),  # empty counts as unset
    (None, {}, None, None, (None, None)),  # the plugin and the preflight suite: no env, stay inert
    (Path("/p.yaml"), {}, None, None, ("/p.yaml", "option")),
])
def test_env_file_precedence_option_then_variable_then_ini_then_default(explicit, environ, ini, default,
                                                                        expect) -> None:
    from framework.config import resolve_env_path

    assert resolve_env_path(explicit, environ, ini, default=default) == expect


def test_env_file_rule_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from framework.config import resolve_env_path

    monkeypatch.setenv("CAMIT_ENV", "/from/env.yaml")
    assert resolve_env_path() == ("/from/env.yaml", "CAMIT_ENV")
    monkeypatch.delenv("CAMIT_ENV")
    assert resolve_env_path() == (DEFAULT_ENV_PATH, "default")


def test_package_exports_the_public_api() -> None:
    import framework.config as config
    from framework.config import effective

    for name in config.__all__:
        assert getattr(config, name) is not None
    assert config.load is effective.load and config.EnvConfig is effective.EnvConfig
