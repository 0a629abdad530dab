"""MkDocs hooks: the generated reference pages and the external-link check.

The env-file reference comes from the schema (``framework.config.document.json_schema``), the CLI
reference from camit's and the lab's argparse parsers, the benchmark page from
``bench/results/*.md``.
Nothing here reaches the network: an external link is checked for its syntax only.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("mkdocs.plugins.camit")

#: generated page -> the function writing it
GENERATED = {
    "reference/env-file.md": "env_file_page",
    "reference/cli.md": "cli_page",
    "benchmarks.md": "benchmarks_page",
}

_LINK = re.compile(r"\]\((?P<url>[a-z][a-z0-9+.-]*:[^)\s]*)")
_SCHEMES = ("https", "http", "mailto")


# --------------------------------------------------------------------------- env file


def _type_of(node: dict[str, Any]) -> str:
    """A short type for a schema node: 'string', 'integer | string', 'one of a, b', 'mapping'."""
    variants = [v for v in node.get("anyOf", [node]) if v.get("type") != "null"]
    names: list[str] = []
    for v in variants:
        names.append(_one_type(v))
    return " or ".join(dict.fromkeys(n for n in names if n)) or "any"


def _one_type(v: dict[str, Any]) -> str:
    if "anyOf" in v:
        return _type_of(v)
    if "enum" in v:
        return "one of " + ", ".join(f"`{e}`" for e in v["enum"])
    if "const" in v:
        return f"`{v['const']}`"
    if "$ref" in v:
        return "mapping"
    kind = v.get("type", "")
    if isinstance(kind, list):
        return " or ".join(k for k in kind if k != "null")
    if kind == "array":
        return f"list of {_one_type(v.get('items', {}))}"
    return {"object": "mapping"}.get(kind, kind)


def _ref(node: dict[str, Any]) -> str | None:
    for v in [node, *node.get("anyOf", [])]:
        if "$ref" in v:
            return str(v["$ref"]).rsplit("/", 1)[-1]
    return None


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _rows(schema: dict[str, Any], props: dict[str, Any], prefix: str) -> Iterator[tuple[str, ...]]:
    defs = schema["$defs"]
    for key, node in props.items():
        path = f"{prefix}{key}"
        default = node.get("default")
        shown = "" if default is None else f"`{json.dumps(default)}`"
        yield (f"`{path}`", _cell(_type_of(node)), shown, _cell(node.get("description", "")))
        ref = _ref(node)
        if ref is None and "patternProperties" in node:
            ref = _ref(next(iter(node["patternProperties"].values())))
            path = f"{path}.<host>"
        if ref is not None:
            yield from _rows(schema, defs[ref]["properties"], f"{path}.")


def env_file_page() -> str:
    from framework.config.document import json_schema

    schema = json_schema()
    rows = ["| Key | Type | Default | Meaning |", "|---|---|---|---|"]
    rows += ["| " + " | ".join(r) + " |" for r in _rows(schema, schema["properties"], "")]
    intro = (ROOT / "docs" / "reference" / "env-file.intro.md").read_text()
    return intro + "\n## Every key\n\n" + "\n".join(rows) + "\n"


# --------------------------------------------------------------------------- CLI


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _subcommands(sub)


def _help(parser: argparse.ArgumentParser) -> str:
    text = parser.format_help()
    return re.sub(r"\s+$", "", text, flags=re.M)


def cli_page() -> str:
    import os

    from framework.cli import build_parser
    from framework.lab.manage import _parser as lab_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps at $COLUMNS: the same page on every terminal
    out = [
        "# CLI reference",
        "",
        "Generated from the parsers themselves (`framework/cli/`, `framework/lab/manage.py`)",
        "at every `make docs`, so it is what `--help` prints.",
        "",
    ]
    for parser in [*_subcommands(build_parser()), *_subcommands(lab_parser())]:
        out += [f"## {parser.prog}", "", "```text", _help(parser), "```", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- benchmarks


def benchmarks_page() -> str:
    intro = (ROOT / "docs" / "benchmarks.intro.md").read_text()
    parts = [intro]
    for md in sorted((ROOT / "bench" / "results").glob("*.md")):
        text = md.read_text()
        parts += [
            f"\n<!-- from bench/results/{md.name} -->\n",
            re.sub(r"^#+ ", "### ", text, count=1, flags=re.M),
        ]
        parts.append(f"\n*Source: `bench/results/{md.name}`.*\n")
    return "\n".join(parts)


# --------------------------------------------------------------------------- MkDocs events


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for src, func in GENERATED.items():
        if files.get_file_from_path(src) is not None:
            files.remove(files.get_file_from_path(src))
        files.append(File.generated(config, src, content=globals()[func]()))
    return files


def bad_links(markdown: str) -> list[str]:
    """External links whose syntax is wrong (unknown scheme, no host): nothing is fetched."""
    bad = []
    for m in _LINK.finditer(markdown):
        url = urlsplit(m["url"])
        if url.scheme not in _SCHEMES or (url.scheme != "mailto" and not url.netloc):
            bad.append(m["url"])
    return bad


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for url in bad_links(markdown):
        log.warning("%s: malformed external link %r", page.file.src_uri, url)
    return markdown
