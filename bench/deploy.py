#!/usr/bin/env python3
"""\
Deploy benchmark: star push vs pipelined relay under a shaped controller uplink; the whole first deploy; redeploy cost.

    python bench/deploy.py [--hosts 8] [--size-mib 64] [--rate-mbit 100] [--first 3] [--name bench]

Brings up a private lab (``--name``, ``--subnet``), shapes the controller's link to the lab
bridge with tc (tbf, egress of the bridge device in the root namespace: only
controller → host traffic; host → host traffic is bridged port to port and not
shaped), deploys a wheel padded to ``--size-mib`` of random data, once with the
relay off (star) and once with it on, each to fresh workdirs, and prints the
transfer times next to the physical limit size / uplink.

Then the whole first deploy as a user meets it (issue 18): ``camit deploy --json`` as a
process, ``--first`` times, each to a fresh workdir on every host (no venv, nothing
staged), timed from the call to the result — connect, lease, probe, relay transfer,
venv, the wheel's install, the verify import, state, report folder — beside that deploy's own
transfer (the slowest host's upload), and the CPU seconds on each host of the
non-transfer steps (``cpu_seconds`` of ``deploy-manifest.json``: the step's process
tree as the host's shell counts it; sshd's own share is not in it).

The wheel install step alone, side by side on the controller machine: pip (what a deploy into
camit's venv ran before) vs camit's shipped installer, each into a fresh venv, and ``import torch``
(the verify import's floor).

Last, a redeploy of unchanged artifacts against ``camit exec -- true`` on the same hosts.
Goals: relay transfer ≤ 1.5 × limit, redeploy ≤ 1.5 × exec (issue 3); whole first
deploy ≤ 2 × limit, non-transfer CPU per host ≤ 3 s (issue 18).
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

from framework.config.effective import load  # noqa: E402
from framework.deploy import Deployer  # noqa: E402
from framework.hosts import Cluster  # noqa: E402
from framework.lab import artifacts  # noqa: E402

#: what a subprocess ``camit`` imports: this checkout's framework, not an editable install elsewhere
CLI_ENV = {**os.environ, "PYTHONPATH": str(common.ROOT)}


def env_file(base: Path, out: Path, wheel: Path, workdir: str, relay: bool) -> Path:
    import yaml

    doc = yaml.safe_load(base.read_text())
    doc["artifacts"] = {"wheel": str(wheel)}
    doc["defaults"]["workdir"] = workdir
    doc["relay"] = relay
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def transfer_seconds(hosts: dict[str, Any]) -> float:
    """The slowest host's upload (``hosts``: the manifest's per-host entries, as dicts)."""
    return max(h["durations"].get("upload", 0.0) for h in hosts.values())


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *argv], check=True, capture_output=True, text=True,
                          env=CLI_ENV, cwd=common.ROOT)


def first_deploy(env: Path, reports: Path, hosts: list[str] | None = None) -> dict[str, Any]:
    """One ``camit deploy --json`` to a fresh workdir: wall seconds from the call to the result, and its manifest."""
    only = ["--hosts", ",".join(hosts)] if hosts else []
    t = time.perf_counter()
    out = cli("deploy", "--env", str(env), "--report-dir", str(reports), "--json", *only).stdout
    wall = time.perf_counter() - t
    manifest = json.loads(out)
    bad = {h: m.get("error") for h, m in manifest["hosts"].items() if m["status"] != "deployed"}
    if bad:
        raise SystemExit(f"first deploy failed: {bad}")
    return {"wall": wall, "manifest": manifest}


def cpu_per_host(manifest: dict[str, Any]) -> list[float]:
    return [sum(h.get("cpu_seconds", {}).values()) for h in manifest["hosts"].values()]


def step_profile(runs: list[dict[str, Any]], key: str) -> str:
    """``step median`` over every host of every run, for ``key`` (cpu_seconds or durations)."""
    per: dict[str, list[float]] = {}
    for run in runs:
        for h in run["manifest"]["hosts"].values():
            for step, v in h.get(key, {}).items():
                per.setdefault(step, []).append(v)
    return ", ".join(f"{s} {statistics.median(v):.2f}" for s, v in per.items())


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def child_cpu(argv: list[str]) -> float:
    """CPU seconds (user + sys) of ``argv`` run to its end as a child process."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def installers(wheel: Path, tmp: Path, rounds: int = 5) -> dict[str, float]:
    """The wheel install step's own cost, side by side on this machine: the median CPU seconds of pip (what a
    deploy into camit's venv ran before, ``--python`` into a ``--without-pip`` venv), of camit's shipped
    installer (``framework/remote/wheelinst.py``) alone, of ``sha256sum`` on the wheel (the step's separate hash
    check before the installer hashed the wheel itself) and of the installer with ``--sha256`` (the step now),
    each into a fresh ``--without-pip --system-site-packages`` venv, alternated; and of ``import torch``, the
    verify import's floor."""
    from framework.deploy.plan import PIP_OPTIONS
    from framework.hosts import sha256_file
    from framework.remote import script

    inst = str(script("wheelinst.py")[0])
    sha = sha256_file(wheel)
    got: dict[str, list[float]] = {"pip": [], "camit": [], "sha256sum": [], "camit-sha": [], "torch": []}
    for i in range(rounds):
        for kind in ("pip", "camit", "camit-sha"):
            venv = tmp / f"venv-{kind}-{i}"
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
                           check=True)
            py = str(venv / "bin" / "python")
            argv = ([sys.executable, "-m", "pip", "--python", py, *PIP_OPTIONS, str(wheel)] if kind == "pip"
                    else [py, "-I", inst, *(["--sha256", sha] if kind == "camit-sha" else []), str(wheel)])
            got[kind].append(child_cpu(argv))
        got["sha256sum"].append(child_cpu(["sha256sum", str(wheel)]))
        got["torch"].append(child_cpu([sys.executable, "-c", "import torch"]))
    return {k: statistics.median(v) for k, v in got.items()}


