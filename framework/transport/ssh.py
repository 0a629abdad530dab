"""SSH transport over paramiko: the only module that imports paramiko (``config.sshconfig`` borrows
its ssh_config parser) and translates its errors into ``framework.errors``.

Host keys, keepalives, remote process groups and jump hosts: docs/internals/core.md.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko

from framework import commands, fetchcaps
from framework.errors import (
    AuthenticationFailed,
    Cancelled,
    HostError,
    HostKeyError,
    HostUnreachable,
    TransferError,
)
from framework.fetchcaps import FetchCaps
from framework.result import Result
from framework.transport.base import DEFAULT_MAX_OUTPUT, LineQueue, OutputTail

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import HostSpec, JumpSpec, Secret

log = logging.getLogger("camit.ssh")

POLICIES = ("strict", "accept-new", "insecure")
#: how long a killed command may take to go away before we stop waiting
KILL_GRACE = 1.0
#: seconds between keepalives that expect a reply
KEEPALIVE_INTERVAL = 5.0
#: a keepalive unanswered this long means the host stopped answering: the connection is declared lost
KEEPALIVE_DEADLINE = 20.0
#: one SFTP request (open, read, write, stat) waits at most this long for the host
SFTP_TIMEOUT = 60.0
#: how often an idle connection's reader thread wakes to see whether the connection was closed (paramiko: 0.1 s);
#: incoming data wakes it at once either way. Ten wake-ups a second per host were 25 ms of the controller's CPU
#: per second with 128 idle connections — 0.6 s of a 25 s 128-host deploy on the lab (bench/scale.py, issue 18)
READER_WAKEUP = 1.0
_CHUNK = 65536


class _Transport(paramiko.Transport):
    """paramiko's transport whose reader thread polls for a close every ``READER_WAKEUP`` seconds."""

    _active_check_timeout = READER_WAKEUP


def _new_transport(sock: Any, /, **kw: Any) -> paramiko.Transport:
    """``SSHClient.connect``'s ``transport_factory`` (it passes options that differ between paramiko versions)."""
    return _Transport(sock, **kw)


# At most one handshake at a time per target (sshd MaxStartups drops bursts;
# paramiko#664): keyed by (address, port), shared by every transport object.
_handshake_guard = threading.Lock()
_handshake_locks: dict[tuple[str, int], threading.Lock] = {}


def _handshake_lock(address: str, port: int) -> threading.Lock:
    with _handshake_guard:
        return _handshake_locks.setdefault((address, port), threading.Lock())


class _SharedJump:
    """One jump connection and how many host transports hold it."""

    def __init__(self, transport: SshTransport) -> None:
        self.transport = transport
        self.users = 0


# Jump connections shared by the hosts behind them, by (address, port, user, key, known_hosts, policy)
_jumps_guard = threading.Lock()
_jumps: dict[tuple[str, int, str, str, str, str], _SharedJump] = {}


def _acquire_jump(owner: SshTransport, jump: JumpSpec) -> SshTransport:
    key = (jump.address, jump.port, jump.user, str(jump.key_file), str(owner.known_hosts), owner.policy)
    with _jumps_guard:
        entry = _jumps.get(key)
        if entry is None:
            entry = _jumps[key] = _SharedJump(SshTransport(
                f"jump host {jump.display}", jump.address, jump.port, user=jump.user, key_file=jump.key_file,
                known_hosts=owner.known_hosts, policy=owner.policy, connect_timeout=owner.connect_timeout,
            ))
        entry.users += 1
        return entry.transport


def _release_jump(transport: SshTransport) -> None:
    """One host behind ``transport`` is done with it; the last one closes it."""
    with _jumps_guard:
        key = next((k for k, e in _jumps.items() if e.transport is transport), None)
        if key is None:
            return
        _jumps[key].users -= 1
        if _jumps[key].users > 0:
            return
        del _jumps[key]
    transport.close()


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:…`` fingerprint of a public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def parse_public_key(line: str) -> paramiko.PKey:
    """A ``<type> <base64> [comment]`` line → PKey (ValueError when malformed)."""
    parts = line.split()
    if len(parts) < 2:
        raise ValueError(f"not a public key line: {line[:40]!r}")
    try:
        return paramiko.PKey.from_type_string(parts[0], base64.b64decode(parts[1]))
    except Exception as exc:  # paramiko raises several unrelated types here
        raise ValueError(f"cannot parse public key {parts[0]}: {exc}") from exc


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


