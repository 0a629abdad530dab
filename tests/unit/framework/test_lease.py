"""framework.lease: pure parts, the flow on FakeTransport, and the real shell scripts on LocalTransport.

LocalTransport "hosts" (one workdir each under tmp_path) run the very scripts the lab's hosts run,
so atomic creation, conditional replacement and the all-or-nothing order are tested without SSH.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from framework.config.effective import HostSpec, NicSpec
from framework.errors import EXIT_INFRA
from framework.hosts import Cluster, Host
from framework.lease import (
    LEASE_FILE,
    STALE_BEATS,
    Lease,
    LeaseHeld,
    LeaseLost,
    LeaseRecord,
    acquire_script,
    default_owner,
    lease_status,
    parse_reply,
    release_leases,
    release_script,
    render_template,
    stale_reason,
)
from framework.result import Result
from framework.testing import FakeTransport
from framework.transport.local import LocalTransport
from tests.support.leases import answers, states

BASE = LeaseRecord(owner="https://ci/job/7/", token="abc", pid=4242, controller="ctl", hosts=("h1", "h2"),
                   start=1000.0, heartbeat=1100.0, expires=1400.0, ttl=300.0, interval=10.0)


def record(**over: Any) -> LeaseRecord:
    return dataclasses.replace(BASE, **over)


def on_host(host: Host) -> LeaseRecord:
    """The lease record in ``host``'s lease file (the test fails when it is not one)."""
    rec = LeaseRecord.parse(lease_file(host).read_text())
    assert rec is not None, f"{host.name}: no lease record"
    return rec


# --------------------------------------------------------------------------- pure


def test_template_fills_host_times_and_parses_back():
    text = render_template(owner='o "q" $(x)', token="t1", pid=7, controller="c", hosts=["h1"], ttl=300,
                           interval=10, pid_start=12.5, run_id="r1", controller_id="c/boot/ns")
    assert '"start": __NOW__' in text and '"expires": __EXPIRES__' in text
    filled = text.replace("__NOW__", "1000").replace("__EXPIRES__", "1300")
    rec = LeaseRecord.parse(filled)
    assert rec == LeaseRecord('o "q" $(x)', "t1", 7, "c", ("h1",), 1000, 1000, 1300, 300, 10, 12.5, "r1",
                              "c/boot/ns")
    # the holder is named by owner, pid, start time and run id: never by its command line
    assert "argv" not in json.loads(filled)
    kept = render_template(owner="o", token="t", pid=1, controller="c", hosts=[], ttl=1, interval=0,
                           start=900.0)
    assert '"start": 900.0' in kept
    assert LeaseRecord.parse("not json") is None and LeaseRecord.parse('{"owner": 1}') is None


def test_parse_reply():
    r = parse_reply("RESULT held\nNOW 1234\nLEASE-BEGIN\n{\"a\": 1}\n\nLEASE-END\n")
    assert (r.result, r.now, r.content) == ("held", 1234.0, '{"a": 1}')
    r = parse_reply("RESULT error cannot create /x\nNOW 5\n")
    assert (r.result, r.message, r.content) == ("error", "cannot create /x", None)
    # a reply cut before LEASE-END still carries the text it has
    assert parse_reply("RESULT held\nNOW 1\nLEASE-BEGIN\n{}\n").content == "{}"


@pytest.mark.parametrize(("rec", "now", "here", "alive", "reason"), [
    (record(), 1105.0, "other", True, None),
    (record(), 1401.0, "other", True, "it expired 1s ago"),
    (record(), 1131.0, "other", True, "its heartbeat is 31s old (interval 10s)"),
    (record(interval=0.0), 1390.0, "other", True, None),  # no heartbeat thread: only expiry counts
    (record(controller_id="ctl/b/ns", run_id="r9"), 1105.0, "ctl", False,
     "its holder, pid 4242 on this controller, is gone (run r9)"),
    (record(controller_id="ctl/b/ns"), 1105.0, "other", False, None),  # a pid on another controller: unjudged
    # same hostname, another boot or PID namespace (a container): its pid means nothing here
    (record(controller_id="ctl/b/other-ns"), 1105.0, "ctl", False, None),
    (record(), 1105.0, "ctl", False, None),  # an old record without controller id is never judged by pid
    (None, 0.0, "x", True, "the lease file is not a camit lease"),
])
def test_stale_reason(rec, now, here, alive, reason):
    assert stale_reason(rec, now, here=here, here_id="ctl/b/ns", alive=lambda pid, start: alive) == reason