def torch_floor(n: int, rounds: int = 3) -> dict[str, float]:
    """The verify's floor as the lab meets it, measured: ``n`` ``python -c 'import torch'`` started at once on
    this machine (as the ``n`` lab hosts' import checks run on its cores), the median wall seconds until the last
    ends and CPU seconds per process (more than one import alone: ``n`` processes on few cores share caches)."""
    import resource

    walls, cpus = [], []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", "import torch"], stdout=subprocess.DEVNULL)
                 for _ in range(n)]
        if any(p.wait() != 0 for p in procs):
            raise SystemExit("import torch failed")
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / n)
    return {"wall": statistics.median(walls), "cpu": statistics.median(cpus)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--rate-mbit", type=int, default=100)
    ap.add_argument("--first", type=int, default=3, metavar="N", help="cold first deploys (median)")
    ap.add_argument("--few-hosts", type=int, default=os.cpu_count() or 2, metavar="N",
                    help="also time first deploys to N of the hosts (default: as many as cores; 0: not)")
    ap.add_argument("--only-first", action="store_true", help="the first-deploy rows alone (no star/relay/redeploy)")
    ap.add_argument("--name", default="bench", help="lab name (default: bench)")
    ap.add_argument("--subnet", default="10.79.0.0/24")
    ap.add_argument("--save", default="deploy", help="result file name under bench/results/ (default: deploy)")
    args = ap.parse_args()
    sys.path.insert(0, str(common.ROOT / "tests" / "integration"))
    from test_deploy_lab import pad_wheel  # the same padding the tests use

    tmp = Path(tempfile.mkdtemp(prefix="camit-bench-"))
    wheel = pad_wheel(artifacts.build_wheel(tmp / "w"), tmp / "padded", args.size_mib * 1024 * 1024)
    size = wheel.stat().st_size
    limit = size / (args.rate_mbit * 1e6 / 8)
    shape = f"{args.hosts} hosts, {size / 2**20:.0f} MiB, {args.rate_mbit} Mbit/s"
    rows: list[dict[str, str]] = []
    notes = [f"load average (1/5/15 min) at the start: {load_avg()}"]
    results: dict[str, float] = {}
    with common.lab(args.hosts, args.name, args.subnet) as lab:
        bridge = lab.plan.bridge
        common.sh("tc", "qdisc", "replace", "dev", bridge, "root", "tbf", "rate", f"{args.rate_mbit}mbit",
                  "burst", "256kb", "latency", "100ms")
        try:
            if not args.only_first:
                for label, relay in (("star", False), ("relay", True)):
                    env = load(env_file(lab.env_file, tmp / f"{label}.yaml", wheel, f"/var/tmp/camit/bench-{label}",
                                        relay))
                    with Cluster.from_env(env) as cluster:
                        res = Deployer(env, cluster, on_event=lambda h, m: None).run()
                    if not res.ok:
                        print(res.errors, file=sys.stderr)
                        return 1
                    t = transfer_seconds(res.to_json()["hosts"])
                    results[label] = t
                    rows.append({"case": f"{label} push, {shape}", "transfer s": f"{t:.2f}",
                                 "whole deploy s": f"{res.duration:.2f}", "× limit": f"{t / limit:.2f}",
                                 "non-transfer CPU s per host": "-"})
            # the whole first deploy, as `camit deploy` from a shell: a fresh workdir on every host each time
            firsts, fews = [], []
            few = [h.name for h in lab.hosts][:args.few_hosts]
            for i in range(args.first):
                env_path = env_file(lab.env_file, tmp / f"first{i}.yaml", wheel, f"/var/tmp/camit/bench-first{i}",
                                    True)
                firsts.append(first_deploy(env_path, tmp / "reports"))
                if args.few_hosts:  # as many hosts as cores: each host's CPU is its own, as on a cluster
                    env_path = env_file(lab.env_file, tmp / f"few{i}.yaml", wheel, f"/var/tmp/camit/bench-few{i}",
                                        True)
                    fews.append(first_deploy(env_path, tmp / "reports", few))
            notes.append(f"load average after the first deploys: {load_avg()}")
        finally:
            common.sh("tc", "qdisc", "del", "dev", bridge, "root")
        walls = [r["wall"] for r in firsts]
        transfers = [transfer_seconds(r["manifest"]["hosts"]) for r in firsts]
        cpus = [c for r in firsts for c in cpu_per_host(r["manifest"])]
        wall, transfer = statistics.median(walls), statistics.median(transfers)
        results.update(first=wall, first_transfer=transfer, cpu_max=max(cpus), cpu_median=statistics.median(cpus))
        rows.append({"case": f"first deploy (camit deploy, cold), {shape}", "transfer s": f"{transfer:.2f}",
                     "whole deploy s": f"{wall:.2f}", "× limit": f"{transfer / limit:.2f} / {wall / limit:.2f}",
                     "non-transfer CPU s per host": f"{statistics.median(cpus):.2f} (max {max(cpus):.2f})"})
        if fews:
            few_wall = statistics.median(r["wall"] for r in fews)
            few_transfer = statistics.median(transfer_seconds(r["manifest"]["hosts"]) for r in fews)
            few_cpus = [c for r in fews for c in cpu_per_host(r["manifest"])]
            results.update(few=few_wall)
            rows.append({"case": f"first deploy (camit deploy, cold), {len(few)} of the hosts (one core each), "
                                 f"{size / 2**20:.0f} MiB, {args.rate_mbit} Mbit/s",
                         "transfer s": f"{few_transfer:.2f}", "whole deploy s": f"{few_wall:.2f}",
                         "× limit": f"{few_transfer / limit:.2f} / {few_wall / limit:.2f}",
                         "non-transfer CPU s per host": f"{statistics.median(few_cpus):.2f} (max {max(few_cpus):.2f})"})
        cost = installers(wheel, tmp)
        results.update(pip_cpu=cost["pip"], installer_cpu=cost["camit"], torch_cpu=cost["torch"])
        floor = torch_floor(args.hosts)
        results.update(torch_floor=floor["wall"], torch_floor_cpu=floor["cpu"])
        rows.append({"case": f"{args.hosts} × `import torch` started at once on this machine (the {args.hosts} hosts' "
                             "verify imports alone, nothing else running; median of 3)",
                     "transfer s": "-", "whole deploy s": f"{floor['wall']:.2f}",
                     "× limit": f"{floor['wall'] / limit:.2f}",
                     "non-transfer CPU s per host": f"{floor['cpu']:.2f} (alone: {cost['torch']:.2f})"})
        rows.append({"case": f"wheel install step alone, {size / 2**20:.0f} MiB wheel into a fresh venv, this machine: "
                             "pip vs camit's installer (CPU s, median of 5, alternated)",
                     "transfer s": "-", "whole deploy s": "-",
                     "× limit": f"{cost['camit'] / cost['pip']:.2f} × pip",
                     "non-transfer CPU s per host": f"{cost['pip']:.2f} vs {cost['camit']:.2f}"})
        before, now = cost["sha256sum"] + cost["camit"], cost["camit-sha"]
        results.update(step_before=before, step_now=now)
        rows.append({"case": "install-wheel step, same wheel, this machine: `sha256sum` then the installer (before) vs "
                             "the installer hashing the open wheel itself, `--sha256` (now) (CPU s, median of 5)",
                     "transfer s": "-", "whole deploy s": "-", "× limit": f"{now / before:.2f} × before",
                     "non-transfer CPU s per host": f"{cost['sha256sum']:.2f} + {cost['camit']:.2f} vs {now:.2f}"})
        rows.append({"case": "physical limit (size / uplink)", "transfer s": f"{limit:.2f}", "whole deploy s": "-",
                     "× limit": "1.00", "non-transfer CPU s per host": "-"})
        if not args.only_first:
            # redeploy of unchanged artifacts vs camit exec -- true (unshaped)
            relay_env = str(tmp / "relay.yaml")
            t_exec = common.timed(lambda: cli("exec", "--env", relay_env, "--", "true"), 5)
            t_re = common.timed(lambda: cli("deploy", "--env", relay_env, "--report-dir", str(tmp / "reports")), 5)
            results.update(exec=t_exec, redeploy=t_re)
            rows.append({"case": f"redeploy unchanged ({args.hosts} hosts) vs camit exec -- true",
                         "transfer s": f"{t_re:.2f} vs {t_exec:.2f}", "whole deploy s": "-",
                         "× limit": f"{t_re / t_exec:.2f} × exec", "non-transfer CPU s per host": "-"})
    if "relay" in results:
        notes.append(f"goal: relay ≤ 1.5 × limit → {results['relay'] / limit:.2f}; star is about "
                     f"{args.hosts} × → {results['star'] / limit:.2f}")
    notes.append(f"goal: whole first deploy ≤ 2 × limit → {wall / limit:.2f} (median of {len(walls)}: "
                 + ", ".join(f"{w:.2f}" for w in walls) + f" s; its transfer {transfer / limit:.2f} × limit)")
    notes.append(f"goal: non-transfer CPU per host ≤ 3 s → median {results['cpu_median']:.2f}, max "
                 f"{results['cpu_max']:.2f} s over {len(cpus)} host deploys")
    inner = statistics.median(r["manifest"]["duration"] for r in firsts)
    notes.append(f"first deploy: Deployer.run {inner:.2f} s of the {wall:.2f} s (the rest: the camit process, "
                 "env, connect, lease, report folder)")
    notes.append(f"first deploy, CPU s per step (median over hosts): {step_profile(firsts, 'cpu_seconds')}")
    notes.append(f"first deploy, wall s per step (median over hosts): {step_profile(firsts, 'durations')}")
    notes.append(f"the lab's {args.hosts} hosts share {os.cpu_count()} cores: the non-transfer steps alone need at "
                 f"least {args.hosts} × {results['cpu_median']:.2f} / {os.cpu_count()} = "
                 f"{args.hosts * results['cpu_median'] / (os.cpu_count() or 1):.2f} s of wall time here, whatever "
                 "overlaps; on a cluster each host spends its CPU on its own cores")
    notes.append(f"of that, the verify's `import torch` alone: {results['torch_cpu']:.2f} s of CPU on this machine "
                 f"({args.hosts} hosts: {args.hosts * results['torch_cpu'] / (os.cpu_count() or 1):.2f} s of wall "
                 f"time on {os.cpu_count()} cores); the wheel install with camit's installer "
                 f"{results['installer_cpu']:.2f} s vs pip's {results['pip_cpu']:.2f} s (side by side, same wheel)")
    notes.append(f"measured floor: {args.hosts} `import torch` processes started at once on this machine end after "
                 f"{results['torch_floor']:.2f} s = {results['torch_floor'] / limit:.2f} × limit, "
                 f"{results['torch_floor_cpu']:.2f} s of CPU each (alone {results['torch_cpu']:.2f} s): "
                 f"{results['torch_floor'] / (2 * limit):.0%} of the ≤ 2 × budget before anything of the deploy "
                 f"itself (the transfer's CPU, the install) shares the same {os.cpu_count()} cores")
    if "redeploy" in results:
        notes.append(f"goal: redeploy ≤ 1.5 × exec → {results['redeploy'] / results['exec']:.2f} (median of 5, "
                     "both as CLI processes)")
    common.save(args.save, "Deploy: star vs relay, the whole first deploy, redeploy", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
