"""The one format of what host-side scripts print back, and its one parser (standard library only).

A script prints *tagged records*: a tag line ``<mark><tag>[ <value>]`` and the body lines up to
the next one; :func:`read_records` parses them, :func:`tag_line` and :func:`sh_tag` write tag
lines. The format and its marks: docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the mark that opens a tag line
MARK = "@@"
#: the preflight probe's mark (its bodies are other tools' output: a distinctive mark)
PROBE_MARK = "@@camit@@ "


@dataclass(frozen=True)
class Record:
    """One tag line and the body lines after it (newlines kept; ``line`` is the tag line as printed)."""

    tag: str
    value: str
    body: str
    line: str

    @property
    def raw(self) -> str:
        """The record as printed: its tag line and its body."""
        return f"{self.line}\n{self.body}"


def read_records(text: str, mark: str = MARK) -> list[Record]:
    """The tagged records of ``text`` in order; lines before the first tag line are dropped."""
    out: list[Record] = []
    for chunk in _chunks(text.splitlines(keepends=True), mark):
        stripped = chunk[0].rstrip("\r\n")
        tag, _, value = stripped[len(mark):].partition(" ")
        out.append(Record(tag, value, "".join(chunk[1:]), stripped))
    return out


def _chunks(lines: list[str], mark: str) -> list[list[str]]:
    """The lines from each tag line up to the next one (the lines before the first are dropped)."""
    chunks: list[list[str]] = []
    for line in lines:
        if line.startswith(mark):
            chunks.append([line])
        elif chunks:
            chunks[-1].append(line)
    return chunks


def tag_line(tag: str, value: str = "", mark: str = MARK) -> str:
    """``@@tag value`` (one line, no newline)."""
    return f"{mark}{tag}" + (f" {value}" if value else "")


def sh_tag(tag: str, value_expr: str | None = None, mark: str = MARK) -> str:
    """An ``sh`` command printing a tag line; ``value_expr`` is a shell word (``"$now"``) printed as the value.

    ``tag`` and ``mark`` must be plain text (no ``%``, ``\\`` or ``'``): they go into a ``printf`` format.
    """
    if value_expr is None:
        return f"printf '{mark}{tag}\\n'"
    return f"printf '{mark}{tag} %s\\n' {value_expr}"


__all__ = ["MARK", "PROBE_MARK", "Record", "read_records", "sh_tag", "tag_line"]