def test_pid_alive_needs_the_start_time_too():
    import os

    from framework.lease import pid_alive, process_start

    me = os.getpid()
    began = process_start(me)
    assert began is not None and pid_alive(me, began) and pid_alive(me)
    # the same pid with another start time is another process (the holder's pid was reused)
    assert not pid_alive(me, began + 5)


def test_pid_alive_a_zombie_is_gone():
    from framework.lease import pid_alive

    child = subprocess.Popen(["true"])  # exits at once; not reaped until wait(): a zombie
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not pid_alive(child.pid)
    finally:
        child.wait()


def test_lease_held_names_the_holder():
    err = LeaseHeld("host2", record(), 1105.0, waited=30)
    text = str(err)
    assert text.startswith("host2: leased by https://ci/job/7/ (pid 4242 on ctl, since ")
    assert "heartbeat 5s ago, expires in 295s" in text and "after waiting 30s" in text
    assert isinstance(err.holder, LeaseRecord)
    assert err.exit_code == EXIT_INFRA and err.holder.token == "abc"


def test_release_script_takes_exactly_one_condition():
    with pytest.raises(ValueError):
        release_script("/w/l")
    with pytest.raises(ValueError):
        release_script("/w/l", token="a", old="b")
    assert "grep -q -F -- '\"token\": \"a1\"'" in release_script("/w/l", token="a1")


def test_default_owner(monkeypatch):
    monkeypatch.setenv("BUILD_URL", "https://jenkins/job/cam/12/")
    assert default_owner() == "https://jenkins/job/cam/12/"
    monkeypatch.delenv("BUILD_URL")
    assert default_owner().endswith("@" + socket.gethostname())


# --------------------------------------------------------------------------- flow on FakeTransport


def fake_host(name: str, ip: str) -> tuple[Host, FakeTransport]:
    fake = FakeTransport(name)
    s = HostSpec(name=name, manage_nic=NicSpec("eth0", ip), workdir="/w")
    return Host(name, fake, spec=s, command_timeout=5), fake


def put_content(display: str) -> str:
    """The lease text a script writes (the word after ``put``), unquoted as the shell would.

    Not a regex: the text holds the controller's command line, which can hold quotes (``-k "a or b"``).
    """
    lexer = shlex.shlex(display[display.index("put ") + 4:], posix=True)
    lexer.whitespace_split = True
    return next(iter(lexer))


def reply(result: str, content: str | None = None, now: int = 1000) -> Result:
    text = f"RESULT {result}\nNOW {now}\n" + (f"LEASE-BEGIN\n{content}\nLEASE-END\n" if content else "")
    return Result("x", "script", 0, text)


def test_all_or_nothing_in_address_order_on_fake_hosts():
    # names sort one way, addresses the other: the lease goes by address
    a, fa = fake_host("a", "10.0.0.9")
    b, fb = fake_host("b", "10.0.0.1")
    other = json.dumps(record(controller="elsewhere", heartbeat=995, expires=1300).to_json())
    mine: dict[str, str] = {}

    def take_b(display: str) -> Result:
        content = put_content(display)
        mine["b"] = content.replace("__NOW__", "1000").replace("__EXPIRES__", "1300")
        return reply("acquired", mine["b"])

    fb.on(re.compile(r"ln -- "), handler=take_b)
    fb.on(re.compile(r"rm -f -- \"\$L\" && echo 'RESULT released'"), handler=lambda d: reply("released"))
    fa.on(re.compile(r"ln -- "), handler=lambda d: reply("held", other))
    lease = Lease(Cluster([a, b]), owner="me", interval=0)
    assert [h.name for h in lease.hosts] == ["b", "a"]
    with pytest.raises(LeaseHeld, match=r"^a: leased by https://ci/job/7/ \(pid 4242 on elsewhere"):
        lease.acquire()
    assert any("RESULT released" in c for c in fb.calls)  # b was given back
    assert lease.held == {}


