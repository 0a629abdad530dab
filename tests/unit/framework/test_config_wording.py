"""Each kind of schema mistake is worded in plain words, one per row (framework.config.document's
_WORDING table: every kind it words, and a kind it leaves to our validators' own message)."""

from __future__ import annotations

from typing import Any

import pytest

from framework.config.document import DocumentInvalid, validate

NIC = {"name": "eth0", "ip": "10.0.0.1"}


def _doc(host: dict[str, Any] | None = None, **sections: Any) -> dict[str, Any]:
    return {**sections, "host_info": {"host1": {"manage_nic": NIC, **(host or {})}}}


CASES = [
    ({"host_info": {"host1": {"manage_nic": {"name": "eth0"}}}},
     ("host_info.host1.manage_nic", "missing required key 'ip'")),
    ({"host_info": {"9bad host": {"manage_nic": NIC}}},
     ("host_info", "host name '9bad host' is not a safe identifier (letters, digits, '_', '.', '-'; "
                   "starting with a letter or '_')")),
    (_doc({"manage_nic": {"name": "", "ip": "10.0.0.1"}}),
     ("host_info.host1.manage_nic.name", "must not be empty")),
    (_doc(defaults={"max_parallel": "x"}), ("defaults.max_parallel", "expected an integer, got 'x'")),
    (_doc({"ssh_port": 1.5}), ("host_info.host1.ssh_port", "expected a whole number, got 1.5")),
    (_doc(defaults={"connect_timeout": float("nan")}),
     ("defaults.connect_timeout", "must be a finite number, got nan")),
    (_doc(defaults={"connect_timeout": 0}), ("defaults.connect_timeout", "must be > 0, got 0")),
    (_doc(launch={"backend": "mpi"}),
     ("launch.backend", "'mpi' is not allowed (expected 'hccl', 'nccl' or 'gloo')")),
    (_doc(launch={"env": {"1X": "a"}}),
     ("launch.env", "'1X' is not a valid environment variable name (letters, digits, '_'; "
                    "not starting with a digit)")),
    (_doc({"passwd": ["s3cret"]}),
     ("host_info.host1.passwd", "expected a string (quote the value), got a list")),
    (_doc({"npu": {"visible": []}}), ("host_info.host1.npu.visible", "must list at least one device")),
]


@pytest.mark.parametrize(("doc", "expected"), CASES, ids=[c[1][1][:32] for c in CASES])
def test_each_kind_of_mistake_is_worded(doc: dict[str, Any], expected: tuple[str, str]) -> None:
    with pytest.raises(DocumentInvalid) as exc:
        validate(doc)
    assert exc.value.problems == [expected]
