"""Issue 31 item 7 on the lab (security review 3, #15): ``Host.run(env=...)`` / ``BaseTest.exec_cmd(env=...)``
put a ``Secret`` value into the ``bash -c`` command line, readable by every user in ``ps``. Now the value
travels in a private file (SFTP, ``O_EXCL``, 0600) that the command reads and removes first.

Every command line on the machine is sampled for the whole call (the lab's hosts share this machine's PID
namespace), as tests/security/test_secrets_lab.py does for launches.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

import pytest

from framework.config.effective import Secret

pytestmark = pytest.mark.lab


def _sample(needle: bytes, done: threading.Event, hits: list[bytes], seen: list[int]) -> None:
    while not done.is_set():
        for d in Path("/proc").iterdir():
            try:
                cmd = (d / "cmdline").read_bytes() if d.name.isdigit() else b""
            except OSError:
                continue
            if b"camit-env-" in cmd:
                seen.append(1)
            if needle in cmd:
                hits.append(cmd)
        done.wait(0.01)


def test_a_secret_env_value_reaches_the_command_but_never_a_command_line(cluster):
    host = cluster["host1"]
    token = f"pw-{secrets.token_hex(8)}"
    value = token + "'\"$(id)"  # the token is what a quoted line shows whole
    done, hits, seen = threading.Event(), list[str](), list[str]()
    sampler = threading.Thread(target=_sample, args=(token.encode(), done, hits, seen), daemon=True)
    sampler.start()
    try:
        res = host.run(["sh", "-c", 'sleep 0.5; printf %s "$DB_PASSWORD"; printf " %s" "$PLAIN"'],
                       env={"DB_PASSWORD": Secret(value), "PLAIN": "visible"}, timeout=30, check=True)
    finally:
        done.set()
        sampler.join(5)
    assert res.stdout == f"{value} visible"
    assert hits == [], hits[:2]
    assert seen  # the sampler did see the run's line (it names the file), never the value
    assert "***" in res.command_display and value not in res.command_display
    assert host.run(["sh", "-c", "ls /tmp | grep -c camit-env-"]).stdout.strip() == "0"
