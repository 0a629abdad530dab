"""``camit diagnose``: where the ranks of a launch still running are, without stopping it.

A stdlib host program (sent on the command line) dumps each rank's stacks; the controller groups
them."""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from framework.config.effective import EnvConfig
from framework.hosts import Cluster, Host
from framework.launch import stacks
from framework.remote.layout import HostLayout
from framework.remote.protocol import RUN_TAG

#: the host side: argv = runs folder, launch-id prefix, host name, seconds to wait, tail bytes, run-tag name,
#: seconds the native py-spy dumps get, seconds the Python-only ones get
HOST_PROGRAM = r"""
import base64, glob, json, os, signal, subprocess, sys, time
runs, prefix, host, wait, tail = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
def tagged(tag):
    found = set()
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/environ", "rb") as fh:
                if tag in fh.read().split(b"\0"):
                    found.add(int(d[6:]))
        except OSError:
            pass
    return found
out = {}
for d in sorted(glob.glob(os.path.join(glob.escape(runs), glob.escape(prefix) + "*"))):
    launch = os.path.basename(d)
    ours = tagged(("%s=%s.%s" % (sys.argv[6], launch, host)).encode())
    pids = {}
    for p in glob.glob(os.path.join(glob.escape(d), "rank*.pid")):
        stem = os.path.basename(p)[4:-4]
        try:
            with open(p) as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if stem.isdigit() and pid in ours:
            pids[int(stem)] = pid
    asked = []
    for rank, pid in sorted(pids.items()):
        try:
            size = os.stat(os.path.join(d, "rank%d.log" % rank)).st_size
            os.kill(pid, signal.SIGUSR1)
            asked.append((rank, size))
        except OSError:
            pass
    out[launch] = {"asked": [r for r, _ in asked], "pids": {r: pids[r] for r, _ in asked}, "logs": {}, "spy": {},
                   "size": dict(asked)}
signalled = time.time()
def dumped(launch, rank, size):
    try:
        fd = os.open(os.path.join(runs, launch, "rank%d.log" % rank), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return True
    with os.fdopen(fd, "rb") as fh:
        fh.seek(size)
        return b"most recent call first" in fh.read()
waiting = [(launch, r, n) for launch, v in out.items() for r, n in v["size"].items()]
while waiting and time.time() < signalled + wait:  # py-spy's ptrace must not swallow a SIGUSR1 still pending
    time.sleep(0.05)
    waiting = [w for w in waiting if not dumped(*w)]
spy = None
for folder in (os.path.dirname(sys.executable), *os.environ.get("PATH", "").split(os.pathsep)):
    if os.access(os.path.join(folder or ".", "py-spy"), os.X_OK):
        spy = os.path.join(folder or ".", "py-spy")
        break
def dump(items, extra, timeout):
    procs = [(v, rank, subprocess.Popen([spy, "dump", "--pid", str(pid), *extra], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)) for v, rank, pid in items]
    end, late = time.time() + timeout, []
    for v, rank, proc in procs:
        try:
            v["spy"][str(rank)] = base64.b64encode(proc.communicate(timeout=max(0.0, end - time.time()))[0][-tail:]).decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            late.append((v, rank, v["pids"][rank]))
    return late
items = [(v, rank, pid) for v in out.values() for rank, pid in v["pids"].items()]
if spy is None:
    for v, rank, _ in items:
        v["spy"][str(rank)] = base64.b64encode(b"py-spy is not installed on this host\n").decode()
else:
    dump(dump(items, ["--native"], float(sys.argv[7])), [], float(sys.argv[8]))
for v in out.values():
    del v["pids"], v["size"]
for launch, v in out.items():
    for rank in v["asked"]:
        try:
            fd = os.open(os.path.join(runs, launch, "rank%d.log" % rank), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as fh:
            fh.seek(max(0, os.fstat(fd).st_size - tail))
            v["logs"][str(rank)] = base64.b64encode(fh.read(tail)).decode()
print(json.dumps(out))
"""
#: seconds the ranks get to print their stacks after SIGUSR1, before py-spy attaches (a process stopped by
#: ptrace while the signal is still pending leaves its handler to the tracer's detach)
WAIT = 2.0
#: seconds the native py-spy dumps get (they run at once), then the Python-only dumps of those not done
PYSPY_TIMEOUT = 4.0
PLAIN_TIMEOUT = 1.5


