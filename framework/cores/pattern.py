"""The one model of ``kernel.core_pattern``: where the kernel sends a core and how to read its name
(pure).

Both the preflight ``core`` check and the core watcher read the pattern through it
(docs/internals/cores.md).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

#: kind -> the text in the pipe handler's file name that identifies it (kernel ``|<handler>
#: <args>``)
PIPE_HANDLERS: tuple[tuple[str, str], ...] = (
    ("systemd", "systemd-coredump"), ("apport", "apport"), ("abrt", "abrt-hook-ccpp"))
#: the kinds whose cores camit can find and read
CHECKED_KINDS = frozenset({"file", "relative", *(kind for kind, _ in PIPE_HANDLERS)})

#: specifier -> regex of its expansion (kernel format_corename; '/' in names is written as '!')
_SPEC_RE = {
    "p": r"\d+", "P": r"\d+", "i": r"\d+", "I": r"\d+", "u": r"\d+", "g": r"\d+", "d": r"\d+",
    "s": r"\d+", "t": r"\d+", "c": r"\d+", "C": r"\d+", "F": r"\d+",
    "h": r"[^/]*", "e": r"[^/]*", "f": r"[^/]*", "E": r"[^/]*",
}


@dataclass(frozen=True)
class CorePattern:
    """Where ``kernel.core_pattern`` sends cores and how to read their names.

    ``kind``: ``file`` (absolute), ``relative`` (the process's cwd), ``systemd``,
    ``apport``, ``abrt``, ``pipe`` (an unknown handler), ``socket`` (``@…``) or
    ``none`` (empty). ``handler`` is the pipe's program (or the socket's path). For
    file kinds ``regex`` matches a whole path (absolute) or a path suffix (relative)
    and names each specifier's group ``<spec><n>``.
    """

    raw: str
    kind: str
    regex: re.Pattern[str] | None = None
    handler: str | None = None

    @property
    def delivery(self) -> str:
        """How the kernel delivers the core: ``pipe`` for every ``|`` handler, else the kind."""
        return "pipe" if self.kind in ("pipe", *(kind for kind, _ in PIPE_HANDLERS)) else self.kind

    @property
    def checked(self) -> bool:
        """Whether camit can find and read the cores this pattern stores."""
        return self.kind in CHECKED_KINDS

    @property
    def directory(self) -> str | None:
        """For ``file``: the directory before the first ``%`` specifier (``/var/crash/%h/core`` →
        ``/var/crash``)."""
        if self.kind != "file":
            return None
        return self.raw.split("%", 1)[0].rsplit("/", 1)[0] or "/"

    def fields(self, path: str) -> dict[str, str] | None:
        """The specifier values in ``path`` (``{'e': 'python3', 'p': '12'}``), None if it does not
        match."""
        if self.regex is None:
            return None
        m = self.regex.search(path) if self.kind == "relative" else self.regex.fullmatch(path)
        return None if m is None else _specifier_values(m)


def _specifier_values(m: re.Match[str]) -> dict[str, str]:
    """Each specifier's first value in a matched name (groups ``<spec><n>``; an optional one may be
    unset)."""
    out: dict[str, str] = {}
    for name, value in m.groupdict().items():
        if value is not None:
            out.setdefault(name.rstrip("0123456789"), value)
    return out


def _first_line(text: str) -> str:
    """The pattern line of ``text``: the first non-blank line that is not a capture's ``# source:``
    note."""
    lines = [ln.strip() for ln in text.splitlines() if not ln.startswith("# source:")]
    return next((ln for ln in lines if ln), "")


#: a pattern's tokens: a ``%`` specifier, or literal text (a trailing lone ``%`` is neither:
#: dropped)
_TOKEN = re.compile(r"%(.)|([^%]+)", re.DOTALL)


def _path_regex(raw: str) -> str:
    """The regex of the names a file pattern expands to; each specifier a group ``<spec><n>``."""
    parts: list[str] = []
    specs: list[str] = []
    for spec, text in _TOKEN.findall(raw):
        if text:
            parts.append(re.escape(text))
        elif spec in _SPEC_RE:
            parts.append(f"(?P<{spec}{len(specs)}>{_SPEC_RE[spec]})")
            specs.append(spec)
        elif spec == "%":
            parts.append("%")
        # unknown specifiers expand to nothing
    body = "".join(parts)
    # kernel.core_uses_pid appends ".<pid>" to patterns without %p
    return body if "p" in specs else body + r"(?:\.(?P<p99>\d+))?"


def parse_core_pattern(text: str) -> CorePattern:
    """Classify a ``core_pattern`` value (its first line) and, for file patterns, build its path
    regex.

    >>> parse_core_pattern("/var/crash/core.%e.%p").fields("/var/crash/core.python3.12")
    {'e': 'python3', 'p': '12'}
    >>> p = parse_core_pattern("|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h")
    >>> (p.kind, p.delivery, p.handler)
    ('systemd', 'pipe', '/usr/lib/systemd/systemd-coredump')
    """
    raw = _first_line(text)
    if not raw:
        return CorePattern(raw, "none")
    if raw.startswith("|"):
        return _pipe(raw)
    if raw.startswith("@"):
        return CorePattern(raw, "socket", handler=raw[1:].lstrip("@"))
    body = _path_regex(raw)
    if raw.startswith("/"):
        return CorePattern(raw, "file", re.compile(body))
    return CorePattern(raw, "relative", re.compile(r"(?:^|/)" + body + "$"))


def _pipe(raw: str) -> CorePattern:
    """A ``|<handler> <args>`` pattern: a known handler's kind by its file name, else ``pipe``."""
    handler = next(iter(raw[1:].split()), "")
    name = posixpath.basename(handler)
    kind = next((kind for kind, needle in PIPE_HANDLERS if needle in name), "pipe")
    return CorePattern(raw, kind, handler=handler)


__all__ = ["CHECKED_KINDS", "PIPE_HANDLERS", "CorePattern", "parse_core_pattern"]
