#!/usr/bin/env python3
"""Fan-out benchmark: ``true`` on 8 and 32 lab hosts, camit vs the peers, cold and warm.

    python bench/fanout.py [--rounds 5] [--warm 5] [--sizes 8,32]

Brings up a private 32-host lab (name ``fan``, 10.84.0.0/24). Each tool runs in
its own worker process (so gevent, asyncio and thread pools never share an
interpreter and imports are not timed); one worker invocation times one *cold*
round (fresh connections: connect + exec + wait for every host) and then
``--warm`` *warm* rounds over the connections it keeps. Worker invocations are
interleaved tool by tool, ``--rounds`` times, and the medians are compared.

Peers: OpenSSH with a ControlMaster per host (``-o ControlMaster=auto
-o ControlPath -o ControlPersist``), fabric ``ThreadingGroup``, asyncssh,
parallel-ssh (``ParallelSSHClient``), pdsh (``-R ssh``, which opens a new
connection for every command, so its warm round is a cold one). Every tool uses
the lab's client key and known_hosts file (fabric and parallel-ssh do not verify
host keys at all). Goals (issue 9): camit ≤ 1.1 × the fastest peer, cold and warm.

    python bench/fanout.py --process [--rounds 9] [--sizes 8] [--env LAB.yaml]

``--process`` times whole processes instead (issue 18): ``camit exec --env E -- true`` (the CLI,
interpreter start-up and imports included), ``pdsh -R ssh -w <ips> true`` and parallel OpenSSH (one
``ssh <ip> true`` process per host, all started at once, no ControlMaster), each from its spawn to the
exit of the last process, interleaved round by round. camit's row also shows when its first TCP
connection started (from spawn: the start-up on the hot path). ``--env`` reuses a running lab (its
key and known_hosts), else a private one is brought up as above; ``--baseline DIR`` also times the
camit of another checkout (before/after) in the same rounds. Goal (issue 18): the camit process
≤ 1.1 × pdsh and parallel OpenSSH.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

TOOLS = ("camit", "openssh-mux", "fabric", "asyncssh", "parallel-ssh", "pdsh")


# -- workers: each prints {"cold": s, "warm": [s, ...]} on stdout --------------
def _ssh_config(cfg: dict[str, Any], path: Path) -> Path:
    path.write_text(
        "Host *\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n"
        "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
        "  ConnectTimeout 10\n  LogLevel ERROR\n".format(key=cfg["key"], kh=cfg["known_hosts"]))
    return path


def w_camit(cfg: dict[str, Any], warm: int) -> dict[str, Any]:
    import framework.transport.ssh  # noqa: F401  (imported lazily by Host.from_spec: paramiko, ~60 ms)
    from framework.config.effective import load
    from framework.hosts import Cluster

    env = load(cfg["env"])
    t = time.perf_counter()
    cluster = Cluster.from_env(env, cfg["names"])
    cluster.check("true")
    cold = time.perf_counter() - t
    warms = []
    for _ in range(warm):
        t = time.perf_counter()
        cluster.check("true")
        warms.append(time.perf_counter() - t)
    cluster.close()
    return {"cold": cold, "warm": warms}


def w_openssh(cfg: dict[str, Any], warm: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="fan-mux-"))
    conf = _ssh_config(cfg, tmp / "config")
    mux = ["-F", str(conf), "-o", "ControlMaster=auto", "-o", f"ControlPath={tmp}/%h", "-o", "ControlPersist=120"]

    def round_() -> float:
        t = time.perf_counter()
        procs = [subprocess.Popen(["ssh", *mux, ip, "true"], stdin=subprocess.DEVNULL) for ip in cfg["ips"]]
        bad = [p.args for p in procs if p.wait() != 0]
        took = time.perf_counter() - t
        if bad:
            raise SystemExit(f"openssh failed: {bad[:2]}")
        return took

    try:
        cold = round_()
        warms = [round_() for _ in range(warm)]
    finally:  # stop the masters we started (by their control sockets, never by name)
        for ip in cfg["ips"]:
            subprocess.run(["ssh", *mux, "-O", "exit", ip], capture_output=True)
    return {"cold": cold, "warm": warms}


def w_fabric(cfg: dict[str, Any], warm: int) -> dict[str, Any]:
    from fabric import ThreadingGroup

    kw = {"key_filename": cfg["key"], "look_for_keys": False, "allow_agent": False}
    t = time.perf_counter()
    group = ThreadingGroup(*cfg["ips"], user="root", connect_kwargs=kw)
    group.run("true", hide=True)
    cold = time.perf_counter() - t
    warms = []
    for _ in range(warm):
        t = time.perf_counter()
        group.run("true", hide=True)
        warms.append(time.perf_counter() - t)
    group.close()
    return {"cold": cold, "warm": warms}


def w_asyncssh(cfg: dict[str, Any], warm: int) -> dict[str, Any]:
    import asyncio

    import asyncssh

    async def main() -> dict[str, Any]:
        async def connect(ip: str) -> Any:
            return await asyncssh.connect(ip, username="root", client_keys=[cfg["key"]],
                                          known_hosts=cfg["known_hosts"], agent_path=None, config=[])

        async def once(conns: list[Any]) -> None:
            results = await asyncio.gather(*(c.run("true", check=True) for c in conns))
            assert all(r.exit_status == 0 for r in results)

        t = time.perf_counter()
        conns = await asyncio.gather(*(connect(ip) for ip in cfg["ips"]))
        await once(conns)
        cold = time.perf_counter() - t
        warms = []
        for _ in range(warm):
            t = time.perf_counter()
            await once(conns)
            warms.append(time.perf_counter() - t)
        for c in conns:
            c.close()
        await asyncio.gather(*(c.wait_closed() for c in conns))
        return {"cold": cold, "warm": warms}

    return asyncio.run(main())


def w_pssh(cfg: dict[str, Any], warm: int) -> dict[str, Any]:
    from pssh.clients import ParallelSSHClient

    def once(client: Any) -> None:
        output = client.run_command("true")
        client.join(output)
        assert all(o.exit_code == 0 for o in output), [(o.host, o.exit_code, o.exception) for o in output]

    t = time.perf_counter()
    client = ParallelSSHClient(cfg["ips"], user="root", pkey=cfg["key"], num_retries=1, pool_size=100)
    once(client)
    cold = time.perf_counter() - t
    warms = []
    for _ in range(warm):
        t = time.perf_counter()
        once(client)
        warms.append(time.perf_counter() - t)
    return {"cold": cold, "warm": warms}


def w_pdsh(cfg: dict[str, Any], warm: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="fan-pdsh-"))
    conf = _ssh_config(cfg, tmp / "config")
    env = dict(os.environ, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS=f"-F {conf} -l%u %h")

    def round_() -> float:
        t = time.perf_counter()
        p = subprocess.run(["pdsh", "-S", "-f", "64", "-w", ",".join(cfg["ips"]), "true"], env=env,
                           capture_output=True, text=True)
        took = time.perf_counter() - t
        if p.returncode != 0:
            raise SystemExit(f"pdsh failed rc {p.returncode}: {p.stderr[-500:]}")
        return took

    cold = round_()
    return {"cold": cold, "warm": [round_() for _ in range(warm)]}


WORKERS = {"camit": w_camit, "openssh-mux": w_openssh, "fabric": w_fabric, "asyncssh": w_asyncssh,
           "parallel-ssh": w_pssh, "pdsh": w_pdsh}


def worker_main(tool: str, cfg_path: str, warm: int) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    print(json.dumps(WORKERS[tool](cfg, warm)))
    return 0


# -- driver ----------------------------------------------------------------------
def available(tool: str) -> str | None:
    """None if the tool can run here, else why not."""
    probe = {"fabric": "import fabric", "asyncssh": "import asyncssh", "parallel-ssh": "import pssh.clients"}
    if tool in probe:
        p = subprocess.run([sys.executable, "-c", probe[tool]], capture_output=True, text=True)
        return None if p.returncode == 0 else p.stderr.strip().splitlines()[-1]
    if tool == "pdsh":
        p = subprocess.run(["sh", "-c", "command -v pdsh"], capture_output=True)
        return None if p.returncode == 0 else "pdsh not installed (apt-get install -y pdsh)"
    return None


def run_worker(tool: str, cfg_path: Path, warm: int) -> dict[str, Any]:
    p = subprocess.run([sys.executable, __file__, "--worker", tool, "--cfg", str(cfg_path), "--warm", str(warm)],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{tool}: {(p.stderr or p.stdout)[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- --process: whole processes, spawn to exit ------------------------------------
#: ``camit`` as its console script runs it (``from framework.cli import main``), plus a hook that notes
#: when the first TCP connection starts (a write to an inherited pipe: wall clock and CPU so far)
CAMIT_LAUNCHER = r"""
import os, socket, sys, time
_fd, _real = int(os.environ.pop("FANOUT_FIRST_CONNECT_FD")), socket.socket.connect
def _connect(self, address):
    global _fd
    fd, _fd = _fd, -1
    if fd >= 0:
        os.write(fd, f"{time.time()!r} {time.process_time()!r} {sys.modules['framework'].__file__}".encode())
        os.close(fd)
    return _real(self, address)
