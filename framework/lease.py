"""Cluster leases: at most one driver of a host at a time (pipelines, xdist workers, the CLI).

    with Lease(cluster, ttl=300, wait=600) as lease:   # LeaseHeld names the holder (exit 3)
        deploy(...); launch(...)

Design (a file on each host, atomicity, staleness, heartbeats): docs/internals/core.md.
"""

from __future__ import annotations

import getpass
import hmac
import json
import logging
import math
import os
import posixpath
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from framework import commands
from framework.commands import ShellScript
from framework.errors import LeaseError, LeaseHeld, LeaseLost
from framework.remote.layout import DEFAULT_WORKDIR, HostLayout

if TYPE_CHECKING:  # pragma: no cover
    from framework.hosts import Cluster, Host

__all__ = [
    "DEFAULT_TTL",
    "DEFAULT_WAIT",
    "DEFAULT_WORKDIR",
    "LEASE_FILE",
    "Lease",
    "LeaseError",
    "LeaseHeld",
    "LeaseLost",
    "LeaseRecord",
    "LeaseState",
    "Reply",
    "acquire_script",
    "default_owner",
    "lease_path",
    "lease_status",
    "parse_reply",
    "controller_id",
    "pid_alive",
    "process_start",
    "read_script",
    "refresh_script",
    "release_leases",
    "release_script",
    "render_template",
    "stale_reason",
    "takeover_script",
]

_T = TypeVar("_T")
log = logging.getLogger("camit.lease")

LEASE_FILE = "camit-lease.json"
DEFAULT_TTL = 300.0
#: ``wait=True`` waits this long for a held lease
DEFAULT_WAIT = 1800.0
#: heartbeat interval cap; the interval is ``min(MAX_INTERVAL, ttl / 3)``
MAX_INTERVAL = 10.0
#: a heartbeat older than this many intervals makes the lease stale
STALE_BEATS = 3
_NOW, _EXPIRES = "__NOW__", "__EXPIRES__"


# --------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class LeaseRecord:
    """What a lease file holds. Times are the leased host's epoch seconds."""

    owner: str
    token: str
    pid: int
    controller: str
    hosts: tuple[str, ...]
    start: float
    heartbeat: float
    expires: float
    ttl: float
    interval: float
    #: the holder's process start time (seconds since boot, from /proc/PID/stat; 0 when unknown)
    pid_start: float = 0.0
    #: the holder's run (``$CAMIT_RUN_ID`` when set, else the lease's own id)
    run_id: str = ""
    #: hostname, boot id and PID namespace of the holder's controller (its pids mean something only there)
    controller_id: str = ""

    @classmethod
    def parse(cls, text: str | None) -> LeaseRecord | None:
        """The record in a lease file's text; None when it is not one of ours."""
        if not text:
            return None
        try:
            d = json.loads(text)
            return cls(owner=str(d["owner"]), token=str(d["token"]), pid=int(d["pid"]),
                       controller=str(d["controller"]), hosts=tuple(d["hosts"]), start=float(d["start"]),
                       heartbeat=float(d["heartbeat"]), expires=float(d["expires"]), ttl=float(d["ttl"]),
                       interval=float(d["interval"]), pid_start=float(d.get("pid_start", 0) or 0),
                       run_id=str(d.get("run_id", "")), controller_id=str(d.get("controller_id", "")))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self, now: float | None = None) -> str:
        """``owner (pid P on C, since …; heartbeat Ns ago, expires in Ms)`` for error messages."""
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.start))
        run = f", run {self.run_id}" if self.run_id else ""
        text = f"{self.owner} (pid {self.pid} on {self.controller}{run}, since {since}"
        if now is not None:
            text += f"; heartbeat {max(0.0, now - self.heartbeat):.0f}s ago, expires in {self.expires - now:.0f}s"
        return text + ")"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["hosts"] = list(self.hosts)
        return d


