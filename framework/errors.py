"""The one exception tree of camit; every error carries the evidence a person needs.

Each class says when it is raised; the tree, with exit codes: docs/internals/core.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from framework.result import Result


class Holder(Protocol):
    """A lease's holder as :class:`LeaseHeld` names it (``framework.lease.LeaseRecord``)."""

    def describe(self, now: float | None = None) -> str: ...

#: exit statuses shared by every ``camit`` command
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INFRA = 3
#: Ctrl-C or SIGTERM ended the command (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130

#: Exit statuses of a pytest session with camit (``pytest suites/cam``); the Jenkinsfile maps 1 to
#: UNSTABLE and everything from 2 up to FAILURE. 0-5 are pytest's own, 6-8 camit's: an infrastructure
#: failure ends the session with one of these (``pytest.exit``, one line naming the host and step)
#: instead of one error per test.
#:
#: ====  =====================================================================
#: code  meaning
#: ====  =====================================================================
#: 0     every test passed
#: 1     tests failed (CAM, not the cluster)
#: 2     interrupted: Ctrl-C, SIGTERM (a Jenkins abort or timeout), SIGHUP
#: 3     pytest internal error
#: 4     usage error (options; an env file that does not load)
#: 5     no tests collected
#: 6     cluster unreachable: a host down, authentication or host key refused
#: 7     lease held by another owner (after ``CAMIT_LEASE_WAIT``), or lost mid-run
#: 8     deploy failed
#: ====  =====================================================================
SESSION_UNREACHABLE = 6
SESSION_LEASE = 7
SESSION_DEPLOY = 8
#: what each session exit status means (the table above), for messages and manifest.json
SESSION_MEANING = {
    0: "ok", 1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected",
    SESSION_UNREACHABLE: "cluster unreachable", SESSION_LEASE: "lease held or lost", SESSION_DEPLOY: "deploy failed",
}


class FrameworkError(Exception):
    """Base class: raised for every failure camit reports on purpose."""

    exit_code = EXIT_INFRA

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(FrameworkError):
    """Raised when the command line or an option value is wrong."""

    exit_code = EXIT_USAGE


class ConfigError(FrameworkError):
    """Raised when an environment file cannot be read or is invalid.

    ``file`` is the path as the user gave it, ``key_path`` the dotted path of
    the offending key (``host_info.host2.manage_nic.ip``) or ``None`` for
    file-level problems. ``str()`` reads ``<file>: <key_path>: <problem>``.
    """

    exit_code = EXIT_USAGE

    def __init__(self, file: str, key_path: str | None, problem: str) -> None:
        self.file = file
        self.key_path = key_path
        self.problem = problem
        where = f"{file}: {key_path}: " if key_path else f"{file}: "
        super().__init__(where + problem)


class LabError(FrameworkError):
    """Raised when the local namespace lab cannot be brought up, used or removed."""

    exit_code = EXIT_INFRA


class ArtifactError(FrameworkError):
    """Raised when an artifact cannot be built (missing tool, failed build, unexpected makeself)."""


class LeaseHeld(FrameworkError):
    """Raised when a host of the lease is held by someone else (after waiting, if asked to wait)."""

    exit_code = EXIT_INFRA

    def __init__(self, host: str, holder: Holder | None, now: float | None = None, *,
                 waited: float = 0.0) -> None:
        self.host = host
        self.holder = holder
        who = holder.describe(now) if holder is not None else "an unknown holder"
        text = f"{host}: leased by {who}"
        if waited:
            text += f"; still held after waiting {waited:.0f}s"
        text += " (wait with --wait, or free a dead holder's lease with 'camit lease release --force')"
        super().__init__(text)


class LeaseError(FrameworkError):
    """Raised when a lease file cannot be created, read or replaced on a host."""

    exit_code = EXIT_INFRA


class LeaseLost(FrameworkError):
    """Raised when our lease was taken over while we held it (we were judged stale)."""

    exit_code = EXIT_INFRA


class HostError(FrameworkError):
    """Raised for a failure on one host: ``host`` names it (the env's host name), ``reason`` says what.

    ``str()`` is ``<host>: <reason>``.
    """

    exit_code = EXIT_INFRA

    def __init__(self, host: str, message: str) -> None:
        self.host = host
        self.reason = message
        super().__init__(f"{host}: {message}")


