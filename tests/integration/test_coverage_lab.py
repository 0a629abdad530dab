"""Coverage mode on the lab: `pytest suites/cam/test_prefill.py --cov-ranks` gives one combined report
(html + Cobertura) covering the rank-side test and the stand-in op library from every host; a .gcda file
left by a coverage build of the op library on one host is found and fetched."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from framework import commands
from framework.commands import ShellScript
from framework.lab import artifacts
from framework.ranksuite.coverage import RankCoverage

REPO = Path(__file__).resolve().parents[2]
WORKDIR = "/var/tmp/camit/cov"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return artifacts.build_all(tmp_path_factory.mktemp("cov-artifacts"))


def cov_env(env_variant: Callable[..., Path], built, name: str = "cov.yaml") -> Path:
    def change(doc):
        doc["artifacts"] = {"run_package": str(built["run"]), "wheel": str(built["wheel"])}
        doc["defaults"]["workdir"] = WORKDIR
    return env_variant(change, name)


def line_rates(xml: Path) -> dict[str, float]:
    """Cobertura file name (relative to its <source>) → line rate."""
    return {c.get("filename", ""): float(c.get("line-rate", 0)) for c in ET.parse(xml).getroot().iter("class")}


def test_prefill_with_cov_ranks_gives_one_combined_report(env_variant: Callable[..., Path], built, tmp_path):
    env = cov_env(env_variant, built)
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/cam/test_prefill.py", "--env", str(env),
                           "--report-dir", str(tmp_path / "reports"), "--world-sizes", "4", "--cov-ranks",
                           "-p", "no:cacheprovider", "-q"], cwd=REPO, capture_output=True, text=True, timeout=1500)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    folder = (tmp_path / "reports" / "latest").resolve()
    # every rank wrote its data file in its run folder and it came back with the launch's files
    data = sorted(folder.glob("host*/*/coverage-rank*.dat*"))
    assert {p.name.split(".")[0] for p in data} == {f"coverage-rank{r}" for r in range(4)}, data
    assert {p.relative_to(folder).parts[0] for p in data} == {"host1", "host2"}
    assert (folder / "coverage" / "index.html").exists()
    rates = line_rates(folder / "coverage.xml")
    # remote paths were mapped onto this checkout: one <source>, names relative to it
    assert [s.text for s in ET.parse(folder / "coverage.xml").getroot().iter("source")] == [str(REPO)]
    assert rates["suites/cam/rank/test_prefill_rank.py"] > 0, rates
    assert rates["standin/umdk_cam_op_lib/prefill.py"] > 0, rates
    html = "".join(p.read_text(errors="replace") for p in (folder / "coverage").glob("*.html"))
    assert "test_prefill_rank.py" in html and "prefill.py" in html
    assert not (folder / ".coveragerc-camit").exists()
    # one summary line in the terminal, and no gcov data on the pure-Python stand-in
    m = re.search(r"^coverage: (\d+\.\d)% \((\d+)/(\d+) lines\) in \d+ file\(s\) from 4 rank data file\(s\) "
                  r"on 2 host\(s\) -> (\S+)$", out, re.M)
    assert m and float(m.group(1)) > 0, out[-3000:]
    assert m.group(4) == str(folder / "coverage" / "index.html")
    assert "gcov:" not in m.group(0) and not list(folder.glob("*/gcov"))


def test_gcda_of_a_coverage_build_is_fetched_from_the_host_that_has_it(env_variant, built, tmp_path):
    from framework.config.effective import load
    from framework.hosts import Cluster

    env = load(cov_env(env_variant, built, "gcda.yaml"))
    spec = env.hosts["host2"]
    with Cluster.from_env(env) as cluster:
        cov = RankCoverage(env, cluster, tmp_path / "report")
        probes = cov.check(["host1", "host2"])
        vendor_dir = f"{probes['host2'].install_path}/vendors/{probes['host2'].vendor or 'CAM'}"
        gcda = f"{vendor_dir}/op_kernel/camit-synthetic-{tmp_path.name}.gcda"
        payload = "adcg synthetic gcov counters"
        host2 = cluster["host2"]
        host2.check(ShellScript(f"mkdir -p {commands.quote(vendor_dir + '/op_kernel')} && "
                                f"printf %s {commands.quote(payload)} > {commands.quote(gcda)}"))
        try:
            got = cov.collect_gcov(["host1", "host2"])
        finally:
            host2.run(["rm", "-f", "--", gcda])
        leftovers = host2.run(ShellScript(f"ls {commands.quote(spec.workdir)}/coverage-gcda-* 2>/dev/null")).stdout
    assert got["host2"] == 1 and got["host1"] == 0, got
    local = tmp_path / "report" / "host2" / "gcov" / gcda.lstrip("/")
    assert local.read_text() == payload
    assert not (tmp_path / "report" / "host1" / "gcov").exists()
    assert leftovers == ""  # the per-host archive was removed after the fetch
