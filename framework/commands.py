"""Pure builders for every remote command line: the one place where quoting happens.

A command is an ``Argv`` (each word quoted) or a ``ShellScript`` (text run by ``sh -c``); secrets
are exported with their value but shown as ``***``. Design: docs/internals/core.md.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias


class ShellScript(str):
    """Shell text run by ``sh -c`` as written: pipes, ``&&``, redirections and ``$VAR`` work.

    >>> build(ShellScript("echo $HOME | wc -c")).text
    'echo $HOME | wc -c'
    """

    __slots__ = ()


#: an argv: each word is quoted, nothing is interpreted by a shell
Argv: TypeAlias = list[str] | tuple[str, ...]
#: a command: an argv (quoted word by word) or a shell script (run by ``sh -c``)
Command: TypeAlias = Argv | ShellScript

#: first stderr line of every wrapped command: the remote process-group id (and the login shell's $0)
PGID_MARKER = "__camit_pgid__="
#: login shells that read our POSIX sh lines as /bin/sh would: a command can run in them directly
POSIX_SHELLS = frozenset({"bash", "sh", "dash"})

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REDACTED = "***"


def quote(value: str) -> str:
    """Quote one word for a POSIX shell (the only quoting function we use)."""
    return shlex.quote(str(value))


def _reveal(value: object) -> str:
    reveal = getattr(value, "reveal", None)
    return str(reveal()) if callable(reveal) else str(value)


def _is_secret(value: object) -> bool:
    return callable(getattr(value, "reveal", None))


def join(argv: Sequence[str]) -> str:
    """Join an argv into one shell line, every element quoted."""
    if isinstance(argv, str):
        raise TypeError("join() takes an argv sequence, not a str")
    return " ".join(quote(a) for a in argv)


def script_of(command: Command) -> str:
    """The shell text for a command: argv joined and quoted, a script (any ``str``) verbatim."""
    if isinstance(command, str):
        return command
    if not command:
        raise ValueError("empty command")
    return join(command)


def export_env(env: Mapping[str, object], *, redact: bool = False) -> str:
    """``export A='x' B='y'`` for ``env`` (names validated), or '' when empty."""
    if not env:
        return ""
    parts = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"invalid environment variable name {name!r}")
        shown = REDACTED if (redact and _is_secret(value)) else _reveal(value)
        parts.append(f"{name}={quote(shown)}")
    return "export " + " ".join(parts)


@dataclass(frozen=True)
class Line:
    """A complete remote command line and its redacted display form."""

    text: str
    display: str


def secret_env(env: Mapping[str, object] | None) -> tuple[dict[str, object], dict[str, str]]:
    """``env`` split into the values that may be on a command line and the secrets (revealed), which never
    may: those travel in a private file (:func:`env_file_text`, read by ``build(..., env_file=...)``)."""
    plain = {k: v for k, v in (env or {}).items() if not _is_secret(v)}
    hidden = {k: _reveal(v) for k, v in (env or {}).items() if _is_secret(v)}
    return plain, hidden


def env_file_text(secrets: Mapping[str, str]) -> str:
    """The text of a private env file: one ``export NAME='value'`` line a variable (names validated)."""
    return "".join(export_env({name: value}) + "\n" for name, value in secrets.items())


def build(
    command: Command,
    *,
    env: Mapping[str, object] | None = None,
    cwd: str | None = None,
    env_file: str | None = None,
) -> Line:
    """Build the line that runs ``command`` with ``env`` exported in ``cwd``; with ``env_file``, first read
    that (private, :func:`env_file_text`) file's variables and remove it.

    >>> build(["echo", "a b"], env={"X": "$(id)"}, cwd="/w d").text
    "cd -- '/w d' && export X='$(id)' && echo 'a b'"
    """
    script = script_of(command)

    def assemble(redact: bool) -> str:
        steps = [f". {quote(env_file)} && rm -f -- {quote(env_file)}"] if env_file else []
        if cwd:
            steps.append(f"cd -- {quote(cwd)}")
        exported = export_env(env or {}, redact=redact)
        if exported:
            steps.append(exported)
        if steps:
            # a script runs in its own sh so that its syntax cannot break ours
            body = script if not isinstance(command, str) else f"exec /bin/sh -c {quote(script)}"
            steps.append(body)
            return " && ".join(steps)
        return script

    return Line(assemble(False), assemble(True))


def with_pgid(line: str, *, direct: bool = False, stdin: bool = True) -> str:
    """Wrap ``line`` so its first stderr line reports the process-group id and the login shell.

    sshd starts every session's shell with ``setsid()``, so the shell's ``$$`` is
    the process group (and session) of everything the command starts, unless a
    child leaves it on purpose. By default ``line`` runs in ``/bin/sh`` (``exec``
    keeps that pid), whatever the user's login shell; with ``direct`` — the login
    shell is known to be one of ``POSIX_SHELLS`` — it runs in the login shell
    itself, which saves one exec of ``/bin/sh`` per command (~0.6 ms of host CPU).
    Without ``stdin`` the command reads ``/dev/null``: the caller never has to send
    an EOF, which can race the server's close of a command that already ended.
    """
    head = f"echo {PGID_MARKER}$$ \"$0\" >&2; " + ("" if stdin else "exec </dev/null; ")
    if direct:
        # the trailing `exit $?` keeps the shell from exec'ing the last command: a command killed by a
        # signal then still ends in an exit status (128+n) as under /bin/sh, not in an exit-signal
        # message that paramiko does not report
        return f"{head}{line}\nexit $?"
    return head + f"exec /bin/sh -c {quote(line)}"


def shell_name(arg0: str) -> str:
    """The login shell's name from its ``$0`` (``-bash``, ``/bin/bash`` → ``bash``)."""
    return arg0.strip().lstrip("-").rsplit("/", 1)[-1]


def group_alive(pgid: int) -> str:
    """Shell test: does process group ``pgid`` still have a member that is not a zombie?

    (``kill -0 -PGID`` also succeeds for zombies that nobody has reaped yet.)
    """
    return f"ps -e -o pgid= -o stat= | awk '$1 == {int(pgid)} && $2 !~ /^Z/ {{f = 1}} END {{exit !f}}'"


def kill_group(pgid: int, grace: float = 1.0, step: float = 0.05) -> str:
    """Script: TERM the process group ``pgid``, wait up to ``grace``, then KILL it.

    Only ever called with a pgid our own wrapper reported (never by name).
    """
    if pgid <= 1:
        raise ValueError(f"refusing to signal process group {pgid}")
    tries = max(1, int(grace / step))
    g = f"-{int(pgid)}"
    return (
        f"kill -TERM {g} 2>/dev/null || exit 0; "
        f"i=0; while {group_alive(pgid)}; do "
        f"i=$((i+1)); if [ $i -ge {tries} ]; then kill -KILL {g} 2>/dev/null; exit 0; fi; "
        f"sleep {step}; done"
    )


def sha256_cmd(path: str) -> list[str]:
    """argv printing ``<hex>  <path>`` for one file."""
    return ["sha256sum", "--", path]


def parse_sha256(output: str) -> str:
    """The hex digest from ``sha256sum`` output (ValueError when there is none)."""
    word = output.strip().split(maxsplit=1)[0] if output.strip() else ""
    word = word.lstrip("\\")
    if not re.fullmatch(r"[0-9a-f]{64}", word):
        raise ValueError(f"not a sha256sum line: {output.strip()[:120]!r}")
    return word
