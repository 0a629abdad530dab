"""tests/support/builders.py gives the objects a real test_env.yaml gives, and refuses what the schema refuses."""

from __future__ import annotations

import pytest

from framework.config.effective import EnvConfig, HostSpec, NpuSpec
from framework.errors import ConfigError
from tests.support.builders import env_document, make_env, make_host_spec


def test_make_env_loads_a_real_env_with_distinct_addresses_and_defaults():
    env = make_env(["host1", "host2"], npu={"count": 2, "soc": "ascend910_93"}, launch={"env": {"MY_TOKEN": "t"}})
    assert isinstance(env, EnvConfig) and list(env.hosts) == ["host1", "host2"]
    assert [h.ssh_ip for h in env.hosts.values()] == ["10.0.0.1", "10.0.0.2"]
    assert env.hosts["host2"].npu == NpuSpec(2, "ascend910_93")
    assert env.hosts["host1"].install_path == "/var/tmp/camit/opp"
    assert "t" not in repr(env.launch.env) and env.select(["host2"]) == [env.hosts["host2"]]  # a Secret, as loaded


def test_host_keys_go_through_the_schema_and_effective_only_fields_are_set_after():
    spec = make_host_spec("h1", workdir="/w/", install_path="/elsewhere")
    assert isinstance(spec, HostSpec) and (spec.workdir, spec.install_path) == ("/w", "/elsewhere")
    with pytest.raises(ConfigError, match="host_info.h1: unknown key 'wrkdir'"):
        make_host_spec("h1", wrkdir="/w")


def test_source_names_the_file_in_errors_and_the_document_is_plain_data():
    assert make_env(source="lab.yaml").source == "lab.yaml"
    assert env_document({"a": {"user": "u"}}, relay=False) == {
        "host_info": {"a": {"user": "u", "manage_nic": {"name": "eth0", "ip": "10.0.0.1"}}}, "relay": False}
