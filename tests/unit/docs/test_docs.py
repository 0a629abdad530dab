"""The documentation cannot go stale: README.md's and the getting-started pages' shell blocks run
or parse, the CLI's help names only paths that exist, the site builds strictly, and the exit-code
tables match the code.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from framework.cli import EXIT_CODES, build_parser
from framework.errors import SESSION_MEANING, UsageError
from framework.lab.manage import _parser as lab_parser
from tests.support.docblocks import KINDS, PAGES, ROOT, Block, blocks

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}


def _hooks():
    spec = importlib.util.spec_from_file_location("camit_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ids(found: list[Block]) -> list[str]:
    return [f"{b.page}:{b.line}" for b in found]


ALL = blocks()


def test_readme_is_short_and_has_the_two_commands_on_the_first_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150
    first_screen = "\n".join(lines[:30])
    assert "make demo" in first_screen and "make test" in first_screen


def test_the_pages_have_shell_blocks_of_every_kind():
    kinds = {b.kind for b in ALL}
    assert kinds <= set(KINDS), f"unknown block kinds {kinds - set(KINDS)}: use one of {KINDS}"
    assert kinds == set(KINDS)
    assert {b.page for b in ALL} == {str(p.relative_to(ROOT)) for p in PAGES}


@pytest.mark.parametrize("block", ALL, ids=_ids(ALL))
def test_every_shell_block_parses(block: Block):
    res = subprocess.run(["bash", "-n"], input=block.body, text=True, capture_output=True)
    assert res.returncode == 0, f"{block.page}:{block.line}: {res.stderr}"


RUN = [b for b in ALL if b.kind == "run"]


@pytest.mark.parametrize("block", RUN, ids=_ids(RUN))
def test_runnable_blocks_run(block: Block):
    """Blocks that need no lab run from the repository root with this checkout's camit."""
    bindir = Path(sys.executable).parent
    env = {**ENV, "PATH": f"{bindir}{os.pathsep}{ENV['PATH']}"}
    res = subprocess.run(
        ["bash", "-e", "-c", block.body],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert res.returncode == 0, f"{block.page}:{block.line}: {res.stdout}{res.stderr}"


def _targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {m[1] for m in re.finditer(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.M)}


def test_make_lines_name_makefile_targets():
    targets = _targets()
    lines = [ln for b in ALL if b.kind == "make" for ln in b.commands()]
    assert lines
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "make", line
        named = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
        assert named and set(named) <= targets, f"{line!r}: not a Makefile target"


def _parse(words: list[str]) -> None:
    """Parse a documented command line with the real parser (nothing runs)."""
    if words[0] == "camit":
        build_parser().parse_args(words[1:])
    elif words[:3] == ["python", "-m", "framework.lab"]:
        lab_parser().parse_args(words[3:])
    elif words[0] == "pytest":
        paths = [w.split("::")[0] for w in words[1:] if not w.startswith("-") and "/" in w]
        assert all((ROOT / p).exists() for p in paths if not p.startswith(("/", "env/"))), words


CHECKED = [b for b in ALL if b.kind in ("cluster", "lab")]


@pytest.mark.parametrize("block", CHECKED, ids=_ids(CHECKED))
def test_cluster_and_lab_commands_parse(block: Block):
    """A renamed option or command breaks the page here, not in front of a user."""
    for line in block.commands():
        words = shlex.split(line)
        try:
            _parse(words)
        except SystemExit as exc:
            if exc.code not in (0, None):  # --help and --version exit 0
                pytest.fail(f"{block.page}:{block.line}: {line!r}: exit {exc.code}")
        except UsageError as exc:
            pytest.fail(f"{block.page}:{block.line}: {line!r}: {exc}")


def test_a_stale_option_in_a_block_is_caught():
    with pytest.raises(UsageError):
        _parse(shlex.split("camit run --env x.yaml --no-such-option -- examples/hello_ranks.py"))
    with pytest.raises(SystemExit):
        _parse(shlex.split("python -m framework.lab up --hosts 2 --no-such-option"))


def _help_paths() -> list[tuple[str, str]]:
    """(command, path) for each repository path camit's --help names: relative, a folder or .py."""
    found = []
    for parser in _hooks()._subcommands(build_parser()):
        for token in re.findall(r"[^\s'\"(),;|]+", parser.format_help()):
            if token.startswith(("/", "~", "$", "-")) or "<" in token:
                continue  # a host path, a variable, an option
            if "/" in token or token.endswith(".py"):
                found.append((parser.prog, token))
    return found


def test_every_path_the_cli_help_names_exists():
    paths = _help_paths()
    assert ("camit", "examples/hello_ranks.py") in paths
    missing = [(prog, p) for prog, p in paths if not (ROOT / p).exists()]
    assert not missing, f"camit --help names paths that do not exist: {missing}"


def test_readme_links_point_at_files():
    text = (ROOT / "README.md").read_text()
    links = [u for u in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in u]
    assert links
    for link in links:
        assert (ROOT / link.split("#")[0]).is_file(), link


def _table(page: str, heading: str) -> dict[int, str]:
    text = (ROOT / "docs" / page).read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\| ([\d, ]+) \| (.+) \|$", section, re.M):
        for code in m[1].split(","):
            rows[int(code)] = m[2]
    return rows


def test_exit_code_tables_match_the_code():
    cli = _table("reports.md", "Exit codes of `camit`")
    assert sorted(cli) == sorted(code for code, _ in EXIT_CODES)
    session = _table("reports.md", "Exit status of pytest")
    assert set(SESSION_MEANING) <= set(session)
    for code in (6, 7, 8):  # camit's own statuses, above pytest's
        assert SESSION_MEANING[code].split(" or ")[0] in session[code], (code, session[code])


def test_generated_references_cover_the_schema_and_the_parsers():
    hooks = _hooks()
    env_page = hooks.env_file_page()
    for key in (
        "host_info.<host>.manage_nic.ip",
        "defaults.host_key_policy",
        "launch.rendezvous_nic",
        "relay",
    ):
        assert f"| `{key}` |" in env_page
    cli_page = hooks.cli_page()
    for prog in ("camit run", "camit lease release", "python -m framework.lab up"):
        assert f"\n## {prog}\n" in cli_page
    assert "--nproc-per-node" in cli_page and "--visible" in cli_page


def test_external_links_are_checked_for_syntax():
    bad = _hooks().bad_links(
        "[a](https://example.org/x) [b](ftp:/x) [c](https:nohost) [d](mailto:a@b.c)"
    )
    assert bad == ["ftp:/x", "https:nohost"]


@pytest.mark.skipif(
    shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None,
    reason="mkdocs is not installed (make install installs the docs extra)",
)
def test_the_site_builds_strictly(tmp_path: Path):
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT,
        env={**ENV, "NO_MKDOCS_2_WARNING": "1"},
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "reference" / "cli.html").is_file() and (
        tmp_path / "benchmarks.html"
    ).is_file()


