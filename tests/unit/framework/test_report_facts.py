"""RunFacts: manifest.json's run facts as one typed record (wrong shapes read as absent, not as a crash)."""

from __future__ import annotations

from framework.report.model import DeployHost, RunFacts


def test_facts_from_a_full_manifest() -> None:
    f = RunFacts.from_manifest({
        "status": "failed", "error": "boom", "started": {"epoch": 10}, "ended": {"epoch": 12.5},
        "duration": 2.5, "seed": 7, "env": {"file": "env/lab.yaml"},
        "framework": {"version": "0.1.0", "git": "abcdef0123456789"}, "command": {"repro": "camit run x"},
        "report_problems": ["cores.json: unreadable"],
    })
    assert f == RunFacts(status="failed", error="boom", started=10.0, ended=12.5, duration=2.5, seed="7",
                         env_file="env/lab.yaml", version="0.1.0", git="abcdef0123456789", repro="camit run x",
                         problems=("cores.json: unreadable",))


def test_absent_empty_and_misshapen_keys_are_none() -> None:
    assert RunFacts.from_manifest({}) == RunFacts()
    f = RunFacts.from_manifest({"status": "", "started": "yesterday", "ended": {"epoch": True}, "duration": "2",
                                "seed": 0, "env": ["a"], "framework": None, "command": {"repro": ""},
                                "report_problems": "not a list"})
    assert f == RunFacts(seed="0")


def test_deploy_host_record() -> None:
    d = DeployHost.from_json("node1", {"status": "failed", "step": "install", "error": "",
                                       "durations": {"ship": 1, "install": 2.5, "bad": "x"},
                                       "installed_version": "", "vendor": "acme",
                                       "artifacts": [{"name": "a.whl", "sha256": "00"}, "junk"]})
    assert d == DeployHost("node1", status="failed", step="install", error="",
                           durations={"ship": 1.0, "install": 2.5}, vendor="acme",
                           artifacts=({"name": "a.whl", "sha256": "00"},))
    assert d.failed and d.seconds == 3.5
    ok = DeployHost.from_json("node2", {"status": "ok", "durations": None})
    assert not ok.failed and ok.seconds == 0 and ok.error is None and ok.step is None


def test_deployed_artifacts_and_versions() -> None:
    """manifest.json's artifacts (objects only) and each host's installed version (hosts naming
    one)."""
    versions = {"node1": {"installed_version": "1.2", "vendor": "acme"},
                "node2": {"installed_version": None}, "node3": "junk"}
    f = RunFacts.from_manifest({"artifacts": [{"kind": "wheel", "name": "a.whl"}, "junk"],
                                "versions": versions})
    assert f.artifacts == ({"kind": "wheel", "name": "a.whl"},)
    assert f.versions == {"node1": "1.2"}
    assert RunFacts.from_manifest({"artifacts": {}, "versions": []}) == RunFacts()
