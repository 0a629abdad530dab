"""Exact command lines from the pure builders, and that hostile values arrive literally."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from framework import commands
from framework.commands import ShellScript

HOSTILE = ["a b", "it's", 'say "hi"', "$(id -u)", "`id -u`", "a;b", "x && y", "line1\nline2", "ünïcødé ✓", "", "*", "~"]


@pytest.mark.parametrize(
    ("command", "env", "cwd", "expected"),
    [
        (["echo", "hi"], None, None, "echo hi"),
        (["echo", "a b"], None, None, "echo 'a b'"),
        ("echo $HOME | wc -c", None, None, "echo $HOME | wc -c"),
        (["ls"], None, "/w d", "cd -- '/w d' && ls"),
        (["env"], {"A": "1", "B": "x y"}, None, "export A=1 B='x y' && env"),
        ("echo $A", {"A": "$(id)"}, "/tmp", "cd -- /tmp && export A='$(id)' && exec /bin/sh -c 'echo $A'"),
        (["printf", "%s", "it's"], None, None, "printf %s 'it'\"'\"'s'"),
    ],
)
def test_build_exact_lines(command, env, cwd, expected):
    assert commands.build(command, env=env, cwd=cwd).text == expected


def test_secret_values_are_exported_but_never_displayed():
    class Secret:
        def reveal(self) -> str:
            return "hunter2"

    line = commands.build(["true"], env={"PASS": Secret(), "X": "1"})
    assert "hunter2" in line.text
    assert "hunter2" not in line.display
    assert "PASS='***'" in line.display


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", "", "A;B", "A$"])
def test_invalid_env_names_rejected(name):
    with pytest.raises(ValueError, match="invalid environment variable name"):
        commands.build(["true"], env={name: "x"})


def test_empty_argv_rejected():
    with pytest.raises(ValueError):
        commands.build([])


def _sh(line: str) -> str:
    return subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, check=True).stdout


def test_hostile_argv_arrives_literally_through_a_real_shell():
    line = commands.build(["printf", "%s\\0", *HOSTILE]).text
    assert _sh(line).split("\0")[:-1] == HOSTILE


def test_hostile_env_and_cwd_arrive_literally(tmp_path):
    weird = tmp_path / "d i r $(x) `y` ;z 'q' \"w\""
    weird.mkdir()
    env = {f"V{i}": v for i, v in enumerate(HOSTILE)}
    script = ShellScript("pwd; printf '%s\\0' " + " ".join(f'"$V{i}"' for i in range(len(HOSTILE))))
    line = commands.build(script, env=env, cwd=str(weird)).text
    out = _sh(line)
    first, rest = out.split("\n", 1)
    assert first == str(weird)
    assert rest.split("\0")[:-1] == HOSTILE


@pytest.mark.parametrize("direct", [False, True], ids=["via-sh", "direct"])
@pytest.mark.parametrize("login", ["/bin/sh", "bash"])
def test_pgid_wrapper_reports_the_shell_pid_and_name_first(direct, login):
    script = commands.build(
        ShellScript("echo out; echo err >&2; printf '%s\\n' \"$@\" 'it''s' \"$(echo x)\"; exit 3")).text
    line = commands.with_pgid(script, direct=direct)
    proc = subprocess.Popen([login, "-c", line], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    stdout, stderr = proc.communicate(timeout=30)
    first, rest = stderr.split("\n", 1)
    pid, arg0 = first[len(commands.PGID_MARKER):].split(" ", 1)
    assert first.startswith(commands.PGID_MARKER) and int(pid) == proc.pid  # the session leader: the pgid
    assert commands.shell_name(arg0) == Path(login).name
    assert rest == "err\n" and stdout == "out\nits\nx\n" and proc.returncode == 3
    assert ("exec /bin/sh -c" in line) is not direct


@pytest.mark.parametrize(("arg0", "name"), [("bash", "bash"), ("-bash", "bash"), ("/usr/bin/zsh", "zsh"),
                                            (" /bin/sh\n", "sh")])
def test_shell_name(arg0, name):
    assert commands.shell_name(arg0) == name


def test_kill_group_refuses_init_and_negative():
    for bad in (0, 1, -5):
        with pytest.raises(ValueError):
            commands.kill_group(bad)
    assert commands.kill_group(1234, grace=0.5).startswith("kill -TERM -1234 ")
    assert "awk" in commands.kill_group(1234)


@pytest.mark.parametrize(
    ("out", "digest"),
    [("a" * 64 + "  /x\n", "a" * 64), ("\\" + "b" * 64 + "  /we\\nird\n", "b" * 64)],
)
def test_parse_sha256(out, digest):
    assert commands.parse_sha256(out) == digest


@pytest.mark.parametrize("out", ["", "sha256sum: /x: No such file", "abc  /x"])
def test_parse_sha256_rejects_garbage(out):
    with pytest.raises(ValueError):
        commands.parse_sha256(out)


def test_pgid_wrapper_without_stdin_reads_dev_null():
    line = commands.with_pgid("cat; echo done", direct=True, stdin=False)
    proc = subprocess.run(["bash", "-c", line], input="never read\n", capture_output=True, text=True, timeout=30)
    assert proc.stdout == "done\n"


@pytest.mark.parametrize("direct", [False, True], ids=["via-sh", "direct"])
def test_a_command_killed_by_a_signal_ends_in_128_plus_n(direct):
    """The shell outlives a command that dies of a signal and exits 128+n (sshd then sends an exit status;
    had the shell exec'd the command, sshd would send an exit-signal, which paramiko does not report)."""
    crash = commands.build([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]).text
    proc = subprocess.run(["bash", "-c", commands.with_pgid(crash, direct=direct, stdin=False)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 128 + 11


# --------------------------------------------------------------------------- argv and shell script: two types


@pytest.mark.parametrize(("script", "env", "cwd"), [
    ("echo $HOME | wc -c", None, None),
    ("echo $A && exit 3", {"A": "$(id)"}, "/w d"),
])
def test_a_shell_script_builds_the_line_a_plain_str_always_built(script, env, cwd):
    typed = commands.build(commands.ShellScript(script), env=env, cwd=cwd)
    assert typed == commands.build(script, env=env, cwd=cwd)  # the runtime still takes a str as a script
    assert isinstance(commands.ShellScript(script), str) and commands.ShellScript(script) == script


def test_an_argv_tuple_is_an_argv_like_a_list():
    assert commands.build(("echo", "a b")) == commands.build(["echo", "a b"])
    assert commands.script_of(("echo", "$(id)")) == "echo '$(id)'"


def test_the_type_checker_tells_an_argv_from_a_shell_script(tmp_path):
    """A bare str is no Command for mypy: the caller has to say ShellScript (or give an argv)."""
    mypy_api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from framework.commands import Command, ShellScript\n"
        "ok1: Command = ShellScript('a | b')\n"
        "ok2: Command = ['ls', '-l']\n"
        "ok3: Command = ('ls',)\n"
        "bad: Command = 'a | b'\n"
    )
    root = Path(__file__).resolve().parents[3]
    # the checkout's own cache (mypy in make test fills it) keeps this to a second or two
    out, _, status = mypy_api.run(["--cache-dir", str(root / ".mypy_cache"), "--follow-imports", "silent",
                                   "--config-file", str(root / "pyproject.toml"), str(snippet)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1 and len(errors) == 1 and "snippet.py:5:" in errors[0], out