def _expired(record: LeaseRecord, now: float) -> str | None:
    """Why ``record`` timed out by the host's clock: past its expiry or its heartbeat too old."""
    if now > record.expires:
        return f"it expired {now - record.expires:.0f}s ago"
    if record.interval > 0 and now - record.heartbeat > STALE_BEATS * record.interval:
        return f"its heartbeat is {now - record.heartbeat:.0f}s old (interval {record.interval:g}s)"
    return None


def stale_reason(record: LeaseRecord | None, now: float, *, here: str | None = None,
                 alive: Callable[[int, float], bool] | None = None, here_id: str | None = None
                 ) -> str | None:
    """Why a lease may be taken over (None while it is live). ``now`` is the host's clock.

    The holder's pid is judged only when it ran on this controller: the same hostname and the same
    ``controller_id`` (boot and PID namespace); then it is gone only if no process has that pid with
    that start time (``alive(pid, start)``).
    """
    if record is None:
        return "the lease file is not a camit lease"
    timed_out = _expired(record, now)
    if timed_out is not None:
        return timed_out
    if not _held_here(record, here, here_id):
        return None
    if (alive or pid_alive)(record.pid, record.pid_start):
        return None
    return f"its holder, pid {record.pid} on this controller, is gone (run {record.run_id or '?'})"


def _held_here(record: LeaseRecord, here: str | None, here_id: str | None) -> bool:
    """Whether the holder ran on this controller (hostname ``here``, ``controller_id`` ``here_id``).

    An old record without controller_id never does: it may come from another PID namespace.
    """
    ours = (socket.gethostname() if here is None else here,
            controller_id() if here_id is None else here_id)
    return (record.controller, record.controller_id) == ours


def process_start(pid: int) -> float | None:
    """Seconds after boot at which ``pid`` started (``/proc/PID/stat`` field 22), None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[-1].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def controller_id() -> str:
    """``hostname/boot-id/pid-namespace``: where a pid of ours means this process."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = "?"
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = "?"
    return f"{socket.gethostname()}/{boot}/{ns}"


def pid_alive(pid: int, start: float = 0.0) -> bool:
    """True when ``pid`` exists on this machine (a zombie counts as gone) and, when ``start`` is
    given, started then (a pid reused by another process is not the holder)."""
    if start and not _started_at(pid, start):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _started_at(pid: int, start: float) -> bool:
    """Whether ``pid`` started at ``start`` (seconds after boot), as far as /proc tells."""
    began = process_start(pid)
    return began is None or abs(began - start) <= 0.05


