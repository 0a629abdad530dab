"""Reading an environment file into plain data: its text, strict YAML, then ``${VAR}`` expansion.

PyYAML silently keeps the last of two equal mapping keys, so a second ``host1:`` would replace
the first without a word; :func:`parse_yaml` composes the node tree first and rejects any
duplicate key, at any depth, with its key path and line. The loader also drops YAML 1.1's
base-60 numbers, octal and timestamps, which would turn an unquoted MAC such as
``52:54:00:12:34:56`` into an integer. Syntax errors are reported with a 1-based line and column
but without PyYAML's source snippet, which could show a password.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from framework.config.document import ENV_NAME_RE, Loc, dotted
from framework.errors import ConfigError

#: builds the error to raise: (dotted key path or None, problem) -> ConfigError
MakeError = Callable[[str | None, str], ConfigError]

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"
_REF = re.compile(r"\$\$\{|\$\{(?P<name>[^}]*)(?P<close>\})?")


class _EnvLoader(yaml.SafeLoader):
    """SafeLoader with decimal/hex integers and plain floats only (no 1:30 = 90, no 0755 = 493)."""


_EnvLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_EnvLoader.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"), list("-+0123456789")
)
_EnvLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
        |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def read_text(source: str, error: MakeError) -> str:
    """The file's text (UTF-8, BOM allowed); ConfigError when it cannot be read."""
    problem = None
    try:
        raw = Path(source).read_bytes()
    except FileNotFoundError:
        problem = "file not found"
    except IsADirectoryError:
        problem = "is a directory, not a file"
    except PermissionError:
        problem = "permission denied"
    except OSError as exc:
        problem = f"cannot read the file: {exc.strerror or type(exc).__name__}"
    if problem is None:
        try:
            return raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            problem = f"not UTF-8 text (bad byte at offset {exc.start})"
    raise error(None, problem)


def expand_vars(value: Any, environ: Mapping[str, str], expanded: set[Loc], error: MakeError, loc: Loc = ()) -> Any:
    """Replace ``${VAR}`` in every string value (``$${`` is a literal ``${``).

    The key path of every value that had a variable substituted is added to ``expanded``.
    """
    if isinstance(value, dict):
        return {k: expand_vars(v, environ, expanded, error, (*loc, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_vars(v, environ, expanded, error, (*loc, i)) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name = match.group("name")
        if match.group("close") is None:
            raise error(dotted(loc), "unterminated '${' (write '$${' for a literal '${')")
        if not re.fullmatch(ENV_NAME_RE, name):
            raise error(dotted(loc), f"'${{{name}}}' is not a valid variable reference (write '$${{' for a literal '${{')")
        if name not in environ:
            raise error(dotted(loc), f"environment variable {name!r} is not set")
        expanded.add(loc)
        return environ[name]

    return _REF.sub(substitute, value)


def parse_yaml(text: str, error: MakeError) -> dict[str, Any]:
    """Parse one environment document; it must be a non-empty mapping.

    Raises:
        ConfigError: (built by ``error``) syntax error, duplicate key, empty file, not a mapping.
    """
    loader = _EnvLoader(text)
    problem: tuple[str | None, str] | None = None
    data: Any = None
    try:
        node = loader.get_single_node()
        if node is not None:
            problem = _find_duplicate(node, (), set())
            if problem is None:
                data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        problem = (None, _syntax_problem(exc))
    except yaml.YAMLError as exc:  # ReaderError: a control character in the text
        problem = (None, f"not a valid YAML document ({type(exc).__name__})")
    finally:
        loader.dispose()
    # raised outside the except block: PyYAML's exception text quotes the source line
    if problem is not None:
        raise error(*problem)
    if data is None:
        raise error(None, "the file is empty (expected a mapping with a 'host_info' key)")
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else "a string" if isinstance(data, str) else "a single value"
        raise error(None, f"the top level must be a mapping with a 'host_info' key, got {kind}")
    return data


def _syntax_problem(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    text = f"YAML syntax error{where}: {exc.problem or exc.context}"
    if exc.context and exc.problem and exc.context_mark is not None:
        text += f" ({exc.context} at line {exc.context_mark.line + 1})"
    return text


def _find_duplicate(node: Node, loc: Loc, visited: set[int]) -> tuple[str | None, str] | None:
    """The first mapping key that appears twice in one mapping, as (parent key path, problem)."""
    if id(node) in visited:  # an alias seen before (also stops recursive aliases)
        return None
    visited.add(id(node))
    if isinstance(node, MappingNode):
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            child: Loc = (*loc, "?")
            if isinstance(key_node, ScalarNode) and key_node.tag != _MERGE:
                key, line = key_node.value, key_node.start_mark.line + 1
                if key in first_line:
                    return (
                        dotted(loc) or None,
                        f"duplicate key {key!r} at line {line} (first defined at line {first_line[key]})",
                    )
                first_line[key] = line
                child = (*loc, key)
            found = _find_duplicate(value_node, child, visited)
            if found:
                return found
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            found = _find_duplicate(item, (*loc, index), visited)
            if found:
                return found
    return None
