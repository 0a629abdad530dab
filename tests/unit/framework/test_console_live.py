"""Live progress (``framework.console.progress``) on a real pseudo-terminal, and plain lines everywhere else.

A small program drives the progress API with the events a two-host deploy sends (one of them carrying
terminal escapes a host could print) and runs with its stderr on a pty (``pty.openpty``) or a pipe:

- ``TERM=xterm``: the rich live display (cursor movement), then each host's last message as a plain line;
- ``NO_COLOR=1``: the same live display without one colour or style code (no ``ESC[...m``);
- ``TERM=dumb`` (or ``CI=true``) on the pty: plain lines, no cursor movement, rich never imported;
- a pipe: exactly the plain ``HH:MM:SS host: message`` lines, one per event, rich never imported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import ptyrun

ROOT = Path(__file__).resolve().parents[3]

EVENTS = [("host1", "probe"), ("host2", "probe"), ("host1", "upload x.whl (1.0 MiB) direct"),
          ("host2", "warning: slow link \x1b]0;pwned\x07"), ("host1", "deployed umdk_cam_op_lib 1.0"),
          ("host2", "FAILED at upload: gone\x1b[2J")]
PROGRAM = (
    "import logging, sys, time\n"
    "from framework import console\n"
    "console.setup_logging()\n"
    f"events = {EVENTS!r}\n"
    "with console.progress() as event:\n"
    "    for host, message in events:\n"
    "        event(host, message)\n"
    "        time.sleep(0.25)\n"
    "    logging.getLogger('camit.test').warning('relay: direct push to host2 \\x1b[2J')\n"
    "    time.sleep(0.25)\n"
    "sys.stderr.write('rich imported: %s\\n' % ('rich' in sys.modules))\n"
)
#: the warning logged while the display runs: a whole line of its own, escaped
LOGGED = re.compile(r"\d\d:\d\d:\d\d\.\d{3} WARNING camit\.test: relay: direct push to host2 \\x1b\[2J")
#: what the hosts' last messages look like once escaped (the lines that stay)
LAST = {"host1": "deployed umdk_cam_op_lib 1.0", "host2": r"FAILED at upload: gone\x1b[2J"}
SGR = re.compile(rb"\x1b\[[0-9;]*m")
#: cursor movement, erase and show/hide: what a dumb terminal or a log must never get
CURSOR = re.compile(rb"\x1b\[[0-9;?]*[A-HJKSTfhl]")
PLAIN = re.compile(r"\d\d:\d\d:\d\d (host\d): (.*)")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR", "TERM", "COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def run_on_pty(env: dict[str, str], timeout: float = 120) -> bytes:
    """The program with a 120-column pseudo-terminal as stdin, stdout and stderr: everything it wrote."""
    rc, out = ptyrun.run_on_pty([sys.executable, "-c", PROGRAM], env=env, cwd=ROOT, columns=120, rows=40,
                                timeout=timeout)
    assert rc == 0, out.decode(errors="replace")
    return out


def _final_lines(out: bytes) -> list[str]:
    """The plain lines after the live display's last escape (what stays on the terminal)."""
    tail = out[max(m.end() for m in CURSOR.finditer(out)):] if CURSOR.search(out) else out
    return [ln for ln in tail.decode().replace("\r", "").splitlines() if ln]


def _assert_last_lines(lines: list[str]) -> None:
    got = {m.group(1): m.group(2) for ln in lines if (m := PLAIN.fullmatch(ln))}
    assert got == LAST, lines


def test_a_terminal_gets_the_live_display_then_each_hosts_last_line():
    out = run_on_pty(_env(TERM="xterm"))
    assert b"\x1b[?25l" in out and b"\x1b[2K" in out and b"\x1b[1A" in out  # a live display redrew its rows
    assert SGR.search(out)  # with colour
    assert b"\x1b]0;pwned" not in out and b"\x1b[2J" not in out and b"\x07" not in out  # a host's escapes: text
    assert rb"host2: warning: slow link \x1b]0;pwned\x07" in out  # kept above the display as it came
    lines = _final_lines(out)
    _assert_last_lines(lines)
    assert lines[-1] == "rich imported: True"
    # printed above the display (its rows erased first, then drawn again below), never into it: a line
    # written through the display would be erased by its next redraw
    assert re.search(rb"\x1b\[2K" + LOGGED.pattern.encode() + rb"\r?\n", out), out


def test_no_color_keeps_the_live_display_without_a_style_code():
    out = run_on_pty(_env(TERM="xterm", NO_COLOR="1"))
    assert CURSOR.search(out)  # still live
    assert not SGR.search(out), out
    _assert_last_lines(_final_lines(out))


def _plain(line: str) -> tuple[str | Any, ...]:
    """(host, message) of a plain progress line; the test fails on any other line."""
    m = PLAIN.fullmatch(line)
    assert m is not None, line
    return m.groups()


def test_a_dumb_terminal_gets_plain_lines():
    for env in (_env(TERM="dumb"), _env(TERM="xterm", CI="true")):
        out = run_on_pty(env)
        assert b"\x1b" not in out, out  # no cursor movement, no colour: nothing to interpret
        lines = out.decode().replace("\r", "").splitlines()
        assert [_plain(ln) for ln in lines[:-2]] == [
            (h, m.replace("\x1b", r"\x1b").replace("\x07", r"\x07")) for h, m in EVENTS]
        assert LOGGED.fullmatch(lines[-2]), lines
        assert lines[-1] == "rich imported: False"


def test_a_pipe_gets_the_plain_lines_unchanged():
    proc = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=_env(TERM="xterm"), capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in proc.stderr
    lines = proc.stderr.decode().splitlines()
    assert [_plain(ln) for ln in lines[:-2]] == [
        (h, m.replace("\x1b", r"\x1b").replace("\x07", r"\x07")) for h, m in EVENTS]
    assert LOGGED.fullmatch(lines[-2]), lines
    assert lines[-1] == "rich imported: False"
