#!/usr/bin/env python3
"""Launch overhead: a 2-node × 2-rank rank-side test through camit vs a hand-written ssh + torchrun loop.

    python bench/launch.py [--repeat 5]

Brings up a private 2-host lab (name ``lbench``, 10.86.0.0/24), builds the stand-in
artifacts and deploys them once (the first ``pytest`` run, untimed). Then, alternating:

- camit: ``python -m pytest suites/cam/test_prefill.py --env <env> --world-sizes 4 --no-deploy``
  (controller pytest + plugin, connect, preflight of the launch, supervised torchrun on both
  nodes, fetch of logs and JUnit, cluster.xml, manifest, index.html);
- bare: one ``bash`` loop that starts ``ssh <node> "cd … && python -m torch.distributed.run
  --nnodes 2 --nproc-per-node 2 --node-rank i … -m pytest <shipped rank dir>/test_prefill_rank.py"``
  for each node in the background and waits for both — the same rank-side tests, the same
  interpreter and op library, no report.

Goal (issue 9): camit ≤ 1.3 × bare.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

WORKDIR = "/var/tmp/camit/lbench"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import yaml

    from framework.lab import artifacts

    tmp = Path(tempfile.mkdtemp(prefix="camit-lbench-"))
    built = artifacts.build_all(tmp / "artifacts")
    loads = [os.getloadavg()[0]]
    times: dict[str, list[float]] = {"camit": [], "bare": []}
    with common.lab(2, "lbench", "10.86.0.0/24") as lab:
        doc = yaml.safe_load(lab.env_file.read_text())
        doc["artifacts"] = {"run_package": str(built["run"]), "wheel": str(built["wheel"])}
        doc["defaults"]["workdir"] = WORKDIR
        env = tmp / "lbench.yaml"
        env.write_text(yaml.safe_dump(doc, sort_keys=False))
        ssh_cfg = tmp / "ssh_config"
        ssh_cfg.write_text(f"Host *\n  User root\n  IdentityFile {lab.key_file}\n  IdentitiesOnly yes\n"
                           f"  UserKnownHostsFile {lab.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
                           "  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n")
        ips = [h.ip for h in lab.hosts]

        def camit(deploy: bool = False) -> float:
            argv = [sys.executable, "-m", "pytest", "suites/cam/test_prefill.py", "--env", str(env), "--world-sizes",
                    "4", "--report-dir", str(tmp / "reports"), "-p", "no:cacheprovider", "-q"]
            t = time.perf_counter()
            p = subprocess.run(argv + ([] if deploy else ["--no-deploy"]), cwd=common.ROOT, capture_output=True,
                               text=True, timeout=900)
            took = time.perf_counter() - t
            if p.returncode != 0:
                raise RuntimeError(f"camit run failed:\n{p.stdout[-3000:]}\n{p.stderr[-1500:]}")
            return took

        camit(deploy=True)  # deploys the .run and the wheel, ships the rank tree (untimed)

        def remote(ip: str, script: str) -> str:
            return subprocess.run(["ssh", "-F", str(ssh_cfg), ip, script], check=True, capture_output=True,
                                  text=True).stdout

        state = json.loads(remote(ips[0], f"cat {WORKDIR}/deploy-state.json"))
        py = state["interpreter"]
        rank_dir = remote(ips[0], f"ls -d {WORKDIR}/suites/*/ | head -1").strip().rstrip("/")
        vendor = state.get("vendor")
        set_env = f". {shlex.quote(state['install_path'] + '/vendors/' + vendor + '/bin/set_env.bash')} && " \
            if vendor else ""

        def bare(port: int) -> float:
            lines = []
            for i, ip in enumerate(ips):
                work = f"/tmp/bare-{port}"
                torchrun = (f"{set_env}mkdir -p {work} && cd {work} && GLOO_SOCKET_IFNAME=eth0 CAMIT_BACKEND=gloo "
                            f"PYTHONDONTWRITEBYTECODE=1 {py} -m torch.distributed.run --nnodes 2 --nproc-per-node 2 "
                            f"--node-rank {i} --master-addr {ips[0]} --master-port {port} -m pytest "
                            f"{rank_dir}/test_prefill_rank.py -p no:cacheprovider -p no:camit --rootdir {rank_dir} "
                            f"-q; rc=$?; rm -rf {work}; exit $rc")
                lines.append(f"ssh -F {shlex.quote(str(ssh_cfg))} {ip} {shlex.quote(torchrun)} > "
                             f"{tmp}/bare-{port}-{i}.log 2>&1 & p{i}=$!")
            script = "\n".join(lines) + "\nwait $p0; a=$?; wait $p1; b=$?; exit $((a | b))\n"
            t = time.perf_counter()
            p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=900)
            took = time.perf_counter() - t
            if p.returncode != 0:
                raise RuntimeError(f"bare loop failed: {(tmp / f'bare-{port}-0.log').read_text()[-3000:]}")
            return took

        for r in range(args.repeat):
            order = ("camit", "bare") if r % 2 == 0 else ("bare", "camit")
            for what in order:
                times[what].append(camit() if what == "camit" else bare(29700 + r))
                loads.append(os.getloadavg()[0])
                print(f"#{r + 1} {what}: {times[what][-1]:.2f}s (load {loads[-1]:.2f})", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["camit"] / med["bare"]
    rows = [{"run": "camit: pytest suites/cam/test_prefill.py --world-sizes 4 --no-deploy",
             "wall s (median)": f"{med['camit']:.2f}", "min–max": f"{min(times['camit']):.2f}–{max(times['camit']):.2f}"},
            {"run": "bare: ssh + torchrun loop, same rank-side tests", "wall s (median)": f"{med['bare']:.2f}",
             "min–max": f"{min(times['bare']):.2f}–{max(times['bare']):.2f}"},
            {"run": "camit / bare", "wall s (median)": f"**{ratio:.2f} ×**",
             "min–max": "goal ≤ 1.3 × " + ("met" if ratio <= 1.3 else "MISSED")}]
    notes = [f"2 nodes × 2 ranks (gloo, CPU stand-in op library), median of {args.repeat} runs each, alternated",
             "camit's wall includes the controller pytest session, connecting, the launch, fetching logs and JUnit, "
             "and writing cluster.xml, manifest.json and index.html; bare writes nothing",
             f"load average (1 min) during the run: {min(loads):.2f}–{max(loads):.2f} on 2 cores shared with "
             "other engineers' test runs"]
    common.save("launch", "Launch overhead: camit vs a hand-written ssh + torchrun loop", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
