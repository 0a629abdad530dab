"""The main job on the lab: `pytest suites/cam --env ...` passes with a complete, valid report folder,
and an op library with one injected mistake makes it fail naming the op, the rank and the mismatch."""

from __future__ import annotations

import json
import random
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from framework.lab import artifacts
from framework.perf.history import History, RunKey, path_for
from framework.report.junit import validate_junit
from tests.support import one_rank_failure
from tests.support.camit_labtools import launches, verdicts

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return artifacts.build_all(tmp_path_factory.mktemp("suite-artifacts"))


def suite_env(env_variant: Callable[..., Path], run_package: Path, wheel: Path, workdir: str, name: str) -> Path:
    def change(doc):
        doc["artifacts"] = {"run_package": str(run_package), "wheel": str(wheel)}
        doc["defaults"]["workdir"] = workdir
    return env_variant(change, name)


def run_suite(env: Path, reports: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "suites/cam", "--env", str(env), "--report-dir",
                           str(reports), "-p", "no:cacheprovider", "-q", "-rs", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def main_job(lab_env_path, built, tmp_path_factory):
    """The main job once for the module, one launch per test (the default) at worlds 8 and 16 (16 is skipped:
    the lab has 8 slots): (its process, its report folder, its env). World 8 spans all four hosts; world 4 runs in
    tests/faults/test_crosstalk_lab.py (CPU, two workers) and tests/integration/test_ascend_lab.py (hccl)."""
    import yaml

    tmp = tmp_path_factory.mktemp("main-job")
    doc = yaml.safe_load(lab_env_path.read_text())
    doc["artifacts"] = {"run_package": str(built["run"]), "wheel": str(built["wheel"])}
    doc["defaults"]["workdir"] = "/var/tmp/camit/suite"
    env = tmp / "suite.yaml"
    env.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_suite(env, tmp / "reports", "--world-sizes", "8,16")
    return proc, (tmp / "reports" / "latest").resolve(), env


def test_suite_passes_with_a_complete_report_folder(main_job):
    proc, folder, _ = main_job
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    # a case the env cannot host is skipped with the requirement named
    assert "needs 16 ranks; the env has 4 host(s) x 2 rank(s) per node = 8" in out
    assert "camit run" in out and "reproduce: pytest suites/cam" in out and "--random-seed" in out
    for name in ("junit.xml", "cluster.xml", "manifest.json", "index.html", "deploy-manifest.json"):
        assert (folder / name).exists(), name
    assert validate_junit(folder / "junit.xml") == []
    assert validate_junit(folder / "cluster.xml") == []
    cluster = (folder / "cluster.xml").read_text()
    for host in ("host1", "host2", "host3", "host4"):
        assert f"@{host}" in cluster
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["seed"] is not None
    # per-rank logs came back under <host>/<launch>/
    assert list(folder.glob("host1/*/rank0.log")) and list(folder.glob("host4/*/rank7.log"))


def test_one_launch_per_world_gives_the_verdicts_of_one_launch_per_test(main_job, tmp_path):
    """The main job again at world 8 with ``--launch-per world`` (no redeploy): every test the verdict it had with
    one launch per test, one launch for the world instead of one per launching test, each test its own report."""
    per_test, a, env = main_job
    assert per_test.returncode == 0, per_test.stdout[-3000:]
    per_world = run_suite(env, tmp_path / "world", "--world-sizes", "8", "--no-deploy", "--launch-per", "world")
    assert per_world.returncode == 0, per_world.stdout[-3000:] + per_world.stderr[-2000:]
    b = (tmp_path / "world" / "latest").resolve()
    def at_8(cases: dict[str, str]) -> dict[str, str]:
        return {t: v for t, v in cases.items() if not re.search(r"(?<!\d)(4|16)ranks", t)}

    got = verdicts(b / "junit.xml")
    assert at_8(got) == at_8(verdicts(a / "junit.xml"))
    assert {v for t, v in got.items() if t not in at_8(got)} == {"skipped"}  # (--world-sizes 8)
    ran = [t for t, v in at_8(got).items() if v == "passed" and re.search(r"(?<!\d)8ranks", t)]
    assert len(ran) >= 5, ran
    launched = [launch["world_size"] for launch in launches(a)]
    assert launched.count(8) == len(ran)  # one per test ...
    shared = launches(b)
    assert len(shared) == 1 and shared[0]["ok"] and shared[0]["world_size"] == 8, shared  # ... against one
    # each test keeps its own report: the shared launch named, its own module's rank-side counts
    # (pytest's xunit2 JUnit carries a test's properties in its system-out)
    assert (b / "junit.xml").read_text().count("property shared_launch = ") == len(ran)


def _mistaken_standin(tmp_path: Path) -> Path:
    src = tmp_path / "standin"
    shutil.copytree(REPO / "standin", src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    prefill = src / "umdk_cam_op_lib" / "prefill.py"
    text = prefill.read_text()
    good = "    weights = topk_weights.to(torch.float32).unsqueeze(-1)\n"
    assert good in text, "the stand-in's combine changed: update this test's injected mistake"
    # the mistake: combine ignores top-k slot 0
    prefill.write_text(text.replace(good, good + "    weights[:, 0] = 0\n"))
    return src


def test_an_injected_op_mistake_fails_naming_op_rank_and_mismatch(env_variant: Callable[..., Path], built, tmp_path):
    wheel = artifacts.build_wheel(tmp_path / "bad-wheel", source=_mistaken_standin(tmp_path))
    env = suite_env(env_variant, built["run"], wheel, "/var/tmp/camit/mistake", "mistake.yaml")
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/cam/test_prefill.py", "--env", str(env),
                           "--report-dir", str(tmp_path / "reports"), "--world-sizes", "4", "-p", "no:cacheprovider",
                           "-q"], cwd=REPO, capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:]
    assert "moe_combine_prefill: combined_x vs x·Σw on rank" in out
    assert "calc_diff" in out
    assert "rank-side failure(s) in test_prefill_rank.py (world 4)" in out
    cluster = (tmp_path / "reports" / "latest" / "cluster.xml").read_text()
    assert "moe_combine_prefill" in cluster


