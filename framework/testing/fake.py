"""FakeTransport: scripted results for unit tests of pure logic, loud on surprises.

Rules map a command line (exact string or compiled regex, matched against the
*display* form so secrets never need to appear in tests) to a canned result or
to a callable. A tiny in-memory file system answers the file-handling commands
``Host.put``/``Host.get`` send (``mkdir -p``, ``sha256sum``, ``mv -f``, ``rm -f``),
so transfer verification is tested without a network.

    fake = FakeTransport("node1")
    fake.on("hostname", stdout="node1\\n")
    fake.on(re.compile(r"^sleep "), timed_out=True)
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from framework.errors import HostError
from framework.result import Result

Pattern = Union[str, "re.Pattern[str]"]
Handler = Callable[[str], Result]


@dataclass
class _Rule:
    pattern: Pattern
    rc: int | None = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    raises: BaseException | None = None
    handler: Handler | None = None
    times: int | None = None  # None: unlimited

    def matches(self, text: str) -> bool:
        if isinstance(self.pattern, str):
            return self.pattern == text
        return bool(self.pattern.search(text))


class FakeTransport:
    """A transport whose behaviour is scripted; unexpected commands raise AssertionError."""

    def __init__(self, name: str = "fake", *, files: dict[str, bytes] | None = None) -> None:
        self.name = name
        self.rules: list[_Rule] = []
        self.calls: list[str] = []
        self.files: dict[str, bytes] = dict(files or {})
        self.connected = False
        self.connect_error: BaseException | None = None
        self.corrupt_next_put = False

    def on(
        self, pattern: Pattern, *, rc: int | None = 0, stdout: str = "", stderr: str = "",
        timed_out: bool = False, raises: BaseException | None = None,
        handler: Handler | None = None, times: int | None = None,
    ) -> FakeTransport:
        self.rules.append(_Rule(pattern, rc, stdout, stderr, timed_out, raises, handler, times))
        return self

    def connect(self) -> None:
        if self.connect_error is not None:
            raise self.connect_error
        self.connected = True

    def close(self) -> None:
        self.connected = False

    def run(self, line: str, *, timeout: float | None, display: str, max_output: int = 0) -> Result:
        self.connect()
        self.calls.append(display)
        for rule in self.rules:
            if rule.matches(display):
                if rule.times is not None:
                    if rule.times <= 0:
                        continue
                    rule.times -= 1
                if rule.raises is not None:
                    raise rule.raises
                if rule.handler is not None:
                    return rule.handler(display)
                return Result(self.name, line, None if rule.timed_out else rule.rc, rule.stdout,
                              rule.stderr, 0.0, timed_out=rule.timed_out, display=display)
        builtin = self._builtin(line, display)
        if builtin is not None:
            return builtin
        raise AssertionError(f"FakeTransport({self.name}): unexpected command {display!r}")

    # -- in-memory files ------------------------------------------------------
    def _builtin(self, line: str, display: str) -> Result | None:
        try:
            argv = shlex.split(line)
        except ValueError:
            return None
        if argv[:1] == ["mkdir"]:
            return self._ok(line, display)
        if argv[:2] == ["sha256sum", "--"] and len(argv) == 3:
            data = self.files.get(argv[2])
            if data is None:
                return Result(self.name, line, 1, "", f"sha256sum: {argv[2]}: No such file\n", display=display)
            return self._ok(line, display, f"{hashlib.sha256(data).hexdigest()}  {argv[2]}\n")
        if argv[:3] == ["mv", "-f", "--"] and len(argv) == 5:
            self.files[argv[4]] = self.files.pop(argv[3])
            return self._ok(line, display)
        if argv[:3] == ["rm", "-f", "--"]:
            for p in argv[3:]:
                self.files.pop(p, None)
            return self._ok(line, display)
        return None

    def _ok(self, line: str, display: str, stdout: str = "") -> Result:
        return Result(self.name, line, 0, stdout, "", 0.0, display=display)

    def put(self, local: Path, remote: str, progress: Callable[[int, int], None] | None = None) -> None:
        self.connect()
        data = Path(local).read_bytes()
        if self.corrupt_next_put:
            self.corrupt_next_put = False
            data = data[:-1] + bytes([data[-1] ^ 0xFF]) if data else b"x"
        self.files[remote] = data
        if progress is not None:
            progress(len(data), len(data))

    def get(self, remote: str, local: Path) -> None:
        self.connect()
        if remote not in self.files:
            raise HostError(self.name, f"no such file {remote}")
        Path(local).write_bytes(self.files[remote])
