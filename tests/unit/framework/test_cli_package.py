"""The ``camit`` CLI package: one dispatch table names every verb, and the generated CLI reference
(docs/hooks.py's ``cli_page``) documents exactly the parser's commands and options."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from framework import cli
from framework.cli import VERBS, build_parser

ROOT = Path(__file__).resolve().parents[3]
#: option-like words of the help texts that are no option of camit's: the target's ``-m MODULE``
#: (``camit run``), ``-vv`` (``-v`` counted twice)
NOT_OPTIONS = {"-m", "-vv"}


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("camit_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _commands(sub)


def _verbs(parser: argparse.ArgumentParser) -> list[str]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _documented(page: str) -> dict[str, set[str]]:
    """The reference page's sections: command path -> the options its help block names."""
    sections = re.findall(r"^## (camit[^\n]*)\n\n```text\n(.*?)\n```", page, re.M | re.S)
    assert sections, "no `## camit ...` section in the CLI reference"
    # the examples' lines hold commands for the hosts too (``uname -r``): options come from the rest
    bodies = {prog: re.sub(r"^examples:\n(?:  .*\n)*", "", body, flags=re.M)
              for prog, body in sections}
    return {prog: set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", body))
            for prog, body in bodies.items()}


def test_the_dispatch_table_holds_every_verb_of_the_parser_in_help_order() -> None:
    assert _verbs(build_parser()) == list(VERBS)
    for name, verb in VERBS.items():
        assert callable(verb.add_parser) and callable(verb.run), name


def test_each_verb_module_adds_only_its_own_verb() -> None:
    for name, verb in VERBS.items():
        parser = argparse.ArgumentParser(prog="camit")
        verb.add_parser(parser.add_subparsers(dest="command"))
        assert _verbs(parser) == [name]


def test_the_reference_documents_every_command_and_option_of_the_parser() -> None:
    documented = _documented(_hooks().cli_page())
    commands = {p.prog: _options(p) for p in _commands(build_parser())}
    assert list(documented) == list(commands)  # the same commands, in the same order
    for prog, options in commands.items():
        assert options <= documented[prog], (prog, options - documented[prog])


def test_the_reference_names_no_option_the_parser_lacks() -> None:
    """An option named in a command's reference block is one of its options (or of its verbs)."""
    commands = {p.prog: p for p in _commands(build_parser())}
    for prog, named in _documented(_hooks().cli_page()).items():
        known = {o for p in commands.values() if p.prog.startswith(prog) for o in _options(p)}
        assert named - NOT_OPTIONS <= known, (prog, named - known)


def test_a_verb_runs_through_the_table(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``main`` dispatches by the table: a verb replaced there is the one that runs."""
    seen: list[str] = []

    def run(args: argparse.Namespace) -> int:
        seen.append(args.command)
        return 7

    monkeypatch.setattr(VERBS["diagnose"], "run", run)
    assert cli.main(["diagnose", "x"]) == 7 and seen == ["diagnose"]


def test_python_dash_m_and_no_verb_print_the_help_and_exit_2() -> None:
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "framework.cli"], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("usage: camit ")


def test_the_console_script_is_the_packages_main() -> None:
    """pyproject's ``camit = "framework.cli:main"`` still names the package's ``main``."""
    found = re.search(r'^camit = "([\w.]+):(\w+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found is not None
    module, name = found.groups()
    assert getattr(importlib.import_module(module), name) is cli.main