def test_upstream_unit_tests_run_with_the_ranks_they_need(lab_env_path, tmp_path):
    fake = REPO / "tests" / "data" / "fake_umdk"
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/cam/test_upstream.py", "--env", str(lab_env_path),
                           "--umdk-src", str(fake), "--no-deploy", "--report-dir", str(tmp_path / "reports"),
                           "-p", "no:cacheprovider", "-q", "-rs"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    assert "1 passed, 1 skipped" in out
    assert "needs 16 ranks" in out
    cluster = (tmp_path / "reports" / "latest" / "cluster.xml").read_text()
    assert "test_base_test" in cluster and "@host2" in cluster


def test_perf_baseline_is_recorded_then_a_regression_fails(env_variant: Callable[..., Path], built, tmp_path):
    env = suite_env(env_variant, built["run"], built["wheel"], "/var/tmp/camit/suite", "perf.yaml")
    base = tmp_path / "baselines"
    args = ["suites/cam/test_perf.py", "--world-sizes", "4", "--baseline-dir", str(base), "--cluster-name", "lab"]
    proc = subprocess.run([sys.executable, "-m", "pytest", *args, "--env", str(env), "--update-baseline",
                           "--report-dir", str(tmp_path / "r1"), "-p", "no:cacheprovider", "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:]
    data = json.loads((base / "lab.json").read_text())
    assert data["prefill.world4"]["dispatch_us"] > 0
    # the run went into the history too; pretend the cluster used to be 100x faster for 20 runs since:
    # the same run is now a regression, named with its series and step
    with History(path_for(base, "lab")) as h:
        soc, = h.db.execute("SELECT soc FROM runs").fetchone()
        key = RunKey("past", "lab", soc, "unknown", "unknown")
        measured = h.series(key, "prefill.world4", "dispatch_us").values
        assert len(measured) == 1 and measured[0] > 0
        rng = random.Random(1)
        for i in range(20):
            h.record(replace(key, run_id=f"past{i}"),
                     {("prefill.world4", "dispatch_us"): measured[0] / 100 * (1 + rng.gauss(0, 0.03))})
    proc = subprocess.run([sys.executable, "-m", "pytest", *args, "--env", str(env),
                           "--report-dir", str(tmp_path / "r2"), "-p", "no:cacheprovider", "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1
    assert "performance regression on lab (prefill.world4):" in proc.stdout
    assert "prefill.world4 dispatch_us: regression by the newest point beyond 5 sigma at point 21" in proc.stdout


def test_two_xdist_workers_share_the_cluster_without_crosstalk(env_variant: Callable[..., Path], built, tmp_path):
    """-n 2: each worker leases, deploys and launches on its own half of the hosts; one report folder."""
    # a workdir of its own, so both shares really deploy (on a reused lab a fixed one is "unchanged")
    env = suite_env(env_variant, built["run"], built["wheel"], f"/var/tmp/camit/xdist-{secrets.token_hex(3)}",
                    "xdist.yaml")
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/cam/test_prefill.py", "suites/cam/test_abnormal.py",
                           "--env", str(env), "--report-dir", str(tmp_path / "reports"), "--world-sizes", "4",
                           "-n", "2", "-p", "no:cacheprovider", "-p", "no:benchmark", "-q",
                           "-k", "not observed"],  # one launch per module: the two modules, one per worker
                          cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout
    folder = (tmp_path / "reports" / "latest").resolve()
    assert validate_junit(folder / "junit.xml") == [] and validate_junit(folder / "cluster.xml") == []
    launches = [json.loads(p.read_text()) for p in folder.glob("launch-*.json")]
    assert len(launches) == 2
    used = [set(n for n in launch["nodes"]) for launch in launches]
    # each worker drove its own pair of hosts, concurrently and without sharing any
    assert sorted(sorted(u) for u in used) == [["host1", "host2"], ["host3", "host4"]]
    # the two launches were dealt one to each worker at the start, and neither worker's deploy waited for
    # the other's (each deploys its own share): the two deploys overlap in time
    phases = json.loads((folder / "phases.json").read_text())
    spans = [(min(p["start"] for p in phases if p["host"] in u and p["phase"] == "deploy"),
              max(p["end"] for p in phases if p["host"] in u and p["phase"] == "deploy")) for u in used]
    assert max(s for s, _ in spans) < min(e for _, e in spans), phases


def test_a_failed_case_shows_the_failure_signatures_of_its_hosts(lab_env_path, tmp_path):
    """A rank that logs an HCCL timeout and fails: the pytest report names the signature and the peer."""
    ut = tmp_path / "src" / "test" / "cam" / "ut" / "hccl"
    ut.mkdir(parents=True)
    (ut / "test_timeout.py").write_text(
        "import os, sys\n\n\ndef test_peer_never_came():\n"
        "    if os.environ.get('RANK') == '1':\n"
        "        print('[ERROR] HCCL(1,python):EI0006: Getting socket times out. dst_rank[3]', file=sys.stderr)\n"
        "        raise RuntimeError('collective timed out')\n")
    # a second upstream file, so a second failed test of the same run
    (ut / "test_timeout_again.py").write_text(
        "import os, sys\n\n\ndef test_peer_gone_again():\n"
        "    if os.environ.get('RANK') == '2':\n"
        "        print('[ERROR] HCCL(2,python):EI0006: Getting socket times out. dst_rank[0]', file=sys.stderr)\n"
        "        raise RuntimeError('collective timed out again')\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/cam/test_upstream.py", "--env", str(lab_env_path),
                           "--umdk-src", str(tmp_path / "src"), "--no-deploy", "--report-dir", str(tmp_path / "r"),
                           "-p", "no:cacheprovider", "-q"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:]
    out = proc.stdout
    assert "failure signatures" in out and "EI0006" in out and "peer ranks 3" in out, out[-4000:]
    # the run's signatures.txt keeps a section per failed test (two here), not the last one only
    text = ((tmp_path / "r" / "latest").resolve() / "signatures.txt").read_text()
    heads = [line for line in text.splitlines() if line.startswith("== ")]
    assert len(heads) == 2 and "test_timeout.py" in heads[0] + heads[1] and \
        "test_timeout_again.py" in heads[0] + heads[1], text
    assert "peer ranks 3" in text and "peer ranks 0" in text, text


def test_a_test_failing_on_one_rank_ends_the_launch_in_seconds_naming_it_and_the_ranks(env_variant, built,
                                                                                       tmp_path):
    """Rank 1's dispatch is refused while ranks 0, 2, 3 wait for it in the op's collective (gloo): the
    harness's agreement ends the launch within its bound, not at the case timeout (issue 15, item 9)."""
    env = suite_env(env_variant, built["run"], built["wheel"], "/var/tmp/camit/suite", "one-rank.yaml")
    ctl = one_rank_failure.write(tmp_path / "ctl")
    proc = one_rank_failure.run(ctl, env, tmp_path / "r")
    one_rank_failure.check(proc, tmp_path / "r")


def test_perf_sweep_rows_page_and_compare(env_variant: Callable[..., Path], built, tmp_path):
    """``-m perf`` with a one-shape matrix file at world 4: schema-valid rows with every iteration's outputs
    identical, the performance page with its pictures, the history file, and ``camit perf compare`` on them."""
    import jsonschema

    from framework.perf.row import packaged_schema

    env = suite_env(env_variant, built["run"], built["wheel"], "/var/tmp/camit/suite", "sweep.yaml")
    spec = tmp_path / "matrix.yaml"
    spec.write_text("tokens: [16]\nhidden: [1024]\ntop_k: [2]\nwarmup: 1\niterations: 3\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/cam/test_sweep.py", "-m", "perf", "--perf-matrix",
                           str(spec), "--world-sizes", "4", "--env", str(env), "--baseline-dir", str(tmp_path / "b"),
                           "--cluster-name", "lab", "--report-dir", str(tmp_path / "r"), "-p", "no:cacheprovider",
                           "-q"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "perf sweep at 4 ranks: 3 configuration(s), 1 warm-up + 3 timed iterations each; the whole sweep " \
        "(1 world size(s)) about" in proc.stdout
    folder = (tmp_path / "r" / "latest").resolve()
    lines = (folder / "perf-rows.jsonl").read_text().splitlines()
    assert len(lines) == 3  # prefill dispatch, prefill combine, fused_deep_moe
    for line in lines:
        doc = json.loads(line)
        jsonschema.validate(doc, packaged_schema())
        assert doc["config"]["world"] == 4 and len(doc["ranks"]) == 4 and doc["reference"]["time_us"]["p50"] > 0
        assert len(doc["output_hashes"]) == 3 and len(set(doc["output_hashes"])) == 1
    assert (tmp_path / "b" / "lab.perf.sqlite").exists()
    assert sorted(p.name for p in (folder / "perf").glob("bandwidth-*.svg")) == [
        "bandwidth-combine.svg", "bandwidth-dispatch.svg", "bandwidth-fused_deep_moe.svg"]
    assert "href='perf.html'" in (folder / "index.html").read_text()
    cmp = subprocess.run([sys.executable, "-m", "framework.cli", "perf", "compare", str(folder), str(folder),
                          "--out", str(tmp_path / "cmp"), "--json"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert cmp.returncode == 0, cmp.stderr
    table = json.loads(cmp.stdout)["configurations"]
    assert len(table) == 3 and not any(c["significant"] for c in table) and all(c["delta"] == 0 for c in table)
