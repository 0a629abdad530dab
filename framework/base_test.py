"""BaseTest: the URMA harness's class API on camit's machinery.

Hosts as ``self.host1``..., ``exec_cmd``, background commands, free ports, URMA's asserts, cores
checked at ``teardown_class``. The full API: docs/porting-urma.md.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TextIO

import pytest

from framework import commands
from framework.errors import FrameworkError
from framework.plugin.failtext import note_failure

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig, HostSpec
    from framework.hosts import Cluster, Host
    from framework.launch.runwatch import ClusterWatch
    from framework.plugin.resources import Resources
    from framework.result import Result
    from framework.samepath import Shipment
    from framework.transport.base import Process

log = logging.getLogger("camit.urma")

#: lines of output ``silence=0`` logs (the tail)
LOG_LINES = 50
#: characters of live output a background command keeps (the tail), as the transports' bound
MAX_LIVE_OUTPUT = 4 * 1024 * 1024
#: the lowest port :meth:`UrmaHost.get_free_port` hands out
PORT_MIN = 10000
#: after a kill, how long to wait for the command's end before giving up on it
KILL_WAIT = 10.0


def _command(cmd: str | Sequence[str]) -> commands.Command:
    """URMA's ``cmd`` string is shell text (its cases pipe and chain); a list or tuple is an argv."""
    if isinstance(cmd, str):
        return commands.ShellScript(cmd)
    return list(cmd)


def _append(path: str, text: str) -> None:
    if text:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)


