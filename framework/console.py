"""Terminal output for the CLI: tables (rich on a terminal, plain text in CI) and logging set-up.

Text from hosts is data: :func:`printable` escapes it. Design: docs/internals/core.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s"
LOG_DATEFMT = "%H:%M:%S"

#: C0 and C1 control characters but tab and newline, DEL, and the bidirectional embeddings,
#: overrides and isolates (which reorder what a terminal shows)
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    r"""``text`` with control characters escaped (``\x1b``, ``\r``, ``\u202e``); tab and newline kept.

    What a host prints can then neither move the cursor, retitle or clear the terminal, nor hide
    or reorder text in a CI log; the escapes show what was there.

    >>> printable("ok\x1b[2J\tdone\n")
    'ok\\x1b[2J\tdone\n'
    """
    return _UNPRINTABLE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r":
        return "\\r"
    return f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}"


def interactive(stream: TextIO | None = None) -> bool:
    """True on a real terminal outside CI: live, coloured output is welcome."""
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)()) and os.environ.get("CI", "").lower() not in (
        "1", "true", "yes",
    )


class PrintableFormatter(logging.Formatter):
    """Log lines with control characters escaped (:func:`printable`): records quote hosts' words too."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def setup_logging(verbose: int = 0) -> None:
    level = logging.WARNING - 10 * verbose
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PrintableFormatter(LOG_FORMAT, LOG_DATEFMT))
    logging.basicConfig(level=max(level, logging.DEBUG), handlers=[handler])
    # paramiko logs every transport exception at ERROR; our errors already say it once
    logging.getLogger("paramiko").setLevel(logging.CRITICAL if verbose < 2 else logging.DEBUG)


#: progress lines come from every host's thread at once: print() writes the text and the newline apart, so two
#: hosts' lines could glue together ("…reinstalled)22:59:31 host2: …", seen on an 8-host redeploy)
_EVENT_LOCK = threading.Lock()


def event(host: str, message: str, stream: TextIO | None = None) -> None:
    """One progress line: ``HH:MM:SS host: message`` (timestamped, greppable in CI logs), written whole."""
    import time

    line = f"{time.strftime('%H:%M:%S')} {printable(host)}: {printable(message)}\n"
    out = stream or sys.stderr
    with _EVENT_LOCK:
        out.write(line)
        out.flush()


def live_wanted(stream: TextIO | None = None) -> bool:
    """A live display on ``stream`` (default stderr, where progress goes): a terminal outside CI whose ``TERM``
    is set and not ``dumb`` (a dumb terminal, or one not named, gets plain lines: no cursor movement)."""
    stream = stream or sys.stderr
    return interactive(stream) and os.environ.get("TERM", "dumb") not in ("", "dumb")


#: progress messages also kept above the live display as they come (not only as a host's last line)
_KEPT = re.compile(r"\b(FAILED|ERROR)\b|^(warning|retrying|relay)\b", re.IGNORECASE)


@contextlib.contextmanager
def progress(stream: TextIO | None = None) -> Iterator[Callable[[str, str], None]]:
    """An ``on_event(host, message)`` for the long commands (deploy, run) while the block runs.

    On a terminal (:func:`live_wanted`) a rich live display: one row per host with its latest message;
    ``NO_COLOR`` (non-empty) turns every colour and style code off. Failures and warnings are printed above it
    as they come, and when the block ends the display goes and each host's last message stays as a line of
    its own, so the terminal keeps what happened per host. Anywhere else (a pipe, CI, ``TERM=dumb``) the
    plain :func:`event` lines. rich is imported only for the live display.
    """
    out = stream or sys.stderr
    if not live_wanted(out):
        yield lambda host, message: event(host, message, out)
        return
    import time

    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    con = Console(file=out, color_system=None if os.environ.get("NO_COLOR") else "auto", highlight=False)
    bar = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                   console=con, transient=True, redirect_stdout=False, redirect_stderr=False)
    tasks: dict[str, Any] = {}
    last: dict[str, str] = {}
    lock = threading.Lock()

    def on_event(host: str, message: str) -> None:
        row = f"{printable(host)}: {printable(message)}"
        with lock:
            last[host] = message
            if host in tasks:
                bar.update(tasks[host], description=row.replace("\n", " "))
            else:
                tasks[host] = bar.add_task(row.replace("\n", " "))
        if _KEPT.search(message):
            bar.console.print(Text(f"{time.strftime('%H:%M:%S')} {row}"))

    # log lines (warnings) go above the display too, instead of through it
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) is out]
    above = _Above(bar.console, Text)
    saved = [(h, h.setStream(above)) for h in handlers]
    bar.start()
    try:
        yield on_event
    finally:
        bar.stop()
        for h, stream in saved:
            h.setStream(stream)
        with lock:
            final = dict(last)
        for host, message in final.items():
            event(host, message, out)