def test_takeover_of_stale_lease_is_conditional_on_its_content(caplog):
    h, fake = fake_host("h", "10.0.0.1")
    stale = json.dumps(record(controller="elsewhere", heartbeat=100, expires=400).to_json())

    def takeover(display: str) -> Result:
        assert "[ \"$(cat -- \"$L\")\" = '" + stale + "' ]" in display
        content = put_content(display)
        return reply("acquired", content.replace("__NOW__", "1000").replace("__EXPIRES__", "1300"))

    fake.on(re.compile(r"ln -- "), handler=lambda d: reply("held", stale))
    fake.on(re.compile(r"mv -f -- \"\$T\" \"\$L\" && echo 'RESULT acquired'"), handler=takeover)
    fake.on(re.compile(r"RESULT released"), handler=lambda d: reply("released"))
    with caplog.at_level(logging.WARNING, logger="camit.lease"):
        with Lease(Cluster([h]), owner="me", interval=0) as lease:
            assert lease.held["h"].owner == "me"
    assert "h: taking over the stale lease of https://ci/job/7/" in caplog.text and "expired 600s ago" in caplog.text


# --------------------------------------------------------------------------- real scripts on LocalTransport


@pytest.fixture
def hosts(tmp_path):
    def make(n: int = 3) -> list[Host]:
        out = []
        for i in range(1, n + 1):
            s = HostSpec(name=f"h{i}", manage_nic=NicSpec("eth0", f"10.0.0.{i}"), workdir=str(tmp_path / f"h{i}"))
            out.append(Host(s.name, LocalTransport(s.name), spec=s, command_timeout=30))
        return out

    return make


def lease_file(host: Host) -> Path:
    assert host.spec is not None
    return Path(host.spec.workdir) / LEASE_FILE


def test_acquire_writes_host_times_and_release_removes(hosts):
    hs = hosts(3)
    before = time.time()
    with Lease(Cluster(hs), owner="alice@ctl", ttl=120, interval=0) as lease:
        for h in hs:
            rec = on_host(h)
            assert rec.owner == "alice@ctl" and rec.token == lease.token and rec.hosts == ("h1", "h2", "h3")
            assert before - 1 <= rec.start <= time.time() + 1 and rec.expires == rec.heartbeat + 120
            assert rec.pid == __import__("os").getpid()
    assert not any(lease_file(h).exists() for h in hs)
    assert not any(Path(h.spec.workdir, LEASE_FILE + ".lock").exists() for h in hs)


def test_second_lease_fails_naming_the_first_then_succeeds_after_release(hosts):
    hs = hosts(2)
    first = Lease(Cluster(hs), owner="first@ctl", interval=0).acquire()
    with pytest.raises(LeaseHeld, match=r"h1: leased by first@ctl \(pid \d+ on "):
        Lease(Cluster(hs), owner="second@ctl", interval=0).acquire()
    first.release()
    with Lease(Cluster(hs), owner="second@ctl", interval=0):
        pass


def test_all_or_nothing_leaves_nothing_behind(hosts):
    h1, h2, h3 = hosts(3)
    with Lease(Cluster([h2]), owner="holder", interval=0):
        with pytest.raises(LeaseHeld, match="^h2: leased by holder"):
            Lease(Cluster([h1, h2, h3]), owner="greedy", interval=0).acquire()
        assert not lease_file(h1).exists() and not lease_file(h3).exists()


class TimedTransport(LocalTransport):
    """The real scripts, each acquire's (start, end) noted: which hosts were taken at the same time."""

    def __init__(self, name: str, spans: list[tuple[str, float, float]]) -> None:
        super().__init__(name)
        self.spans = spans

    def run(self, line: str, **kw):
        start = time.monotonic()
        try:
            return super().run(line, **kw)
        finally:
            if "ln -- " in line:  # the acquire script
                self.spans.append((self.name, start, time.monotonic()))


def timed_hosts(tmp_path: Path, n: int, spans: list[tuple[str, float, float]]) -> list[Host]:
    out = []
    for i in range(1, n + 1):
        s = HostSpec(name=f"h{i}", manage_nic=NicSpec("eth0", f"10.0.0.{i}"), workdir=str(tmp_path / f"h{i}"))
        out.append(Host(s.name, TimedTransport(s.name, spans), spec=s, command_timeout=30))
    return out