def _is_zombie(pid: int) -> bool:
    """Whether ``pid``'s state in ``/proc/PID/stat`` is ``Z`` (False when unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return False


def default_owner() -> str:
    """``$BUILD_URL`` in Jenkins, else ``user@controller``."""
    url = os.environ.get("BUILD_URL")
    if url:
        return url
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


# --------------------------------------------------------------------------- host scripts (pure)


def lease_path(host: Host) -> str:
    """``<workdir>/camit-lease.json`` of a ``Host`` (its spec's workdir)."""
    workdir = getattr(getattr(host, "spec", None), "workdir", None) or DEFAULT_WORKDIR
    return posixpath.join(workdir.rstrip("/") or "/", LEASE_FILE)


def _prelude(path: str, token: str = "read", ttl: int = 0) -> str:
    q = commands.quote
    return "\n".join([
        f"L={q(path)}; D={q(posixpath.dirname(path) or '/')}; M=\"$L.lock\"; T=\"$L.{token}.tmp\"; TTL={ttl}",
        # a mutex for changes to an existing lease: held for milliseconds; one left by a killed script is broken
        "mutex() { _i=0; while ! mkdir -- \"$M\" 2>/dev/null; do "
        "if [ -n \"$(find \"$M\" -maxdepth 0 -mmin +1 2>/dev/null)\" ]; "
        "then rmdir -- \"$M\" 2>/dev/null; continue; fi; "
        "_i=$((_i+1)); [ $_i -ge 200 ] && return 1; sleep 0.05; done; "
        "trap 'rmdir -- \"$M\" 2>/dev/null' EXIT; trap 'rmdir -- \"$M\" 2>/dev/null; exit 1' INT TERM HUP; }",
        "show() { echo \"NOW $now\"; "
        "if [ -f \"$L\" ]; then echo LEASE-BEGIN; cat -- \"$L\"; echo; echo LEASE-END; fi; }",
        f"put() {{ printf '%s\\n' \"$1\" | sed \"s/{_NOW}/$now/g; s/{_EXPIRES}/$((now + TTL))/g\" > \"$T\"; }}",
        "now=$(date +%s)",
    ])


def acquire_script(path: str, content: str, token: str, ttl: int) -> ShellScript:
    """Create the lease if there is none: write a private file, ``ln`` it into place (atomic)."""
    q = commands.quote
    return ShellScript(_prelude(path, token, ttl) + "\n" + "\n".join([
        # the workdir made and checked as deploy and launch make it (framework.remote.layout guard): the lease
        # is the first thing camit writes on a host, so it must not create it inside another user's directory
        f"_g=$( ( {HostLayout(posixpath.dirname(path) or '/').guard_script()} ) 2>&1 ) || "
        "{ echo \"RESULT error refusing the workdir: "
        "$(printf '%s\\n' \"$_g\" | sed -n 's/^@@unsafe //p' | head -n 1)\"; "
        "exit 0; }",
        f"put {q(content)} || {{ echo \"RESULT error cannot write $T\"; exit 0; }}",
        "if err=$(ln -- \"$T\" \"$L\" 2>&1); then echo 'RESULT acquired'",
        "elif [ -e \"$L\" ]; then echo 'RESULT held'",
        "else case $err in *'File exists'*) echo 'RESULT retry';; *) echo \"RESULT error $err\";; esac; fi",
        "rm -f -- \"$T\"",
        "show",
    ]) + "\n")


def _under_mutex(path: str, token: str, ttl: int, condition: str, then: str, otherwise: str) -> ShellScript:
    return ShellScript(_prelude(path, token, ttl) + "\n" + "\n".join([
        "mutex || { echo 'RESULT busy'; show; exit 0; }",
        f"if {condition}; then {then}; else {otherwise}; fi",
        "rm -f -- \"$T\"",
        "show",
    ]) + "\n")


def _holds_content(old: str) -> str:
    return f"[ -f \"$L\" ] && [ \"$(cat -- \"$L\")\" = {commands.quote(old)} ]"


def _holds_token(token: str) -> str:
    return f"grep -q -F -- {commands.quote(json.dumps({'token': token})[1:-1])} \"$L\" 2>/dev/null"


def takeover_script(path: str, content: str, token: str, ttl: int, old: str) -> ShellScript:
    """Replace a stale lease, but only if the file still holds exactly ``old``."""
    q = commands.quote
    return _under_mutex(path, token, ttl, _holds_content(old),
                        f"put {q(content)} && mv -f -- \"$T\" \"$L\" && echo 'RESULT acquired' "
                        "|| echo \"RESULT error cannot replace $L\"",
                        "echo 'RESULT changed'")


def refresh_script(path: str, content: str, token: str, ttl: int) -> ShellScript:
    """Heartbeat: rewrite our lease (new heartbeat and expiry) while it still holds our token."""
    q = commands.quote
    return _under_mutex(path, token, ttl, _holds_token(token),
                        f"put {q(content)} && mv -f -- \"$T\" \"$L\" && echo 'RESULT refreshed' "
                        "|| echo \"RESULT error cannot replace $L\"",
                        "echo 'RESULT lost'")


def release_script(path: str, *, token: str | None = None, old: str | None = None) -> ShellScript:
    """Remove the lease if it holds our ``token`` (or, for a forced release, exactly ``old``)."""
    if (token is None) == (old is None):
        raise ValueError("release_script needs exactly one of token= and old=")
    condition = _holds_token(token) if token is not None else _holds_content(old or "")
    return _under_mutex(path, "release", 0, condition,
                        "rm -f -- \"$L\" && echo 'RESULT released'", "echo 'RESULT changed'")


def read_script(path: str) -> ShellScript:
    """Print the host's clock and the lease file (if any); change nothing."""
    return ShellScript(_prelude(path) + "\nshow\n")


def render_template(*, owner: str, token: str, pid: int, controller: str, hosts: Iterable[str], ttl: float,
                    interval: float, pid_start: float = 0.0, run_id: str = "", controller_id: str = "",
                    start: float | None = None) -> str:
    """The lease file text, with the host-clock placeholders the script fills in (``start`` None: now).

    It names the holder (owner, pid, its start time, run id, controller); never its command line."""
    doc = {"version": 2, "owner": owner, "token": token, "pid": pid, "pid_start": pid_start, "run_id": run_id,
           "controller": controller, "controller_id": controller_id, "hosts": list(hosts), "ttl": ttl,
           "interval": interval,
           "start": _NOW if start is None else start, "heartbeat": _NOW, "expires": _EXPIRES}
    return json.dumps(doc).replace(f'"{_NOW}"', _NOW).replace(f'"{_EXPIRES}"', _EXPIRES)


@dataclass(frozen=True)
class Reply:
    """What a lease script printed: the outcome word (and message), the host's clock, the file's text."""

    result: str
    message: str
    now: float
    content: str | None

    @property
    def record(self) -> LeaseRecord | None:
        return LeaseRecord.parse(self.content)


def parse_reply(stdout: str) -> Reply:
    result, message, now, content = "", "", 0.0, None
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("RESULT ") and not result:
            result, _, message = line[7:].partition(" ")
        elif line.startswith("NOW "):
            now = float(line[4:] or 0)
        elif line == "LEASE-BEGIN":
            content = _lease_text(lines[i + 1:])
            break
    return Reply(result, message, now, content)


def _lease_text(after_begin: list[str]) -> str:
    """The lease file's text: the lines after ``LEASE-BEGIN`` up to ``LEASE-END`` (or the end)."""
    end = after_begin.index("LEASE-END") if "LEASE-END" in after_begin else len(after_begin)
    return "\n".join(after_begin[:end]).rstrip("\n")


# --------------------------------------------------------------------------- the lease


def _order(host: Host) -> tuple[str, int, str]:
    spec = getattr(host, "spec", None)
    return (getattr(spec, "ssh_ip", ""), getattr(spec, "ssh_port", 0), host.name)


#: who holds a host's lease: (host, its record when readable, the host's clock)
Blocker = tuple[str, "LeaseRecord | None", float]


def _failures_and_blockers(taken: Mapping[str, Blocker | None | BaseException],
                           hosts: Sequence[Host]) -> tuple[list[BaseException], list[Blocker]]:
    """The failures of a parallel take, and its blockers in the order of ``hosts``."""
    failed = [v for v in taken.values() if isinstance(v, BaseException)]
    blockers = [v for h in hosts if isinstance(v := taken[h.name], tuple)]
    return failed, blockers


class _Retry:
    """An attempt at a lease file that found it changed under us: try again."""


_RETRY = _Retry()


class Lease:
    """An all-or-nothing lease on every host of ``cluster``; a context manager.

    Args:
        cluster: the hosts to lease (a ``hosts.Cluster``; a sub-cluster leases just those).
        owner: shown to others (default: ``$BUILD_URL``, else ``user@controller``).
        ttl: seconds the lease stays valid after its last heartbeat.
        wait: seconds to wait for a held lease (``True``: :data:`DEFAULT_WAIT`; 0: fail at once).
        interval: heartbeat period (default ``min(10, ttl / 3)``; 0 disables the heartbeat thread).
        on_lost: called (on the heartbeat thread) with the :class:`LeaseLost` as soon as a heartbeat finds
            the lease taken over, so the holder can stop at once rather than at the end of the block.

    Raises:
        LeaseHeld: a host is held by someone else (naming the holder), after ``wait`` seconds.
        LeaseLost: on leaving the block, if the lease was taken over while held.
    """

    def __init__(self, cluster: Cluster, owner: str | None = None, ttl: float = DEFAULT_TTL, wait: float | bool = 0,
                 *, interval: float | None = None, poll: float = 1.0,
                 on_lost: Callable[[LeaseLost], None] | None = None) -> None:
        self.cluster = cluster
        self.hosts = sorted(cluster, key=_order)
        self.owner = owner or default_owner()
        self.token = secrets.token_hex(8)
        self.ttl = max(1, math.ceil(ttl))
        self.interval = min(MAX_INTERVAL, self.ttl / 3) if interval is None else float(interval)
        self.wait = DEFAULT_WAIT if wait is True else float(wait or 0)
        self.poll = poll
        self.run_id = os.environ.get("CAMIT_RUN_ID") or self.token
        self.held: dict[str, LeaseRecord] = {}
        self.lost: dict[str, str] = {}
        #: per held host: (monotonic start of its last successful write, failed refreshes since)
        self._fresh: dict[str, tuple[float, int]] = {}
        self._last_error: dict[str, str] = {}
        self._stop = threading.Event()
        self._beats: list[threading.Thread] = []
        self._lost_lock = threading.Lock()
        self.on_lost = on_lost
        #: an attempt found a host held: take host by host from then on (:meth:`_take_all`)
        self._contended = False

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<Lease {', '.join(h.name for h in self.hosts)} {state} by {self.owner}>"

    def _content(self, start: float | None = None) -> str:
        pid = os.getpid()
        return render_template(owner=self.owner, token=self.token, pid=pid, controller=socket.gethostname(),
                               hosts=[h.name for h in self.hosts], ttl=self.ttl, interval=self.interval,
                               pid_start=process_start(pid) or 0.0, run_id=self.run_id,
                               controller_id=controller_id(), start=start)

    def _each(self, fn: Callable[[Host], _T], names: Sequence[str]) -> dict[str, _T | BaseException]:
        """``fn`` on the named hosts on threads of the lease's own: the cluster's pool may be full of long
        host work (a launch, a deploy), and a heartbeat queued behind it would let the lease go stale."""
        by_name = {h.name: h for h in self.hosts}
        out: dict[str, _T | BaseException] = {}
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(names))),
                                thread_name_prefix="camit-lease") as pool:
            futures = {n: pool.submit(fn, by_name[n]) for n in names}
            for n, fut in futures.items():
                try:
                    out[n] = fut.result()
                except Exception as exc:  # one host's failure is logged by the caller, the others go on
                    out[n] = exc
        return out

    def _run(self, host: Host, script: ShellScript, timeout: float = 60) -> Reply:
        reply = parse_reply(host.check(script, timeout=timeout).stdout)
        if reply.result == "error":
            raise LeaseError(f"{host.name}: lease file {lease_path(host)}: {reply.message}")
        return reply

    # -- acquire --------------------------------------------------------------
    def acquire(self) -> Lease:
        """Take every host, in order, or none; wait up to ``wait`` seconds for held ones."""
        start = time.monotonic()
        delay = self.poll
        announced: tuple[str, str | None] | None = None
        # handshakes in parallel; the lease itself is then taken host by host, in order
        self.cluster.map(lambda h: h.connect(), [h.name for h in self.hosts]).raise_on_failure()
        while (blocker := self._take_all()) is not None:
            host, record, now = blocker
            waited = time.monotonic() - start
            if waited >= self.wait:
                raise LeaseHeld(host, record, now, waited=waited if self.wait else 0.0)
            announced = self._announce(blocker, announced, waited)
            time.sleep(min(delay, max(0.0, self.wait - waited)))
            delay = min(delay * 1.5, 5.0)
        log.info("lease on %s taken by %s", ", ".join(self.held), self.owner)
        if self.interval > 0:
            self._start_heartbeats()
        return self

    def _announce(self, blocker: Blocker, announced: tuple[str, str | None] | None,
                  waited: float) -> tuple[str, str | None]:
        """Log the wait for ``blocker`` once per holder; the holder now announced."""
        host, record, now = blocker
        holder = (host, record.token if record else None)
        if announced != holder:
            log.warning("%s: leased by %s; waiting up to %.0fs", host,
                        record.describe(now) if record else "?", self.wait - waited)
        return holder

    def _take_all(self) -> Blocker | None:
        """One attempt at every host, all or none: the blocker (host, its record, its clock) or None.

        A free cluster costs two round trips, not one per host (8 hosts: 220 ms host by host): the
        first host in order alone, then the rest at once. Contenders whose hosts overlap meet at the
        first one they share; once an attempt found a host held, the retries go host by host in
        order, so of two controllers waiting for each other the one holding the earlier host always
        gets through."""
        if self._contended or len(self.hosts) <= 2:
            return self._take_in_order(self.hosts)
        blocker = self._take_in_order(self.hosts[:1])
        if blocker is not None:
            return blocker
        return self._take_at_once(self.hosts[1:])

    def _take_at_once(self, rest: Sequence[Host]) -> Blocker | None:
        """The hosts after the first, in parallel: all taken (None), or every one released and the
        first failure raised or the first blocker returned (later attempts go in order)."""
        try:
            taken = self._each(self._take, [h.name for h in rest])
        except BaseException:
            self._release_held()
            raise
        failed, blockers = _failures_and_blockers(taken, rest)
        if not (failed or blockers):
            return None
        self._release_held()
        if failed:
            raise failed[0]
        self._contended = True
        return blockers[0]

    def _take_in_order(self, hosts: Sequence[Host]) -> Blocker | None:
        for host in hosts:
            try:
                blocker = self._take(host)
            except BaseException:
                self._release_held()
                raise
            if blocker is not None:
                self._release_held()
                return blocker
        return None

    def _take(self, host: Host) -> Blocker | None:
        """Take ``host``'s lease (None) or name who holds it (the blocker)."""
        path = lease_path(host)
        for _ in range(5):
            outcome = self._attempt(host, path)
            if not isinstance(outcome, _Retry):
                return outcome
        raise LeaseError(f"{host.name}: the lease file {path} keeps changing; giving up")

    def _attempt(self, host: Host, path: str) -> Blocker | None | _Retry:
        """One try at ``host``'s lease file: taken (None), held (the blocker), or changed under us."""
        self._fresh[host.name] = (time.monotonic(), 0)
        reply = self._run(host, acquire_script(path, self._content(), self.token, self.ttl))
        if reply.result == "retry":
            return _RETRY
        record = reply.record
        if self._holds(reply.result, record):
            if record is None:
                raise LeaseError(
                    f"{host.name}: lease file {path} unreadable right after it was written")
            self.held[host.name] = record
            return None
        why = stale_reason(record, reply.now)
        if why is None:
            return host.name, record, reply.now
        return self._take_over(host, path, reply, why)

    def _holds(self, result: str, record: LeaseRecord | None) -> bool:
        """Whether the lease file now holds our lease (``result``: the script's outcome word): just
        taken, or already ours."""
        return result == "acquired" or (record is not None and record.token == self.token)

    def _take_over(self, host: Host, path: str, reply: Reply, why: str) -> None | _Retry:
        """Replace the stale lease ``reply`` found on ``host``; a retry when it changed first."""
        record = reply.record
        who = record.describe(reply.now) if record else repr((reply.content or "")[:80])
        log.warning("%s: taking over the stale lease of %s: %s", host.name, who, why)
        script = takeover_script(path, self._content(), self.token, self.ttl, reply.content or "")
        taken = self._run(host, script)
        if taken.result == "acquired" and taken.record is not None:
            self.held[host.name] = taken.record
            return None
        return _RETRY

    # -- heartbeat ------------------------------------------------------------
    def _start_heartbeats(self) -> None:
        """One heartbeat thread per held host, each on its own schedule: a host whose refresh is slow (a
        stopped host: its timeout, then the kill path) delays only its own beats, never a healthy one's."""
        self._stop.clear()
        self._beats = [threading.Thread(target=self._heartbeat, args=(h,), name=f"camit-lease-{h.name}",
                                        daemon=True) for h in self.hosts if h.name in self.held]
        for t in self._beats:
            t.start()

    @property
    def stale_after(self) -> float:
        """Seconds after a heartbeat when another controller may judge the lease stale (:func:`stale_reason`)."""
        return min(float(self.ttl), STALE_BEATS * self.interval) if self.interval > 0 else float(self.ttl)

    @property
    def _guard(self) -> float:
        """How much of the staleness window a heartbeat leaves unused (then the host is dropped)."""
        return max(0.05, min(self.interval, 2.0))

    def _heartbeat(self, host: Host) -> None:
        due = time.monotonic() + self.interval
        retry = max(0.02, min(1.0, self.interval / 4))
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            if host.name in self.lost:
                return
            ok = self._refresh_one(host)
            # the next beat one interval after this one was due (beats missed while slow are not made up);
            # after a failure, a retry at once: the window before staleness is what counts
            due = max(due + self.interval, time.monotonic()) if ok else time.monotonic() + retry
            if host.name in self.lost:
                self._tell_lost()

    def _tell_lost(self) -> None:
        """Hand the :class:`LeaseLost` to ``on_lost`` (one at a time), unless being released."""
        if self.on_lost is None or self._stop.is_set():
            return
        with self._lost_lock:
            try:
                self.check()
            except LeaseLost as exc:
                self.on_lost(exc)

    def _drop(self, host: Host, failures: int, why: str) -> None:
        """Stop holding ``host``: its refresh kept failing and the lease could soon be judged stale."""
        since, _ = self._fresh.get(host.name, (time.monotonic(), 0))
        self.lost[host.name] = (f"dropped: the lease heartbeat failed {failures} time(s) over "
                                f"{time.monotonic() - since:.1f}s ({why}); stopped using the host before "
                                f"another controller could judge its lease stale ({self.stale_after:g}s)")
        log.error("%s: %s", host.name, self.lost[host.name])

    def _refresh_one(self, host: Host) -> bool:
        """Renew ``host``'s lease now; a takeover found is recorded in ``lost``, a failure logged (and the
        host dropped when too little of the staleness window is left for another attempt). True when renewed."""
        start = self.held[host.name].start
        since, failures = self._fresh.get(host.name, (time.monotonic(), 0))
        began = time.monotonic()
        left = since + self.stale_after - began - self._guard
        if left <= 0 and failures:  # failing, not merely slow: no time for another attempt
            self._drop(host, failures, f"last: {self._last_error.get(host.name, 'none')}")
            return False
        try:
            reply = self._run(host, refresh_script(lease_path(host), self._content(start), self.token, self.ttl),
                              timeout=self._beat_timeout(left))
        except Exception as exc:  # this host's beat failed; the next one tries again, while there is time
            return self._failed(host, since, failures, str(exc))
        if reply.result == "refreshed" and reply.record is not None:
            self.held[host.name] = reply.record
            self._fresh[host.name] = (began, 0)
            return True
        if reply.result == "lost":
            return self._taken_over(host, reply)
        # "busy" (the lease file's mutex never came free) renewed nothing either
        return self._failed(host, since, failures, f"the refresh answered {reply.result!r}")

    def _beat_timeout(self, left: float) -> float:
        """A refresh's timeout: bounded well inside the ``left`` seconds of the staleness window
        (a slow but working host keeps its normal bound)."""
        timeout = max(5.0, min(60.0, self.interval * 1.5))
        return min(left, timeout) if left > 0 else timeout

    def _taken_over(self, host: Host, reply: Reply) -> bool:
        """Record (in ``lost``) and log that the refresh found ``host``'s lease taken over."""
        holder = reply.record
        who = holder.describe(reply.now) if holder else "someone"
        self.lost[host.name] = f"taken over by {who}"
        log.error("%s: our lease was %s", host.name, self.lost[host.name])
        return False

    def _failed(self, host: Host, since: float, failures: int, why: str) -> bool:
        """Count a heartbeat that renewed nothing; drop the host when no time is left for another one."""
        self._fresh[host.name] = (since, failures + 1)
        self._last_error[host.name] = why
        log.warning("%s: lease heartbeat failed: %s", host.name, why)
        if since + self.stale_after - time.monotonic() - self._guard <= 0:
            self._drop(host, failures + 1, f"last: {why}")
        return False

    def refresh(self) -> None:
        """Renew every held host's lease now, in parallel (each host's heartbeat thread renews its own)."""
        names = [n for n in self.held if n not in self.lost]
        if names:
            self._each(self._refresh_one, names)

    def check(self) -> None:
        """Raise :class:`LeaseLost` if any host's lease was taken over while we held it."""
        if self.lost:
            raise LeaseLost("lease lost: " + "; ".join(f"{h}: {why}" for h, why in self.lost.items()))

    # -- release --------------------------------------------------------------
    def release(self) -> None:
        """Stop the heartbeat and remove our lease files (best effort; failures are logged)."""
        self._stop.set()
        deadline = time.monotonic() + self.interval + 65
        for t in self._beats:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        self._beats = []
        self._release_held()

    def _release_held(self) -> None:
        names = list(self.held)
        if not names:
            return

        def one(host: Host) -> Reply:
            return self._run(host, release_script(lease_path(host), token=self.token))

        for name, value in self._each(one, names).items():
            if isinstance(value, BaseException):
                log.warning("%s: could not release the lease (it expires by itself): %s", name, value)
            elif value.result != "released" and name not in self.lost:
                log.warning("%s: lease was no longer ours at release (%s)", name, value.result)
        self.held.clear()

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.release()
        if exc_type is None:
            self.check()


