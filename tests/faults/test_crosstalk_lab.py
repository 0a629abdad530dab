"""Sixteen hosts, two xdist workers, one suite run: no crosstalk, both reports complete.

The test brings up a 16-host lab of its own (``x16``, 10.74.0.0/24; it needs what the CI lab
needs: root, network namespaces) and runs the whole CAM suite (``pytest suites/cam``: prefill,
fused_deep_moe, abnormal, fuzz, perf at world size 4, and the preflight tests of all 16
hosts) with ``-n 2``. World 4 is what this test adds to the suite's CPU runs (the 4-host main job in
tests/integration/test_suites_lab.py runs every module at world 8); two workers, each on its own half, need only
launches that both halves can run (world 4 takes 2 of a half's 8 hosts, two ranks each). Worlds 8 and 16 are left
out: they add no crosstalk case and cost two 8- or 16-rank CPU launches at once on the machine's two cores (two
16-rank launches need more memory than the CI machine has). Each worker must lease,
deploy and launch only on its own half (host1..8, host9..16); the launches must be spread over
both halves; every rank of every launch must be in cluster.xml with its results; both JUnit
files validate; leases are released and nothing of any launch is left on any host.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from framework.lab import artifacts
from framework.preflight.checks import CHECKS
from framework.report.junit import validate_junit
from tests.support.camit_labtools import REPO, wait_none_left

pytestmark = pytest.mark.lab

HOSTS = [f"host{i}" for i in range(1, 17)]
SHARES = (set(HOSTS[:8]), set(HOSTS[8:]))


@pytest.fixture(scope="module")
def lab16(lab, tmp_path_factory):
    """A private 16-host lab for this module (the CI lab stays as it is); always taken down."""
    from framework.lab.manage import Lab

    env_out = tmp_path_factory.mktemp("x16") / "lab16.yaml"
    big = Lab.up(16, name="x16", subnet="10.74.0.0/24", env_out=env_out, say=lambda m: None)
    try:
        yield big, env_out
    finally:
        big.down(say=lambda m: None)


@pytest.fixture(scope="module")
def suite16(lab16, tmp_path_factory):
    _, env_out = lab16
    out = tmp_path_factory.mktemp("x16-artifacts")
    built = artifacts.build_all(out)
    doc_path = out / "suite16.yaml"
    import yaml

    doc = yaml.safe_load(env_out.read_text())
    doc["artifacts"] = {"run_package": str(built["run"]), "wheel": str(built["wheel"])}
    doc["defaults"]["workdir"] = "/var/tmp/camit/x16"
    doc_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return doc_path


def test_two_workers_on_sixteen_hosts_keep_to_their_halves(lab16, suite16, tmp_path):
    big, _ = lab16
    reports = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/cam", "--env", str(suite16), "--report-dir",
                           str(reports), "--baseline-dir", str(tmp_path / "baselines"), "--world-sizes", "4",
                           "-n", "2", "-q", "-rs", "-p", "no:cacheprovider"],
                          cwd=REPO, capture_output=True, text=True, timeout=1500)
    # the tail without -rs's 200-odd skip lines, so a failure's own lines are what an assert shows
    out = "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("SKIPPED ["))[-8000:] + \
        proc.stderr[-3000:]
    assert proc.returncode == 0, out
    folder = (reports / "latest").resolve()
    assert validate_junit(folder / "junit.xml") == [] and validate_junit(folder / "cluster.xml") == []

    # pytest's report: every collected test is there once — 6 modules x the default worlds (4, 8, 16, 32 on
    # 16 hosts of 2 slots; all but 4 skipped), the 2 out-of-range-id observations, the
    # upstream placeholder (no --umdk-src), every check x 16 hosts
    from framework.ranksuite.suite import default_worlds

    worlds = default_worlds(16, 2, frozenset({4}))
    assert worlds == [4, 8, 16, 32]
    junit = ET.parse(folder / "junit.xml").getroot()
    names = [f"{c.get('classname')}::{c.get('name')}" for c in junit.iter("testcase")]
    # (the perf sweep, suites/cam/test_sweep.py, is one of the 6: skipped without -m perf, it launches nothing)
    assert len(names) == len(set(names)) == 6 * len(worlds) + 2 + 1 + len(CHECKS) * 16, len(names)
    launched = [c.get("name") for c in junit.iter("testcase")
                if "test_preflight" not in (c.get("classname") or "")
                and not any(e.tag in ("failure", "error", "skipped") for e in c)]  # passed (system-out: placement)
    # 5 CAM modules and the 2 out-of-range-id observations (recorded, never judged: they run on gloo too)
    assert len(launched) == 7, launched

    # each launch kept to one worker's half, and both halves ran launches
    launches = [json.loads(p.read_text()) for p in folder.glob("launch-*.json")]
    assert len(launches) == 7
    halves = []
    for launch in launches:
        nodes = set(launch["nodes"])
        owner = [i for i, share in enumerate(SHARES) if nodes <= share]
        assert owner, f"launch {launch['launch_id']} spans both workers' hosts: {sorted(nodes)}"
        halves.append(owner[0])
    assert sorted(set(halves)) == [0, 1], halves

    # cluster.xml: every rank of every launch reported its rank-side cases from a host of its launch
    cluster = ET.parse(folder / "cluster.xml").getroot()

    def prop(suite: ET.Element, key: str) -> str | None:
        """A suite's property (the run's own ``cluster`` suite has no launch_id: None)."""
        return next((p.get("value") for p in suite.iter("property") if p.get("name") == key), None)

    def rank(suite: ET.Element) -> int:
        value = prop(suite, "rank")
        assert value is not None, f"no property rank in {suite.get('name')}"
        return int(value)

    for launch in launches:
        suites = [s for s in cluster.iter("testsuite") if prop(s, "launch_id") == launch["launch_id"]]
        assert sorted(rank(s) for s in suites) == list(range(launch["world_size"])), launch["launch_id"]
        for s in suites:
            assert s.get("hostname") in launch["nodes"], (s.get("name"), s.get("hostname"))
            assert int(s.get("tests", 0)) > 0 and int(s.get("failures", 0)) == 0 and int(s.get("errors", 0)) == 0
            assert not [c for c in s.iter("testcase") if c.get("name") in ("rank_report", "rank_exit")]

    # the deploy covered all 16 hosts (each worker its own half); leases released; nothing left running
    deployed = json.loads((folder / "deploy-manifest.json").read_text())
    assert {h for h, d in deployed["hosts"].items() if d["status"] == "deployed"} == set(HOSTS)
    for h in HOSTS:
        assert big.host_exec(h, ["test", "-e", "/var/tmp/camit/x16/camit-lease.json"]).returncode == 1, h
    for launch in launches:
        assert wait_none_left(launch["launch_id"], 5) == []
