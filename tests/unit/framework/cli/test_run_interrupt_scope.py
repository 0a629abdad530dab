"""Issue 31 item 5, the pure half (security review 3, #6 and #8): an interrupt inside ``Cluster.map`` kills
the commands it started and leaves the hosts usable (this machine as the host, ``LocalTransport``); ``camit
run`` whose launch raised (Ctrl-C, SIGTERM, a host error) scans the cores before the run folders go."""

from __future__ import annotations

import argparse
import contextlib
import secrets
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from framework.cli import run as cli_run
from framework.config.effective import EnvConfig
from framework.hosts import Cluster, Host
from framework.records.folder import RunDir
from framework.transport.local import LocalTransport


def test_an_interrupted_map_kills_its_commands_and_is_scoped_to_that_map(tmp_path):
    marker = tmp_path / f"ran-{secrets.token_hex(4)}"
    cluster = Cluster([Host(f"h{i}", LocalTransport(f"h{i}"), command_timeout=900) for i in (1, 2)])
    timer = threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with cluster, pytest.raises(KeyboardInterrupt):
        cluster.run(["sh", "-c", f"sleep 3; touch {marker}"], timeout=900)
    reached = time.monotonic() - start
    assert reached < 2, reached
    assert [h.cancel_event.is_set() for h in cluster] == [False, False]
    assert {h: r.stdout for h, r in cluster.check(["echo", "ok"]).items()} == {"h1": "ok\n", "h2": "ok\n"}
    time.sleep(3.2)
    assert not marker.exists(), "the interrupted command went on running"


class _Recorder:
    def __init__(self, calls: list[str], fail: BaseException | None) -> None:
        self.calls, self.fail = calls, fail

    def __call__(self, *args: Any, **kwargs: Any) -> _Recorder:
        return self

    def begin(self) -> None:
        self.calls.append("scan before")

    def end(self, **kwargs: Any) -> SimpleNamespace:
        self.calls.append("scan after")
        return SimpleNamespace(cores=["a core"], failed=False, message="", log_summary="", policy=None)

    def run(self, target: Any, timeout: float) -> None:
        self.calls.append("launch")
        assert self.fail is not None
        raise self.fail

    def cleanup_remote(self) -> None:
        self.calls.append("remove run folders")


@pytest.mark.parametrize("error", [KeyboardInterrupt("signal 15"), RuntimeError("host error in prepare")])
def test_camit_run_scans_cores_before_it_removes_anything_however_the_launch_ends(monkeypatch, error):
    calls: list[str] = []
    rec = _Recorder(calls, error)
    monkeypatch.setattr("framework.launch.runwatch.ClusterWatch", rec)
    monkeypatch.setattr("framework.launch.Launcher", rec)
    monkeypatch.setattr(cli_run, "leased", lambda args, cluster: contextlib.nullcontext())
    args = argparse.Namespace(json=True, nproc_per_node=1, keep_remote=False, timeout=60, core_policy="fail")
    state: dict[str, Any] = {"cores": None}
    with pytest.raises(type(error)):
        # stand-ins for the env, the cluster and the run folder: the recorder replaces what would use them
        cli_run.run_leased(args, cast(EnvConfig, SimpleNamespace()), cast(Cluster, contextlib.nullcontext()),
                           cast(RunDir, SimpleNamespace(path=Path("."))), None, state)
    assert calls == ["scan before", "launch", "scan after", "remove run folders"]
    assert state["cores"] == ["a core"]


def test_an_interrupt_stops_a_download_at_its_next_chunk(tmp_path):
    """A fetch is bounded by its 1800 s cap, not by the interrupt, unless it looks at the host's cancel."""
    import io

    from framework.errors import Cancelled
    from framework.fetchcaps import CHUNK, caps, copy_bounded

    stop = threading.Event()
    source = io.BytesIO(b"x" * (CHUNK * 8))

    def read(n: int) -> bytes:
        if source.tell() >= 2 * CHUNK:
            stop.set()  # the interrupt arrives while the file is coming
        return source.read(n)

    out = io.BytesIO()
    with pytest.raises(Cancelled, match="interrupted: download of /big stopped after"):
        copy_bounded(read, out, host="h1", remote="/big", cap=caps({}).with_(cancel=stop))
    assert len(out.getvalue()) <= 3 * CHUNK

    seen = []

    class Recording(LocalTransport):
        def get(self, remote, local, *, cap=None):
            seen.append(cap.cancel)
            return super().get(remote, local, cap=cap)

    (tmp_path / "f").write_bytes(b"data")
    host = Host("h1", Recording("h1"), command_timeout=30)
    host.get(str(tmp_path / "f"), tmp_path / "copy")
    assert seen == [host.cancel_event] and (tmp_path / "copy").read_bytes() == b"data"
