"""The host-side contract: one HostLayout for every path under a host's workdir, one DeployState document."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from framework import commands, deploy
from framework.config.effective import HostSpec, NicSpec
from framework.launch.plan import Prepared, parse_net, parse_prepare_probe, prepare_probe, shipped_files
from framework.ranksuite import coverage
from framework.remote.layout import STATE_FILE, DeployState, HostLayout
from framework.remote.sections import MARK, Record, read_records

SHA = "0123456789abcdef" * 4


def test_every_path_under_the_workdir():
    lay = HostLayout("/w d/", "/opt/opp")
    assert lay.workdir == "/w d"
    assert lay.stage(SHA) == f"/w d/artifacts/{SHA}"
    assert lay.artifact(SHA, "a.whl") == f"/w d/artifacts/{SHA}/a.whl"
    assert lay.stage_ok(SHA) == f"/w d/artifacts/{SHA}/.ok"
    assert (lay.venv, lay.venv_python) == ("/w d/venv", "/w d/venv/bin/python")
    assert lay.state_file == "/w d/deploy-state.json"
    assert lay.bin("supervisor.py", SHA) == "/w d/bin/supervisor-0123456789ab.py"
    assert lay.target(SHA, "t.py") == "/w d/targets/0123456789ab/t.py"
    assert lay.run_dir("r1-x1-ab") == "/w d/runs/r1-x1-ab"
    assert lay.suite(SHA) == "/w d/suites/0123456789abcdef"
    assert lay.tmp == "/w d/tmp"
    assert lay.vendor_set_env() == "/opt/opp/vendors/CAM/bin/set_env.bash"
    assert lay.vendor_set_env("customize") == "/opt/opp/vendors/customize/bin/set_env.bash"


def test_root_workdir_and_default_install_path():
    assert HostLayout("/").state_file == "/deploy-state.json"
    assert HostLayout("/w").install_path == "/w/opp"


def test_layout_of_a_spec_agrees_with_the_spec_defaults():
    spec = HostSpec(name="h", manage_nic=NicSpec("eth0", "10.0.0.1"), workdir="/var/tmp/camit/")
    lay = HostLayout.of(spec)
    assert lay.workdir == "/var/tmp/camit" and lay.install_path == spec.install_path


def test_deploy_and_launch_name_the_same_host_paths():
    """Deploy writes what launch reads: the same state file, the same vendor set_env, one bin folder."""
    spec = HostSpec(name="h", manage_nic=NicSpec("eth0", "10.0.0.1"), workdir="/w", venv=True)
    plan = deploy.HostPlan(host="h", workdir=spec.workdir, python=spec.python, venv=spec.venv,
                           install_path=spec.install_path, manage_ip="10.0.0.1")
    lay = HostLayout.of(spec)
    assert plan.state_file == lay.state_file
    assert plan.interpreter == lay.venv_python
    assert plan.vendor_set_env() == lay.vendor_set_env()
    assert plan.bin_path("relay.py", SHA) == lay.bin("relay.py", SHA)
    files = shipped_files(lay, {"supervisor.py": (Path("/x/supervisor.py"), SHA)})
    assert list(files) == [lay.bin("supervisor.py", SHA)]


def test_state_written_by_deploy_is_read_by_launch_through_a_real_shell(tmp_path):
    lay = HostLayout(str(tmp_path / "w d"), "/o p")
    Path(lay.workdir).mkdir()
    state = DeployState({"wheel": SHA}, "/o p", "/w d/venv/bin/python", vendor="CAM", installed_version="1.0",
                        ops=("fused_deep_moe",), deployed_at="2026-01-01T00:00:00+0000")
    subprocess.run(["/bin/sh", "-c", DeployState.write_script(lay, {**state.to_doc(), "note": "it's $(x)"})],
                   check=True)
    assert (Path(lay.workdir) / STATE_FILE).exists() and not Path(lay.state_file + ".tmp").exists()
    out = subprocess.run(["/bin/sh", "-c", prepare_probe({lay.bin("supervisor.py", SHA): SHA}, lay)],
                         capture_output=True, text=True, check=True).stdout
    have, read = parse_prepare_probe(out)
    assert have == set() and read == state
    assert DeployState.matches(DeployState.from_probe(out), state.expected())
    assert not DeployState.matches(DeployState.from_probe(out), {**state.expected(), "artifacts": {"wheel": "x"}})
    prepared = Prepared(lay, "s", "r", state=read)
    assert prepared.state.interpreter == "/w d/venv/bin/python"


def test_state_absent_or_broken():
    assert DeployState.from_probe("@@have x\n") is None
    assert DeployState.from_probe("@@state {not json\n") == {}
    assert DeployState.parse("") == {} and DeployState.parse("[1]") == {}
    empty = DeployState.from_doc({})
    assert (empty.interpreter, empty.vendor, empty.artifacts, empty.version) == ("", None, {}, 0)
    assert not DeployState.matches(None, DeployState({"wheel": SHA}, "/o", "/py").expected())


def test_a_state_file_of_other_types_reads_as_an_empty_state_never_an_error():
    """deploy-state.json is the host's data: values of the wrong type are empty, not a traceback (int("x"),
    tuple(5) had raised in the launch's plan)."""
    odd = DeployState.from_doc({"version": "x", "ops": 5, "artifacts": {"wheel": 1, "run": SHA},
                                "interpreter": ["/py"], "vendor": 0, "installed_version": 2.0, "deployed_at": {}})
    assert odd == DeployState({"run": SHA}, "", "", None, None, (), None, 0)
    assert DeployState.from_doc({"version": True}).version == 0
    kept = DeployState({"wheel": SHA}, "/o", "/py", "CAM", "1.0", ("a", "b"), "2026-12-06T00:00:00Z")
    assert DeployState.from_doc(kept.to_doc()) == kept


