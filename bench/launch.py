#!/usr/bin/env python3
"""Launch overhead: camit's launches vs hand-written ssh + torchrun loops, 2 nodes × 2 ranks (world 4).

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

And the suite at world 4 (the five controller tests that launch: fused, abnormal inputs, perf, prefill,
fuzz), alternating:

- camit per test: ``pytest suites/cam -k <those five> --world-sizes 4 --no-deploy`` (one launch each);
- camit per world: the same with ``--launch-per world`` (one launch for the five modules);
- bare world: one upstream-style torchrun per node running the five rank modules in one pytest, with the
  launch env camit gives them (``CAMIT_FUZZ_N``, ``HCCL_BUFFSIZE``, plugin autoload off).

camit runs with ``--random-seed 1234``, the seed the bare loops' ranks default to, so both run the same cases
(the fuzz module draws its shapes from the seed).

Goals: camit ≤ 1.3 × bare (issue 9); the suite per world ≤ 1.15 × bare world (issue 18).
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
#: the controller tests that launch at world 4 on the CPU lab, and their rank modules (their rank_module markers)
SUITE_TESTS = "test_fused_deep_moe or test_abnormal_inputs or test_dispatch_combine_perf or " \
              "test_prefill_dispatch_combine or test_fuzz"
RANK_MODULES = ("test_abnormal_rank.py", "test_fused_rank.py", "test_fuzz_rank.py", "test_perf_rank.py",
                "test_prefill_rank.py")
#: the merged launch env of those tests (camit's PREFILL_ENV and FUZZ_ENV; autoload off as RankSuite sets it)
WORLD_ENV = "CAMIT_FUZZ_N=6 HCCL_BUFFSIZE=4096 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import yaml

    from framework.lab import artifacts

    tmp = Path(tempfile.mkdtemp(prefix="camit-lbench-"))
    built = artifacts.build_all(tmp / "artifacts")
    loads = [os.getloadavg()[0]]
    times: dict[str, list[float]] = {"camit": [], "bare": [], "per test": [], "per world": [], "bare world": []}
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

        def camit(deploy: bool = False, suite: str | None = None) -> float:
            what = ["suites/cam", "-k", SUITE_TESTS, *(["--launch-per", suite] if suite else [])] if suite \
                else ["suites/cam/test_prefill.py"]
            argv = [sys.executable, "-m", "pytest", *what, "--env", str(env), "--world-sizes",
                    "4", "--report-dir", str(tmp / "reports"), "-p", "no:cacheprovider", "-q",
                    # the seed the bare loops' ranks default to (suites/cam/rank/conftest.py): the same fuzz cases
                    "--random-seed", "1234"]
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

        def bare(port: int, modules: tuple[str, ...] = ("test_prefill_rank.py",), extra: str = "") -> float:
            lines = []
            paths = " ".join(f"{rank_dir}/{m}" for m in modules)
            for i, ip in enumerate(ips):
                work = f"/tmp/bare-{port}"
                torchrun = (f"{set_env}mkdir -p {work} && cd {work} && GLOO_SOCKET_IFNAME=eth0 CAMIT_BACKEND=gloo "
                            f"PYTHONDONTWRITEBYTECODE=1 {extra} {py} -m torch.distributed.run --nnodes 2 "
                            f"--nproc-per-node 2 --node-rank {i} --master-addr {ips[0]} --master-port {port} -m pytest "
                            f"{paths} -p no:cacheprovider -p no:camit --rootdir {rank_dir} "
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

        runs = {"camit": lambda r: camit(), "bare": lambda r: bare(29700 + r),
                "per test": lambda r: camit(suite="test"), "per world": lambda r: camit(suite="world"),
                "bare world": lambda r: bare(29800 + r, RANK_MODULES, WORLD_ENV)}
        for r in range(args.repeat):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for what in order:
                times[what].append(runs[what](r))
                loads.append(os.getloadavg()[0])
                print(f"#{r + 1} {what}: {times[what][-1]:.2f}s (load {loads[-1]:.2f})", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["camit"] / med["bare"]
    rows = [{"run": "camit: pytest suites/cam/test_prefill.py --world-sizes 4 --no-deploy",
             "wall s (median)": f"{med['camit']:.2f}",
             "min–max": f"{min(times['camit']):.2f}–{max(times['camit']):.2f}"},
            {"run": "bare: ssh + torchrun loop, same rank-side tests", "wall s (median)": f"{med['bare']:.2f}",
             "min–max": f"{min(times['bare']):.2f}–{max(times['bare']):.2f}"},
            {"run": "camit / bare", "wall s (median)": f"**{ratio:.2f} ×**",
             "min–max": "goal ≤ 1.3 × " + ("met" if ratio <= 1.3 else "MISSED")}]
    world_ratio = med["per world"] / med["bare world"]
    rows += [{"run": f"suite, world 4, per test: pytest suites/cam -k <{len(RANK_MODULES)} launching tests>",
              "wall s (median)": f"{med['per test']:.2f}",
              "min–max": f"{min(times['per test']):.2f}–{max(times['per test']):.2f}"},
             {"run": "suite, world 4, --launch-per world (one launch)", "wall s (median)": f"{med['per world']:.2f}",
              "min–max": f"{min(times['per world']):.2f}–{max(times['per world']):.2f}"},
             {"run": f"bare world: one ssh + torchrun per node, the {len(RANK_MODULES)} rank modules in one pytest",
              "wall s (median)": f"{med['bare world']:.2f}",
              "min–max": f"{min(times['bare world']):.2f}–{max(times['bare world']):.2f}"},
             {"run": "per test / per world", "wall s (median)": f"{med['per test'] / med['per world']:.2f} ×",
              "min–max": ""},
             {"run": "per world / bare world", "wall s (median)": f"**{world_ratio:.2f} ×**",
              "min–max": "goal ≤ 1.15 × " + ("met" if world_ratio <= 1.15 else "MISSED")}]
    notes = [f"2 nodes × 2 ranks (gloo, CPU stand-in op library), median of {args.repeat} runs each, alternated",
             "camit's wall includes the controller pytest session, connecting, the launch, fetching logs and JUnit, "
             "and writing cluster.xml, manifest.json and index.html; bare writes nothing",
             f"load average (1 min) during the run: {min(loads):.2f}–{max(loads):.2f} on 2 cores shared with "
             "other engineers' test runs"]
    common.save("launch", "Launch overhead: camit vs hand-written ssh + torchrun loops", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
