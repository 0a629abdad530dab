"""``camit --help`` epilogs (examples, the exit-code table from framework.errors) and ``camit completion``:
the bash script is generated from the parser, and bash really completes with it (``COMP_WORDS`` + the function)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

import pytest

from framework import errors
from framework.cli import EXIT_CODES, build_parser, main
from framework.cli.completion import bash_script, tree


def _complete(script: str, line: str) -> list[str]:
    """What bash offers for ``line`` (the word under the cursor is its last, '' after a trailing space)."""
    prog = ('source /dev/stdin; read -ra COMP_WORDS <<< "$1"; [[ "$1" == *" " ]] && COMP_WORDS+=(""); '
            'COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); fn=$(complete -p camit | sed "s/.*-F \\([^ ]*\\).*/\\1/"); '
            '"$fn"; printf "%s\\n" "${COMPREPLY[@]}"')
    out = subprocess.run(["bash", "--norc", "-c", prog, "_", line], input=script, capture_output=True, text=True,
                         check=True).stdout
    return [w for w in out.splitlines() if w]


def test_exit_code_table_is_the_errors_constants_and_in_every_help(capsys):
    assert [c for c, _ in EXIT_CODES] == [errors.EXIT_OK, errors.EXIT_FAILED, errors.EXIT_USAGE, errors.EXIT_INFRA,
                                          errors.EXIT_INTERRUPTED] == [0, 1, 2, 3, 130]
    assert errors.Cancelled.exit_code == errors.EXIT_INTERRUPTED
    for argv in (["--help"], ["run", "--help"], ["collect", "--help"], ["lease", "status", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert "exit codes:" in out and "130  interrupted" in out and "3    infrastructure" in out, argv
        assert "examples:" in out, argv


def test_bash_completes_with_the_generated_script():
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = subprocess.run([sys.executable, "-m", "framework.cli", "completion", "bash"], capture_output=True,
                            text=True, check=True).stdout
    registered = subprocess.run(["bash", "--norc", "-c", "source /dev/stdin; complete -p camit"], input=script,
                                capture_output=True, text=True, check=True).stdout
    assert "-F _camit_complete camit" in registered
    assert _complete(script, "camit ru") == ["run"]
    assert _complete(script, "camit lease st") == ["status"]
    assert _complete(script, "camit run --core-policy ") == ["fail", "warn", "ignore"]
    assert _complete(script, "camit collect --wa") == ["--wait"]  # collect takes the lease (issue 16 item 10)
    assert _complete(script, "camit exec --hosts run --js") == ["--json"]  # an option's value is no sub-command
    assert _complete(script, "camit run -- sc") == []  # after --: the shell's default (files)


def test_every_option_of_every_command_completes():
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    parser = build_parser()
    script = bash_script(parser)
    for node in tree(parser).walk():
        for opt in node.options:
            if opt.startswith("--"):
                assert opt in _complete(script, f"{node.path} {opt}"), (node.path, opt)
        for child in node.children:
            assert child in _complete(script, f"{node.path} {child}"), (node.path, child)


def test_a_new_option_completes_without_touching_the_generator():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["check"].add_argument("--brand-new-flag", action="store_true")
    assert "--brand-new-flag" in bash_script(parser)


def test_zsh_completes_with_the_generated_script():
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed on this machine (the zsh script is the bash one under bashcompinit)")
    script = subprocess.run([sys.executable, "-m", "framework.cli", "completion", "zsh"], capture_output=True,
                            text=True, check=True).stdout
    out = subprocess.run(["zsh", "-f", "-c", "source /dev/stdin; print -r -- ${_comps[camit]}"], input=script,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
