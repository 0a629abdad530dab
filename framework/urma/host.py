"""URMA's ``UBUSHost`` and ``BackgroundCmdRes`` (``test_framework/common/host.py``) on camit's
hosts.

What differs from camit's own ``UrmaHost``: docs/internals/urma.md.
"""

from __future__ import annotations

import logging
import posixpath
import re
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import commands
from framework.base_test import BackgroundCmd, ExecResult, UrmaHost, note_failure
from framework.errors import FrameworkError
from framework.urma.shims.common.constants import const

if TYPE_CHECKING:
    pass

log = logging.getLogger("camit.urma")

#: how long ``exec_cmd(background=True)`` waits for the command's pid before it returns
PID_WAIT = 10.0
#: upstream members camit does not provide, and what to use instead
NOT_PROVIDED = {
    "conn": "camit keeps no Fabric Connection; use exec_cmd (or .host.run)",
    "passwd": "camit never exposes the password",
    "info": "the env file's host mapping is validated into .host.spec",
    "ns_list": "network namespaces are not managed by camit",
    "conn_pid": "camit keeps no connection shell; a background command's pid is its .pid",
}
_NEWLINE = re.compile(r"(?<!\r)\n")

#: the sampler run on a host for ``check_resource`` (stdlib, /proc): time, rss bytes, cpu %, open
#: fds
SAMPLER = """\
import os, sys, time
pid, interval = int(sys.argv[1]), float(sys.argv[2])
hz, page, prev = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE"), None
while True:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            st = fh.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/statm") as fh:
            rss = int(fh.read().split()[1]) * page
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, IndexError, ValueError):
        break
    ticks, now = int(st[11]) + int(st[12]), time.monotonic()
    cpu = 0.0 if prev is None else 100.0 * (ticks - prev[0]) / hz / max(now - prev[1], 1e-6)
    prev = (ticks, now)
    print(f"{time.strftime('%Y-%m-%d_%H:%M:%S')}\\t{rss}\\t{cpu:.1f}\\t{fds}", flush=True)
    time.sleep(interval)
"""


def pty_text(text: str) -> str:
    """``text`` with the line endings a pty gives (``\\r\\n``)."""
    return _NEWLINE.sub("\r\n", text)


def not_provided(owner: str, name: str) -> AttributeError:
    return AttributeError(f"URMA's {owner}.{name} is not provided by camit: {NOT_PROVIDED[name]}")


class PtyResult(ExecResult):
    """``exec_cmd``'s result as upstream's pty gave it: stderr merged into ``stdout``, ``\\r\\n``
    endings."""

    __slots__ = ()

    @property
    def stdout(self) -> str:
        return pty_text(self.result.stdout + self.result.stderr)

    @property
    def stderr(self) -> str:
        return ""

    @property
    def exited(self) -> int | None:
        return self.ret


class ResourceInfo:
    """Samples of one process (upstream's ``ResourceInfo``): rows ``[time, rss, cpu %, fds]``."""

    def __init__(
        self, res: BackgroundCmdRes, pid: int, timeout: float, interval: float = 1
    ) -> None:
        argv = [res.host.python, "-c", SAMPLER, str(pid), str(interval)]
        self.p = res.host.exec_cmd(argv, background=True, timeout=timeout, silence=2)
        self.info_list: list[list[Any]] = []
        self._seen = 0

    def parse_stdout(self) -> None:
        lines = self.p.stdout.replace("\r\n", "\n").splitlines()
        for line in lines[self._seen :]:
            parts = line.split("\t")
            if len(parts) == 4:
                self.info_list.append([parts[0], int(parts[1]), float(parts[2]), int(parts[3])])
        self._seen = len(lines)

    def _column(self, index: int) -> list[float]:
        self.parse_stdout()
        return [row[index] for row in self.info_list]

    @property
    def info(self) -> list[list[Any]]:
        self.parse_stdout()
        return self.info_list

    @property
    def mem_avg(self) -> float:
        values = self._column(1)
        return sum(values) / len(values) if values else 0

    @property
    def mem_max(self) -> float:
        return max(self._column(1), default=0)

    @property
    def cpu_avg(self) -> float:
        values = self._column(2)
        return sum(values) / len(values) if values else 0

    @property
    def cpu_max(self) -> float:
        return max(self._column(2), default=0)

    @property
    def fd_max(self) -> float:
        return max(self._column(3), default=0)


