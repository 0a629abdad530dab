"""``camit completion bash|zsh``: a shell completion script generated from camit's own argument
parser.

Design: docs/internals/core.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from framework.errors import EXIT_OK

__all__ = ["Node", "add_parser", "bash_script", "run", "script", "tree", "zsh_script"]

SHELLS = ("bash", "zsh")
#: metavars of options and positionals that name a file / a directory
FILE_METAVARS = frozenset({"FILE"})
DIR_METAVARS = frozenset({"D", "DIR"})


@dataclass
class Node:
    """One (sub-)command: its words path (``camit lease status``), options, value kinds and children."""

    path: str
    options: list[str] = field(default_factory=list)
    #: option → ``("words", "a b")`` | ``("file", "")`` | ``("dir", "")`` | ``("none", "")``
    values: dict[str, tuple[str, str]] = field(default_factory=dict)
    children: dict[str, Node] = field(default_factory=dict)
    #: the positional's completion when there are no sub-commands (``file``, ``words``, or ``none``)
    positional: tuple[str, str] = ("none", "")

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children.values():
            yield from child.walk()


def _remainder_words(action: argparse.Action, metavar: str) -> str | None:
    """The words of a ``a|b|c ...`` metavar on a REMAINDER positional, else None."""
    head = metavar.split("...")[0].strip()
    if action.nargs != argparse.REMAINDER or "|" not in metavar or " " in head:
        return None
    return " ".join(w for w in head.split("|") if w)


def _kind(action: argparse.Action) -> tuple[str, str]:
    """How the value of ``action`` completes: ``(kind, words)`` (see :attr:`Node.values`)."""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return "words", " ".join(str(c) for c in action.choices)
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    return _metavar_kind(action, metavar)


def _metavar_kind(action: argparse.Action, metavar: str) -> tuple[str, str]:
    """How a value completes by its metavar: a file, a folder, the words of a REMAINDER's
    ``a|b|c``, else not at all."""
    if metavar in FILE_METAVARS:
        return "file", ""
    if metavar in DIR_METAVARS:
        return "dir", ""
    words = _remainder_words(action, metavar)
    return ("none", "") if words is None else ("words", words)


def _add_option(node: Node, action: argparse.Action) -> None:
    """Record option ``action`` on ``node``, with its value's kind when it takes one."""
    node.options += action.option_strings
    if action.nargs == 0:
        return
    for opt in action.option_strings:
        node.values[opt] = _kind(action)


def tree(parser: argparse.ArgumentParser, path: str | None = None) -> Node:
    """The command tree of ``parser`` (``path`` defaults to its ``prog``)."""
    node = Node(path or parser.prog)
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            _add_subcommands(node, action)
            continue
        if action.option_strings:
            _add_option(node, action)
        elif node.positional == ("none", ""):
            node.positional = _kind(action)
    return node


def _add_subcommands(node: Node, action: argparse._SubParsersAction[Any]) -> None:
    """Each sub-command of ``action`` as a child of ``node``, with its own tree."""
    for name, sub in action.choices.items():
        node.children[name] = tree(sub, f"{node.path} {name}")


def _q(text: str) -> str:
    """A double-quoted bash word for generated text (the parser's own names: no quote, $ or backtick in them)."""
    if any(c in text for c in '"$`\\'):
        raise ValueError(f"unexpected character in a completion word: {text!r}")
    return f'"{text}"'


_COMPGEN = {
    "file": 'COMPREPLY=( $(compgen -f -- "$cur") )',
    "dir": 'COMPREPLY=( $(compgen -d -- "$cur") )',
}


def _compgen(kind: tuple[str, str]) -> str:
    """The bash statement completing a value of ``kind``."""
    what, words = kind
    if what == "words":
        return f'COMPREPLY=( $(compgen -W {_q(words)} -- "$cur") )'
    return _COMPGEN.get(what, "COMPREPLY=()")


def _descend_cases(nodes: list[Node]) -> list[str]:
    """The case arms that step from a command to its sub-command."""
    return [f'            {_q(f"{n.path}/{name}")}) path={_q(c.path)} ;;'
            for n in nodes for name, c in n.children.items()]


