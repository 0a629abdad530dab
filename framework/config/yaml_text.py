"""Reading an environment file into plain data: its text, strict YAML, then ``${VAR}`` expansion.

The file is not trusted: every error is one ConfigError, found in bounded time and memory,
quoting nothing."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, CollectionStartEvent, NodeEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

try:  # libyaml's event parser (C), bundled with PyYAML's wheels; the pure-Python one otherwise
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - a PyYAML built without libyaml
    from yaml.parser import Parser as _PyParser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, _PyParser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            _PyParser.__init__(self)

from framework.config.document import ENV_NAME_RE, Loc, dotted
from framework.errors import ConfigError

#: builds the error to raise: (dotted key path or None, problem) -> ConfigError
MakeError = Callable[[str | None, str], ConfigError]

#: the largest environment file read, in bytes (a 500-host file is about 150 KiB)
MAX_BYTES = 4 * 1024 * 1024
#: the deepest nesting of mappings and lists, aliases followed (the schema needs 5)
MAX_DEPTH = 32
#: the most values (mappings, lists and scalars) in the document, every alias counted where it is used (a
#: host takes about 8: some 5000 hosts; composing 40000 costs ~0.6 s of CPU, tests/security/test_env_loader_cost.py)
MAX_NODES = 40_000
#: the most characters in all scalars together, aliases counted where used and ``${VAR}`` substituted
MAX_CHARS = 2 * MAX_BYTES
#: the longest integer literal (Python refuses to convert more than 4300 decimal digits)
MAX_INT_DIGITS = 100

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
#: the tags a document may carry: those the resolver gives plain values (no ``!!binary``, ``!!set``, ``!x``)
_ALLOWED_TAGS = frozenset({_STR, _INT, _FLOAT, _BOOL, _NULL, _MERGE, _SEQ, _MAP})
_REF = re.compile(r"\$\$\{|\$\{(?P<name>[^}]*)(?P<close>\})?")
#: what PyYAML's reader refuses (its NON_PRINTABLE), plus NUL
_CONTROL = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
#: a quoted value in a PyYAML message that came from the file (after "found", "alias", "tag", ...)
_QUOTED = re.compile(r"(?P<lead>\b(?:found|got|character|handle|alias|anchor|tag)) "
                     r"""(?P<repr>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
#: PyYAML token names: quoting them shows no text from the file
_TOKEN_IDS = frozenset({
    "<directive>", "<document start>", "<document end>", "<stream start>", "<stream end>",
    "<block sequence start>", "<block mapping start>", "<block end>", "<alias>", "<anchor>", "<tag>",
    "<scalar>", "[", "]", "{", "}", "?", ":", "-", ",",
})
_BLANKS = {"'\\t'": "a tab", "' '": "a space", "'\\n'": "a line break", "'\\r'": "a line break",
           "'\\x00'": "end of input", "'\\ufeff'": "a byte order mark"}

#: a problem found in the document: (its key path, dotted; None: the document as a whole), its text
_Problem = tuple["str | None", str]


class _Refused(Exception):
    """A problem found while composing, with the key path where it is."""

    def __init__(self, loc: Loc, problem: str) -> None:
        super().__init__(problem)
        self.loc, self.problem = loc, problem


class _EnvLoader(Composer, _Parser, SafeConstructor, Resolver):
    """SafeLoader with decimal/hex integers and plain floats only (no 1:30 = 90, no 0755 = 493), its
    events from libyaml's parser (C: a 4 MiB flow list is scanned in 1.5 s, not 30) when PyYAML has it.

    Its composer keeps the key path of the node being composed, refuses nesting deeper than
    :data:`MAX_DEPTH` before Python's recursion limit is near, and more than :data:`MAX_NODES` nodes
    or :data:`MAX_CHARS` characters as they are composed (the bound holds in time and memory, before
    the tree exists), refuses undefined, duplicate and recursive aliases naming the key (not the
    alias), and records which nodes carry an anchor.
    """

    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        Composer.__init__(self)
        self.nodes = 0
        self.chars = 0
        self.path: list[Any] = []
        self.anchored: set[int] = set()  # id() of every node that carries an anchor
        self._open: set[str] = set()  # anchors of the collections being composed

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if parent is None:
            return self._compose(parent, index)
        # the child's step in the key path: its key's text, its index, or "?" when it has none
        word = index.value if isinstance(index, ScalarNode) else index
        self.path.append("?" if word is None else word)
        try:
            return self._compose(parent, index)
        finally:
            self.path.pop()

    def _compose(self, parent: Node | None, index: Any) -> Node | None:
        """One node, refused past the bounds; an anchor checked, an anchored node recorded."""
        if len(self.path) > MAX_DEPTH:
            raise _Refused(tuple(self.path[:1]), f"nested deeper than {MAX_DEPTH} levels")
        event = self.peek_event()
        self._count(event)
        if not isinstance(event, NodeEvent) or event.anchor is None:
            return super().compose_node(parent, index)
        self._check_anchor(event, event.anchor)
        if isinstance(event, AliasEvent):
            return super().compose_node(parent, index)
        return self._compose_anchored(parent, index, event, event.anchor)

    def _compose_anchored(self, parent: Node | None, index: Any, event: NodeEvent,
                          anchor: str) -> Node | None:
        """A node that carries an anchor (a collection's is open while it is composed: no alias
        to it inside it)."""
        if isinstance(event, CollectionStartEvent):
            self._open.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._open.discard(anchor)
        self.anchored.add(id(node))
        return node

    def _count(self, event: Any) -> None:
        """Refuse the document as soon as it holds more nodes or characters than the bounds allow."""
        self.nodes += 1
        self.chars += len(event.value) if isinstance(event, ScalarEvent) else 0
        if self.nodes > MAX_NODES or self.chars > MAX_CHARS:
            what = f"{MAX_NODES} values" if self.nodes > MAX_NODES else f"{MAX_CHARS} characters"
            raise _Refused(tuple(self.path[:1]), f"holds more than {what} (refused while it was read)")

    def _check_anchor(self, event: NodeEvent, anchor: str) -> None:
        here = tuple(self.path)
        if isinstance(event, AliasEvent):
            if anchor in self._open:
                raise _Refused(here, "a recursive alias: it refers to the mapping or list that contains it")
            if anchor not in self.anchors:
                raise _Refused(here, "an alias ('*...') that names no anchor defined before it "
                                     "(quote the value if it is a string that starts with '*')")
        elif anchor in self.anchors:
            first = self.anchors[anchor].start_mark.line + 1
            raise _Refused(here, f"an anchor ('&...') defined twice (first at line {first})")


_EnvLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_EnvLoader.yaml_constructors = dict(yaml.SafeLoader.yaml_constructors)
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


def _file_kind(mode: int) -> str | None:
    """Why a file of this mode is not read, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    return f"is {kind}, not a regular file (camit reads an environment file only from a regular file)"


def _too_big(size: int) -> str:
    return (f"is larger than {MAX_BYTES // (1024 * 1024)} MiB ({size} bytes), the limit for an environment file")


def _read_bytes(source: str) -> bytes | str:
    """The file's bytes, or the problem: only a regular file (checked before and after opening), at most MAX_BYTES."""
    problem = _file_kind(os.stat(source).st_mode)
    if problem:
        return problem
    # O_NONBLOCK: a FIFO swapped in after the stat does not block the open; fstat then refuses it
    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        problem = _file_kind(st.st_mode) or (_too_big(st.st_size) if st.st_size > MAX_BYTES else None)
        if problem:
            return problem
        return _read_capped(fd)
    finally:
        os.close(fd)


def _read_capped(fd: int) -> bytes | str:
    """At most MAX_BYTES of an open file, or why not (it grew past them after its fstat)."""
    chunks, size = [], 0
    while size <= MAX_BYTES:
        chunk = os.read(fd, min(1 << 20, MAX_BYTES + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return _too_big(size) if size > MAX_BYTES else b"".join(chunks)


def read_text(source: str, error: MakeError) -> str:
    """The file's text (UTF-8, BOM allowed); ConfigError when it cannot be read or is not text.

    Only a regular file of at most :data:`MAX_BYTES` is read; NUL and control characters (other
    than tab and line breaks) are refused with their line and column.
    """
    try:
        result = _read_bytes(source)
    except OSError as exc:
        result = _unreadable(exc)
    if isinstance(result, str):
        raise error(None, result)
    try:
        text = result.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(None, f"not UTF-8 text (bad byte at offset {exc.start})") from None
    bad = _CONTROL.search(text)
    if bad:
        raise error(None, _control_problem(text, bad))
    return text


#: why a file could not be opened, by the error its opening raised (the first that matches)
_UNREADABLE: tuple[tuple[type[OSError], str], ...] = (
    (FileNotFoundError, "file not found"),
    (IsADirectoryError, "is a directory, not a file"),
    (PermissionError, "permission denied"),
)


def _unreadable(exc: OSError) -> str:
    found = next((why for kind, why in _UNREADABLE if isinstance(exc, kind)), None)
    return found or f"cannot read the file: {exc.strerror or type(exc).__name__}"


def _control_problem(text: str, bad: re.Match[str]) -> str:
    """A control character in the text, named with its line and column."""
    line = text.count("\n", 0, bad.start()) + 1
    column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
    char = bad.group()
    what = "a NUL byte" if char == "\0" else f"the control character U+{ord(char):04X}"
    return (f"{what} at line {line}, column {column}: an environment file is text "
            "(write control characters as escapes in a double-quoted string)")


def expand_vars(value: Any, environ: Mapping[str, str], expanded: set[Loc], error: MakeError, loc: Loc = (),
                budget: list[int] | None = None) -> Any:
    """Replace ``${VAR}`` in every string value (``$${`` is a literal ``${``).

    The key path of every value that had a variable substituted is added to ``expanded``.
    ``budget`` holds the characters substitutions may still add (default :data:`MAX_CHARS`).
    """
    budget = [MAX_CHARS] if budget is None else budget
    if isinstance(value, dict):
        return {k: expand_vars(v, environ, expanded, error, (*loc, k), budget) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_vars(v, environ, expanded, error, (*loc, i), budget) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name = match.group("name")
        problem = _reference_problem(match, environ)
        if problem:
            raise error(dotted(loc), problem)
        budget[0] -= len(environ[name])
        if budget[0] < 0:
            raise error(dotted(loc), f"substituting ${{{name}}} makes the document larger than {MAX_CHARS} "
                                     "characters (an alias repeats each substitution)")
        expanded.add(loc)
        return environ[name]

    return _REF.sub(substitute, value)


def _reference_problem(match: re.Match[str], environ: Mapping[str, str]) -> str | None:
    """What is wrong with one ``${NAME}``: unterminated, not a name, or not set."""
    name = match.group("name")
    if match.group("close") is None:
        return "unterminated '${' (write '$${' for a literal '${')"
    if not re.fullmatch(ENV_NAME_RE, name):
        return f"'${{{name}}}' is not a valid variable reference (write '$${{' for a literal '${{')"
    if name not in environ:
        return f"environment variable {name!r} is not set"
    return None


def parse_yaml(text: str, error: MakeError) -> dict[str, Any]:
    """Parse one environment document; it must be a non-empty mapping.

    Raises:
        ConfigError: (built by ``error``) syntax error, duplicate key, a bound exceeded (depth,
            values, characters, digits), a recursive or undefined alias, an anchor with no value,
            a tag, empty file, not a mapping.
    """
    data, problem = _load(text)
    # raised outside any except block: PyYAML's exception text quotes the source line
    if problem is not None:
        raise error(*problem)
    if data is None:
        raise error(None, "the file is empty (expected a mapping with a 'host_info' key)")
    if not isinstance(data, dict):
        kind = _kind(data)
        raise error(None, f"the top level must be a mapping with a 'host_info' key, got {kind}")
    return data


def _load(text: str) -> tuple[Any, _Problem | None]:
    """The document's data, else the first problem reading it: syntax, a bound, an alias, a tag."""
    try:
        return _construct(text)
    except _Refused as exc:
        return None, (dotted(exc.loc) or None, exc.problem)
    except yaml.MarkedYAMLError as exc:
        return None, (None, _syntax_problem(exc))
    except yaml.YAMLError as exc:
        return None, (None, f"not a valid YAML document ({type(exc).__name__})")
    except RecursionError:  # a backstop: the bounds above stop every nesting we know of first
        return None, (None, f"nested deeper than {MAX_DEPTH} levels")


def _construct(text: str) -> tuple[Any, _Problem | None]:
    """Compose the document, check its node tree, and only then build its data."""
    loader = _EnvLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        problem = _check_size(node) or _check_tree(node, (), set(), loader.anchored)
        return (None, problem) if problem else (loader.construct_document(node), None)
    finally:
        loader.dispose()


def _kind(data: object) -> str:
    """What a top level that is not a mapping is, in words."""
    if isinstance(data, list):
        return "a list"
    return "a string" if isinstance(data, str) else "a single value"


def _hide_quoted(text: str) -> str:
    """PyYAML's message without the file's text it quotes (an alias, tag or character may start a password)."""
    def hide(match: re.Match[str]) -> str:
        quoted = match.group("repr")
        if quoted[1:-1] in _TOKEN_IDS:
            return match.group(0)
        return f"{match.group('lead')} ({_BLANKS.get(quoted, 'not shown')})"

    return _QUOTED.sub(hide, text)


def _syntax_problem(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's syntax error in our words: where, what, its context (never the file's text)."""
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    what = _hide_quoted(exc.problem or exc.context or "")
    return f"YAML syntax error{where}: {what}{_syntax_context(exc)}"


def _syntax_context(exc: yaml.MarkedYAMLError) -> str:
    """`` (<context> at line N)`` when the error has both a problem and a marked context."""
    if not (exc.context and exc.problem and exc.context_mark is not None):
        return ""
    return f" ({_hide_quoted(exc.context)} at line {exc.context_mark.line + 1})"


def _check_size(root: Node) -> _Problem | None:
    """The first bound the document exceeds with every alias expanded: depth, values, characters.

    Each node is measured once (memoised), so a bomb is measured in the time its text takes. Sizes
    are plain (values, characters, height) tuples: the garbage collector untracks them, and a
    document may hold hundreds of thousands of nodes.
    """
    sizes: dict[int, tuple[int, int, int]] = {}  # id -> (values, characters, height)

    def measure(node: Node, loc: Loc) -> tuple[int, int, int]:
        known = sizes.get(id(node))
        if known is None:
            if isinstance(node, ScalarNode):
                known = (1, len(node.value), 0)
            else:
                parts = [measure(child, child_loc) for child, child_loc in _children(node, loc)]
                known = _total(parts)
            sizes[id(node)] = known
        if len(loc) + known[2] > MAX_DEPTH:
            raise _Refused(loc[:1], f"nested deeper than {MAX_DEPTH} levels (through aliases)")
        return known

    values, chars, _ = measure(root, ())
    if not _over(values, chars):
        return None
    what = f"{MAX_NODES} values" if values > MAX_NODES else f"{MAX_CHARS} characters"
    return _largest_key(root, sizes), \
        f"expands to more than {what} (aliases counted where they are used; a YAML alias bomb?)"


def _over(values: int, chars: int) -> bool:
    """More values or characters than the bounds allow."""
    return values > MAX_NODES or chars > MAX_CHARS


def _total(parts: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """A collection's (values, characters, height) from its children's, capped past the bounds."""
    values = 1 + sum(p[0] for p in parts)
    chars = sum(p[1] for p in parts)
    height = 1 + max((p[2] for p in parts), default=0)
    return min(values, MAX_NODES + 1), min(chars, MAX_CHARS + 1), height


def _children(node: Node, loc: Loc) -> Iterator[tuple[Node, Loc]]:
    """A collection's children with their key paths (a mapping's key and value: under the key),
    one at a time (a document may have hundreds of thousands: none is held longer than needed)."""
    if isinstance(node, SequenceNode):
        for i, child in enumerate(node.value):
            yield child, (*loc, i)
        return
    for key_node, value_node in node.value:
        child_loc = (*loc, key_node.value if isinstance(key_node, ScalarNode) else "?")
        yield key_node, child_loc
        yield value_node, child_loc


def _largest_key(root: Node, sizes: Mapping[int, tuple[int, int, int]]) -> str | None:
    """The first top-level key over a bound by itself, else the one holding most of the values, else None."""
    if not isinstance(root, MappingNode):
        return None
    pairs = _key_sizes(root, sizes)
    over = [key for key, (values, chars, _) in pairs if _over(values, chars)]
    most = [key for key, (values, _, _) in pairs if 2 * values > sizes[id(root)][0]]
    return next(iter(over or most), None)


def _key_sizes(root: MappingNode, sizes: Mapping[int, tuple[int, int, int]]
               ) -> list[tuple[str, tuple[int, int, int]]]:
    """Each top-level key (a scalar) with the measured size of its value."""
    return [(k.value, sizes[id(v)]) for k, v in root.value if isinstance(k, ScalarNode)]


def _scalar_problem(node: ScalarNode, anchored: set[int]) -> str | None:
    if node.tag == _INT and len(node.value) > MAX_INT_DIGITS:
        return (f"an integer of {len(node.value)} characters is longer than {MAX_INT_DIGITS} "
                "(quote it if it is text)")
    if node.tag == _NULL and node.value == "" and id(node) in anchored:
        return ("an anchor ('&...') with no value: quote the value if it is a string that starts with '&' "
                "(a password, for example)")
    return None


def _node_problem(node: Node, anchored: set[int]) -> str | None:
    """What is wrong with one node itself (its tag, its scalar), never quoting it."""
    if node.tag not in _ALLOWED_TAGS:
        return ("a YAML tag ('!...') is not supported here: quote the value if it is a string that starts "
                "with '!' (a password, for example)")
    if isinstance(node, ScalarNode):
        return _scalar_problem(node, anchored)
    if isinstance(node, MappingNode):
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode):
                return "a mapping or a list as a mapping key is not supported"
    return None


def _check_tree(node: Node, loc: Loc, visited: set[int], anchored: set[int]) -> _Problem | None:
    """The first problem in the node tree, as (key path, problem): a duplicate key, a tag, a node's value."""
    if id(node) in visited:  # an alias seen before
        return None
    visited.add(id(node))
    problem = _node_problem(node, anchored)
    if problem:
        return dotted(loc) or None, problem
    if isinstance(node, MappingNode):
        return _check_mapping(node, loc, visited, anchored)
    if isinstance(node, SequenceNode):
        items = ((item, (*loc, index)) for index, item in enumerate(node.value))
        return _first_problem(items, visited, anchored)
    return None


def _check_mapping(node: MappingNode, loc: Loc, visited: set[int],
                   anchored: set[int]) -> _Problem | None:
    """A mapping's first duplicate key or problem below it, key by key."""
    first_line: dict[str, int] = {}
    for key_node, value_node in node.value:
        child: Loc = (*loc, "?")
        if key_node.tag != _MERGE:
            duplicate = _duplicate_key(key_node, first_line)
            if duplicate:
                return dotted(loc) or None, duplicate
            child = (*loc, key_node.value)
        # (no list per entry: this runs for every key of the document)
        found = _check_tree(key_node, child, visited, anchored) or \
            _check_tree(value_node, child, visited, anchored)
        if found:
            return found
    return None


def _duplicate_key(key_node: Node, first_line: dict[str, int]) -> str | None:
    """The problem when ``key_node``'s key was defined before in its mapping, else None (its line
    is noted in ``first_line``)."""
    key, line = key_node.value, key_node.start_mark.line + 1
    if key in first_line:
        return f"duplicate key {key!r} at line {line} (first defined at line {first_line[key]})"
    first_line[key] = line
    return None


def _first_problem(children: Iterable[tuple[Node, Loc]], visited: set[int],
                   anchored: set[int]) -> _Problem | None:
    """The first problem below ``children`` (node, key path), checked in order until one is
    found."""
    for node, loc in children:
        found = _check_tree(node, loc, visited, anchored)
        if found:
            return found
    return None