def _tail(text: str, lines: int = LOG_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


class ExecResult:
    """What ``exec_cmd`` returns: URMA's names over camit's :class:`~framework.result.Result` (``.result``)."""

    __slots__ = ("result",)

    def __init__(self, result: Result) -> None:
        self.result = result

    @property
    def ret(self) -> int | None:
        """The exit status; None when the command was killed at its timeout or the connection was lost."""
        return self.result.rc

    return_code = ret  # Fabric's name

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr

    @property
    def command(self) -> str:
        """The command as shown (secrets redacted)."""
        return self.result.command_display

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def failed(self) -> bool:
        return self.result.failed

    @property
    def timed_out(self) -> bool:
        return self.result.timed_out

    def __repr__(self) -> str:
        return f"<ExecResult {self.result.host}: {self.command!r} ret={self.ret}>"


class BackgroundCmd:
    """A command started with ``exec_cmd(..., background=True)``; see docs/porting-urma.md.

    A daemon thread reads its stdout as it comes (into a bounded buffer and ``log_path``) and kills
    its process group when its deadline (``timeout`` seconds from the start) passes.
    """

    def __init__(self, host: UrmaHost, proc: Process, command: str, *, timeout: float, silence: int = 0,
                 log_path: str | None = None, port: int | None = None, exp_ret: int | None = None) -> None:
        self.host = host
        self.p = proc
        self.command = command
        self.timeout = timeout
        self.silence = silence
        self.port = port
        self.exp_ret = exp_ret
        self.need_kill = 1
        self.reason: str | None = None
        self.timed_out = False
        self.killed = False
        self.result: Result | None = None
        self._deadline = time.monotonic() + timeout
        self._expired_at: float | None = None
        self._lines: collections.deque[str] = collections.deque()
        self._size = 0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._log: TextIO | None = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115 - closed by the reader
        self._reader = threading.Thread(target=self._read, name=f"camit-urma-{host.name}", daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        state = "running" if not self._done.is_set() else f"ret={self.ret}"
        return f"<BackgroundCmd {self.host.name}: {self.command!r} {state}>"

    def _read(self) -> None:
        try:
            while True:
                line = self.p.readline(max(0.05, min(0.5, self._deadline - time.monotonic())))
                if line == "":
                    break
                if line is not None:
                    self._keep(line)
                elif time.monotonic() >= self._deadline and not self.p.poll():
                    self._expire(f"its timeout of {self.timeout:g}s passed")
                if self._expired_at is not None and time.monotonic() > self._expired_at + KILL_WAIT:
                    break  # killed, yet its stdout stays open (a process that left the group): stop reading
            result = self.p.wait(max(0.0, self._deadline - time.monotonic()))
            if result is None:
                self._expire(f"its timeout of {self.timeout:g}s passed")
                result = self.p.wait(KILL_WAIT)
            self.result = result
            if self.result is None:
                self.reason = f"{self.host.name}: no end seen after killing {self.command!r}"
            elif self.result.rc is None and self.p.lost:
                self.reason = f"{self.host.name}: {self.p.lost}"
        finally:
            if self._log is not None:
                if self.result is not None and self.result.stderr:
                    self._log.write(self.result.stderr)
                self._log.close()
            self._done.set()

    def _keep(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)
            self._size += len(line)
            while self._size > MAX_LIVE_OUTPUT and len(self._lines) > 1:
                self._size -= len(self._lines.popleft())
        if self._log is not None:
            self._log.write(line)
            self._log.flush()

    def _expire(self, why: str) -> None:
        with self._lock:  # the reader and a waiting test may both get here: one kill
            if self.timed_out:
                return
            self.timed_out = True
            self._expired_at = time.monotonic()
        log.warning("%s: killing %r: %s", self.host.name, self.command, why)
        self.p.kill()

    # -- URMA's BackgroundCmdRes ------------------------------------------------
    @property
    def process_is_finished(self) -> bool:
        return self._done.is_set()

    @property
    def process_is_running(self) -> bool:
        return not self._done.is_set()

    @property
    def pid(self) -> int | None:
        """The command's process group on the host (its wrapper shell's pid)."""
        return self.p.pgid

    @property
    def stdout(self) -> str:
        """Everything printed so far (the last 4 MiB)."""
        with self._lock:
            return "".join(self._lines)

    @property
    def stderr(self) -> str:
        """stderr once the command ended ('' while it runs)."""
        return self.result.stderr if self.result is not None else ""

    @property
    def ret(self) -> int | None:
        """The exit status: waits for the end (at most until the deadline, then kills); None when killed."""
        if not self._done.is_set():
            self.wait()
        return self.result.rc if self.result is not None else None

    def wait(self, timeout: float = 0) -> BackgroundCmd:
        """Wait ``timeout`` seconds (0: until the command's deadline) for the end; on expiry kill it."""
        limit = timeout if timeout else max(0.0, self._deadline - time.monotonic())
        if not self._done.wait(limit):
            self._expire(f"wait timeout after {limit:g}s")
            self._done.wait(KILL_WAIT)
        self.need_kill = 0
        if self.silence == 0 and self._done.is_set():
            log.info("[ %s exec_cmd end ] %s ret=%s stdout=\n%s", self.host.name, self.command,
                     self.result.rc if self.result else None, _tail(self.stdout))
        if self.result is not None and self.result.rc != 0 and not self.killed and self.silence < 2:
            note_failure(self.host.name, self.command, self.result.rc, self.stdout,
                         self.result.stderr)
        if self.exp_ret is not None:
            BaseTest.assertEqual(self.result.rc if self.result else None, self.exp_ret,
                                 f"{self.host.name}: {self.command}")
        return self

    def kill(self) -> None:
        """End the command: TERM, then KILL, to its process group on the host; then wait for it."""
        if not self._done.is_set():
            self.killed = True
            with self._lock:
                self._expired_at = time.monotonic()
            self.p.kill()
            self._done.wait(KILL_WAIT)
        self.need_kill = 0

    def stdin(self, msg: str) -> None:
        log.info("%s: stdin %r", self.host.name, msg)
        self.p.write(msg.encode())

    def match_keyword(self, keyword: str) -> int:
        """How many lines of stdout so far contain ``keyword``."""
        return sum(keyword in line for line in self.stdout.split("\n"))

    def expect(self, keyword: str, msg: str | None = None, now: bool = False, timeout: float = 20,
               interval: float = 0.1) -> int:
        """0 once ``keyword`` is in stdout (with ``now``: appears again), then send ``msg``; -1 on timeout or end."""
        start = self.match_keyword(keyword) if now else 0
        end = time.monotonic() + timeout
        while True:
            finished = self._done.is_set()
            if self.match_keyword(keyword) > start:
                if msg is not None:
                    self.stdin(msg)
                return 0
            if finished or time.monotonic() >= end:
                log.info("%s: expect %r: %s", self.host.name, keyword, "process ended" if finished else "timeout")
                return -1
            time.sleep(interval)


_SPEC_ATTRS = frozenset({"manage_ip", "manage_nic", "manage_nic_dev", "manage_mac", "ssh_ip", "ssh_port", "user",
                         "bmc", "isolcpu", "env_type", "arch", "test_nic"})
_NIC_ATTR = re.compile(r"^test_nic([12])(?:_(dev|gid|ip|ipv6|eid))?$")
#: ports handed out by ``get_free_port`` in this process, per host address (never handed out twice)
_ports_lock = threading.Lock()
_ports_given: dict[str, set[int]] = {}

#: the probe run on a host (stdlib only): argv is count, then the ports to skip (comma-separated)
FREE_PORTS_CODE = f"""\
import errno, socket, sys
count, skip = int(sys.argv[1]), {{int(p) for p in sys.argv[2].split(",") if p}}
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
        lo, hi = (int(x) for x in fh.read().split())
except (OSError, ValueError):
    lo, hi = 32768, 60999
def free(port):
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port))
        except OSError as exc:
            if family == socket.AF_INET or exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
        finally:
            s.close()
    return True
ports = [p for p in range({PORT_MIN}, 65536) if not lo <= p <= hi] or list(range({PORT_MIN}, 65536))
found = []
for p in ports:
    if p not in skip and free(p):
        found.append(p)
        if len(found) >= count:
            break
print(" ".join(map(str, found)))
"""


def _probe_ports(host: Host, count: int, skip: set[int]) -> list[int]:
    """Up to ``count`` ports free on ``host`` (see :meth:`UrmaHost.get_free_port`), lowest first."""
    python = host.spec.python if host.spec is not None else "python3"
    argv = [python, "-c", FREE_PORTS_CODE, str(count), ",".join(map(str, sorted(skip)))]
    out = host.check(argv, timeout=60).stdout.split()
    return [int(p) for p in out if p.isdigit()]


def _port_key(host: Host) -> str:
    return host.spec.address if host.spec is not None else host.name


def free_port(hosts: Sequence[Host]) -> int:
    """A TCP port free on every one of ``hosts`` and never handed out before by this process."""
    if not hosts:
        raise FrameworkError("get_free_port: no hosts")
    with _ports_lock:  # one at a time: two threads never get the same port
        given = set().union(*(_ports_given.setdefault(_port_key(h), set()) for h in hosts))
        for count in (16, 256):
            common: set[int] | None = None
            for h in hosts:
                found = set(_probe_ports(h, count, given))
                common = found if common is None else common & found
            if common:
                port = min(common)
                for h in hosts:
                    _ports_given[_port_key(h)].add(port)
                return port
        names = ", ".join(h.name for h in hosts)
        raise FrameworkError(f"get_free_port: no TCP port is free on every one of {names}")


class UrmaHost:
    """One host as URMA cases see it (``UBUSHost``): env-file attributes, ``exec_cmd``, ``get_free_port``.

    Wraps the session's :class:`~framework.hosts.Host`; any other attribute is the Host's.
    ``process`` lists the background commands started on it by its class.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self.process: list[BackgroundCmd] = []

    #: what ``exec_cmd(background=True)`` returns (the URMA layer's keeps URMA's ``ret``/``pid``)
    background_class: ClassVar[type[BackgroundCmd]] = BackgroundCmd

    def _prepare(self, command: commands.Command) -> commands.Command:
        """What ``exec_cmd`` runs for ``command`` (shown as given); the URMA layer's merges stderr."""
        return command

    def __repr__(self) -> str:
        return f"<UrmaHost {self.host.name}>"

    def __getattr__(self, name: str) -> Any:
        if name == "host":  # not set yet (copy, pickle): never recurse
            raise AttributeError(name)
        if name in _SPEC_ATTRS:  # its property raised: no env spec behind this host
            raise AttributeError(f"{self.host.name}: {name} comes from the env file, and this host has none")
        nic = _NIC_ATTR.match(name)
        if nic is not None:
            spec = self._spec(name)
            value = getattr(spec, f"test_nic{nic[1]}")
            if value is None:
                raise AttributeError(f"{self.host.name}: no test_nic{nic[1]} in the env file, so no {name}")
            return getattr(value, nic[2] or "name")
        return getattr(self.host, name)

    def _spec(self, what: str) -> HostSpec:
        if self.host.spec is None:
            raise AttributeError(f"{self.host.name}: {what} comes from the env file, and this host has none")
        return self.host.spec

    # -- from the env file (URMA's UBUSHost attributes) ---------------------------
    @property
    def name(self) -> str:
        return self.host.name

    @property
    def manage_ip(self) -> str:
        return self._spec("manage_ip").manage_nic.ip

    @property
    def manage_nic(self) -> dict[str, str]:
        nic = self._spec("manage_nic").manage_nic
        return {k: v for k, v in (("name", nic.name), ("ip", nic.ip), ("mac", nic.mac)) if v is not None}

    @property
    def manage_nic_dev(self) -> str:
        return self._spec("manage_nic_dev").manage_nic.name

    @property
    def manage_mac(self) -> str | None:
        return self._spec("manage_mac").manage_nic.mac

    @property
    def ssh_ip(self) -> str:
        return self._spec("ssh_ip").ssh_ip

    @property
    def ssh_port(self) -> int:
        return self._spec("ssh_port").ssh_port

    @property
    def user(self) -> str:
        return self._spec("user").user

    @property
    def bmc(self) -> str | None:
        return self._spec("bmc").bmc

    @property
    def isolcpu(self) -> list[int]:
        return list(self._spec("isolcpu").isolcpu_list)

    @property
    def env_type(self) -> str | None:
        return self._spec("env_type").env_type

    @property
    def arch(self) -> str | None:
        return self._spec("arch").arch

    @property
    def test_nic(self) -> dict[int, dict[str, str]]:
        """{1: test_nic1, 2: test_nic2} as in the file (keys that are set), for the NICs the file has."""
        spec = self._spec("test_nic")
        out = {}
        for n, nic in ((1, spec.test_nic1), (2, spec.test_nic2)):
            if nic is not None:
                out[n] = {k: v for k in ("name", "dev", "gid", "ip", "ipv6", "eid")
                          if (v := getattr(nic, k)) is not None}
        return out

    # -- commands --------------------------------------------------------------
    def exec_cmd(self, cmd: str | Sequence[str], background: bool = False, timeout: float = 0,
                 log_path: str | None = None, env: Mapping[str, Any] | None = None, silence: int = 0,
                 get_pid: bool = True, port: int | None = None,
                 exp_ret: int | None = None) -> Any:
        """Run ``cmd`` on this host (URMA's signature); see docs/porting-urma.md. Returns an
        :class:`ExecResult`, or with ``background`` a running :class:`BackgroundCmd`."""
        __tracebackhide__ = True
        shown = commands.build(_command(cmd), env=env).display
        command = self._prepare(_command(cmd))
        limit = float(timeout) if timeout else self.host.command_timeout
        if silence <= 1:
            log.info("[ %s exec_cmd ] %s background=%s timeout=%gs", self.host.name, shown, background, limit)
        if background:
            proc = self.host.spawn(command, env=env)
            bg = self.background_class(self, proc, shown, timeout=limit, silence=silence,
                                       log_path=log_path, port=port, exp_ret=exp_ret)
            self.process.append(bg)
            return bg
        res = ExecResult(self.host.run(command, env=env, timeout=limit))
        if res.timed_out:
            log.warning("%s: timed out after %gs (process group killed): %s", self.host.name, limit, shown)
        if silence == 0:
            log.info("[ %s exec_cmd end ] %s ret=%s stdout=\n%s", self.host.name, shown, res.ret, _tail(res.stdout))
        if res.ret != 0 and silence < 2:
            note_failure(self.host.name, shown, res.ret, res.stdout, res.stderr)
        if log_path is not None:
            _append(log_path, res.stdout + res.stderr)
        if exp_ret is not None:
            BaseTest.assertEqual(res.ret, exp_ret, f"{self.host.name}: {shown}")
        return res

    def get_free_port(self) -> int:
        """A TCP port free on this host now, outside its ephemeral range; see docs/porting-urma.md."""
        return free_port([self.host])

    def kill_background(self) -> None:
        """Kill this host's background commands that still run (``teardown_class`` calls it)."""
        for bg in self.process:
            if bg.need_kill and bg.process_is_running:
                log.warning("%s: killing background command still running at teardown: %s", self.name, bg.command)
            if bg.need_kill:
                bg.kill()


def _num(a: Any, b: Any) -> tuple[Any, Any]:
    """URMA's ``adapt_factor``: a str that reads as a number becomes that float; otherwise both compare as str."""
    try:
        if isinstance(a, str):
            a = float(a)
        if isinstance(b, str):
            b = float(b)
    except ValueError:
        return str(a), str(b)
    return a, b


def _short(value: Any, limit: int = 2000) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2:]


def _fail(msg: str, detail: str) -> AssertionError:
    return AssertionError(f"{msg} ({detail})" if msg else detail)


class BaseTest:
    env: ClassVar[EnvConfig | None] = None
    cluster: ClassVar[Cluster | None] = None
    host_list: ClassVar[list[UrmaHost]] = []
    hosts: ClassVar[dict[str, UrmaHost]] = {}
    core_policy: ClassVar[str] = "fail"
    _core_watch: ClassVar[ClusterWatch | None] = None  # between setup_class and teardown_class
    #: cores the class watch found between test bodies (under the plugin), reported at teardown_class
    _core_messages: ClassVar[list[str]] = []
    #: the session's resources, set by the plugin (``pytest_runtest_setup``) when it runs the class
    #: set by the plugin before the class is set up (framework.plugin.markers.RESOURCES_ATTR)
    _camit_resources: ClassVar[Resources | None] = None
    #: what the class opened itself (no plugin env): its own leased cluster, closed at teardown
    _own_stack: ClassVar[ExitStack | None] = None
    #: what :meth:`ship` wrote, by local path: taken away at teardown_class
    _shipped: ClassVar[dict[str, list[Shipment]]] = {}
    #: the class of ``self.host1``, ``host_list[i]`` (the URMA layer's adds URMA's transfers)
    host_class: ClassVar[type[UrmaHost]] = UrmaHost

    #: True where ``setup_method``/``teardown_method`` call nose-style ``setup()``/``teardown()``
    #: (the URMA layer's ``ubus_test.base_test.BaseTest``): then defining them is no error
    calls_nose_hooks: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for legacy in ("setup", "teardown") if not cls.calls_nose_hooks else ():
            if legacy in cls.__dict__:
                raise TypeError(f"{cls.__name__}.{legacy}() is nose-style and pytest >= 8.1 never calls it; "
                                f"rename it to {legacy}_method(self, method)")

    @classmethod
    def _session(cls) -> Resources | None:
        """The plugin session's resources when it has an env, else None (the class then opens its own)."""
        resources = cls._camit_resources
        return resources if resources is not None and resources.ctx.env is not None else None

    @classmethod
    def _open(cls) -> tuple[EnvConfig, Cluster]:
        """The env and the leased cluster: the session's, or the class's own."""
        session = cls._session()
        if session is not None:
            return session.ctx.require_env(), session.open_cluster()
        from framework.config import load, resolve_env_path  # the one env-file rule (with the default file)
        from framework.plugin.resources import open_leased_cluster

        env = load(resolve_env_path()[0])
        cls._own_stack = stack = ExitStack()
        try:
            cluster = open_leased_cluster(env, None, stack).cluster
        except BaseException:
            stack.close()
            cls._own_stack = None
            raise
        return env, cluster

    @classmethod
    def setup_class(cls) -> None:
        from framework.launch.runwatch import ClusterWatch  # the one watch around a run (also pytest, camit run)

        cls.env, cls.cluster = cls._open()
        cls.cluster.connect().raise_on_failure()
        cls.host_list = [cls.host_class(h) for h in cls.cluster]
        cls.hosts = {h.name: h for h in cls.host_list}
        for name, host in cls.hosts.items():
            setattr(cls, name, host)
        cls._core_watch = ClusterWatch(cls.cluster, cls.env, policy=cls.core_policy, label=cls.__qualname__)
        cls._core_messages = []
        cls._shipped = {}
        cls._core_watch.begin()

    @pytest.fixture(autouse=True)
    def _camit_core_windows(self, request: pytest.FixtureRequest) -> Iterator[None]:
        """Under the plugin each test body runs inside the session's core watch (``cores.around_test``),
        which reports its cores on that test: the class watch then covers only what lies outside the
        bodies (setup_class, setup/teardown_method, teardown_class), so no core is reported twice.
        This fixture is the innermost one: after ``setup_method``, before ``teardown_method``."""
        cls = type(self)
        resources = cls._camit_resources
        body_watched = False
        if cls._session() is not None and resources is not None and cls._core_watch is not None:
            from framework.plugin.cores import watched

            body_watched = watched(request.node, resources.ctx)
        if body_watched:
            cls._end_core_window()
        yield
        if body_watched and cls._core_watch is not None:
            cls._core_watch.begin()

    @classmethod
    def _end_core_window(cls) -> None:
        """Collect the cores since the class watch's snapshot into the run folder; keep a failure's message."""
        if cls._core_watch is None:
            return
        resources = cls._camit_resources
        rundir = resources.ctx.ensure_rundir() if resources is not None else None
        watched = cls._core_watch.end(rundir=rundir)
        if watched.failed:
            cls._core_messages.append(watched.message)

    @classmethod
    def teardown_class(cls) -> None:
        message = ""
        try:
            for host in cls.host_list:  # only what this class started, each by its process group
                host.kill_background()
            cls._unship()
            cls._end_core_window()
            message = "\n".join(cls._core_messages)
        finally:
            cls._close()
        if message:
            raise FrameworkError(f"CHECK CORE FAILED: {message}")

    @classmethod
    def _close(cls) -> None:
        """Close what the class opened itself (the session's cluster stays open for the session)."""
        stack, cls._own_stack = cls._own_stack, None
        try:
            if stack is not None:
                stack.close()
        finally:
            for name in cls.hosts:
                if name in cls.__dict__:
                    delattr(cls, name)
            cls._core_watch = None

    @classmethod
    def get_free_port(cls) -> int:
        """URMA's: a TCP port free on every host of the class (see :meth:`UrmaHost.get_free_port`)."""
        return free_port([h.host for h in cls.host_list])

    @classmethod
    def ship(cls, path: str | os.PathLike[str]) -> str:
        """Put ``path`` (a file, or a folder's files) at the same absolute path on every host of the class, as
        URMA's "Preparation" wants a case's test binary (:mod:`framework.samepath`): a host that has it
        there already with the same sha256 gets nothing, a file there with other content is refused; what
        was written is taken away at ``teardown_class``. Once per class and path. Returns the absolute path.
        """
        from framework.hosts import sha256_file
        from framework.samepath import files_of, ship

        local = Path(path).resolve()
        key = str(local)
        if cls.cluster is None:
            raise FrameworkError(f"{cls.__name__}.ship({key!r}): the class has no hosts (before setup_class?)")
        if key not in cls._shipped:
            digests = {f: sha256_file(f) for f in files_of(local)}
            shipped = cls.cluster.map(lambda h: ship(h, local, digests=digests), [h.name for h in cls.host_list])
            cls._shipped[key] = list(shipped.succeeded.values())
            shipped.raise_on_failure()  # what did ship is taken away at teardown_class all the same
        return key

    @classmethod
    def _unship(cls) -> None:
        """Take away what :meth:`ship` wrote on each host (a failure is a warning naming the host)."""
        shipments, cls._shipped = [s for group in cls._shipped.values() for s in group], {}
        if shipments and cls.cluster is not None:
            names = list(dict.fromkeys(s.host.name for s in shipments))

            def remove(host: Host) -> None:
                for shipment in shipments:
                    if shipment.host is host:
                        shipment.remove()

            removed = cls.cluster.map(remove, names)
            for name, exc in removed.failed.items():  # best effort, as the kills: teardown goes on
                log.warning("%s: cannot remove the files ship() put there: %s", name, exc)

    # -- URMA's assertions (common/utils.py BaseObject), same semantics; a failure shows both values
    @staticmethod
    def assertEqual(first: Any, second: Any, msg: str = "") -> None:  # URMA's names (camelCase)
        __tracebackhide__ = True
        a, b = _num(first, second)
        if not a == b:
            raise _fail(msg, f"{first!r} != {second!r}")

    @staticmethod
    def assertNotEqual(first: Any, second: Any, msg: str = "") -> None:
        __tracebackhide__ = True
        a, b = _num(first, second)
        if not a != b:
            raise _fail(msg, f"{first!r} == {second!r}")

    @staticmethod
    def assertGreater(first: Any, second: Any, msg: str = "") -> None:
        __tracebackhide__ = True
        a, b = _num(first, second)
        if not a > b:
            raise _fail(msg, f"{first!r} <= {second!r}")

    @staticmethod
    def assertGreaterEqual(first: Any, second: Any, msg: str = "") -> None:
        __tracebackhide__ = True
        a, b = _num(first, second)
        if not a >= b:
            raise _fail(msg, f"{first!r} < {second!r}")

    @staticmethod
    def assertLess(first: Any, second: Any, msg: str = "") -> None:
        __tracebackhide__ = True
        a, b = _num(first, second)
        if not a < b:
            raise _fail(msg, f"{first!r} >= {second!r}")

    @staticmethod
    def assertLessEqual(first: Any, second: Any, msg: str = "") -> None:
        __tracebackhide__ = True
        a, b = _num(first, second)
        if not a <= b:
            raise _fail(msg, f"{first!r} > {second!r}")

    @staticmethod
    def assertTrue(flag: Any, msg: str = "") -> None:
        __tracebackhide__ = True
        if flag is not True:
            raise _fail(msg, f"{flag!r} is not True")

    @staticmethod
    def assertFalse(flag: Any, msg: str = "") -> None:
        __tracebackhide__ = True
        if flag is not False:
            raise _fail(msg, f"{flag!r} is not False")

    @staticmethod
    def assertIn(member: Any, container: Any, msg: str = "") -> None:
        __tracebackhide__ = True
        if str(member) not in str(container):
            raise _fail(msg, f"{member!r} not in {_short(container)}")

    @staticmethod
    def assertNotIn(member: Any, container: Any, msg: str = "") -> None:
        __tracebackhide__ = True
        if str(member) in str(container):
            raise _fail(msg, f"{member!r} in {_short(container)}")

    def setup_method(self, method: Callable[..., Any]) -> None:
        """Per-test set-up hook for subclasses."""

    def teardown_method(self, method: Callable[..., Any]) -> None:
        """Per-test tear-down hook for subclasses."""
