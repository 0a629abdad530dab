"""Shared bits of the benchmark scripts: a private lab, timing, and result files.

Benchmarks print ratios measured side by side in one run and save them under
bench/results/ (JSON + a Markdown table for the README). They are scripts, not
tests: CI never times anything.
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    system = f"{platform.system()} {platform.release()}"
    return f"{system}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


@contextmanager
def lab(n: int, name: str, subnet: str, keep: bool = False) -> Iterator[Any]:
    """A lab of ``n`` hosts only for this benchmark (a healthy one of that shape is reused); removed unless ``keep``."""
    from framework.lab.manage import Lab

    env_out = Path(f"/run/camit-lab/{name}.yaml")
    the_lab = Lab.up(n, name=name, subnet=subnet, env_out=env_out, say=lambda m: None)
    try:
        yield the_lab
    finally:
        if not keep:
            the_lab.down(say=lambda m: None)


def timed(fn: Callable[[], Any], repeat: int = 1) -> float:
    """Median wall time of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def save(name: str, title: str, rows: list[dict[str, Any]], notes: list[str]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"title": title, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows,
            "notes": notes}
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    headers = list(rows[0]) if rows else []
    lines = [f"### {title}", "", f"{data['machine']}, {data['date']}", "",
             "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(r[h]) for h in headers) + " |" for r in rows]
    lines += [""] + [f"- {n}" for n in notes]
    md = RESULTS / f"{name}.md"
    md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return md
