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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--sizes", default="8,32")
    ap.add_argument("--worker", choices=TOOLS)
    ap.add_argument("--cfg")
    ap.add_argument("--tools", default=",".join(TOOLS))
    args = ap.parse_args()
    if args.worker:
        return worker_main(args.worker, args.cfg, args.warm)
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