class _Above:
    """A text stream whose lines a rich console prints above its live display (for the logging handlers)."""

    def __init__(self, con: Any, text: Any) -> None:
        self.con, self.text, self.partial = con, text, ""

    def write(self, data: str) -> int:
        *lines, self.partial = (self.partial + data).split("\n")
        for line in lines:
            self.con.print(self.text(printable(line)))
        return len(data)

    def flush(self) -> None:
        pass


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt so the same teardown runs for both."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _first_line(cell: str) -> str:
    """The first line of ``cell`` ("" for an empty cell)."""
    return (cell.splitlines() or [""])[0]


def _widths(headers: Sequence[str], firsts: list[list[str]]) -> list[int]:
    """Each column's width: its widest header or first line, at most 60."""
    widths = [len(h) for h in headers]
    for r in firsts:
        for i, c in enumerate(r[: len(widths)]):
            widths[i] = min(max(widths[i], len(c)), 60)
    return widths


def _fmt_row(widths: list[int], values: Sequence[str]) -> str:
    """One table line: every value but the last padded to its column's width (a value past the
    headers is not padded)."""
    padded = [v.ljust(w) for v, w in zip(values[:-1], [*widths, *[0] * len(values)])]
    return "  ".join([*padded, *values[-1:]]).rstrip()


def _continuations(widths: list[int], row: list[str]) -> list[str]:
    """The second and later lines of ``row``'s cells, each indented to its column."""
    return [
        " " * (sum(widths[:i]) + 2 * i) + "  " + extra
        for i, c in enumerate(row)
        for extra in c.splitlines()[1:]
    ]


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A fixed-width text table; multi-line cells continue on indented lines."""
    cells = [[str(c) for c in r] for r in rows]
    firsts = [[_first_line(c) for c in r] for r in cells]
    widths = _widths(headers, firsts)
    out = [_fmt_row(widths, list(headers)), _fmt_row(widths, ["-" * w for w in widths])]
    for r, first in zip(cells, firsts):
        out.append(_fmt_row(widths, first))
        out.extend(_continuations(widths, r))
    return "\n".join(out)


def _rich_table(headers: Sequence[str], cells: list[list[str]], title: str | None) -> Any:
    """The rich table of :func:`print_table` on a terminal: cells as Text, never markup."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(printable(title)) if title else None)
    for h in headers:
        table.add_column(Text(printable(h)))
    for r in cells:
        table.add_row(*(Text(c) for c in r))
    return table


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *,
                title: str | None = None, stream: TextIO | None = None) -> None:
    """A table of text: rich on a terminal (cells as Text, never markup), :func:`plain_table` otherwise.

    Every cell, header and the title go through :func:`printable` in both modes.
    """
    stream = stream or sys.stdout
    cells = [[printable(str(c)) for c in r] for r in rows]
    if interactive(stream):
        from rich.console import Console

        Console(file=stream).print(_rich_table(headers, cells, title))
        return
    if title:
        print(printable(title), file=stream)
    print(plain_table([printable(h) for h in headers], cells), file=stream)


def print_json(data: object, stream: TextIO | None = None) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str), file=stream or sys.stdout)