class BackgroundCmdRes(BackgroundCmd):
    """A background command with upstream's ``ret`` (None while it runs) and ``pid`` (set at
    spawn)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.res_info: dict[int, ResourceInfo] = {}
        end = time.monotonic() + PID_WAIT
        while self.p.pgid is None and not self._done.is_set() and time.monotonic() < end:
            time.sleep(0.01)

    @property
    def ret(self) -> int | None:
        """The exit status once the command ended; None while it runs (upstream's
        ``returncode()``)."""
        return self.result.rc if self._done.is_set() and self.result is not None else None

    @property
    def stdout(self) -> str:
        return pty_text(super().stdout)

    @property
    def all_pid(self) -> set[int]:
        return self.host.get_child_pid(self.pid) if self.pid is not None else set()

    def check_resource(self, timeout: float = 0, interval: float = 1) -> dict[int, ResourceInfo]:
        """Sample memory, CPU and fds of every process of the command (upstream's, psutil-free)."""
        limit = timeout or self.timeout
        self.res_info = {pid: ResourceInfo(self, pid, limit, interval) for pid in self.all_pid}
        return self.res_info

    def stop_check_resource(self) -> None:
        for info in self.res_info.values():
            info.p.kill()

    def kill(self) -> None:
        self.stop_check_resource()
        super().kill()


def _under(path: str, root: str) -> bool:
    return bool(root) and (path == root or path.startswith(root.rstrip("/") + "/"))


class UBUSHost(UrmaHost):
    """One host as upstream's cases see it; see the module docstring."""

    background_class = BackgroundCmdRes

    def __getattr__(self, name: str) -> Any:
        if name in NOT_PROVIDED:
            raise not_provided("common.host.UBUSHost", name)
        return super().__getattr__(name)

    @property
    def python(self) -> str:
        return self.host.spec.python if self.host.spec is not None else "python3"

    def exec_cmd(
        self,
        cmd: str | Sequence[str],
        background: bool = False,
        timeout: float = 0,
        log_path: str | None = None,
        env: Mapping[str, Any] | None = None,
        silence: int = 0,
        get_pid: bool = True,
        port: int | None = None,
        exp_ret: int | None = None,
    ) -> Any:
        """Upstream's ``exec_cmd``: pty-style output, ``timeout=0`` the test's limit
        (``const.TMOUT``)."""
        __tracebackhide__ = True
        res = super().exec_cmd(
            cmd,
            background=background,
            timeout=timeout or float(const.TMOUT),
            log_path=log_path,
            env=env,
            silence=silence,
            get_pid=get_pid,
            port=port,
            exp_ret=exp_ret,
        )
        return res if background else PtyResult(res.result)

    def _prepare(self, command: commands.Command) -> commands.Command:
        """Shell text runs with stderr into stdout, as under upstream's pty."""
        return (
            commands.ShellScript("exec 2>&1\n" + command) if isinstance(command, str) else command
        )

    # -- processes ---------------------------------------------------------------
    def get_child_pid(self, pid: int) -> set[int]:
        """``pid`` and every process below it on this host (upstream used pstree); empty for -1."""
        if pid == -1:
            return set()
        out = self.host.run(["ps", "-e", "-o", "pid=,ppid="], timeout=60).stdout
        children: dict[int, list[int]] = {}
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
                children.setdefault(int(fields[1]), []).append(int(fields[0]))
        found, todo = set(), [int(pid)]
        while todo:
            one = todo.pop()
            if one not in found:
                found.add(one)
                todo.extend(children.get(one, []))
        return found

    def get_process_pid(self) -> set[int]:
        """The pids of this host's background commands still running (camit has no connection
        shell)."""
        return {bg.pid for bg in self.process if bg.process_is_running and bg.pid is not None}

    def capture_log(self, log_path: str, output: str | None = None, silence: int = 2) -> Any:
        """Follow ``log_path`` on this host from now on (``tail -F``); ``output`` a controller
        file."""
        return self.exec_cmd(
            commands.ShellScript(f"tail -n 0 -F {commands.quote(log_path)}"),
            background=True,
            log_path=output,
            silence=silence,
        )

    def reconnect(self, wait_time: float = 30, timeout: float = 0) -> None:
        """Sleep ``wait_time``, then try to connect every 10 s until ``timeout`` (0:
        ``const.TMOUT``)."""
        deadline = time.monotonic() + (timeout or float(const.TMOUT)) - wait_time
        time.sleep(wait_time)
        while True:
            try:
                self.host.reset()
                self.host.connect()
                log.info("%s: reconnected", self.name)
                return
            except FrameworkError as exc:
                if time.monotonic() > deadline:
                    log.error("%s: reconnect failed: %s", self.name, exc)
                    return
                log.warning("%s: reconnect: %s; again in 10 s", self.name, exc)
            time.sleep(10)

    # -- files (upstream: scp on a host; here: through the controller) -----------
    def put_file(self, src_file: str, dst_host: UBUSHost, dst_path: str) -> None:
        copy("put_file", self, str(src_file), dst_host, str(dst_path))

    def get_file(self, src_file: str, src_host: UBUSHost, dst_path: str) -> None:
        copy("get_file", src_host, str(src_file), self, str(dst_path))

    def try_put(self, src_path: str, dst_host: UBUSHost, dst_path: str) -> None:
        copy("try_put", self, str(src_path), dst_host, str(dst_path))

    def try_get(self, src_path: str, src_host: UBUSHost, dst_path: str) -> None:
        copy("try_get", src_host, str(src_path), self, str(dst_path), pattern="tsan*")


def pack_script(path: str, pattern: str | None) -> commands.ShellScript:
    """Pack ``path`` (or the ``pattern`` matches in folder ``path``) into a new temp archive; print
    its name."""
    q = commands.quote
    if pattern is None:
        folder, names = posixpath.dirname(path) or ".", q(posixpath.basename(path.rstrip("/")))
    else:
        folder, names = (
            path,
            pattern,
        )  # upstream's fixed glob ("tsan*"), expanded by the host's shell
    return commands.ShellScript(
        f't=$(mktemp /tmp/camit-xfer.XXXXXX) && cd {q(folder)} && tar -czf "$t" -- {names} '
        f'&& echo "$t" || {{ rm -f "$t"; exit 1; }}'
    )


def unpack_script(archive: str, dst: str) -> commands.ShellScript:
    """Unpack ``archive`` into folder ``dst``, or, when ``dst`` is no folder, its one entry as
    ``dst``."""
    q = commands.quote
    return commands.ShellScript(
        f'a={q(archive)}; d={q(dst)}; if [ -d "$d" ]; then tar -xzf "$a" -C "$d"; rc=$?; else '
        f't=$(mktemp -d "$d.camit-xfer.XXXXXX") && tar -xzf "$a" -C "$t" '
        f'&& mv -- "$t"/* "$d"; rc=$?; '
        f'rm -rf "$t"; fi; rm -f "$a"; exit $rc'
    )


def _unpack_local(archive: Path, dst: str) -> None:
    target = Path(dst)
    with tarfile.open(archive) as tar:
        if target.is_dir():
            tar.extractall(target, filter="data")
            return
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            tar.extractall(tmp, filter="data")
            (entry,) = Path(tmp).iterdir()
            entry.replace(target)


def copy(
    what: str,
    src: UBUSHost,
    src_path: str,
    dst: UBUSHost,
    dst_path: str,
    *,
    pattern: str | None = None,
) -> None:
    """``src:src_path`` to ``dst:dst_path`` as upstream's ``what`` did (scp semantics), through the
    controller;
    a destination under ``const.CASE_LOG_PATH`` is the controller's own folder (see the module
    docstring).
    """
    shown = f"{what}({src.name}:{src_path} -> {dst.name}:{dst_path})"
    packed: str | None = None
    try:
        packed = src.host.check(pack_script(src_path, pattern), timeout=600).stdout.strip()
        with tempfile.TemporaryDirectory(prefix="camit-xfer-") as tmp:
            local = Path(tmp) / "xfer.tar.gz"
            src.host.get(packed, local)
            if _under(dst_path, str(const.CASE_LOG_PATH)):
                _unpack_local(local, dst_path)
            else:
                remote = dst.host.check(["mktemp", "/tmp/camit-xfer.XXXXXX"]).stdout.strip()
                dst.host.put(local, remote)
                dst.host.check(unpack_script(remote, dst_path), timeout=600)
        log.info("%s: done", shown)
    except (FrameworkError, OSError, tarfile.TarError, ValueError) as exc:
        note_failure(src.name, shown, None, "", str(exc))
    finally:
        if packed:
            src.host.run(["rm", "-f", "--", packed], timeout=60)
