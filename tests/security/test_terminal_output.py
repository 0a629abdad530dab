"""What a host prints is text on our terminal, never markup and never terminal control (issue 17, item 8).

``camit exec`` shows each host's output in a table: rich on a terminal, plain text in CI. A host that
prints ``[/red]`` used to crash ``camit exec`` on a TTY after the commands had run (rich read the output
as markup), ``[bold]`` restyled it, and escape sequences (retitle the terminal, clear the screen, move
the cursor) reached the terminal or the CI log raw. Here a real ``camit exec`` runs on the lab's hosts
under a pseudo-terminal (``pty.openpty``, so rich is on) and with its output captured (plain mode):
the markup is printed as the characters it is, and control characters arrive escaped (``\\x1b``).

Needs the lab (any size: it runs on every host of the lab's env).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.security._env_terminal import REPO, clean_env
from tests.support.ptyrun import run_on_pty

pytestmark = pytest.mark.lab

MARKUP = '[/red] [bold]x [link=file:///etc]y[/link]'
# OSC 0 (retitle), ED 2 (clear the screen), a cursor move, CSI as one C1 byte, and a right-to-left override
CONTROL = r"printf 'a\033]0;pwn\007b\033[2Jc\033[10;10Hd\302\233e\342\200\256f\n'"


def _exec_argv(env_path: Path, command: str) -> list[str]:
    return [sys.executable, "-m", "framework.cli", "exec", "--env", str(env_path), "--", command]


def run_on_tty(argv: list[str], timeout: float = 120) -> tuple[int | None, bytes]:
    """Run ``argv`` with a pseudo-terminal (200 columns) as stdin, stdout and stderr; (exit status, output)."""
    env = clean_env(TERM="xterm-256color")
    env.pop("COLUMNS", None)
    env.pop("NO_COLOR", None)
    return run_on_pty(argv, env=env, cwd=REPO, columns=200, rows=50, timeout=timeout)


def run_plain(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=REPO, capture_output=True, timeout=timeout, env=clean_env(CI="true"))


def test_markup_in_host_output_is_printed_as_text_on_a_tty(lab_env_path, lab_env):
    rc, out = run_on_tty(_exec_argv(lab_env_path, f"echo '{MARKUP}'"))
    text = out.decode(errors="replace")
    assert rc == 0, text[-2000:]
    assert "Traceback" not in text and "MarkupError" not in text, text[-2000:]
    # byte for byte, with no style code inside: neither parsed nor restyled (one row per host)
    assert text.count(MARKUP) == len(lab_env.hosts), text[-2000:]
    assert b"\x1b]8;" not in out  # no hyperlink made of [link=...]


def test_control_characters_from_a_host_are_escaped_on_a_tty(lab_env_path, lab_env):
    rc, out = run_on_tty(_exec_argv(lab_env_path, CONTROL))
    text = out.decode(errors="replace")
    assert rc == 0, text[-2000:]
    for raw in (b"\x1b]0;pwn", b"\x07", b"\x1b[2J", b"\x1b[10;10H", "\u009b".encode(), "\u202e".encode()):
        assert raw not in out, (raw, text[-2000:])
    assert text.count(r"a\x1b]0;pwn\x07b\x1b[2Jc\x1b[10;10Hd\x9be\u202ef") == len(lab_env.hosts), text[-2000:]


def test_control_characters_and_markup_from_a_host_are_escaped_in_plain_mode(lab_env_path, lab_env):
    proc = run_plain(_exec_argv(lab_env_path, f"{CONTROL}; echo '{MARKUP}'"))
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert not any(ord(c) < 0x20 and c != "\n" for c in out), repr(out)
    assert "\u009b" not in out and "\u202e" not in out, repr(out)
    assert out.count(r"a\x1b]0;pwn\x07b\x1b[2Jc\x1b[10;10Hd\x9be\u202ef") == len(lab_env.hosts), out
    assert out.count(MARKUP) == len(lab_env.hosts), out


def test_a_host_error_reason_is_escaped_too(lab_env_path, lab_env):
    """The error line of a failed command (stderr of the host in it) goes through the same escaping."""
    proc = run_plain(_exec_argv(lab_env_path, r"printf 'oops\033[2J\n' >&2; exit 3"))
    assert proc.returncode == 1, proc.stderr.decode()[-2000:]
    assert b"\x1b" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert proc.stdout.decode().count(r"oops\x1b[2J") == len(lab_env.hosts), proc.stdout.decode()
