"""accept-new: two controllers meeting the same new host at the same time record its key once
(the check and the append to known_hosts happen under one lock)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.camit_labtools import REPO

pytestmark = pytest.mark.lab

CONNECT = """
import sys, time
from pathlib import Path
from framework.transport.ssh import SshTransport
ip, key, kh, at = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
t = SshTransport("host4", ip, 22, key_file=Path(key), known_hosts=Path(kh), policy="accept-new")
time.sleep(max(0.0, at - time.time()))
t.connect()
print(t.run("echo ok", timeout=30, display="echo ok").stdout.strip())
t.close()
"""


def test_concurrent_accept_new_of_one_new_host_records_it_once(lab, tmp_path):
    known_hosts = tmp_path / "known_hosts"
    at = time.time() + 4  # every controller has imported paramiko by then: the handshakes overlap
    procs = [subprocess.Popen([sys.executable, "-c", CONNECT, lab.host("host4").ip, str(lab.key_file),
                               str(known_hosts), str(at)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [e[-1500:] for _, e in outs]
    assert all(o.strip() == "ok" for o, _ in outs), outs
    lines = [ln for ln in known_hosts.read_text().splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    # and the one recorded key is the host's
    assert lines[0].split()[1:3] == lab.host("host4").plan.host_key_pub.read_text().split()[:2]
