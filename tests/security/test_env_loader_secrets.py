"""A password that YAML reads as syntax never reaches the terminal (issue 17, item 3, the loader part).

An unquoted password that starts with ``*``, ``!`` or ``&`` is an alias, a tag or an anchor to YAML:
PyYAML's own messages quote it (``found undefined alias 's3cret...'``, ``could not determine a
constructor for the tag '!s3cret...'``, ``found undefined tag handle '!s3cret!'``), and ``passwd: &x``
silently meant "no password". Through the real ``camit env validate``: exit 2, one line naming the file
and the key, and the password nowhere in the output.

Needs no lab.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security._env_terminal import run_cli

SECRET = "s3cretPw9"
HOST = "host_info:\n  host1:\n    manage_nic: {name: eth0, ip: 192.0.2.11}\n"

#: name -> (lines under host1 or a top-level tail, the key path the error must name or None)
CASES: dict[str, tuple[str, str | None]] = {
    "undefined_alias": (f"    passwd: *{SECRET}\n", "host_info.host1.passwd"),
    "undefined_alias_then_text": (f"    passwd: *{SECRET} more words\n", "host_info.host1.passwd"),
    "local_tag": (f"    passwd: !{SECRET}\n", "host_info.host1.passwd"),
    "local_tag_then_text": (f"    passwd: !{SECRET} tail\n", "host_info.host1.passwd"),
    "standard_prefix_tag": (f"    passwd: !!{SECRET}\n", "host_info.host1.passwd"),
    "tag_handle": (f"    passwd: !{SECRET[:4]}!{SECRET[4:]}\n", None),
    "verbatim_tag": (f"    passwd: !<{SECRET}\n", None),
    "anchor_twice": (f"    passwd: &{SECRET} one\n    user: &{SECRET} two\n", "host_info.host1.user"),
    "launch_env_alias": (f"launch:\n  env:\n    MY_TOKEN: *{SECRET}\n", "launch.env.MY_TOKEN"),
    "launch_env_tag": (f"launch:\n  env:\n    MY_TOKEN: !{SECRET}\n", "launch.env.MY_TOKEN"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_yaml_error_near_a_password_never_prints_it(tmp_path: Path, name: str) -> None:
    body, key_path = CASES[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(HOST + body)
    run = run_cli("env", "validate", str(path))
    assert run.rc == 2, run.describe()
    assert SECRET not in run.stderr + run.stdout, run.describe()
    assert SECRET[:4] not in run.stderr + run.stdout, run.describe()
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.describe()
    head = f"camit: error: {path}: " + (f"{key_path}: " if key_path else "")
    assert lines[0].startswith(head), (head, run.describe())


def test_an_anchor_with_no_value_is_an_error_naming_the_key_not_no_password(tmp_path: Path) -> None:
    path = tmp_path / "anchor.yaml"
    path.write_text(HOST + f"    passwd: &{SECRET}\n")
    run = run_cli("env", "validate", str(path))
    assert run.rc == 2, run.describe()
    assert run.stderr.startswith(f"camit: error: {path}: host_info.host1.passwd: an anchor"), run.describe()
    assert "quote the value" in run.stderr and SECRET not in run.stderr + run.stdout, run.describe()


def test_quoted_passwords_with_yaml_indicators_still_load(tmp_path: Path) -> None:
    path = tmp_path / "quoted.yaml"
    path.write_text(HOST + f"    passwd: '*{SECRET}'\n  host2:\n    manage_nic: {{name: eth0, ip: 192.0.2.12}}\n"
                    f"    passwd: \"!{SECRET}\"\n  host3:\n    manage_nic: {{name: eth0, ip: 192.0.2.13}}\n"
                    f"    passwd: '&{SECRET}'\n")
    run = run_cli("env", "validate", str(path))
    assert run.rc == 0, run.describe()
    assert "valid, 3 host(s)" in run.stdout and SECRET not in run.stdout, run.describe()
