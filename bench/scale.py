#!/usr/bin/env python3
"""Scale benchmark: ``camit check`` (preflight) on 32 hosts vs 8, as the CLI a user runs.

    python bench/scale.py [--repeat 5]

Brings up a private 32-host lab (name ``scale``, 10.85.0.0/24) and times the whole
``python -m framework.cli check --env <lab env> [--hosts host1,…,host8]`` process
(interpreter start, connect, one probe script per host, verdicts, table),
alternating 8 and 32 hosts. Also prints the time preflight itself reports
(``--json`` ``duration``) so process start-up can be told apart.
Goal (issue 9): 32 hosts ≤ 2.5 × 8 hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def check(env: Path, names: list[str]) -> tuple[float, float, int]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "framework.cli", "check", "--env", str(env), "--hosts", ",".join(names),
                        "--json"], cwd=common.ROOT, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t
    if p.returncode not in (0, 1):  # 1: a check failed (disk, clock...) but every host answered
        raise RuntimeError(f"camit check rc {p.returncode}: {p.stderr[-1500:]}")
    data = json.loads(p.stdout)
    return wall, float(data.get("duration", float("nan"))), p.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--small", type=int, default=8)
    ap.add_argument("--large", type=int, default=32)
    args = ap.parse_args()
    sizes = (args.small, args.large)
    got: dict[int, list[tuple[float, float, int]]] = {n: [] for n in sizes}
    loads = [os.getloadavg()[0]]
    with common.lab(args.large, "scale", "10.85.0.0/24") as lab:
        names = [h.name for h in lab.hosts]
        check(lab.env_file, names[: args.small])  # warm the page cache and the pycache
        for r in range(args.repeat):
            for n in sizes if r % 2 == 0 else tuple(reversed(sizes)):
                got[n].append(check(lab.env_file, names[:n]))
                loads.append(os.getloadavg()[0])
                print(f"{n} hosts #{r + 1}: {got[n][-1]}", file=sys.stderr)
    med = {n: (statistics.median(g[0] for g in got[n]), statistics.median(g[1] for g in got[n])) for n in sizes}
    rc = {n: sorted({g[2] for g in got[n]}) for n in sizes}
    rows = [{"hosts": n, "camit check wall s (median)": f"{med[n][0]:.2f}",
             "preflight duration s (median)": f"{med[n][1]:.2f}", "exit codes": ",".join(map(str, rc[n]))}
            for n in sizes]
    ratio_wall = med[args.large][0] / med[args.small][0]
    ratio_pf = med[args.large][1] / med[args.small][1]
    rows.append({"hosts": f"{args.large} / {args.small}", "camit check wall s (median)": f"**{ratio_wall:.2f} ×**",
                 "preflight duration s (median)": f"{ratio_pf:.2f} ×",
                 "exit codes": "goal ≤ 2.5 × " + ("met" if ratio_wall <= 2.5 else "MISSED")})
    notes = [f"median of {args.repeat} runs per size, sizes alternated; wall = the whole CLI process "
             "(interpreter start-up included), duration = what preflight reports (connect + probe + verdicts)",
             f"load average (1 min) during the run: {min(loads):.2f}–{max(loads):.2f} on 2 cores shared by all "
             f"{args.large} lab sshds and other engineers' test runs",
             "exit code 1 = some check failed on every host alike (e.g. the lab's shared disk or core "
             "settings), every host answered; 3 would mean unreachable"]
    common.save("scale", f"Scale: camit check on {args.large} vs {args.small} hosts", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