def _value_cases(nodes: list[Node]) -> list[str]:
    """The case arms completing an option's value, one per distinct completion."""
    values: dict[str, list[str]] = {}
    for n in nodes:
        for opt, kind in n.values.items():
            values.setdefault(_compgen(kind), []).append(f"{n.path}/{opt}")
    return [f'        {"|".join(_q(k) for k in keys)}) {action}; return 0 ;;'
            for action, keys in values.items()]


def _word_case(n: Node) -> str:
    """The case arm completing the word after command ``n``: an option or its next word."""
    if n.children:
        rest = f'COMPREPLY=( $(compgen -W {_q(" ".join(n.children))} -- "$cur") )'
    else:
        rest = _compgen(n.positional)
    opts = _q(" ".join(n.options))
    return (f'        {_q(n.path)})\n'
            f'            if [[ "$cur" == -* ]]; then COMPREPLY=( $(compgen -W {opts} -- "$cur") )\n'
            f'            else {rest}; fi ;;')


def _takes_value(nodes: list[Node]) -> str:
    """The case pattern of every option that takes a value (the loop skips that value's word)."""
    takes = sorted({f"{n.path}/{opt}" for n in nodes for opt in n.values})
    return "|".join(_q(t) for t in takes) or '""'


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The bash completion script for ``parser`` (a function ``_<prog>`` and its ``complete`` line)."""
    root = tree(parser)
    prog = root.path
    fn = "_" + "".join(c if c.isalnum() else "_" for c in prog) + "_complete"
    nodes = list(root.walk())
    descend = _descend_cases(nodes)
    takes = _takes_value(nodes)
    value_cases = _value_cases(nodes)
    word_cases = [_word_case(n) for n in nodes]
    nl = "\n"
    return f"""# {prog} completion for bash, generated from {prog}'s argument parser by `{prog} completion bash`.
# Use: eval "$({prog} completion bash)"   (e.g. in ~/.bashrc)
{fn}() {{
    [[ -n "${{ZSH_VERSION-}}" ]] && setopt localoptions ksharrays
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" path={_q(prog)} w i skip=0
    (( COMP_CWORD > 0 )) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    COMPREPLY=()
    for (( i = 1; i < COMP_CWORD; i++ )); do
        w="${{COMP_WORDS[i]}}"
        if (( skip )); then skip=0; continue; fi
        [[ "$w" == "--" ]] && return 0  # the rest is a command or target: the shell's default completion
        case "$path/$w" in
{nl.join(descend)}
            *) case "$path/$w" in
                   {takes}) skip=1 ;;
               esac ;;
        esac
    done
    case "$path/$prev" in
{nl.join(value_cases)}
    esac
    case "$path" in
{nl.join(word_cases)}
    esac
    return 0
}}
complete -o default -F {fn} {prog}
"""


def zsh_script(parser: argparse.ArgumentParser) -> str:
    """The zsh completion script: the bash one under ``bashcompinit``."""
    prog = parser.prog
    body = bash_script(parser).split("\n", 2)[2]
    return (f"# {prog} completion for zsh, generated from {prog}'s argument parser by `{prog} completion zsh`.\n"
            f'# Use: eval "$({prog} completion zsh)"   (e.g. in ~/.zshrc)\n'
            "autoload -U +X compinit && { (( $+functions[compdef] )) || compinit; }\n"
            "autoload -U +X bashcompinit && bashcompinit\n" + body)


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    if shell == "bash":
        return bash_script(parser)
    if shell == "zsh":
        return zsh_script(parser)
    raise ValueError(f"no completion for {shell!r} (one of {', '.join(SHELLS)})")


def add_parser(sub: Any) -> None:
    cp = sub.add_parser("completion", help="print a shell completion script (bash or zsh)")
    cp.add_argument("shell", choices=SHELLS)


def run(args: argparse.Namespace) -> int:
    """The script, generated from this very parser (``args.parser``: camit's, set by the dispatch)."""
    sys.stdout.write(script(args.shell, args.parser))
    return EXIT_OK