# known_hosts files as parsed, by path, with the (inode, size, mtime) they were parsed at: every host's connect
# parsed the whole file again (paramiko's load is itself quadratic in the lines), N hosts × an N-line file —
# 0.5 s of the controller's CPU for 128 hosts (bench/scale.py, issue 18)
_known_guard = threading.Lock()
_known: dict[str, tuple[tuple[int, int, int], paramiko.HostKeys]] = {}


def known_host_keys(path: Path) -> paramiko.HostKeys:
    """``path`` parsed, once per version of the file for the whole process (read-only: callers copy out).

    A file replaced or appended to (accept-new, another controller, the user) is parsed again.
    Raises OSError / paramiko.SSHException as ``HostKeys.load`` does.
    """
    st = path.stat()
    version = (st.st_ino, st.st_size, st.st_mtime_ns)
    with _known_guard:  # one thread parses; the others wait for its result instead of parsing too
        cached = _known.get(str(path))
        if cached is not None and cached[0] == version:
            return cached[1]
        keys = paramiko.HostKeys()
        keys.load(str(path))
        _known[str(path)] = (version, keys)
        return keys


def _accept_new(o: SshTransport, hostname: str, key: paramiko.PKey) -> None:
    """accept-new: check known_hosts again and append, under one lock (two controllers meeting the same
    new host record it once; one that recorded a *different* key meanwhile makes this a changed key)."""
    assert o.known_hosts is not None
    fp = fingerprint(key)
    # imported here: only a host key not yet recorded needs it, and filelock (asyncio) costs ~9 ms of start-up
    from filelock import FileLock

    o.known_hosts.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(o.known_hosts) + ".lock", timeout=60):
        seen = paramiko.HostKeys()
        if o.known_hosts.exists():
            try:
                seen.load(str(o.known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise HostKeyError(o.name, f"cannot read known_hosts {o.known_hosts}: {exc}") from exc
        entry = seen.lookup(hostname)
        recorded = entry.get(key.get_name()) if entry is not None else None
        if recorded is not None:
            if recorded.asbytes() == key.asbytes():
                log.info("%s: accept-new: %s key %s for %s was recorded meanwhile", o.name, key.get_name(),
                         fp, hostname)
                return
            raise HostKeyError(
                o.name,
                f"HOST KEY CHANGED for {hostname}: known_hosts ({o.known_hosts}) has {key.get_name()} "
                f"{fingerprint(recorded)}, server offered {fp}; refusing to connect",
            )
        with o.known_hosts.open("a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
    log.warning("%s: accept-new: recorded new %s key %s for %s in %s",
                o.name, key.get_name(), fp, hostname, o.known_hosts)


class _Policy(paramiko.MissingHostKeyPolicy):
    """Decides about a key that is in neither the pin nor known_hosts."""

    def __init__(self, owner: SshTransport) -> None:
        self.owner = owner

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        o = self.owner
        fp = fingerprint(key)
        if o.policy == "insecure":
            log.warning(
                "%s: INSECURE host_key_policy: accepting unverified %s key %s for %s",
                o.name, key.get_name(), fp, hostname,
            )
            return
        if o.policy == "accept-new" and o.known_hosts is not None and o.pinned is None:
            _accept_new(o, hostname, key)
            return
        where = "the pinned host_key" if o.pinned is not None else f"known_hosts ({o.known_hosts})"
        raise HostKeyError(
            o.name,
            f"unknown host key {key.get_name()} {fp} for {hostname}: not in {where} "
            f"and host_key_policy is {o.policy!r}; pin it with host_key: or add it to known_hosts",
        )


class SshTransport:
    """paramiko connection to one host, created from a ``config.HostSpec``."""

    def __init__(
        self,
        name: str,
        address: str,
        port: int = 22,
        *,
        user: str = "root",
        password: Secret | str | None = None,
        key_file: Path | None = None,
        host_key: str | None = None,
        known_hosts: Path | None = None,
        policy: str = "strict",
        connect_timeout: float = 10.0,
        jump: JumpSpec | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"host_key_policy must be one of {POLICIES}, not {policy!r}")
        self.name = name
        self.address = address
        self.port = port
        self.user = user
        self._password = password
        self.key_file = key_file
        self.pinned = parse_public_key(host_key) if host_key else None
        self.known_hosts = known_hosts
        self.policy = policy
        self.connect_timeout = connect_timeout
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._shell: str | None = None  # the login shell, as the first command's marker line named it
        self._lock = threading.Lock()
        self._sftp_lock = threading.Lock()  # one SFTP client is not thread-safe
        #: why the watchdog declared the current connection lost (None while it answers)
        self.lost: str | None = None
        #: the jump host this host is reached through, and its (shared) connection while we hold it
        self.jump = jump
        self._jump: SshTransport | None = None

    @classmethod
    def from_spec(cls, spec: HostSpec) -> SshTransport:
        """Build from a ``config.HostSpec`` (imported for typing only: the import stays one-way)."""
        return cls(
            spec.name, spec.ssh_ip, spec.ssh_port, user=spec.user, password=spec.password,
            key_file=spec.key_file, host_key=spec.host_key, known_hosts=spec.known_hosts,
            policy=spec.host_key_policy, connect_timeout=spec.connect_timeout, jump=spec.jump,
        )

    def __repr__(self) -> str:
        via = f" via {self.jump.display}" if self.jump else ""
        return f"<SshTransport {self.name} {self.user}@{self.address}:{self.port}{via}>"

    # -- connection -----------------------------------------------------------
    def connect(self) -> None:
        with self._lock:
            if self._client is not None:
                t = self._client.get_transport()
                if t is not None and t.is_active():
                    return
                self._drop()
            target = f"{self.jump.display}>{self.address}" if self.jump else self.address
            with _handshake_lock(target, self.port):
                self._client = self._handshake()

    def _via(self) -> str:
        return f" via jump host {self.jump.display}" if self.jump else ""

    def _tunnel(self, deadline: float) -> paramiko.Channel:
        """A ``direct-tcpip`` channel through the jump host to this host's sshd (connecting the jump if needed)."""
        assert self.jump is not None
        if self._jump is None:
            self._jump = _acquire_jump(self, self.jump)
        jump = self._jump
        try:
            jump.connect()
        except HostError as exc:
            why = f"jump host {self.jump.display} ({self.jump.origin}): {exc.reason}"
            kind = type(exc) if isinstance(exc, (HostKeyError, AuthenticationFailed)) else HostUnreachable
            raise kind(self.name, why) from None
        client = jump._client
        transport = client.get_transport() if client is not None else None
        remaining = max(0.1, deadline - time.monotonic())
        try:
            if transport is None or not transport.is_active():
                raise paramiko.SSHException("the jump connection is closed")
            return transport.open_channel("direct-tcpip", (self.address, self.port), ("127.0.0.1", 0),
                                          timeout=remaining)
        except paramiko.ChannelException as exc:  # the jump could not reach the host: final
            raise HostUnreachable(
                self.name, f"cannot connect to {self.address}:{self.port}{self._via()}: the jump host "
                           f"answered {exc.text or 'connect failed'} (code {exc.code})") from None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            why = jump.lost or str(exc) or type(exc).__name__
            raise HostUnreachable(
                self.name, f"cannot connect to {self.address}:{self.port}{self._via()}: {why}") from None

    def _new_client(self, hk_name: str) -> paramiko.SSHClient:
        """A client that knows this host's pinned or recorded keys only, and asks :class:`_Policy` otherwise."""
        client = paramiko.SSHClient()
        if self.pinned is not None:
            client.get_host_keys().add(hk_name, self.pinned.get_name(), self.pinned)
        elif self.known_hosts is not None and self.known_hosts.exists():
            try:
                recorded = known_host_keys(self.known_hosts).lookup(hk_name)
            except (OSError, paramiko.SSHException) as exc:
                raise HostKeyError(self.name, f"cannot read known_hosts {self.known_hosts}: {exc}") from exc
            for keytype, key in (recorded or {}).items():  # this host's keys only, as paramiko looks them up
                client.get_host_keys().add(hk_name, keytype, key)
        client.set_missing_host_key_policy(_Policy(self))
        return client

    def _open_socket(self, deadline: float) -> tuple[socket.socket | paramiko.Channel, float]:
        """The connection to the host (through the jump host when there is one) and the time left."""
        if self.jump is not None:
            sock = self._tunnel(deadline)  # the jump's own socket has Nagle off
            return sock, max(0.1, deadline - time.monotonic())
        remaining = max(0.1, deadline - time.monotonic())
        # our own socket, so Nagle is off before the handshake: paramiko sets no socket option,
        # and with Nagle on every channel open and exec waited out the peer's delayed ACK
        # (~40 ms each here: `true` took 48 ms warm, 2.9 ms with TCP_NODELAY)
        tcp = socket.create_connection((self.address, self.port), timeout=remaining)
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return tcp, remaining

    def _retry(self, exc: BaseException, attempt: int, deadline: float) -> bool:
        """A transient drop (banner lost to MaxStartups, reset) is retried within the connect deadline
        (3 attempts); a refusal, a dead address, a host key, an authentication or a timeout is final."""
        if isinstance(exc, (paramiko.BadHostKeyException, paramiko.AuthenticationException, TimeoutError)):
            return False
        if _refused(exc) or getattr(exc, "errno", None) in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return False
        if attempt >= 3 or time.monotonic() + 0.2 >= deadline:
            return False
        log.info("%s: connect attempt %d failed (%s); retrying", self.name, attempt, _reason(exc))
        time.sleep(0.2 * attempt)
        return True

    def _connect_failure(self, exc: BaseException, hk_name: str, password: str | None) -> HostError:
        """The error a failed connect ends with."""
        if isinstance(exc, paramiko.BadHostKeyException):
            return HostKeyError(
                self.name,
                f"HOST KEY CHANGED for {hk_name}{self._via()}: expected {exc.expected_key.get_name()} "
                f"{fingerprint(exc.expected_key)}, server offered {exc.key.get_name()} "
                f"{fingerprint(exc.key)}; refusing to connect",
            )
        if isinstance(exc, paramiko.AuthenticationException):
            how = "key " + str(self.key_file) if self.key_file else ("password" if password else "agent/default keys")
            return AuthenticationFailed(self.name, f"authentication as {self.user!r} with {how} failed: {exc}")
        if isinstance(exc, TimeoutError):
            return HostUnreachable(
                self.name, f"cannot connect to {self.address}:{self.port}{self._via()}: timed out after "
                           f"{self.connect_timeout:g}s")
        return HostUnreachable(self.name, f"cannot connect to {self.address}:{self.port}{self._via()}: "
                                          f"{_reason(exc)}")

    def _handshake(self) -> paramiko.SSHClient:
        deadline = time.monotonic() + self.connect_timeout
        attempt = 0
        while True:
            attempt += 1
            hk_name = known_hosts_name(self.address, self.port)
            client = self._new_client(hk_name)
            password = self._password if self._password is None or isinstance(self._password, str) \
                else self._password.reveal()
            sock: socket.socket | paramiko.Channel | None = None
            try:
                sock, remaining = self._open_socket(deadline)
                client.connect(
                    self.address, self.port, username=self.user, password=password, sock=sock,
                    transport_factory=_new_transport,
                    key_filename=str(self.key_file) if self.key_file else None,
                    look_for_keys=self.key_file is None and password is None,
                    allow_agent=self.key_file is None,
                    timeout=remaining, banner_timeout=remaining, auth_timeout=remaining,
                    channel_timeout=remaining,
                )
            except HostError:
                _close(client, sock)
                raise
            except (paramiko.SSHException, EOFError, OSError) as exc:
                _close(client, sock)
                if self._retry(exc, attempt, deadline):
                    continue
                raise self._connect_failure(exc, hk_name, password) \
                    from (exc if isinstance(exc, TimeoutError) else None)
            transport = client.get_transport()
            if transport is not None:
                self.lost = None
                threading.Thread(target=self._watchdog, args=(transport,), daemon=True,
                                 name=f"camit-{self.name}-keepalive").start()
            log.debug("%s: connected to %s@%s:%d%s", self.name, self.user, self.address, self.port, self._via())
            return client

    def _watchdog(self, transport: paramiko.Transport) -> None:
        """Keepalives that expect a reply; an unanswered one past the deadline closes the connection."""
        while transport.is_active():
            time.sleep(KEEPALIVE_INTERVAL)
            if not transport.is_active():
                return
            answered = _ping(transport)
            if not answered.wait(KEEPALIVE_DEADLINE) and transport.is_active():
                self.lost = (f"{self.address}:{self.port} stopped answering (no reply to a keepalive in "
                             f"{KEEPALIVE_DEADLINE:g}s)")
                log.error("%s: connection lost: %s", self.name, self.lost)
                transport.close()
                return

    def _lost_error(self, what: str) -> HostUnreachable:
        jump_lost = self._jump.lost if self._jump is not None else None
        why = self.lost or (f"jump host {self.jump.display}: {jump_lost}" if self.jump and jump_lost else None) \
            or f"lost the SSH connection to {self.address}:{self.port}{self._via()}"
        return HostUnreachable(self.name, f"{why} {what}".rstrip())

    def _drop(self) -> None:
        for obj in (self._sftp, self._client):
            try:
                if obj is not None:
                    obj.close()
            except Exception:  # closing a dead connection may raise anything
                pass
        self._sftp = None
        self._client = None

    def close(self) -> None:
        """Close the connection (and, when this was the last host using it, the jump host's)."""
        with self._lock:
            self._drop()
            jump, self._jump = self._jump, None
        if jump is not None:
            _release_jump(jump)

    def _session(self) -> paramiko.Channel:
        self.connect()
        assert self._client is not None
        transport = self._client.get_transport()
        try:
            if transport is None or not transport.is_active():
                raise paramiko.SSHException("connection is closed")
            return transport.open_session(timeout=self.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if transport is not None and transport.is_active():
                # a live connection that cannot open a channel in time: the host stopped answering; what
                # else runs on it (an upload, a process) ends now, naming that
                self.lost = self.lost or (f"{self.address}:{self.port} stopped answering (no channel opened in "
                                          f"{self.connect_timeout:g}s: {exc})")
                log.error("%s: connection lost: %s", self.name, self.lost)
            self.close()
            if self.lost:
                raise self._lost_error("") from None
            raise HostUnreachable(self.name, f"lost the SSH connection to {self.address}:{self.port}: {exc}") from None

    # -- commands -------------------------------------------------------------
    def run(
        self, line: str, *, timeout: float | None, display: str, max_output: int = DEFAULT_MAX_OUTPUT,
        cancel: threading.Event | None = None,
    ) -> Result:
        start = time.monotonic()
        chan = self._session()
        out = OutputTail(max_output)
        err = OutputTail(max_output, strip_pgid=True)
        timed_out = False
        try:
            # stdin is /dev/null on the host, so no EOF is ever sent: paramiko builds an EOF under the
            # channel lock but sends it outside, so it could follow our reply to the server's CLOSE of a
            # command that had already ended, and sshd then drops the whole connection ("ieof packet
            # referred to nonexistent channel"; seen with 8 threads of short commands on one host)
            chan.exec_command(commands.with_pgid(line, direct=self._shell in commands.POSIX_SHELLS, stdin=False))
            deadline = None if timeout is None else start + timeout
            timed_out = self._follow(chan, out, err, deadline, display, cancel)
        except KeyboardInterrupt:
            self._kill(err.pgid)
            raise
        finally:
            chan.close()
        out.close()
        err.close()
        if err.shell:  # learnt from the first command: later ones skip the /bin/sh exec in a POSIX shell
            self._shell = err.shell
        rc = None if timed_out else (chan.recv_exit_status() if chan.exit_status_ready() else None)
        return Result(
            host=self.name, command=line, rc=rc, stdout=out.text(), stderr=err.text(),
            duration=time.monotonic() - start, timed_out=timed_out,
            truncated=out.truncated or err.truncated, display=display,
        )

    def _follow(self, chan: paramiko.Channel, out: OutputTail, err: OutputTail, deadline: float | None,
                display: str, cancel: threading.Event | None) -> bool:
        """Read a running command's output until it ends; True when ``deadline`` passed (the command killed)."""
        while True:
            wait = 0.5 if deadline is None else min(0.5, max(0.0, deadline - time.monotonic()))
            _wait_for_news(chan, wait)
            _drain(chan, out, err)
            if self.lost and _dead(chan):  # the watchdog closed it: no exit status is coming
                raise self._lost_error(f"while running: {display}")
            if chan.exit_status_ready() and (chan.eof_received or chan.closed):
                _drain(chan, out, err)
                return False
            if chan.closed:
                return False
            if deadline is not None and time.monotonic() >= deadline:
                self._kill(err.pgid)
                _drain_until(chan, out, err, time.monotonic() + KILL_GRACE)
                return True
            if cancel is not None and cancel.is_set():  # interrupted: killed at once, as on a timeout
                self._kill(err.pgid)
                raise Cancelled(self.name, f"interrupted: killed {display}")
            transport = chan.get_transport()
            if transport is None or not transport.is_active():
                raise self._lost_error(f"while running: {display}")

    def spawn(self, line: str, *, display: str, max_output: int = DEFAULT_MAX_OUTPUT) -> SshProcess:
        """Start ``line`` and return at once; see ``transport.base.Process``."""
        chan = self._session()
        try:
            chan.exec_command(commands.with_pgid(line, direct=self._shell in commands.POSIX_SHELLS))
        except (paramiko.SSHException, OSError) as exc:
            chan.close()
            raise HostUnreachable(self.name, f"cannot start command: {exc}") from None
        return SshProcess(self, chan, line, display, max_output)

    def _kill(self, pgid: int | None) -> None:
        """Kill the remote process group of a command we started (TERM, then KILL).

        Retried: on a loaded host opening the extra channel can time out, and a kill that
        silently failed would leave the command running.
        """
        if pgid is None:
            log.warning("%s: no process group reported; closing the channel only", self.name)
            return
        script = "/bin/sh -c " + commands.quote(commands.kill_group(pgid, KILL_GRACE))
        for attempt in range(1, 4):
            if self.lost:
                log.error("%s: cannot kill remote process group %d: %s", self.name, pgid, self.lost)
                return
            chan = None
            try:
                chan = self._session()
                chan.settimeout(KILL_GRACE + 5 * attempt)
                chan.exec_command(script)
                # never recv_exit_status(): it waits forever on a host that stopped answering
                if not chan.status_event.wait(KILL_GRACE + 5 * attempt):
                    raise TimeoutError(f"no exit status within {KILL_GRACE + 5 * attempt:g}s")
                log.info("%s: killed remote process group %d", self.name, pgid)
                return
            except (HostError, paramiko.SSHException, OSError) as exc:
                log.warning("%s: killing remote process group %d failed (attempt %d): %s",
                            self.name, pgid, attempt, exc)
            finally:
                if chan is not None:
                    chan.close()

    # -- files ----------------------------------------------------------------
    @contextmanager
    def _sftp_client(self) -> Iterator[paramiko.SFTPClient]:
        self.connect()
        with self._lock:
            if self._sftp is None:
                assert self._client is not None
                try:
                    transport = self._client.get_transport()
                    if transport is None or not transport.is_active():
                        raise paramiko.SSHException("connection is closed")
                    chan = transport.open_session(timeout=self.connect_timeout)
                    chan.settimeout(SFTP_TIMEOUT)  # every request and reply: a stopped host times out
                    chan.invoke_subsystem("sftp")
                    self._sftp = paramiko.SFTPClient(chan)
                except (paramiko.SSHException, EOFError, OSError) as exc:
                    raise TransferError(self.name, self.lost or f"cannot open SFTP: {exc}") from None
            sftp = self._sftp
        with self._sftp_lock:
            try:
                yield sftp
            except (OSError, paramiko.SSHException, EOFError) as exc:
                if isinstance(exc, (TimeoutError, EOFError, paramiko.SSHException)) or self.lost:
                    with self._lock:  # a timed-out client has replies in flight: never reuse it
                        if self._sftp is sftp:
                            self._sftp = None
                    sftp.close()
                raise

    def put(self, local: Path, remote: str, progress: Callable[[int, int], None] | None = None) -> None:
        """Upload to a file the server creates new (``O_CREAT|O_EXCL``: never through a planted symlink or
        into someone's file), private (0600) before the first byte, then the size confirmed."""
        total = Path(local).stat().st_size
        try:
            with self._sftp_client() as sftp, open(local, "rb") as src:
                with sftp.open(remote, "wxb") as dst:  # "x": CREATE|EXCL
                    dst.chmod(0o600)
                    dst.set_pipelined(True)
                    sent = 0
                    for chunk in iter(lambda: src.read(32768), b""):
                        dst.write(chunk)
                        sent += len(chunk)
                        if progress is not None:
                            progress(sent, total)
                got = sftp.stat(remote).st_size
                if got != total:
                    raise OSError(f"size mismatch: {got} on the host, {total} here")
        except (OSError, paramiko.SSHException, EOFError) as exc:
            why = self.lost or str(exc) or type(exc).__name__
            raise TransferError(self.name, f"upload of {local} to {remote} failed: {why}") from None

    def get(self, remote: str, local: Path, *, cap: FetchCaps | None = None) -> None:
        # bytes are counted as they arrive (never the size stat() reports); prefetch at most the cap
        cap = cap or fetchcaps.caps()
        start = time.monotonic()
        try:
            with self._sftp_client() as sftp, sftp.open(remote, "rb") as src, fetchcaps.open_private(local) as out:
                size = src.stat().st_size or 0
                src.prefetch(min(size, cap.max_bytes + 1))
                fetchcaps.copy_bounded(src.read, out, host=self.name, remote=remote, cap=cap, started=start)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise TransferError(self.name, f"download of {remote} to {local} failed: {exc}") from None


def _refused(exc: BaseException) -> bool:
    return isinstance(exc, (paramiko.ssh_exception.NoValidConnectionsError, ConnectionRefusedError))


def _reason(exc: BaseException) -> str:
    """A failed connect in a few words."""
    return "connection refused" if _refused(exc) else (str(exc) or type(exc).__name__)


def _close(client: paramiko.SSHClient, sock: socket.socket | paramiko.Channel | None) -> None:
    """Close a client whose connect failed, and the socket we gave it (it may never have owned it)."""
    client.close()
    if sock is not None:
        try:
            sock.close()
        except (OSError, EOFError, paramiko.SSHException):
            pass


def _ping(transport: paramiko.Transport) -> threading.Event:
    """Send ``keepalive@openssh.com`` wanting a reply; the event is set when any reply arrives.

    paramiko's own keepalive wants no reply, and its ``global_request(wait=True)`` waits without a
    deadline: the request is built here and paramiko's reply handlers set our event (sshd answers
    an unknown request with REQUEST_FAILURE, which counts). Sent from a helper thread, as a
    host that stopped reading can fill the socket and block the send itself.
    """
    answered = threading.Event()
    transport.completion_event = answered

    def send() -> None:
        m = paramiko.Message()
        m.add_byte(paramiko.common.cMSG_GLOBAL_REQUEST)
        m.add_string("keepalive@openssh.com")
        m.add_boolean(True)
        try:
            getattr(transport, "_send_user_message")(m)  # noqa: B009 (private: the public one has no deadline)
        except Exception:  # the connection died meanwhile: the watchdog sees it inactive
            answered.set()

    threading.Thread(target=send, daemon=True, name="camit-keepalive-send").start()
    return answered


def _dead(chan: paramiko.Channel) -> bool:
    transport = chan.get_transport()
    return transport is None or not transport.is_active()


def _wait_for_news(chan: paramiko.Channel, wait: float) -> None:
    """Block until output, EOF, the exit status or ``wait`` seconds.

    After EOF the only thing left to arrive is the exit status, which does not wake a
    select() on the channel: wait on its status event instead (else every command
    paid up to the select timeout after it ended).
    """
    if chan.recv_ready() or chan.recv_stderr_ready():
        return
    if chan.eof_received:
        chan.status_event.wait(wait)
    else:
        select.select([chan], [], [], wait)


def _drain(chan: paramiko.Channel, out: OutputTail, err: OutputTail) -> None:
    while chan.recv_ready():
        out.feed(chan.recv(_CHUNK))
    while chan.recv_stderr_ready():
        err.feed(chan.recv_stderr(_CHUNK))


def _drain_until(chan: paramiko.Channel, out: OutputTail, err: OutputTail, until: float) -> None:
    while time.monotonic() < until and not chan.closed:
        select.select([chan], [], [], 0.05)
        _drain(chan, out, err)
        if chan.exit_status_ready() and chan.eof_received:
            break
    _drain(chan, out, err)


class SshProcess:
    """A running remote command (``SshTransport.spawn``); a reader thread drains it."""

    def __init__(self, owner: SshTransport, chan: paramiko.Channel, line: str, display: str,
                 max_output: int) -> None:
        self.host = owner.name
        self.display = display
        self._owner = owner
        self._chan = chan
        self._line = line
        self._start = time.monotonic()
        self._out = OutputTail(max_output)
        self._err = OutputTail(max_output, strip_pgid=True)
        self._lines = LineQueue()
        self._done = threading.Event()
        self._killed = False
        self._lost: str | None = None
        self._result: Result | None = None
        self._reader = threading.Thread(target=self._read, name=f"camit-{self.host}-reader", daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"<SshProcess {self.host}: {self.display!r} pgid={self.pgid}>"

    @property
    def pgid(self) -> int | None:
        return self._err.pgid

    def wait_pgid(self, timeout: float) -> int | None:
        end = time.monotonic() + timeout
        while self._err.pgid is None and not self._done.is_set() and time.monotonic() < end:
            time.sleep(0.01)
        return self._err.pgid

    def _drain(self) -> None:
        """What the command printed so far into the tails and the line queue."""
        chan = self._chan
        while chan.recv_ready():
            data = chan.recv(_CHUNK)
            self._out.feed(data)
            self._lines.feed(data)
        while chan.recv_stderr_ready():
            self._err.feed(chan.recv_stderr(_CHUNK))

    def _finished(self, chan: paramiko.Channel) -> bool:
        """The command ended, or its connection was lost (``_lost`` says why)."""
        if self._owner.lost and _dead(chan):  # the watchdog closed it: no exit status is coming
            self._lost = f"SSH connection lost: {self._owner.lost}"
            return True
        if chan.closed or (chan.exit_status_ready() and chan.eof_received):
            return True
        transport = chan.get_transport()
        if transport is None or not transport.is_active():
            self._lost = f"SSH connection lost: {self._owner.lost}" if self._owner.lost else "SSH connection lost"
            return True
        return False

    def _read(self) -> None:
        chan = self._chan
        try:
            while True:
                _wait_for_news(chan, 0.5)
                self._drain()
                if self._finished(chan):
                    break
        except (OSError, paramiko.SSHException, EOFError) as exc:
            self._lost = f"SSH connection lost: {exc}"
        finally:
            self._out.close()
            self._err.close()
            self._lines.finish()
            rc = chan.recv_exit_status() if chan.exit_status_ready() and self._lost is None else None
            self._result = Result(
                host=self.host, command=self._line, rc=rc, stdout=self._out.text(), stderr=self._err.text(),
                duration=time.monotonic() - self._start, timed_out=self._killed and rc is None,
                truncated=self._out.truncated or self._err.truncated, display=self.display,
            )
            self._done.set()

    @property
    def lost(self) -> str | None:
        """Why the connection died under this command, when it did."""
        return self._lost

    def write(self, data: bytes) -> None:
        try:
            self._chan.sendall(data)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise HostUnreachable(self.host, f"cannot write to {self.display!r}: {exc}") from None

    def close_stdin(self) -> None:
        if self._chan.closed or self._chan.eof_received:  # it ended: an EOF now could follow our CLOSE
            return
        try:
            self._chan.shutdown_write()
        except (OSError, paramiko.SSHException, EOFError):
            pass

    def readline(self, timeout: float | None = None) -> str | None:
        return self._lines.readline(timeout)

    def poll(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Result | None:
        if not self._done.wait(timeout):
            return None
        return self._result

    def kill(self) -> None:
        """Kill the command's process group (TERM, then KILL) and close the channel."""
        if self._done.is_set():
            return
        self._killed = True
        self._owner._kill(self.wait_pgid(2.0))
        self._done.wait(KILL_GRACE + 1)
        self.close()

    def close(self) -> None:
        """Close the channel (a supervisor on the other side sees stdin EOF)."""
        try:
            self._chan.close()
        except (OSError, paramiko.SSHException, EOFError):
            pass