class HostUnreachable(HostError):
    """Raised when the host cannot be reached over TCP/SSH within the connect timeout."""


class AuthenticationFailed(HostError):
    """Raised when the SSH server refuses every credential we offered."""


class HostKeyError(HostError):
    """Raised when a host key is unknown under the ``strict`` policy, or has changed."""


class TransferError(HostError):
    """Raised when a file transfer fails or its sha256 differs on the other side."""

    exit_code = EXIT_FAILED


class Cancelled(HostError):
    """Raised on a host when the run was interrupted: no new command starts, uploads stop."""

    exit_code = EXIT_INTERRUPTED


class DeployError(HostError):
    """Raised when deploying to a host fails; ``step`` names where (probe, upload, install-run, ...)."""

    exit_code = EXIT_FAILED

    def __init__(self, host: str, step: str, message: str, *, exit_code: int | None = None) -> None:
        self.step = step
        if exit_code is not None:
            self.exit_code = exit_code  # an unreachable host stays an infrastructure error
        super().__init__(host, f"deploy step {step!r} failed: {message}")


class CommandError(HostError):
    """A command ran on a host and did not succeed; ``result`` holds the evidence."""

    exit_code = EXIT_FAILED

    def __init__(self, result: Result, message: str) -> None:
        self.result = result
        tail = result.tail()
        text = f"{message}: {result.command_display}"
        if tail:
            text += "\n" + tail
        super().__init__(result.host, text)


class CommandFailed(CommandError):
    """Raised by ``check()`` when a command exits non-zero."""

    def __init__(self, result: Result) -> None:
        super().__init__(result, f"exit status {result.rc}")


class CommandTimedOut(CommandError):
    """Raised when a command outlives its wall-clock timeout (its process group was killed)."""

    def __init__(self, result: Result, timeout: float) -> None:
        self.timeout = timeout
        super().__init__(result, f"timed out after {timeout:g}s")


def reason_of(err: BaseException, host: str | None = None) -> str:
    """What went wrong, without the host's name: ``err.reason`` of a :class:`HostError` (of ``host``, when
    given), else ``str(err)``."""
    return err.reason if isinstance(err, HostError) and host in (None, err.host) else str(err)


class MultiHostError(FrameworkError):
    """Raised after a fan-out when at least one host failed; ``errors`` maps host -> error.

    The message lists every failed host with its cause, one per line. The exit
    code is the most severe of the members' (infrastructure beats failure).
    """

    def __init__(self, errors: Mapping[str, BaseException], total: int | None = None) -> None:
        self.errors = dict(errors)
        n = len(self.errors)
        head = f"{n} of {total} hosts failed" if total is not None else f"{n} host(s) failed"
        lines = [head + ":"]
        for host, err in self.errors.items():
            text = str(err)
            if not text.startswith(f"{host}:"):
                text = f"{host}: {text}"
            lines.append("  " + text.replace("\n", "\n    "))
        super().__init__("\n".join(lines))

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        codes = [getattr(e, "exit_code", EXIT_INFRA) for e in self.errors.values()]
        return max(codes, default=EXIT_FAILED)


def session_exit_code(err: BaseException) -> int | None:
    """The session exit status (``SESSION_*``) an infrastructure error ends a pytest run with; None: not one.

    Unreachable hosts, refused credentials or host keys give 6, a held or lost lease 7, a failed deploy
    (at any step, on any host) 8; a fan-out's ``MultiHostError`` the code its members share.
    """
    if isinstance(err, (LeaseHeld, LeaseLost)):
        return SESSION_LEASE
    if isinstance(err, DeployError):
        return SESSION_DEPLOY
    if isinstance(err, (HostUnreachable, AuthenticationFailed, HostKeyError)):
        return SESSION_UNREACHABLE
    if isinstance(err, MultiHostError) and err.errors:
        codes = {session_exit_code(e) for e in err.errors.values()}
        if len(codes) == 1:
            return codes.pop()
    return None


def one_line(err: BaseException) -> str:
    """``err``'s first line (a command's output tail after it stays in the log); a ``MultiHostError``'s hosts
    joined with ``; ``, each named once."""
    if isinstance(err, MultiHostError):
        return "; ".join(one_line(e) if str(e).startswith(f"{h}:") else f"{h}: {one_line(e)}"
                         for h, e in err.errors.items())
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
