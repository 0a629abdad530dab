"""framework.urma.host: upstream's UBUSHost semantics, on local hosts (LocalTransport: real shells,
real tar)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.hosts import Host
from framework.plugin.failtext import failed_commands
from framework.transport.local import LocalTransport
from framework.urma.host import UBUSHost, pty_text
from framework.urma.shims.common.constants import const


@pytest.fixture
def hosts() -> Iterator[tuple[UBUSHost, UBUSHost]]:
    a, b = UBUSHost(Host("a", LocalTransport("a"))), UBUSHost(Host("b", LocalTransport("b")))
    yield a, b
    for h in (a, b):
        h.kill_background()


def test_pty_text() -> None:
    assert pty_text("1\n2\r\n3") == "1\r\n2\r\n3"


def test_exec_cmd_output_is_pty_style(hosts: tuple[UBUSHost, UBUSHost]) -> None:
    res = hosts[0].exec_cmd("echo out; echo err >&2; printf '40001\\n40002\\n'")
    assert res.ret == 0 and res.stderr == ""
    assert res.stdout.split("\r\n") == ["out", "err", "40001", "40002", ""]


def test_timeout_zero_is_the_tests_limit(
    hosts: tuple[UBUSHost, UBUSHost], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(const, "TMOUT", 1)
    start = time.monotonic()
    res = hosts[0].exec_cmd("sleep 20")
    assert res.ret is None and res.timed_out and time.monotonic() - start < 10


def test_background_ret_does_not_block_and_pid_is_set(hosts: tuple[UBUSHost, UBUSHost]) -> None:
    a = hosts[0]
    start = time.monotonic()
    bg = a.exec_cmd("sleep 0.3; echo done", background=True)
    assert bg.pid is not None and bg.pid > 0
    still_running = bg.ret is None
    assert still_running and time.monotonic() - start < 0.3
    assert bg.pid in a.get_child_pid(bg.pid) and bg.pid in a.get_process_pid()
    bg.wait()
    assert bg.ret == 0 and bg.stdout == "done\r\n"


def test_failed_command_is_noted_with_its_output(hosts: tuple[UBUSHost, UBUSHost]) -> None:
    failed_commands(clear=True)
    hosts[0].exec_cmd("echo 'gcc: fatal error: x.h' >&2; exit 4")
    (noted,) = failed_commands(clear=True)
    assert "ret=4" in noted and "gcc: fatal error: x.h" in noted


def test_put_file_get_file_try_put_try_get(
    hosts: tuple[UBUSHost, UBUSHost], tmp_path: Path
) -> None:
    a, b = hosts
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "f.txt").write_text("one")
    (src / "sub" / "g.txt").write_text("two")
    (src / "tsan.1").write_text("t1")
    dst = tmp_path / "dst"
    dst.mkdir()
    a.put_file(str(src / "f.txt"), b, str(dst / "renamed.txt"))
    b.get_file(str(src / "f.txt"), a, str(dst))
    a.try_put(str(src / "sub"), b, str(dst))
    b.try_get(str(src), a, str(dst))
    assert (dst / "renamed.txt").read_text() == "one" and (dst / "f.txt").read_text() == "one"
    assert (dst / "sub" / "g.txt").read_text() == "two" and (dst / "tsan.1").read_text() == "t1"


def test_failed_copy_is_noted_not_raised(hosts: tuple[UBUSHost, UBUSHost], tmp_path: Path) -> None:
    failed_commands(clear=True)
    hosts[0].put_file(str(tmp_path / "absent"), hosts[1], str(tmp_path / "x"))
    (noted,) = failed_commands(clear=True)
    assert noted.startswith("a: put_file(a:") and "absent" in noted


def test_destination_under_case_log_path_is_the_controller(
    hosts: tuple[UBUSHost, UBUSHost], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "case_log"
    (logs / "run1").mkdir(parents=True)
    monkeypatch.setattr(const, "CASE_LOG_PATH", str(logs))
    (tmp_path / "dmesg.log").write_text("kernel")
    hosts[0].get_file(str(tmp_path / "dmesg.log"), hosts[0], str(logs / "run1"))
    assert (logs / "run1" / "dmesg.log").read_text() == "kernel"


def test_check_resource_samples_the_process_tree(hosts: tuple[UBUSHost, UBUSHost]) -> None:
    bg = hosts[0].exec_cmd("sleep 5", background=True)
    info = bg.check_resource(timeout=5, interval=0.1)
    assert bg.pid in info
    deadline = time.monotonic() + 5
    while not info[bg.pid].info and time.monotonic() < deadline:
        time.sleep(0.05)
    assert info[bg.pid].mem_max > 0 and info[bg.pid].fd_max >= 0
    bg.kill()


@pytest.mark.parametrize("name", ["conn", "passwd", "info"])
def test_unprovided_member_names_upstream(hosts: tuple[UBUSHost, UBUSHost], name: str) -> None:
    with pytest.raises(
        AttributeError, match=rf"URMA's common.host.UBUSHost.{name} is not provided by camit"
    ):
        getattr(hosts[0], name)


def test_capture_log_follows_new_lines_only(
    hosts: tuple[UBUSHost, UBUSHost], tmp_path: Path
) -> None:
    watched = tmp_path / "messages"
    watched.write_text("old\n")
    cap = hosts[0].capture_log(str(watched), output=str(tmp_path / "copy.log"))
    time.sleep(0.5)
    with watched.open("a") as fh:
        fh.write("new line\n")
    deadline = time.monotonic() + 5
    while "new line" not in cap.stdout and time.monotonic() < deadline:
        time.sleep(0.05)
    cap.kill()
    assert cap.stdout == "new line\r\n" and (tmp_path / "copy.log").read_text() == "new line\n"