def test_the_deploy_expected_state_is_the_documents_deciding_part():
    plan = deploy.HostPlan(host="h", workdir="/w", python="/py", venv=False, install_path="/o", manage_ip="1.2.3.4")
    art = deploy.Artifact("wheel", Path("/x/a.whl"), SHA, 1)
    assert deploy.expected_state(plan, [art]) == {"version": 1, "artifacts": {"wheel": SHA}, "install_path": "/o",
                                                  "interpreter": "/py"}
    assert deploy.expected_state(plan, [art]) == DeployState({"wheel": SHA}, "/o", "/py").expected()


def _sh(script: str | list[str]) -> str:
    argv = script if isinstance(script, list) else ["/bin/sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _only_records(out: str) -> list[Record]:
    """Every line ``out`` has is a tag line of the one section format (no other line format left)."""
    records = read_records(out)
    assert out and "".join(r.raw for r in records) == out
    assert all(r.body == "" and r.line.startswith(MARK) for r in records)
    return records


def test_deploy_launch_and_coverage_probes_print_tagged_records_read_by_the_one_parser(tmp_path):
    """The three host probes, run by a real sh on one small layout, print only ``@@tag value`` records
    (:mod:`framework.remote.sections`), and their parsers read the same host facts back."""
    lay = HostLayout(str(tmp_path / "w d"), str(tmp_path / "o p"))
    Path(lay.workdir).mkdir()
    state = DeployState({"wheel": SHA}, lay.install_path, sys.executable, vendor="CAM")
    _sh(DeployState.write_script(lay, state.to_doc()))
    x_sha = hashlib.sha256(b"x").hexdigest()
    art = deploy.Artifact("wheel", Path("/x/a.whl"), x_sha, 1)
    state = DeployState({"wheel": x_sha}, lay.install_path, sys.executable, vendor="CAM")
    _sh(DeployState.write_script(lay, state.to_doc()))
    Path(lay.stage(x_sha)).mkdir(parents=True)
    Path(lay.artifact(x_sha, "a.whl")).write_bytes(b"x")
    Path(lay.stage_ok(x_sha)).write_text("ok")
    set_env = Path(lay.vendor_set_env())
    set_env.parent.mkdir(parents=True)
    set_env.write_text("")
    supervisor = Path(lay.bin("supervisor.py", SHA))
    supervisor.parent.mkdir()
    supervisor.write_text("x")
    (set_env.parent / "k.gcda").write_bytes(b"adcg")
    plan = deploy.HostPlan(host="h", workdir=lay.workdir, python=sys.executable, venv=False,
                           install_path=lay.install_path, manage_ip="10.0.0.1")

    out = _sh(deploy.probe_script(plan, [art], lay.bin("relay.py", SHA)))
    assert {r.tag for r in _only_records(out)} == {"have", "state", "free", "tree", "interp", "os", "arch"}
    probe = deploy.parse_probe(out)
    assert probe.have == {x_sha} and probe.free and probe.free > 0 and probe.interpreter_ok and not probe.relay_ok
    assert probe.vendor_trees == [str(set_env)]
    assert DeployState.matches(probe.state, deploy.expected_state(plan, [art]))

    out = _sh(prepare_probe({str(supervisor): x_sha, lay.bin("rankwrap.py", SHA): SHA}, lay))
    tags = [r.tag for r in _only_records(out)]
    # then this machine's devices and addresses (ip -o link / ip -o addr), one record each, and the end mark
    assert tags[:2] == ["have", "state"] and tags[-1] == "net" and set(tags[2:-1]) == {"link", "addr"}, tags
    assert parse_prepare_probe(out) == ({str(supervisor)}, state)
    net = parse_net(out)
    assert net is not None and "lo" in net.links and net.addrs["127.0.0.1"] == "lo"

    out = _sh(coverage.probe_argv(sys.executable))
    assert {r.tag for r in _only_records(out)} <= {"cov", "oplib"}
    cov = coverage.parse_probe("h", sys.executable, lay.install_path, "CAM", 0, out)
    assert cov.ok and coverage.version_tuple(cov.version or "") >= coverage.MIN_VERSION

    tgz = lay.scratch("g.tgz")
    out = _sh(coverage.gcda_script([commands.quote(str(set_env.parent))], tgz))
    assert [r.tag for r in _only_records(out)] == ["gcda"]
    assert coverage.parse_gcda_count(out) == 1 and Path(tgz).is_file()