# --------------------------------------------------------------------------- status and forced release


@dataclass(frozen=True)
class LeaseState:
    """One host's lease as seen now: ``record`` (None when free or unreadable) and its staleness."""

    host: str
    path: str
    now: float
    content: str | None
    record: LeaseRecord | None
    stale: str | None

    @property
    def state(self) -> str:
        if self.content is None:
            return "free"
        return "stale" if self.stale else "held"


def lease_status(cluster: Cluster) -> Mapping[str, LeaseState | BaseException]:
    """Every host's lease, read in one round trip per host (no change made)."""

    def one(host: Host) -> LeaseState:
        path = lease_path(host)
        reply = parse_reply(host.check(read_script(path), timeout=60).stdout)
        record = reply.record
        stale = stale_reason(record, reply.now) if reply.content is not None else None
        return LeaseState(host.name, path, reply.now, reply.content, record, stale)

    return cluster.map(one)


def release_leases(cluster: Cluster, *, token: str | None = None,
                   force: bool = False) -> Mapping[str, str | BaseException]:
    """Remove stale leases (expired, silent, or whose holder on this controller is gone) and the live one
    holding ``token``; ``force`` removes any live one too. A live lease is never judged by its owner string:
    two sessions of one user on one controller share it (``user@host``), and neither releases the other's.

    Returns host → what happened (``free``, ``released``, ``changed``, or ``held by …``).
    """

    def one(host: Host) -> str:
        path = lease_path(host)
        reply = parse_reply(host.check(read_script(path), timeout=60).stdout)
        if reply.content is None:
            return "free"
        record = reply.record
        if record is not None and not force and _live_and_not_ours(record, reply.now, token):
            return f"held by {record.describe(reply.now)}; not released (use --force)"
        done = parse_reply(host.check(release_script(path, old=reply.content), timeout=60).stdout)
        return done.result

    return cluster.map(one)


def _live_and_not_ours(record: LeaseRecord, now: float, token: str | None) -> bool:
    """Whether ``record`` is a live lease of another session (``token`` is ours, if any)."""
    ours = token is not None and hmac.compare_digest(record.token, token)
    return not ours and stale_reason(record, now) is None