socket.socket.connect = _connect
from framework.cli import main
sys.exit(main())
"""
PROCESS_TOOLS = ("camit", "pdsh", "openssh")


def _child_env(root: Path = common.ROOT) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(root))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: camit's modules come from their .pyc
    env.pop("CAMIT_ENV", None)
    return env


#: the working directory of every timed process: ``python -c`` puts its cwd first on sys.path, so a
#: checkout as cwd would shadow ``PYTHONPATH`` (and ``--baseline`` would time this checkout twice)
NEUTRAL_CWD = Path(tempfile.mkdtemp(prefix="camit-fanproc-cwd-"))


def _spawn_wait(argvs: list[list[str]], env: dict[str, str], pass_fds: tuple[int, ...] = ()) -> tuple[float, float]:
    """Start every argv at once, wait for all: (wall seconds, CPU seconds of them and their children)."""
    t = time.time()
    procs = [subprocess.Popen(a, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, pass_fds=pass_fds, cwd=NEUTRAL_CWD) for a in argvs]
    cpu, bad = 0.0, []
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        cpu += usage.ru_utime + usage.ru_stime
        if p.returncode != 0:
            bad.append((p.args, p.returncode, p.stderr.read()[-400:] if p.stderr else b""))
    wall = time.time() - t
    for p in procs:
        if p.stderr:
            p.stderr.close()
    if bad:
        raise SystemExit(f"failed: {bad[:2]}")
    return wall, cpu


def process_round(tool: str, cfg: dict[str, Any], conf: Path, baseline: Path | None = None) -> dict[str, float]:
    """One cold fan-out of ``true`` by ``tool`` as processes: wall, CPU (and camit's first connect).

    ``camit-baseline`` is camit from another checkout (``--baseline``), to compare before and after.
    """
    root = baseline if tool == "camit-baseline" and baseline else common.ROOT
    env = _child_env(root)
    if tool in ("camit", "camit-baseline"):
        r, w = os.pipe()
        env["FANOUT_FIRST_CONNECT_FD"] = str(w)
        argv = [sys.executable, "-c", CAMIT_LAUNCHER, "exec", "--env", cfg["env"], "--hosts", ",".join(cfg["names"]),
                "--", "true"]
        spawned = time.time()
        try:
            wall, cpu = _spawn_wait([argv], env, pass_fds=(w,))
        finally:
            os.close(w)
            with os.fdopen(r, "rb") as f:
                noted = f.read().split()
        if Path(noted[2].decode()).resolve() != root / "framework" / "__init__.py":
            raise SystemExit(f"{tool} imported {noted[2].decode()}, not the checkout {root}")
        return {"wall": wall, "cpu": cpu, "first_connect": float(noted[0]) - spawned,
                "first_connect_cpu": float(noted[1])}
    if tool == "pdsh":
        env.update(PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS=f"-F {conf} -l%u %h")
        wall, cpu = _spawn_wait([["pdsh", "-S", "-R", "ssh", "-f", "64", "-w", ",".join(cfg["ips"]), "true"]], env)
        return {"wall": wall, "cpu": cpu}
    wall, cpu = _spawn_wait([["ssh", "-F", str(conf), ip, "true"] for ip in cfg["ips"]], env)
    return {"wall": wall, "cpu": cpu}


def _lab_cfg_from_env(path: str, n: int) -> dict[str, Any]:
    from framework.config import load

    env = load(path)
    hosts = list(env.hosts.values())[:n]
    if len(hosts) < n:
        raise SystemExit(f"{path}: {len(hosts)} host(s), {n} wanted")
    first = hosts[0]
    return {"env": str(Path(path).resolve()), "names": [h.name for h in hosts], "ips": [h.ssh_ip for h in hosts],
            "key": str(first.key_file), "known_hosts": str(first.known_hosts)}


def process_main(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",")]
    tools = [t for t in PROCESS_TOOLS if t != "pdsh" or available("pdsh") is None]
    baseline = Path(args.baseline).resolve() if args.baseline else None
    if baseline is not None:
        cli = baseline / "framework"
        if not ((cli / "cli.py").is_file() or (cli / "cli" / "__init__.py").is_file()):
            raise SystemExit(f"--baseline {baseline}: no framework/cli.py or framework/cli/ there")
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(baseline / "framework")], check=True,
                       capture_output=True, env=_child_env(baseline))
        tools.insert(1, "camit-baseline")
    tmp = Path(tempfile.mkdtemp(prefix="camit-fanproc-"))
    times: dict[tuple[int, str], dict[str, list[float]]] = {}
    loads = [os.getloadavg()[0]]

    def measure(cfgs: dict[int, dict[str, Any]]) -> None:
        for n, cfg in cfgs.items():
            conf = _ssh_config(cfg, tmp / f"ssh_config{n}")
            for tool in tools:  # warm-up, not timed: page cache, camit's .pyc files written
                process_round(tool, cfg, conf, baseline)
            for r in range(args.rounds):
                for tool in tools if r % 2 == 0 else list(reversed(tools)):
                    got = process_round(tool, cfg, conf, baseline)
                    slot = times.setdefault((n, tool), {})
                    for k, v in got.items():
                        slot.setdefault(k, []).append(v)
                loads.append(os.getloadavg()[0])
                print(f"{n} hosts round {r + 1}/{args.rounds} done (load {loads[-1]:.2f})", file=sys.stderr)

    if args.env:
        measure({n: _lab_cfg_from_env(args.env, n) for n in sizes})
        where = f"the running lab of {args.env}"
    else:
        with common.lab(max(sizes), "fan", "10.84.0.0/24") as lab:
            measure({n: {"env": str(lab.env_file), "names": [h.name for h in lab.hosts[:n]],
                         "ips": [h.ip for h in lab.hosts[:n]], "key": str(lab.key_file),
                         "known_hosts": str(lab.known_hosts)} for n in sizes})
        where = "a private lab"
    rows, raw = [], {}
    peers = [t for t in tools if not t.startswith("camit")]
    for n in sizes:
        med = {t: {k: statistics.median(v) for k, v in times[(n, t)].items()} for t in tools}
        raw[n] = {t: times[(n, t)] for t in tools}
        row: dict[str, Any] = {"hosts": n}
        for t in (t for t in tools if t.startswith("camit")):
            row[f"{t} first connect ms"] = (f"{med[t]['first_connect'] * 1000:.0f} "
                                            f"({med[t]['first_connect_cpu'] * 1000:.0f} CPU)")
        for t in tools:
            row[f"{t} ms"] = f"{med[t]['wall'] * 1000:.0f} ({med[t]['cpu'] * 1000:.0f} CPU)"
        for t in peers:
            row[f"camit / {t}"] = f"**{med['camit']['wall'] / med[t]['wall']:.2f}**"
        worst = max(med["camit"]["wall"] / med[t]["wall"] for t in peers)
        row["goal ≤ 1.1"] = "met" if worst <= 1.1 else "MISSED"
        rows.append(row)
    notes = [
        f"median of {args.rounds} rounds per tool and size on {where}, tools interleaved (order reversed every "
        "other round) after one untimed warm-up round each; every round is cold (new processes, new connections)",
        "each cell: wall time from spawn to the exit of the last process (CPU: user+sys of the processes and their "
        "children, from wait4); camit = `python -c 'from framework.cli import main; ...' exec --env E --hosts ... "
        "-- true` (the console script's code, run by the interpreter itself, not through a pyenv shim), with a "
        "hook on socket.connect that notes the first connection (wall from spawn, and the process's CPU by then)",
        "pdsh = `pdsh -S -R ssh -f 64 -w <ips> true`; openssh = one `ssh -F <config> <ip> true` per host, all "
        "started at once, no ControlMaster; both through the same ssh_config (the lab's key and known_hosts, "
        "StrictHostKeyChecking yes, BatchMode); OpenSSH negotiates its default key exchange "
        "(sntrup761x25519-sha512 here), paramiko curve25519-sha256",
        f"load average (1 min) during the run: {min(loads):.2f}–{max(loads):.2f} on 2 cores shared with the lab "
        "sshds and other engineers' test runs",
    ]
    if baseline is not None:
        notes.append(f"camit-baseline = the same command run on the checkout {baseline} (before the start-up work), "
                     "timed in the same rounds")
    if "pdsh" not in tools:
        notes.append(f"pdsh: not measured — {available('pdsh')}")
    (common.RESULTS / "fanout-process-raw.json").parent.mkdir(parents=True, exist_ok=True)
    (common.RESULTS / "fanout-process-raw.json").write_text(json.dumps({str(k): v for k, v in raw.items()},
                                                                       indent=1) + "\n")
    common.save("fanout-process", "Fan-out as processes: `camit exec -- true` vs pdsh and parallel OpenSSH, cold",
                rows, notes)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--sizes", default="8,32")
    ap.add_argument("--worker", choices=TOOLS)
    ap.add_argument("--cfg")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--process", action="store_true",
                    help="time whole processes: camit exec vs pdsh and parallel OpenSSH (default sizes 8)")
    ap.add_argument("--env", help="with --process: a running lab's env file (default: a private lab)")
    ap.add_argument("--baseline", metavar="DIR", help="with --process: also time camit from this checkout")
    args = ap.parse_args()
    if args.worker:
        return worker_main(args.worker, args.cfg, args.warm)
    if args.process:
        if args.sizes == ap.get_default("sizes"):
            args.sizes = "8"
        return process_main(args)
    sizes = [int(s) for s in args.sizes.split(",")]
    tools = [t for t in args.tools.split(",") if t]
    missing = {t: why for t in tools if (why := available(t))}
    tools = [t for t in tools if t not in missing]
    tmp = Path(tempfile.mkdtemp(prefix="camit-fan-"))
    times: dict[tuple[int, str], dict[str, list[float]]] = {}
    loads = [os.getloadavg()[0]]
    with common.lab(max(sizes), "fan", "10.84.0.0/24") as lab:
        for n in sizes:
            hosts = lab.hosts[:n]
            cfg = {"env": str(lab.env_file), "names": [h.name for h in hosts], "ips": [h.ip for h in hosts],
                   "key": str(lab.key_file), "known_hosts": str(lab.known_hosts)}
            cfg_path = tmp / f"cfg{n}.json"
            cfg_path.write_text(json.dumps(cfg))
            for r in range(args.rounds):
                for tool in tools if r % 2 == 0 else list(reversed(tools)):
                    got = run_worker(tool, cfg_path, args.warm)
                    slot = times.setdefault((n, tool), {"cold": [], "warm": []})
                    slot["cold"].append(got["cold"])
                    slot["warm"] += got["warm"]
                loads.append(os.getloadavg()[0])
                print(f"{n} hosts round {r + 1}/{args.rounds} done (load {loads[-1]:.2f})", file=sys.stderr)
    rows, notes, raw = [], [], {}
    for n in sizes:
        med = {t: {k: statistics.median(v) for k, v in times[(n, t)].items()} for t in tools}
        raw[n] = {t: times[(n, t)] for t in tools}
        peers = [t for t in tools if t != "camit"]
        for mode in ("cold", "warm"):
            fastest = min(peers, key=lambda t: med[t][mode])
            row: dict[str, Any] = {"hosts": n, "round": mode}
            for t in tools:
                row[f"{t} ms"] = f"{med[t][mode] * 1000:.0f}"
            ratio = med["camit"][mode] / med[fastest][mode]
            row["camit / fastest"] = f"**{ratio:.2f}** ({fastest})"
            row["goal ≤ 1.1"] = "met" if ratio <= 1.1 else "MISSED"
            rows.append(row)
    notes.append(f"median of {args.rounds} cold rounds and {args.rounds * args.warm} warm rounds per tool and size; "
                 "tools interleaved (order reversed every other round), each in its own worker process, "
                 "imports not timed")
    notes.append("cold = fresh connections: connect + authenticate + exec `true` + wait on every host; warm = "
                 "`true` again over the connections kept (pdsh has none: its warm round is another cold one)")
    notes.append(f"load average (1 min) during the run: {min(loads):.2f}–{max(loads):.2f} on 2 cores shared with "
                 "the 32 lab sshds and other engineers' test runs")
    for t, why in missing.items():
        notes.append(f"{t}: not measured — {why}")
    notes.append("fabric and parallel-ssh do not verify host keys; camit, OpenSSH, asyncssh and pdsh (via OpenSSH) "
                 "check them against the lab's known_hosts")
    (common.RESULTS / "fanout-raw.json").parent.mkdir(parents=True, exist_ok=True)
    (common.RESULTS / "fanout-raw.json").write_text(json.dumps({str(k): v for k, v in raw.items()}, indent=1) + "\n")
    common.save("fanout", "Fan-out: `true` on N hosts, camit vs peers", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
