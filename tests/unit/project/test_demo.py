"""``make demo`` shows camit crossing nodes: its lab declares 2 visible dies a host, so the suite's world 4
runs 2 + 2 on both hosts (before: 16 dies a host, world 4 on one host), and it ends by printing where the
report and the built docs are. ``make -n`` prints the recipe without running it (it holds no $(MAKE))."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from framework.ranksuite.suite import placement

ROOT = Path(__file__).resolve().parents[3]


def _demo_recipe() -> str:
    res = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_demo_world_4_spreads_over_both_hosts():
    recipe = _demo_recipe()
    up = next(ln for ln in recipe.replace("\\\n", " ").splitlines() if "framework.lab up" in ln)
    words = shlex.split(up)
    hosts = int(words[words.index("--hosts") + 1])
    visible = words[words.index("--visible") + 1].split(",")
    assert words[words.index("--npu") + 1] == "a3"
    assert "--world-sizes 4" in recipe
    # ranks per node default to the visible devices (--ranks-per-node), fewest nodes first
    assert placement(4, hosts, len(visible)) == (2, 2)


def test_the_demo_prints_where_the_report_and_the_docs_are():
    recipe = _demo_recipe()
    assert re.search(r'echo "the report: \S+/reports/latest/index.html', recipe)
    assert re.search(r'echo "the docs: +\S+/build/site/index.html', recipe)
    assert "mkdocs build --strict" in recipe


def test_the_demo_ends_with_the_quick_perf_matrix_and_prints_its_page():
    lines = _demo_recipe().replace("\\\n", " ").split(";")
    sweep = next(i for i, ln in enumerate(lines) if "suites/cam/test_sweep.py" in ln)
    suite = next(i for i, ln in enumerate(lines) if "pytest suites/cam --env" in ln)
    assert suite < sweep, "the quick matrix runs after the suite"
    words = shlex.split(lines[sweep].split("||")[0])
    assert words[words.index("--perf-matrix") + 1] == "quick" and "-m perf" in lines[sweep]
    assert "--world-sizes" in words and words[words.index("--world-sizes") + 1] == "4"
    page = words[words.index("--report-dir") + 1] + "/latest/perf.html"
    assert any(f'the performance page (quick matrix): {ROOT}/{page}' in ln for ln in lines[sweep:])