#: where the module docstrings live whose narrative moved to the docs (issue 32, item 4)
DOCSTRING_TREES = ("framework", "suites", "standin", "standin_npu")
DOC_PAGE = re.compile(r"docs/[\w/.-]+\.md")


def _module_docstrings() -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): ast.get_docstring(ast.parse(p.read_text())) or ""
        for tree in DOCSTRING_TREES for p in sorted((ROOT / tree).rglob("*.py"))
    }


def test_module_docstrings_say_in_a_few_lines_what_the_module_is_for():
    long = {path: len(doc.splitlines()) for path, doc in _module_docstrings().items()
            if len(doc.splitlines()) > 6}
    assert long == {}, "move the narrative to the module's docs page (docs/internals/)"


def _spellings(path: str) -> set[str]:
    """How a page names a module: its path, its file or module name, or (``__init__``) its package."""
    p = Path(path)
    if p.name == "__init__.py":
        return {f"`{p.parent}/`", f"`{path}`"}
    return {f"`{path}`", f"`{p.name}`", f"`{p.stem}`"}


def test_the_page_a_module_docstring_names_exists_and_names_the_module():
    """The first page a docstring names (its design notes) exists and says which module it covers."""
    wrong = []
    for path, doc in _module_docstrings().items():
        pages = DOC_PAGE.findall(doc)
        if pages and not any(s in (ROOT / pages[0]).read_text() for s in _spellings(path)):
            wrong.append(f"{path} -> {pages[0]}")
    assert wrong == []

