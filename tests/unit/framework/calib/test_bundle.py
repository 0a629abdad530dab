"""framework.calib.bundle: each host fact is its probe section's text, a failed tool's exit status
added, and a section the probe never printed says the probe's exit status."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, cast

from framework.calib import bundle
from framework.hosts import Host
from framework.testing import FakeTransport

ANSWER = ("@@camit@@ begin npu-smi\nthe NPU table\n\n@@camit@@ end npu-smi 0\n"
          "@@camit@@ begin hccn-link\nlink status: DOWN\n\n@@camit@@ end hccn-link 3\n")


def test_host_facts_keep_each_sections_text_its_exit_status_and_what_never_answered() -> None:
    fake = FakeTransport("h1")
    fake.on(re.compile(r"cann_record"), rc=9, stdout=ANSWER)
    env = cast(Any, SimpleNamespace(cann=None))
    facts = bundle.host_facts(Host("h1", fake), env)
    assert facts["host.npu_smi_info"] == {"value": "the NPU table\n", "source": "h1: npu-smi info"}
    assert facts["host.hccn_link"]["value"] == "link status: DOWN\n\n[exit 3]"
    assert facts["host.driver_version"]["value"] == "[not answered: the probe exited 9]"
    assert set(facts) == set(bundle.HOST_FACTS)
