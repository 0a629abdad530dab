"""The CLI against the lab: ``camit collect`` takes the lease like ``run``/``deploy``, and ``camit run`` always
leaves the full report folder (cluster.xml, manifest.json, index.html), a failed rank or a crash of camit itself
included (issue 16, item 10). Ctrl-C/SIGTERM mid-run: tests/integration/test_launch_lab.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from framework.hosts import Cluster
from framework.lease import release_leases
from framework.report.junit import validate_junit
from tests.support.xmltree import attr, one

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / "tests" / "data" / "targets" / "alltoall.py"
NODES = ["host1", "host2"]


def camit(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture
def clean(lab_env):
    yield
    with Cluster.from_env(lab_env) as c:
        release_leases(c, force=True)


@contextlib.contextmanager
def holder(env_path: Path, hosts: str, seconds: float):
    """``camit lease run --hosts HOSTS -- sleep SECONDS`` in the background, once it holds the lease."""
    proc = subprocess.Popen([sys.executable, "-m", "framework.cli", "lease", "run", "--env", str(env_path),
                             "--hosts", hosts, "--owner", "holder@cli", "--", "sleep", f"{seconds:g}"],
                            stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "lease held on" in line, line + proc.stderr.read()
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def test_collect_takes_the_lease_names_the_holder_and_waits(lab_env_path, tmp_path, clean):
    reports = str(tmp_path / "reports")
    with holder(lab_env_path, "host1", 4) as proc:
        busy = camit("collect", "--env", str(lab_env_path), "--hosts", "host1", "--report-dir", reports)
        assert busy.returncode == 3, busy.stderr
        assert f"host1: leased by holder@cli (pid {proc.pid} on" in busy.stderr
        assert "Traceback" not in busy.stderr
        # check and lease status stay usable beside the holder
        assert camit("lease", "status", "--env", str(lab_env_path), "--hosts", "host1").returncode == 0
        waited = camit("collect", "--env", str(lab_env_path), "--hosts", "host1", "--report-dir", reports,
                       "--wait", "60", "--json")
    assert waited.returncode == 0, waited.stderr
    assert "leased by holder@cli" in waited.stderr  # it said whom it waited for
    assert json.loads(waited.stdout)["hosts"][0]["host"] == "host1"


def _cases(folder: Path) -> dict[str, ET.Element]:
    root = ET.parse(folder / "cluster.xml").getroot()
    return {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}


def _report_trio(folder: Path) -> dict:
    for name in ("cluster.xml", "manifest.json", "index.html"):
        assert (folder / name).is_file(), f"no {name} in {sorted(p.name for p in folder.iterdir())}"
    assert validate_junit(folder / "cluster.xml") == []
    manifest = json.loads((folder / "manifest.json").read_text())
    assert isinstance(manifest, dict), manifest
    return manifest


CRASH = textwrap.dedent("""
    import sys
    from framework.launch import runwatch

    def boom(self, **kwargs):
        raise RuntimeError("camit bug for the test")

    runwatch.ClusterWatch.end = boom
    from framework.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_a_crash_of_camit_itself_still_leaves_the_report_folder_with_an_error_entry(lab_env_path, tmp_path, clean):
    reports = tmp_path / "reports"
    res = subprocess.run([sys.executable, "-c", CRASH, "run", "--env", str(lab_env_path), "--hosts", ",".join(NODES),
                          "--nproc-per-node", "1", "--report-dir", str(reports), "--timeout", "120", "--",
                          str(TARGET), "--raise-rank", "1"], capture_output=True, text=True, timeout=180, cwd=REPO)
    assert res.returncode != 0 and "camit bug for the test" in res.stderr, res.stderr[-2000:]
    folder = (reports / "latest").resolve()
    manifest = _report_trio(folder)
    assert manifest["status"] == "error" and "camit bug for the test" in manifest["error"]
    cases = _cases(folder)
    run_case = cases["camit.run::run"]
    assert "camit bug for the test" in attr(one(run_case, "error"), "message")
    # what finished before the crash is reported too: both ranks' suites, the failed rank an error naming it
    assert any(k.startswith("host1.rank0") for k in cases), list(cases)
    failed = [c for k, c in cases.items() if k.startswith("host2.rank1") and c.find("error") is not None]
    assert failed and "rank 1 on host2" in attr(one(failed[0], "error"), "message"), list(cases)

