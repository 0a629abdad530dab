"""``camit deploy --dry-run`` and ``camit run --dry-run``: the plans, printed without touching a host.

The env's hosts are TEST-NET addresses (192.0.2.x, RFC 5737: nothing answers there), and every way out is
closed in the test process: the SSH transport's ``connect``, ``socket.socket.connect``,
``socket.create_connection`` and the lease raise (and record that they were called). A dry run must end
with 0, print what the real command would send and start (checked against the plan builders themselves:
the launch line is :func:`framework.launch.plan.node_command`'s), never show a secret, and leave no report
folder behind.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import socket
from pathlib import Path

import pytest

from framework import cli, remote
from framework.cli.common import DRY_RUN_HEADER, EXAMPLES
from framework.config import load
from framework.deploy.plan import HostPlan, install_run_script, install_wheel_script, installer_bin, resolve_artifacts
from framework.launch.plan import Target, node_command, plan_nodes, prepared_for
from framework.remote.layout import HostLayout

SECRET_PW = "pw-Zq81x-secret"
SECRET_TOKEN = "tok-Hh27-secret"


@pytest.fixture
def no_way_out(monkeypatch):
    """Record (and refuse) every connection and lease the test process would make."""
    from framework.lease import Lease
    from framework.transport.ssh import SshTransport

    tried: list[str] = []

    def refuse(what):
        def fn(*args, **kwargs):
            tried.append(what)
            raise AssertionError(f"a dry run {what}")
        return fn

    monkeypatch.setattr(SshTransport, "connect", refuse("connected over SSH"))
    monkeypatch.setattr(socket.socket, "connect", refuse("opened a socket"))
    monkeypatch.setattr(socket, "create_connection", refuse("opened a connection"))
    monkeypatch.setattr(Lease, "__enter__", refuse("took the lease"))
    return tried


@pytest.fixture
def env_file(tmp_path, monkeypatch):
    (tmp_path / "CAM_cpu_debian_x86_64.run").write_bytes(b"#!/bin/sh\necho SUCCESS\n")
    (tmp_path / "umdk_cam_op_lib-1.0-py3-none-any.whl").write_bytes(b"wheel bytes")
    (tmp_path / "key").write_text("never read\n")
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "rank.py").write_text("print('rank')\n")
    monkeypatch.setenv("DRY_PW", SECRET_PW)
    monkeypatch.setenv("DRY_TOKEN", SECRET_TOKEN)
    path = tmp_path / "env.yaml"
    path.write_text(
        "defaults:\n  user: root\n  key_file: key\n  known_hosts: known_hosts\n  connect_timeout: 1\n"
        "host_info:\n"
        "  node1:\n    manage_nic: {name: eth0, ip: 192.0.2.11}\n    passwd: ${DRY_PW}\n"
        "  node2:\n    manage_nic: {name: eth0, ip: 192.0.2.12}\n    workdir: /srv/camit w\n"
        "artifacts:\n  run_package: CAM_*.run\n  wheel: umdk*.whl\n"
        "launch:\n  backend: gloo\n  env:\n    HF_TOKEN: ${DRY_TOKEN}\n    PLAIN_VAR: plain-value\n"
    )
    monkeypatch.chdir(tmp_path)
    return path


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _no_secrets(text: str) -> None:
    assert SECRET_PW not in text and SECRET_TOKEN not in text


def test_deploy_dry_run_prints_each_hosts_uploads_and_install_steps(env_file, no_way_out, capsys, tmp_path):
    rc, out, err = _main(capsys, "deploy", "--env", str(env_file), "--dry-run", "--report-dir", "reports")
    assert rc == 0, out + err
    assert no_way_out == []
    assert not (tmp_path / "reports").exists()  # no run folder either
    _no_secrets(out + err)
    env = load(env_file)
    arts = resolve_artifacts(env)
    wheel = next(a for a in arts if a.kind == "wheel")
    assert wheel.sha256 == hashlib.sha256(b"wheel bytes").hexdigest()
    assert out.startswith(DRY_RUN_HEADER + "\n")
    assert "deploy 2 artifact(s) to 2 host(s); transfer: relay chain" in out
    for host, workdir in (("node1", "/var/tmp/camit"), ("node2", "/srv/camit w")):
        plan = HostPlan.for_spec(env.hosts[host], env)
        assert f"{host}: workdir {workdir}, install path {workdir}/opp, interpreter {workdir}/venv/bin/python" in out
        assert f"  upload {wheel.name} -> {workdir}/artifacts/{wheel.sha256}/{wheel.name}\n" in out
        run = next(a for a in arts if a.kind == "run_package")
        assert f"  install-run: {install_run_script(plan, run)}\n" in out  # the very command deploy runs
        assert f"  install-wheel: {install_wheel_script(plan, wheel)}\n" in out
        assert (f"  ship-installer [when the probe did not find the wheel installer there with its sha256]: "
                f"sends {installer_bin(plan)}\n") in out
    assert "resolved at run time, by each host's probe: which artifacts each host has staged already" in out


def test_deploy_dry_run_json_and_no_relay(env_file, no_way_out, capsys):
    rc, out, _ = _main(capsys, "deploy", "--env", str(env_file), "--dry-run", "--json", "--no-relay",
                       "--hosts", "node2")
    assert rc == 0 and no_way_out == []
    doc = json.loads(out)
    assert doc["dry_run"] is True
    (host,) = doc["hosts"]
    assert host["host"] == "node2" and host["transfer"] == "direct SFTP"
    assert host["interpreter"] == "/srv/camit w/venv/bin/python"
    assert [s["step"] for s in host["steps"]] == ["venv", "ship-installer", "clear-state", "install-run",
                                                  "check-tree", "install-wheel", "verify", "write-state"]
    assert host["steps"][1]["sends"].startswith("/srv/camit w/bin/wheelinst-")
    assert host["steps"][-1]["writes"] == "/srv/camit w/deploy-state.json"
    assert {a["kind"] for a in host["artifacts"]} == {"run_package", "wheel"}
    assert doc["resolved_at_run_time"]


def test_run_dry_run_prints_the_exact_node_commands_without_secrets(env_file, no_way_out, capsys, tmp_path):
    rc, out, err = _main(capsys, "run", "--env", str(env_file), "--dry-run", "--json", "--", "rank.py", "--n", "3")
    assert rc == 0, out + err
    assert no_way_out == []
    assert not (tmp_path / "reports").exists()
    _no_secrets(out + err)
    doc = json.loads(out)
    assert doc["nnodes"] == 2 and doc["world_size"] == 2 and doc["master"] == "192.0.2.11:0"
    # the same builders the launcher uses, with the launch id the dry run chose: byte for byte
    env = load(env_file)
    programs = {name: remote.script(name) for name in ("supervisor.py", "rankwrap.py")}
    script = (Path("rank.py"), hashlib.sha256(b"print('rank')\n").hexdigest())
    prepared = {h: prepared_for(HostLayout.of(env.hosts[h]), programs, script) for h in ("node1", "node2")}
    plans = plan_nodes(env, ["node1", "node2"], prepared, nproc=1, backend="gloo", master_port=0,
                       launch_id=doc["launch_id"], extra_env={}, timeout=600.0, core_limit="auto")
    target = Target(script=prepared["node1"].script, args=("--n", "3"))
    assert [n["host"] for n in doc["nodes"]] == ["node1", "node2"]
    for node in doc["nodes"]:
        assert node["command"] == node_command(plans[node["host"]], target).display
        assert node["secret_env"] == ["HF_TOKEN"]
        argv = shlex.split(node["command"])
        assert argv[:2] == ["bash", "-c"]
        assert f"--node-rank {node['node_rank']} --master-addr 192.0.2.11 --master-port 0" in argv[2]
        assert "PLAIN_VAR=plain-value" in argv[2] and "HF_TOKEN" not in argv[2]
    assert doc["nodes"][1]["python"] == "python3"
    assert any("master port" in why for why in doc["resolved_at_run_time"])


def test_run_dry_run_text(env_file, no_way_out, capsys):
    text = env_file.read_text().replace("  backend: gloo\n", "  backend: gloo\n  master_port: 29533\n")
    env_file.write_text(text)
    rc, out, err = _main(capsys, "run", "--env", str(env_file), "--dry-run", "--nproc-per-node", "2", "--",
                         "-m", "my.mod")
    assert rc == 0, out + err
    assert no_way_out == []
    _no_secrets(out + err)
    lines = out.splitlines()
    assert lines[0] == DRY_RUN_HEADER
    assert lines[1].endswith(": 2 node(s) x 2 rank(s), backend gloo, master 192.0.2.11:29533")
    assert lines[2].startswith("node1 (node 0): ships /var/tmp/camit/bin/")
    assert lines[2].endswith("; secret variables on the supervisor's stdin: HF_TOKEN")
    assert lines[3].startswith("  bash -c ") and "--master-port 29533" in lines[3]
    assert "--nproc-per-node 2 --node-rank 0" in lines[3] and lines[3].endswith("-- -m my.mod'")
    assert lines[4].startswith("node2 (node 1): ")
    assert "--node-rank 1" in lines[5]
    assert lines[6].startswith("resolved at run time: the interpreter")  # the master port is the env's


def test_dry_run_is_in_the_help_examples():
    for path in ("camit deploy", "camit run"):
        assert any("--dry-run" in e for e in EXAMPLES[path])
