"""framework.config.document: the value parsers and messages the env file's validation uses."""

from __future__ import annotations

import base64
import struct

import pytest
from pydantic_core import PydanticCustomError

from framework.config.document import (
    MAX_CPU,
    CpuOutOfRange,
    _host_key,
    parse_cpu_list,
    parse_jump,
    unknown_key_message,
)


@pytest.mark.parametrize(("key", "message"), [
    ("password", "unknown key 'password' (did you mean 'passwd'?)"),  # a known typo
    ("user_nam", "unknown key 'user_nam' (did you mean 'user_name'?)"),  # the closest key
    ("zzz", "unknown key 'zzz' (allowed: passwd, user_name)"),
    (3, "unknown key 3 (allowed: passwd, user_name)"),
])
def test_unknown_key_message_guesses_the_key_meant(key: object, message: str) -> None:
    assert unknown_key_message(key, ["passwd", "user_name"]) == message


def test_a_known_typo_is_fixed_only_to_a_key_the_section_has() -> None:
    message = unknown_key_message("password", ["user_name"])
    assert message == "unknown key 'password' (allowed: user_name)"


@pytest.mark.parametrize(("value", "parsed"), [
    ("bastion", (None, "bastion", None)),
    ("ci@10.0.0.1", ("ci", "10.0.0.1", None)),
    ("ci@bastion:2222", ("ci", "bastion", 2222)),
    ("bastion:65535", (None, "bastion", 65535)),
])
def test_parse_jump(value: str, parsed: tuple[str | None, str, int | None]) -> None:
    assert parse_jump(value) == parsed


def test_parse_jump_refuses_a_port_out_of_range() -> None:
    with pytest.raises(ValueError, match="has port 65536, which is not between 1 and 65535"):
        parse_jump("bastion:65536")


def test_cpu_list_numbers_above_the_maximum_are_refused_before_any_range_is_built() -> None:
    assert parse_cpu_list(f"0-2,{MAX_CPU}") == (0, 1, 2, MAX_CPU)
    for text in (f"0-{MAX_CPU + 1}", f"{MAX_CPU + 1}", "1-" + "9" * 40):
        with pytest.raises(CpuOutOfRange):
            parse_cpu_list(text)
    with pytest.raises(ValueError, match="^3-1$"):
        parse_cpu_list("3-1")


def _blob(kind: bytes, data: bytes = b"\0" * 32) -> str:
    return base64.b64encode(struct.pack(">I", len(kind)) + kind + data).decode()


def test_host_key_data_must_hold_the_declared_type() -> None:
    key = f"ssh-ed25519 {_blob(b'ssh-ed25519')}"
    assert _host_key(f"{key} me@host") == key
    with pytest.raises(PydanticCustomError) as held:
        _host_key(f"ssh-ed25519 {_blob(b'ssh-rsa')}")
    assert held.value.message() == "the key data does not match 'ssh-ed25519': it holds 'ssh-rsa'"
    with pytest.raises(PydanticCustomError) as unprintable:
        _host_key(f"ssh-ed25519 {_blob(bytes([7]))}")
    assert unprintable.value.message().endswith("it holds no key type")
