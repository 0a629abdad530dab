"""Issue 31 item 5 on the lab (security review 3, #6, as ``cancel_sticky.py``/``cancel_wait.py`` ran it): an
interrupt inside ``Cluster.map`` kills the map's remote commands at once (as a timeout does) and is scoped to
that map, so the cleanup that follows (lease release, later commands) still runs on the same hosts.

The interrupt is a real SIGINT to the main thread (what Ctrl-C is, and what camit turns SIGTERM into), sent
0.5 s into a map of ``sleep 60`` with the 900 s timeout of ``install-wheel``; the lab's hosts share this
machine's PID namespace, so the remote sleeps are looked for in /proc.
"""

from __future__ import annotations

import secrets
import signal
import threading
import time
from pathlib import Path

import pytest

from framework.lease import Lease, lease_path

pytestmark = pytest.mark.lab


def _alive(marker: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and marker.encode() in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


def test_an_interrupt_kills_the_maps_commands_at_once_and_the_hosts_stay_usable(cluster):
    lease = Lease(cluster, interval=0).acquire()
    files = {h.name: lease_path(h) for h in cluster}
    marker = f"camit-int-{secrets.token_hex(4)}"
    timer = threading.Timer(0.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            cluster.run(["sh", "-c", f"sleep 60; : {marker}"], timeout=900)
        reached = time.monotonic() - start
    finally:
        timer.cancel()
        lease.release()
    print(f"the interrupt reached the caller after {reached:.2f}s")
    assert reached < 5, f"the interrupt reached the caller after {reached:.1f}s"
    deadline = time.monotonic() + 5
    while _alive(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(marker) == [], "a remote command of the interrupted map still runs"
    # scoped: the release above went through, and later work on the same hosts runs
    for host in cluster:
        assert host.run(["test", "-e", files[host.name]]).rc == 1, f"{host.name}: lease file left"
    assert {h: r.stdout for h, r in cluster.check(["echo", "usable"]).items()} == {
        h.name: "usable\n" for h in cluster}
