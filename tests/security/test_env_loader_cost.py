"""Issue 31 item 4 (security review 3, #13 as ``loadtime.py`` ran it): the env loader enforces its bounds
while it composes the document, so any file it accepts or refuses costs at most 1 s of CPU and 64 MiB.
The review: a flat 4 MiB list (``x: [a,a,a,...]``, no alias) took 33.8 s of CPU and 1.57 GiB before it was
refused. Each file here goes through the real :func:`framework.config.effective.load` in a fresh interpreter:
CPU by ``time.process_time`` around the load, memory as the growth of the peak RSS over it (``VmHWM``, reset
through ``/proc/self/clear_refs`` first)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from framework.config.yaml_text import MAX_BYTES, MAX_NODES

REPO = Path(__file__).resolve().parents[2]
CPU_S = 1.0
PEAK_MIB = 64.0
HOST = "host_info:\n  host1:\n    manage_nic: {name: eth0, ip: 192.0.2.11}\n"


def _hosts(n: int) -> str:
    return "host_info:\n" + "".join(f"  h{i}:\n    manage_nic: {{name: eth0, ip: 10.0.{i // 256}.{i % 256}}}\n"
                                    for i in range(n))


#: name -> (file text, whether the loader accepts it)
FILES = {
    "flat_4mib_list": (HOST + "x: [" + ",".join(["a"] * ((MAX_BYTES - len(HOST) - 6) // 2)) + "]\n", False),
    "block_4mib_list": (HOST + "x:\n" + "- a\n" * ((MAX_BYTES - len(HOST) - 3) // 4), False),
    "many_keys": (HOST + "x:\n" + "".join(f"  k{i}: v\n" for i in range(MAX_NODES // 2)), False),
    "hosts_at_the_cap": (_hosts(MAX_NODES // 8 - 10), True),
}


#: run in a fresh interpreter: the peak RSS growth over the load and its CPU time, as JSON
PROBE = """
import json, sys, time
from pathlib import Path
from framework.config.effective import load
from framework.errors import ConfigError
def kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
with open("/proc/self/clear_refs", "w") as f:  # the peak RSS (VmHWM) starts again from the RSS now
    f.write("5")
before = kib("VmRSS")
start = time.process_time()
try:
    load(Path(sys.argv[1]), environ={})
    error = None
except ConfigError as exc:
    error = str(exc)
cpu = time.process_time() - start
grown = (kib("VmHWM") - before) / 1024
print(json.dumps({"cpu": cpu, "mib": grown, "error": error}))
"""


def _bounded() -> None:
    """The child's own bounds, far above the goal: an unbounded loader is stopped, not the machine."""
    resource.setrlimit(resource.RLIMIT_CPU, (20, 20))
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("name", list(FILES))
def test_any_file_costs_at_most_1s_of_cpu_and_64_mib(tmp_path: Path, name: str) -> None:
    text, accepted = FILES[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    assert path.stat().st_size <= MAX_BYTES
    proc = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=_bounded)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    if accepted:
        assert got["error"] is None, got
    else:
        assert got["error"] and "\n" not in got["error"] and got["error"].startswith(str(path)), got
    print(f"{name}: {got['cpu']:.2f}s of CPU, peak RSS +{got['mib']:.0f} MiB")
    assert got["cpu"] <= CPU_S and got["mib"] <= PEAK_MIB, f"{name}: {got}"
