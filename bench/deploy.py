#!/usr/bin/env python3
"""Deploy benchmark: star push vs pipelined relay under a shaped controller uplink; redeploy cost.

    python bench/deploy.py [--hosts 8] [--size-mib 64] [--rate-mbit 100]

Brings up a private lab (name ``bench``), shapes the controller's link to the lab
bridge with tc (tbf, egress of the bridge device in the root namespace: only
controller → host traffic; host → host traffic is bridged port to port and not
shaped), deploys a wheel padded to ``--size-mib`` of random data, once with the
relay off (star) and once with it on, each to fresh workdirs, and prints the
transfer times next to the physical limit size / uplink. Then it times a
redeploy of unchanged artifacts against ``camit exec -- true`` on the same hosts.
Goals (issue 3): relay ≤ 1.5 × limit; redeploy ≤ 1.5 × exec.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

from framework import artifacts  # noqa: E402
from framework.config.effective import load  # noqa: E402
from framework.deploy import Deployer  # noqa: E402
from framework.hosts import Cluster  # noqa: E402


def env_file(base: Path, out: Path, wheel: Path, workdir: str, relay: bool) -> Path:
    import yaml

    doc = yaml.safe_load(base.read_text())
    doc["artifacts"] = {"wheel": str(wheel)}
    doc["defaults"]["workdir"] = workdir
    doc["relay"] = relay
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def transfer_seconds(result) -> float:  # type: ignore[no-untyped-def]
    return max(m.durations.get("upload", 0.0) for m in result.manifests.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--rate-mbit", type=int, default=100)
    args = ap.parse_args()
    sys.path.insert(0, str(common.ROOT / "tests" / "integration"))
    from test_deploy_lab import pad_wheel  # the same padding the tests use

    tmp = Path(tempfile.mkdtemp(prefix="camit-bench-"))
    wheel = pad_wheel(artifacts.build_wheel(tmp / "w"), tmp / "padded", args.size_mib * 1024 * 1024)
    size = wheel.stat().st_size
    limit = size / (args.rate_mbit * 1e6 / 8)
    rows, notes = [], []
    with common.lab(args.hosts, "bench", "10.79.0.0/24") as lab:
        bridge = lab.plan.bridge if hasattr(lab, "plan") else "benchbr0"
        common.sh("tc", "qdisc", "replace", "dev", bridge, "root", "tbf", "rate", f"{args.rate_mbit}mbit",
                  "burst", "256kb", "latency", "100ms")
        results = {}
        for label, relay in (("star", False), ("relay", True)):
            env = load(env_file(lab.env_file, tmp / f"{label}.yaml", wheel, f"/var/tmp/camit/bench-{label}", relay))
            with Cluster.from_env(env) as cluster:
                res = Deployer(env, cluster, on_event=lambda h, m: None).run()
            if not res.ok:
                print(res.errors, file=sys.stderr)
                return 1
            results[label] = (transfer_seconds(res), res.duration)
        common.sh("tc", "qdisc", "del", "dev", bridge, "root")
        for label in ("star", "relay"):
            t, total = results[label]
            rows.append({"case": f"{label} push, {args.hosts} hosts, {size / 2**20:.0f} MiB, {args.rate_mbit} Mbit/s",
                         "transfer s": f"{t:.2f}", "whole deploy s": f"{total:.2f}",
                         "× limit": f"{t / limit:.2f}"})
        rows.append({"case": "physical limit (size / uplink)", "transfer s": f"{limit:.2f}", "whole deploy s": "-",
                     "× limit": "1.00"})
        # redeploy of unchanged artifacts vs camit exec -- true (unshaped)
        env = load(env_file(lab.env_file, tmp / "relay.yaml", wheel, "/var/tmp/camit/bench-relay", True))

        def redeploy() -> None:
            with Cluster.from_env(env) as cluster:
                assert Deployer(env, cluster, on_event=lambda h, m: None).run().ok

        def exec_true() -> None:
            subprocess.run([sys.executable, "-m", "framework.cli", "exec", "--env", str(tmp / "relay.yaml"), "--",
                            "true"], check=True, capture_output=True)

        def redeploy_cli() -> None:
            subprocess.run([sys.executable, "-m", "framework.cli", "deploy", "--env", str(tmp / "relay.yaml"),
                            "--report-dir", str(tmp / "reports")], check=True, capture_output=True)

        t_exec = common.timed(exec_true, 5)
        t_re = common.timed(redeploy_cli, 5)
        rows.append({"case": f"redeploy unchanged ({args.hosts} hosts) vs camit exec -- true",
                     "transfer s": f"{t_re:.2f} vs {t_exec:.2f}", "whole deploy s": "-",
                     "× limit": f"{t_re / t_exec:.2f} × exec"})
    notes.append(f"goal: relay ≤ 1.5 × limit → {results['relay'][0] / limit:.2f}; star is about "
                 f"{args.hosts} × → {results['star'][0] / limit:.2f}")
    notes.append(f"goal: redeploy ≤ 1.5 × exec → {t_re / t_exec:.2f} (median of 5, both as CLI processes)")
    notes.append("whole deploy includes venv creation, pip install of the padded wheel and the import check on "
                 "every host (2 cores shared by all lab hosts)")
    common.save("deploy", "Deploy: star vs relay, redeploy", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