@dataclass
class Diagnosis:
    """One launch's ranks as found now: their stacks grouped, and the hosts that could not say."""

    launch_id: str
    groups: list[stacks.StackGroup] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    #: the dump's own duration: from asking every host at once to the last host's answer (seconds)
    seconds: float | None = None

    @property
    def ranks(self) -> int:
        return sum(len(g.ranks) for g in self.groups)

    def describe(self) -> str:
        lines = [f"{self.launch_id}: " + (stacks.summary(self.groups) or "no rank answered")]
        lines += [f"  {host}: {why}" for host, why in sorted(self.problems.items())]
        if self.seconds is not None and self.groups:
            lines.append(f"  {self.ranks} rank(s) dumped in {self.seconds:.1f}s")
        return "\n".join(lines)


def parse(stdout: str) -> dict[str, dict[int, tuple[str, str]]]:
    """The host's one JSON line → {launch id: {rank: (log tail, py-spy dump)}}; anything else is refused
    (ValueError)."""
    data = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    out: dict[str, dict[int, tuple[str, str]]] = {}
    for launch, entry in data.items():
        logs = _texts(launch, entry, "logs")
        spies = _texts(launch, entry, "spy")
        out[str(launch)] = {r: (text, spies.get(r, "")) for r, text in logs.items()}
    return out


def _texts(launch: str, entry: object, key: str) -> dict[int, str]:
    texts = entry.get(key) if isinstance(entry, dict) else None
    if not isinstance(texts, dict):
        raise ValueError(f"{launch!r}: no {key} mapping")
    try:
        return _decoded(texts)
    except binascii.Error as exc:
        raise ValueError(f"{launch!r}: {exc}") from None


def _decoded(texts: dict[Any, Any]) -> dict[int, str]:
    """rank -> text of a ``{rank: base64}`` mapping; entries that are not rank and text are left
    out (bad base64 raises ``binascii.Error``)."""
    return {int(r): base64.b64decode(b, validate=True).decode("utf-8", "replace")
            for r, b in texts.items() if str(r).isdigit() and isinstance(b, str)}


def diagnose(env: EnvConfig, cluster: Cluster, launch_prefix: str, *,
             wait: float = WAIT) -> list[Diagnosis]:
    """Ask every rank of the launches whose id starts with ``launch_prefix`` for its stacks, on every host."""

    def one(host: Host) -> dict[str, dict[int, tuple[str, str]]]:
        runs = HostLayout.of(env.hosts[host.name]).runs
        argv = [env.hosts[host.name].python, "-I", "-c", HOST_PROGRAM, runs, launch_prefix, host.name,
                f"{wait:g}", str(stacks.TAIL_BYTES), RUN_TAG, f"{PYSPY_TIMEOUT:g}", f"{PLAIN_TIMEOUT:g}"]
        res = host.run(argv, timeout=wait + PYSPY_TIMEOUT + PLAIN_TIMEOUT + 60)
        if not res.ok:
            raise RuntimeError(f"exit {res.rc}: {res.tail(2)}")
        return parse(res.stdout)

    t0 = time.monotonic()
    got = cluster.map(one)
    took = round(time.monotonic() - t0, 3)
    found = _by_launch(got.succeeded)
    problems = {h: str(e) for h, e in got.failed.items()}
    if not found:
        none = "no running launch with that id on any host"
        return [Diagnosis(launch_prefix, problems={**problems, "*": none})]
    return [_one(launch, ranks, problems, took) for launch, ranks in sorted(found.items())]


def _by_launch(answers: Mapping[str, Mapping[str, Mapping[int, tuple[str, str]]]],
               ) -> dict[str, dict[int, tuple[str, str, str]]]:
    """Every host's answer merged per launch: rank -> (host, log tail, py-spy dump)."""
    found: dict[str, dict[int, tuple[str, str, str]]] = {}
    for host, launches in answers.items():
        for launch, logs in launches.items():
            found.setdefault(launch, {}).update({r: (host, *texts) for r, texts in logs.items()})
    return found


def _one(launch: str, ranks: Mapping[int, tuple[str, str, str]], problems: dict[str, str],
         took: float | None = None) -> Diagnosis:
    groups = stacks.group({r: stacks.pyspy_main(spy) or stacks.main_stack(log) for r, (_, log, spy) in ranks.items()},
                          {r: host for r, (host, _, _) in ranks.items()})
    return Diagnosis(launch, groups, dict(problems), took)


__all__ = ["Diagnosis", "HOST_PROGRAM", "diagnose", "parse"]