def _overlapping(spans: list[tuple[str, float, float]]) -> int:
    """The most acquires that ran at one moment."""
    edges = sorted([(a, 1) for _, a, _ in spans] + [(b, -1) for _, _, b in spans], key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def test_a_free_cluster_is_taken_first_host_then_the_rest_at_once(tmp_path):
    spans: list[tuple[str, float, float]] = []
    hs = timed_hosts(tmp_path, 6, spans)
    with Lease(Cluster(hs), owner="me", interval=0):
        assert all(lease_file(h).exists() for h in hs)
    assert len(spans) == 6
    first = next(s for s in spans if s[0] == "h1")
    assert all(first[2] <= start for name, start, _ in spans if name != "h1")  # the first host alone, before
    assert _overlapping(spans) > 1  # the rest together, not one round trip per host


def test_after_a_held_host_the_retries_go_host_by_host(tmp_path):
    spans: list[tuple[str, float, float]] = []
    hs = timed_hosts(tmp_path, 6, spans)
    holder = Lease(Cluster([hs[3]]), owner="holder", interval=0).acquire()
    spans.clear()  # the holder's own acquire of h4 is not the contender's

    def release_once_h4_was_tried() -> None:  # not on a timer: a loaded machine may not have tried h4 yet
        deadline = time.monotonic() + 20
        while not any(name == "h4" for name, _, _ in spans) and time.monotonic() < deadline:
            time.sleep(0.02)
        holder.release()

    threading.Thread(target=release_once_h4_was_tried, daemon=True).start()
    with Lease(Cluster(hs), owner="me", wait=20, interval=0, poll=0.1) as lease:
        assert all(on_host(h).owner == "me" for h in hs)
        assert lease._contended
    retries = [s for s in spans if s[1] > spans[0][1]]  # everything after the first attempt's h1
    last = [s for s in retries if s[0] == "h1"][-1]
    after = [s for s in spans if s[1] >= last[1]]
    assert [n for n, _, _ in after] == [h.name for h in hs]  # the winning attempt, in order
    assert _overlapping(after) == 1


def test_disjoint_groups_are_leased_concurrently(hosts):
    h1, h2, h3, h4 = hosts(4)
    with Lease(Cluster([h1, h2]), owner="a", interval=0), Lease(Cluster([h3, h4]), owner="b", interval=0):
        owners = {h.name: on_host(h).owner for h in (h1, h2, h3, h4)}
        assert owners == {"h1": "a", "h2": "a", "h3": "b", "h4": "b"}


def test_wait_for_a_lease_released_meanwhile(hosts):
    hs = hosts(2)
    first = Lease(Cluster(hs), owner="first", interval=0).acquire()
    threading.Timer(1.0, first.release).start()
    start = time.monotonic()
    with Lease(Cluster(hs), owner="second", wait=20, interval=0, poll=0.2):
        took = time.monotonic() - start
    assert 0.8 < took < 6


def test_wait_has_a_deadline(hosts):
    hs = hosts(1)
    with Lease(Cluster(hs), owner="first", interval=0):
        start = time.monotonic()
        with pytest.raises(LeaseHeld, match="still held after waiting 1s"):
            Lease(Cluster(hs), owner="second", wait=1.0, interval=0, poll=0.2).acquire()
        assert time.monotonic() - start < 3


def test_expired_lease_is_taken_over_with_a_warning(hosts, caplog):
    (h,) = hosts(1)
    lease_file(h).parent.mkdir(parents=True)
    old = record(controller="gone-ctl", start=1.0, heartbeat=1.0, expires=2.0)
    lease_file(h).write_text(json.dumps(old.to_json()) + "\n")
    with caplog.at_level(logging.WARNING, logger="camit.lease"):
        with Lease(Cluster([h]), owner="new", interval=0) as lease:
            assert on_host(h).token == lease.token
    assert "taking over the stale lease of https://ci/job/7/ (pid 4242 on gone-ctl" in caplog.text


def test_dead_holder_on_this_controller_is_stale_at_once(hosts, caplog):
    (h,) = hosts(1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    first = Lease(Cluster([h]), owner="crashed", interval=0).acquire()
    text = lease_file(h).read_text().replace(f'"pid": {__import__("os").getpid()}', f'"pid": {dead.pid}')
    lease_file(h).write_text(text)
    with caplog.at_level(logging.WARNING, logger="camit.lease"), Lease(Cluster([h]), owner="next", interval=0):
        pass
    assert f"its holder, pid {dead.pid} on this controller, is gone" in caplog.text
    first.held.clear()  # it was taken over


def test_released_on_exception(hosts):
    hs = hosts(2)
    with pytest.raises(ZeroDivisionError), Lease(Cluster(hs), owner="x", interval=0):
        1 / 0  # noqa: B018
    assert not any(lease_file(h).exists() for h in hs)


def test_heartbeat_renews_and_a_takeover_is_noticed(hosts):
    (h,) = hosts(1)
    with pytest.raises(LeaseLost, match="lease lost: h1: taken over by thief"):
        with Lease(Cluster([h]), owner="me", ttl=30, interval=0.3) as lease:
            first = on_host(h)
            deadline = time.monotonic() + 5
            while on_host(h).heartbeat == first.heartbeat:
                assert time.monotonic() < deadline, "no heartbeat"
                time.sleep(0.1)
            renewed = on_host(h)
            assert renewed.start == first.start and renewed.expires == renewed.heartbeat + 30
            lease_file(h).write_text(json.dumps(record(owner="thief", token="other", heartbeat=renewed.heartbeat,
                                                       expires=renewed.expires).to_json()))
            while not lease.lost:
                assert time.monotonic() < deadline + 5, "takeover not noticed"
                time.sleep(0.1)
    assert on_host(h).owner == "thief"  # not ours to remove


def test_racing_takers_exactly_one_wins(hosts):
    hs = hosts(2)
    winners, losers = [], []
    barrier = threading.Barrier(8)

    def take(i: int) -> None:
        lease = Lease(Cluster(hs), owner=f"t{i}", interval=0)
        barrier.wait()
        try:
            lease.acquire()
            winners.append(lease)
        except LeaseHeld:
            losers.append(i)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 7
    tokens = {on_host(h).token for h in hs}
    assert tokens == {winners[0].token}
    winners[0].release()


def test_status_and_forced_release(hosts):
    hs = hosts(2)
    Lease(Cluster(hs[:1]), owner="someone-else", interval=0).acquire()
    st = states(lease_status(Cluster(hs)))
    rec = st["h1"].record
    assert st["h1"].state == "held" and rec is not None and rec.owner == "someone-else"
    assert st["h2"].state == "free"
    result = answers(release_leases(Cluster(hs)))
    assert result["h1"].startswith("held by someone-else") and result["h2"] == "free"
    assert release_leases(Cluster(hs), force=True)["h1"] == "released"
    assert not lease_file(hs[0]).exists()


def test_acquire_script_reports_an_unwritable_workdir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = LocalTransport("x").run(acquire_script(str(blocker / "sub" / LEASE_FILE), "{}", "tok", 10), timeout=10,
                                display="acquire")
    assert parse_reply(r.stdout).result == "error"


def test_release_without_force_takes_only_the_lease_of_its_token_never_by_owner(hosts):
    """Security review 3, #15: two sessions of one user on one controller have the same owner string
    (``user@host``); ``lease release`` without ``--force`` once removed the other session's live lease."""
    hs = hosts(2)
    other = Lease(Cluster(hs), interval=0).acquire()  # the other session: the same default owner as ours
    try:
        result = answers(release_leases(Cluster(hs)))
        assert all(v.startswith(f"held by {default_owner()}") and v.endswith("not released (use --force)")
                   for v in result.values()), result
        assert all(lease_file(h).exists() for h in hs)
        assert answers(release_leases(Cluster(hs), token="0" * 16))["h1"].startswith("held by")
        assert dict(release_leases(Cluster(hs), token=other.token)) == {"h1": "released", "h2": "released"}
    finally:
        other.held.clear()
    assert not any(lease_file(h).exists() for h in hs)


class SlowRefresh(LocalTransport):
    """The real scripts; while ``slow`` is set, each heartbeat takes ``delay`` seconds first (a stopped host:
    its timeout, then the kill path; the review measured 26 s against a 30 s staleness window)."""

    def __init__(self, name: str, slow: threading.Event, delay: float) -> None:
        super().__init__(name)
        self.slow, self.delay = slow, delay

    def run(self, line: str, **kw):
        if "RESULT refreshed" in line and self.slow.is_set():
            time.sleep(self.delay)
        return super().run(line, **kw)


def test_one_slow_host_never_ages_a_healthy_hosts_heartbeat(tmp_path):
    """Security review 3, #7 as ``lease_barrier.py`` ran it, scaled to a 1 s interval (staleness at 3 s): h2's
    heartbeat takes 5 s; h1's must stay fresh, so a second controller finds h1 held, never stale."""
    slow = threading.Event()
    hs = []
    for i in (1, 2):
        spec = HostSpec(name=f"h{i}", manage_nic=NicSpec("eth0", f"10.0.0.{i}"), workdir=str(tmp_path / f"h{i}"))
        hs.append(Host(spec.name, SlowRefresh(spec.name, slow, 5.0 if i == 2 else 0.0), spec=spec,
                       command_timeout=30))
    lease = Lease(Cluster(hs), owner="controller-A", ttl=300, interval=1).acquire()
    try:
        slow.set()
        ages = []
        deadline = time.monotonic() + 4.5  # 1.5 staleness windows
        while time.monotonic() < deadline:
            rec = on_host(hs[0])
            ages.append(time.time() - rec.heartbeat)
            time.sleep(0.25)
        print(f"h1 heartbeat age max {max(ages):.2f}s")
        assert max(ages) < STALE_BEATS, f"h1's heartbeat aged {max(ages):.1f}s (stale past {STALE_BEATS}s)"
        with pytest.raises(LeaseHeld, match="^h1: leased by controller-A"):
            Lease(Cluster([hs[0]]), owner="controller-B", interval=0).acquire()
    finally:
        slow.clear()
        lease.release()


@pytest.mark.parametrize("failure", ["ssh", "busy"])
def test_a_host_whose_refresh_keeps_failing_is_dropped_before_it_could_be_judged_stale(failure):
    """Issue 31: a host whose heartbeat keeps failing (its sshd gone) was only logged, beat after beat,
    while another controller could judge its lease stale and take it: two controllers on one host. Now a
    failed beat is retried at once while the staleness window allows, then the host is dropped (``lost``
    names it and the heartbeat step, ``on_lost`` fires) before the window ends; a healthy host goes on.
    A refresh that answers ``busy`` (the lease file's mutex never came free) renewed nothing: it counts too."""
    hosts, fakes = zip(*(fake_host(n, f"10.0.0.{i}") for i, n in enumerate(("a", "b"), 1)))
    failing = threading.Event()
    refreshes: dict[str, list[float]] = {"a": [], "b": []}

    def handler(name: str):
        def reply_to(display: str) -> Result:
            content = put_content(display).replace("__NOW__", "1000").replace("__EXPIRES__", "1300")
            if "RESULT refreshed" in display:
                refreshes[name].append(time.monotonic())
                if name == "a" and failing.is_set():
                    return (Result(name, "script", 255, "", "ssh: connection refused") if failure == "ssh"
                            else reply("busy", content))
                return reply("refreshed", content)
            return reply("released" if "RESULT released" in display else "acquired", content)
        return reply_to

    for h, fake in zip(hosts, fakes):
        fake.on(re.compile(r"RESULT"), handler=handler(h.name))
    lost: list[LeaseLost] = []
    lease = Lease(Cluster(list(hosts)), owner="me", ttl=300, interval=0.3, on_lost=lost.append).acquire()
    try:
        time.sleep(0.45)  # one good beat each
        failing.set()
        started = time.monotonic()
        deadline = started + 3.0
        while "a" not in lease.lost and time.monotonic() < deadline:
            time.sleep(0.01)
        dropped = time.monotonic()
        time.sleep(0.4)
    finally:
        lease.release()
    assert "a" in lease.lost and "b" not in lease.lost, lease.lost
    last_good = max(t for t in refreshes["a"] if t < started)
    assert dropped < last_good + lease.stale_after  # before a's last good beat could be judged stale
    assert lease.lost["a"].startswith("dropped: the lease heartbeat failed ")
    attempts = [t for t in refreshes["a"] if t >= started]
    assert len(attempts) >= 2 and all(t <= dropped + 0.05 for t in attempts)  # retried, then left alone
    assert len([t for t in refreshes["b"] if t > dropped]) >= 1  # the healthy host beats on
    assert lost and str(lost[0]).startswith("lease lost: a: dropped: the lease heartbeat failed")
    with pytest.raises(LeaseLost, match="^lease lost: a: dropped"):
        lease.check()
