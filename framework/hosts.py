"""Host (one machine) and Cluster (bounded fan-out over many) on an injected transport.

Design: docs/internals/core.md.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import secrets
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from framework import commands, fetchcaps
from framework.commands import Command
from framework.errors import (
    Cancelled,
    CommandFailed,
    CommandTimedOut,
    FrameworkError,
    HostError,
    HostUnreachable,
    MultiHostError,
    TransferError,
    reason_of,
)
from framework.fetchcaps import FetchCapError, FetchCaps
from framework.result import Result
from framework.transport.base import DEFAULT_MAX_OUTPUT, Process, Transport

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig, HostSpec

log = logging.getLogger("camit.hosts")
T = TypeVar("T")

DEFAULT_COMMAND_TIMEOUT = 600.0
DEFAULT_MAX_PARALLEL = 32
#: how long an interrupted ``Cluster.map`` waits for its hosts' killed commands before it re-raises
CANCEL_GRACE = 15.0


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Host:
    """One machine of the cluster, reached through ``transport``.

    ``spec`` is the ``config.HostSpec`` it came from (or ``None`` for ad-hoc
    hosts); its ``command_timeout`` is the default timeout of ``run``.
    """

    def __init__(self, name: str, transport: Transport, *, spec: HostSpec | None = None,
                 command_timeout: float | None = None) -> None:
        self.name = name
        self.transport = transport
        self.spec = spec
        if command_timeout is None:
            command_timeout = getattr(spec, "command_timeout", DEFAULT_COMMAND_TIMEOUT)
        self.command_timeout = float(command_timeout)
        self.broken: HostError | None = None
        #: set by the Cluster when the run is interrupted: no new command, uploads abort
        self.cancel_event = threading.Event()
        self.log = logging.LoggerAdapter(log, {"host": name})

    def _check_cancelled(self) -> None:
        if self.cancel_event.is_set():
            raise Cancelled(self.name, "interrupted: not starting anything new")

    @classmethod
    def from_spec(cls, spec: HostSpec, transport: Transport | None = None) -> Host:
        if transport is None:
            from framework.transport.ssh import SshTransport

            transport = SshTransport.from_spec(spec)
        return cls(spec.name, transport, spec=spec)

    def __repr__(self) -> str:
        return f"<Host {self.name} via {self.transport!r}>"

    # -- connection -----------------------------------------------------------
    def connect(self) -> None:
        """Connect now (otherwise the first command does); remembers a failure."""
        if self.broken is not None:
            raise type(self.broken)(self.name, reason_of(self.broken, self.name)) from self.broken
        try:
            self.transport.connect()
        except HostUnreachable as exc:
            self.broken = exc
            raise
        except HostError as exc:  # key or auth problems are as final
            self.broken = exc
            raise

    def reset(self) -> None:
        """Forget a connection failure and drop the connection (next call reconnects)."""
        self.broken = None
        self.transport.close()

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands -------------------------------------------------------------
    def run(
        self,
        command: Command,
        *,
        env: Mapping[str, Any] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        check: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> Result:
        """Run ``command`` (argv or shell script) and return its Result.

        ``timeout`` (default: the host's ``command_timeout``; ``0`` for none) is
        wall-clock: on expiry the remote process group is killed and the result
        has ``timed_out=True`` (``check=True`` raises ``CommandTimedOut``).
        """
        self._check_cancelled()
        self.connect()
        line, staged = self._line(command, env, cwd)
        limit = self.command_timeout if timeout is None else (timeout or None)
        self.log.debug("%s: run %s", self.name, line.display)
        try:
            result = self.transport.run(line.text, timeout=limit, display=line.display, max_output=max_output,
                                        cancel=self.cancel_event)
        except BaseException as exc:
            if isinstance(exc, HostUnreachable):
                self.broken = exc
            if staged:  # the command removes it first thing; this is for one that never started
                self._unstage(staged)
            raise
        self.log.debug("%s: %r", self.name, result)
        if check:
            _raise_for(result, limit)
        return result

    def spawn(self, command: Command | commands.Line, *, env: Mapping[str, Any] | None = None,
              cwd: str | None = None, max_output: int = DEFAULT_MAX_OUTPUT) -> Process:
        """Start ``command`` and return a running ``Process`` (stdin, lines, wait, kill).

        ``command`` may be a ``commands.Line`` built already (its redacted display is kept).
        """
        if isinstance(command, commands.Line):
            if env or cwd:
                raise ValueError("a built Line carries its own environment and directory")
            line = command
            self._check_cancelled()
            self.connect()
        else:
            self._check_cancelled()
            self.connect()
            line, _ = self._line(command, env, cwd)
        self.log.debug("%s: spawn %s", self.name, line.display)
        try:
            return self.transport.spawn(line.text, display=line.display, max_output=max_output)
        except HostUnreachable as exc:
            self.broken = exc
            raise

    def _line(self, command: Command, env: Mapping[str, Any] | None, cwd: str | None) -> tuple[commands.Line, str]:
        """The line for ``command``; secret values of ``env`` (anything with ``reveal()``) are never on it:
        they go to a new private file on the host (SFTP, ``O_EXCL``, 0600 before the first byte) that the
        line reads and removes first. Returns the line and that file ('' without secrets)."""
        plain, hidden = commands.secret_env(env)
        if not hidden:
            return commands.build(command, env=env, cwd=cwd), ""
        staged = f"/tmp/camit-env-{secrets.token_hex(16)}"
        with tempfile.TemporaryDirectory(prefix="camit-env-") as folder:  # 0700, files 0600
            local = Path(folder, "env")
            fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(commands.env_file_text(hidden))
            self.transport.put(local, staged)
        line = commands.build(command, env=plain, cwd=cwd, env_file=staged)
        redacted = commands.build(command, env={**plain, **dict.fromkeys(hidden, commands.REDACTED)}, cwd=cwd)
        return commands.Line(line.text, redacted.display), staged

    def _unstage(self, staged: str) -> None:
        try:
            line = commands.build(["rm", "-f", "--", staged])
            self.transport.run(line.text, timeout=30, display=line.display, max_output=4096)
        except FrameworkError:
            pass

    def check(self, command: Command, **kwargs: Any) -> Result:
        """``run(..., check=True)``: raise ``CommandFailed``/``CommandTimedOut`` unless rc is 0."""
        __tracebackhide__ = True
        return self.run(command, check=True, **kwargs)

    # -- files ----------------------------------------------------------------
    def put(self, local: Path | str, remote: str, *, sha256: str | None = None,
            progress: Callable[[int, int], None] | None = None) -> str:
        """Upload ``local`` to ``remote``; verify sha256 on the host; replace atomically.

        Returns the hex digest. A mismatch removes the partial file and raises
        ``TransferError`` naming both digests. ``progress(sent, total)`` is called as bytes go.
        """
        local = Path(local)
        digest = sha256 or sha256_file(local)
        part = f"{remote}.camit-part-{secrets.token_hex(4)}"
        self.check(["mkdir", "-p", "--", posixpath.dirname(remote) or "/"])
        try:
            def tick(sent: int, total: int) -> None:
                self._check_cancelled()  # aborts the transfer; the partial file is removed below
                if progress is not None:
                    progress(sent, total)

            self.transport.put(local, part, progress=tick)
            got = self.remote_sha256(part)
            if got != digest:
                raise TransferError(self.name, f"sha256 mismatch after upload of {local.name} to {remote}: "
                                               f"local {digest}, on host {got}")
            self.check(["mv", "-f", "--", part, remote])
        except BaseException:
            try:  # clean up even when cancelled: this is the one command still allowed
                line = commands.build(["rm", "-f", "--", part])
                self.transport.run(line.text, timeout=30, display=line.display, max_output=4096)
            except FrameworkError:
                pass
            raise
        return digest

    def get(self, remote: str, local: Path | str, *, cap: FetchCaps | None = None, keep_partial: bool = False) -> str:
        """Download ``remote`` to ``local`` (mode 0600), verified against the host's sha256.

        Bounded by ``cap`` (default ``framework.fetchcaps.caps()``): past its byte or time cap this raises
        ``FetchCapError`` naming host and file; with ``keep_partial`` what came so far is left at ``local``.
        """
        local = Path(local)
        expected = self.remote_sha256(remote)
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(local.name + f".camit-part-{secrets.token_hex(4)}")
        try:
            try:
                # an interrupt stops the download at its next chunk, as it kills a running command
                self.transport.get(remote, part, cap=replace(cap or fetchcaps.caps(), cancel=self.cancel_event))
            except FetchCapError:
                if keep_partial and part.exists():
                    part.replace(local)
                raise
            got = sha256_file(part)
            if got != expected:
                raise TransferError(self.name, f"sha256 mismatch after download of {remote}: "
                                               f"on host {expected}, local {got}")
            part.replace(local)
        finally:
            part.unlink(missing_ok=True)
        return expected

    def remote_sha256(self, path: str) -> str:
        result = self.run(commands.sha256_cmd(path), timeout=max(self.command_timeout, 60.0))
        if not result.ok:
            raise TransferError(self.name, f"cannot hash {path}: {result.tail(3) or f'rc {result.rc}'}")
        try:
            return commands.parse_sha256(result.stdout)
        except ValueError as exc:
            raise TransferError(self.name, str(exc)) from None


def _raise_for(result: Result, timeout: float | None) -> None:
    __tracebackhide__ = True
    if result.timed_out:
        raise CommandTimedOut(result, timeout or 0.0)
    if result.rc != 0:
        raise CommandFailed(result)


class GroupResult(Mapping[str, Any], Generic[T]):
    """host name → value (a ``Result`` for ``run``) or the exception that host raised."""

    def __init__(self, items: Iterable[tuple[str, T | BaseException]]) -> None:
        self._items: dict[str, T | BaseException] = dict(items)

    def __getitem__(self, key: str) -> T | BaseException:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def error_of(self, host: str) -> BaseException | None:
        """The error for ``host``: its exception, or CommandFailed/TimedOut for a failed Result."""
        value = self._items[host]
        if isinstance(value, BaseException):
            return value
        if isinstance(value, Result) and value.failed:
            try:
                _raise_for(value, None)
            except FrameworkError as exc:
                return exc
        return None

    @property
    def failed(self) -> dict[str, BaseException]:
        return {h: e for h in self._items if (e := self.error_of(h)) is not None}

    @property
    def succeeded(self) -> dict[str, T]:
        return {h: v for h, v in self._items.items() if self.error_of(h) is None}  # type: ignore[misc]

    @property
    def ok(self) -> bool:
        return not self.failed

    def raise_on_failure(self) -> GroupResult[T]:
        failed = self.failed
        if failed:
            raise MultiHostError(failed, total=len(self._items))
        return self

    def __repr__(self) -> str:
        return f"<GroupResult {len(self.succeeded)} ok, {len(self.failed)} failed>"


_POOL_THREAD = threading.local()


def _mark_pool_thread() -> None:
    _POOL_THREAD.active = True


def _new_pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="camit-host", initializer=_mark_pool_thread)


class Cluster:
    """Many hosts, one bounded pool; every call reports every host."""

    def __init__(self, hosts: Sequence[Host], *, max_parallel: int = DEFAULT_MAX_PARALLEL) -> None:
        names = [h.name for h in hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate host names in {names}")
        self.hosts: dict[str, Host] = {h.name: h for h in hosts}
        self.max_parallel = max(1, int(max_parallel))
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @classmethod
    def from_env(
        cls,
        env: EnvConfig,
        names: Sequence[str] | None = None,
        *,
        transport_factory: Callable[[HostSpec], Transport] | None = None,
        max_parallel: int | None = None,
    ) -> Cluster:
        """Hosts of ``env`` (a ``config.EnvConfig``), optionally only ``names``."""
        specs = env.select(names)
        hosts = [Host.from_spec(s, transport_factory(s) if transport_factory else None) for s in specs]
        return cls(hosts, max_parallel=max_parallel or env.max_parallel)

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts.values())

    def __len__(self) -> int:
        return len(self.hosts)

    def __repr__(self) -> str:
        return f"<Cluster {', '.join(self.hosts)}>"

    def map(self, fn: Callable[[Host], T], hosts: Iterable[str] | None = None) -> GroupResult[T]:
        """Call ``fn(host)`` on every (selected) host in the pool; collect values or errors.

        The pool's threads live as long as the cluster (``close`` ends them): starting up to
        ``max_parallel`` threads on every call cost more than the commands themselves — each start
        waits for the new thread to run, so the 32nd host began ~30 ms after the first on a busy
        controller. A ``map`` called from inside a pool thread gets a pool of its own (no deadlock).
        """
        targets = [self.hosts[n] for n in hosts] if hosts is not None else list(self.hosts.values())
        if not targets:
            return GroupResult([])
        results: dict[str, T | BaseException] = {}

        def one(host: Host) -> None:
            try:
                results[host.name] = fn(host)
            except Exception as exc:  # every host's failure is kept, never raised here
                if not isinstance(exc, FrameworkError):
                    log.exception("%s: unexpected error", host.name)
                results[host.name] = exc

        nested = getattr(_POOL_THREAD, "active", False)
        pool = _new_pool(min(self.max_parallel, len(targets))) if nested else self._executor()
        futures: list[Future[None]] = []
        try:
            for host in targets:
                futures.append(pool.submit(one, host))
            wait(futures)
        except KeyboardInterrupt:
            # Ctrl-C/SIGTERM: this map's hosts stop starting commands, kill the ones running (as a timeout
            # does) and abort uploads; the pool drains within CANCEL_GRACE and the interrupt goes on to the
            # caller. The cancel is scoped to this map: cleanup after it (lease release, fetch, core scan,
            # run-folder removal) runs on the same hosts
            try:
                self.cancel(targets)
                wait(futures, timeout=CANCEL_GRACE)
            finally:
                for host in targets:
                    host.cancel_event.clear()
            raise
        finally:
            if nested:
                pool.shutdown(wait=True)
        return GroupResult((h.name, results[h.name]) for h in targets)

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = _new_pool(self.max_parallel)
            return self._pool

    def run(self, command: Command, *, hosts: Iterable[str] | None = None, **kwargs: Any) -> GroupResult[Result]:
        """``Host.run`` on every host; a host that cannot connect holds its exception."""
        kwargs.pop("check", None)
        return self.map(lambda h: h.run(command, **kwargs), hosts)

    def check(self, command: Command, **kwargs: Any) -> GroupResult[Result]:
        """``run`` then raise one ``MultiHostError`` naming each failed host."""
        return self.run(command, **kwargs).raise_on_failure()

    def connect(self) -> GroupResult[None]:
        return self.map(lambda h: h.connect())

    def cancel(self, hosts: Iterable[Host] | None = None) -> None:
        """Interrupt what runs on ``hosts`` (default: every host; see ``Host.cancel_event``)."""
        for h in self.hosts.values() if hosts is None else hosts:
            h.cancel_event.set()

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        for h in self.hosts.values():
            h.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
