"""framework.cores.missing: one reason per host for a dumping rank without a core, from the scan's facts."""

from __future__ import annotations

import pytest

from framework.cores.missing import MissingCore, why
from framework.cores.pattern import parse_core_pattern
from framework.cores.scan import HostScan


def scan(pattern: str, hard: str = "unlimited") -> HostScan:
    return HostScan("host2", pattern=parse_core_pattern(pattern), limit_soft="0", limit_hard=hard)


@pytest.mark.parametrize(("pattern", "hard", "writable", "start"), [
    ("/var/crash/%e.%p", "0", True, "the hard core size limit (ulimit -H -c) is 0"),
    ("", "unlimited", None, "core_pattern is empty"),
    ("|/opt/vendor/dumper %p", "unlimited", None, "core_pattern pipes cores to '/opt/vendor/dumper'"),
    ("|/usr/lib/systemd/systemd-coredump %P", "unlimited", None, "the systemd handler stored no core"),
    ("/var/crash/%e.%p", "unlimited", False, "core_pattern's directory /var/crash is not writable"),
    ("/var/crash/%e.%p", "unlimited", True, "nothing on the host explains it"),
    ("core.%p", "unlimited", None, "nothing on the host explains it"),
])
def test_the_first_reason_that_applies(pattern, hard, writable, start):
    assert why(scan(pattern, hard), writable).startswith(start)


def test_the_sentence_names_rank_host_and_signal():
    m = MissingCore("L1", 5, "host3", "SIGSEGV", "core_pattern is empty: the kernel writes no core")
    assert m.describe() == ("rank 5 on host3 died of SIGSEGV and left no core: core_pattern is empty: "
                            "the kernel writes no core")
    assert m.to_json()["rank"] == 5
