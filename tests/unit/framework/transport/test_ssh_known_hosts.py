"""What every host's connection costs the controller (issue 18, bench/scale.py): known_hosts is parsed once per
version of the file, not once per host (128 hosts each parsing a 128-line file cost 0.5 s of CPU in ``camit exec``),
and an idle connection's reader thread wakes once a second, not ten times. No sshd: the connects are refused after
the host keys are looked up, or stopped at paramiko's connect, which is all these tests need."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from framework.errors import HostUnreachable
from framework.transport.ssh import READER_WAKEUP, SshTransport, known_host_keys


def _key_line() -> str:
    raw = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    blob = paramiko.Message()
    blob.add_string("ssh-ed25519")
    blob.add_string(raw)
    return "ssh-ed25519 " + base64.b64encode(blob.asbytes()).decode()


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A local port nothing listens on (bound, never listening: a connect is refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def test_128_hosts_connecting_parse_known_hosts_once(tmp_path: Path, refused_port: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(f"[127.0.0.1]:{refused_port + i} {_key_line()}\n" for i in range(128))
                  + f"[127.0.0.1]:{refused_port} {_key_line()}\n")
    loads: list[str] = []
    real = paramiko.HostKeys.load

    def counting(self: paramiko.HostKeys, filename: str) -> None:
        loads.append(filename)
        real(self, filename)

    monkeypatch.setattr(paramiko.HostKeys, "load", counting)
    for i in range(128):
        t = SshTransport(f"host{i}", "127.0.0.1", refused_port, known_hosts=kh, connect_timeout=5)
        with pytest.raises(HostUnreachable, match="connection refused"):
            t.connect()
    assert loads == [str(kh)]


def test_a_changed_file_is_read_again_and_an_unchanged_one_is_not(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    first = _key_line()
    kh.write_text(f"10.0.0.1 {first}\n")
    keys = known_host_keys(kh)
    assert known_host_keys(kh) is keys
    assert keys.lookup("10.0.0.2") is None
    with kh.open("a") as fh:  # recorded meanwhile (accept-new, another controller)
        fh.write(f"10.0.0.2 {_key_line()}\n")
    again = known_host_keys(kh)
    assert again is not keys and again.lookup("10.0.0.2") is not None
    kh.write_text(f"10.0.0.1 {_key_line()}\n")  # replaced: the old key is gone
    entry = known_host_keys(kh).lookup("10.0.0.1")
    assert entry is not None and entry["ssh-ed25519"].get_base64() != first.split()[1]


def test_a_hashed_entry_is_found_by_the_host_name(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    line = _key_line()
    kh.write_text(f"{paramiko.HostKeys.hash_host('10.0.0.7')} {line}\n")
    entry = known_host_keys(kh).lookup("10.0.0.7")
    assert entry is not None and entry["ssh-ed25519"].get_base64() == line.split()[1]


def test_an_idle_connection_wakes_its_reader_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """The transport paramiko builds for us polls its socket every READER_WAKEUP (1 s), not paramiko's 0.1 s."""
    made: list[paramiko.Transport] = []

    def connect(self: paramiko.SSHClient, hostname: str, port: int, **kw: object) -> None:
        factory = kw["transport_factory"]
        assert callable(factory)
        made.append(factory(kw["sock"]))
        raise paramiko.AuthenticationException("stop here")

    monkeypatch.setattr(paramiko.SSHClient, "connect", connect)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        t = SshTransport("host1", "127.0.0.1", server.getsockname()[1], connect_timeout=5)
        with pytest.raises(Exception, match="stop here"):
            t.connect()
    assert READER_WAKEUP == 1.0 and made and made[0].sock.gettimeout() == READER_WAKEUP
    made[0].sock.close()
