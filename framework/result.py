"""The one result type every transport returns for a finished (or killed) command."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Result:
    """What one command did on one host.

    ``rc`` is the exit status (``None`` when the command was killed on timeout
    or the channel closed without one); ``signal`` names a terminating signal
    when the transport learnt it. ``stdout``/``stderr`` hold at most the bounded
    tail the transport keeps; ``truncated`` says whether bytes were dropped.
    """

    host: str
    command: str
    rc: int | None
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    timed_out: bool = False
    signal: str | None = None
    truncated: bool = False
    #: what to show a person instead of ``command`` (secrets redacted, wrapper stripped)
    display: str | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    @property
    def failed(self) -> bool:
        return not self.ok

    @property
    def command_display(self) -> str:
        return self.display if self.display is not None else self.command

    def tail(self, lines: int = 10) -> str:
        """The last ``lines`` lines of stderr, else of stdout (for error messages)."""
        for text in (self.stderr, self.stdout):
            text = text.strip()
            if text:
                return "\n".join(text.splitlines()[-lines:])
        return ""

    def __repr__(self) -> str:
        state = "timed out" if self.timed_out else f"rc={self.rc}"
        return f"<Result {self.host}: {self.command_display!r} {state} in {self.duration:.2f}s>"
