"""`camit check`, `camit collect` and the preflight suite against the lab's real sshd hosts.

On the lab (``npu.soc: cpu``) the NPU checks skip with their reason; ssh, python, torch, disk,
clock and core run for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from framework.preflight.checks import CHECKS, NPU_CHECKS

REPO = Path(__file__).resolve().parents[2]


def camit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def check_json(env_path: Path, *extra: str) -> tuple[int, dict]:
    proc = camit("check", "--env", str(env_path), "--json", *extra)
    return proc.returncode, json.loads(proc.stdout)


def by_cell(data: dict) -> dict[tuple[str, str], dict]:
    return {(r["host"], r["check"]): r for r in data["results"]}


def test_check_passes_on_the_lab_with_npu_checks_skipped(lab_env_path, lab_env):
    rc, data = check_json(lab_env_path)
    assert rc == 0, data
    cells = by_cell(data)
    assert set(cells) == {(h, c) for h in lab_env.hosts for c in CHECKS}
    for host in lab_env.hosts:
        for check in NPU_CHECKS:
            assert cells[(host, check)]["status"] == "skip"
            assert cells[(host, check)]["summary"] == "npu.soc is cpu: no NPU on this host"
        for check in ("ssh", "python", "torch", "disk", "clock"):
            assert cells[(host, check)]["status"] == "ok", cells[(host, check)]
        assert cells[(host, "ssh")]["summary"] == f"reached root@{host}; host key verified (pinned)"
        assert cells[(host, "torch")]["value"].startswith("2.")
        assert cells[(host, "core")]["status"] in ("ok", "warn")
    # the lab's hosts share this machine's clock: the true offset is 0, so it must lie within each
    # measurement's uncertainty (half the in-session exchange, a few ms)
    clock = data["clock"]
    for host, offset in clock["offsets"].items():
        assert abs(offset) <= clock["uncertainty"][host] + 0.002, (host, offset, clock["uncertainty"][host])
    assert clock["max_pairwise"] < 0.5


def test_check_table_and_exit_code(lab_env_path, lab_env):
    proc = camit("check", "--env", str(lab_env_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["host", *CHECKS]
    for host in lab_env.hosts:
        assert any(line.startswith(host + " ") and " ok " in line for line in lines)
    assert f"skipped {', '.join(c for c in CHECKS if c in NPU_CHECKS)} on " in proc.stdout
    assert "all checks passed" in lines[-1]


def test_unreachable_host_is_exit_3_and_named(lab, lab_env_path, lab_env):
    victim = list(lab_env.hosts)[1]
    lab.stop_sshd(victim)
    try:
        rc, data = check_json(lab_env_path)
        table = camit("check", "--env", str(lab_env_path))
    finally:
        lab.start_sshd(victim)
    assert rc == 3
    cells = by_cell(data)
    assert cells[(victim, "ssh")]["status"] == "error"
    assert "refused" in cells[(victim, "ssh")]["summary"] or "connect" in cells[(victim, "ssh")]["summary"]
    assert all(cells[(victim, c)]["status"] == "skip" for c in CHECKS[1:])
    others = [h for h in lab_env.hosts if h != victim]
    assert all(cells[(h, "ssh")]["status"] == "ok" for h in others)
    assert table.returncode == 3 and "UNREACHABLE" in table.stdout and "host(s) UNREACHABLE" in table.stdout


def test_full_workdir_fails_disk_with_exit_1(lab, lab_env_path, lab_env):
    victim = list(lab_env.hosts)[-1]
    lab.set_small_workdir(victim, "8m")
    try:
        rc, data = check_json(lab_env_path, "--min-free-gb", "0.5", "--hosts", victim)
    finally:
        lab.reset_workdir(victim)
    assert rc == 1
    disk = by_cell(data)[(victim, "disk")]
    assert disk["status"] == "fail" and disk["summary"].startswith("only 0.0 GiB free at /var/tmp/camit")


def test_deploy_venv_is_the_interpreter_checked(lab, lab_env_path, env_variant):
    workdir = "/var/tmp/camit/preflight-venv-test"
    path = env_variant(lambda doc: doc["defaults"].update(workdir=workdir))
    host = "host1"
    python = lab.plan.python
    lab.host_exec(host, ["sh", "-c", f"mkdir -p {workdir}/venv/bin && ln -sf {python} {workdir}/venv/bin/python"],
                  check=True)
    try:
        rc, data = check_json(path, "--hosts", f"{host},host2")
    finally:
        lab.host_exec(host, ["rm", "-rf", workdir])
    assert rc == 0, data
    cells = by_cell(data)
    assert f"({workdir}/venv/bin/python, deploy venv)" in cells[(host, "python")]["summary"]
    assert "no deploy venv yet" in cells[("host2", "python")]["summary"]
    assert "workdir /var/tmp/camit/preflight-venv-test not created yet" in cells[("host2", "disk")]["summary"]


def test_broken_interpreter_fails_python_and_torch(lab_env_path, env_variant):
    # its own workdir: preflight rightly prefers a deploy venv there, and other tests deploy to the default one
    path = env_variant(lambda doc: doc["defaults"].update(python="/nonexistent/python3",
                                                          workdir="/var/tmp/camit/no-python"))
    rc, data = check_json(path)
    assert rc == 1
    cells = by_cell(data)
    assert cells[("host1", "python")]["status"] == "fail"
    assert cells[("host1", "python")]["summary"].startswith("/nonexistent/python3 does not run")
    assert cells[("host1", "torch")]["summary"] == "interpreter does not run (see python)"


def test_preflight_suite_ids_and_outcomes(lab_env_path, lab_env, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/cam/test_preflight.py", "-v", "-p", "no:cacheprovider",
         "--env", str(lab_env_path), "--report-dir", str(tmp_path / "reports")],
        capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "CAMIT_ENV": ""})
    assert proc.returncode == 0, proc.stdout[-3000:]
    for host in lab_env.hosts:
        assert f"test_check[{host}-ssh] PASSED" in proc.stdout
        assert f"test_check[{host}-npu] SKIPPED" in proc.stdout
    n = len(lab_env.hosts)
    assert f"{(len(CHECKS) - len(NPU_CHECKS)) * n} passed, {len(NPU_CHECKS) * n} skipped" in proc.stdout


def test_preflight_suite_fails_only_the_dead_hosts_ssh(lab, lab_env_path, tmp_path):
    victim = "host3"
    lab.stop_sshd(victim)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "suites/cam/test_preflight.py", "-q", "-rfs", "-p", "no:cacheprovider",
             "--env", str(lab_env_path), "--report-dir", str(tmp_path / "reports")],
            capture_output=True, text=True, timeout=300, cwd=REPO)
    finally:
        lab.start_sshd(victim)
    assert proc.returncode == 1
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith(f"FAILED suites/cam/test_preflight.py::test_check[{victim}-ssh]")
    assert f"{victim} python: not run: host unreachable (see ssh)" in proc.stdout


def test_collect_writes_every_hosts_sections(lab_env_path, lab_env, tmp_path):
    proc = camit("collect", "--env", str(lab_env_path), "--report-dir", str(tmp_path), "--logs", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    run = Path(data["report"])
    assert json.loads((run / "preflight.json").read_text())["exit_code"] == 0
    for host in lab_env.hosts:
        folder = run / "collect" / host
        assert (folder / "python.txt").read_text().startswith("interpreter ")
        assert "Filesystem" in (folder / "disk.txt").read_text()
        assert (folder / "core.txt").read_text().startswith("pattern=")
        entry = next(e for e in data["hosts"] if e["host"] == host)
        assert entry["logs"] in ("no ~/ascend/log",) or entry["logs"].endswith("KiB")


def test_an_unbound_rendezvous_address_fails_addr_and_rdzv(lab_env_path, env_variant):
    """launch.rendezvous_nic test_nic1 with node 0's test_nic1.ip bound nowhere: node 0 cannot listen there, so no
    host reaches its rendezvous; host2's own address is bound and its addr passes."""
    def unbound(doc):
        doc.setdefault("launch", {})["rendezvous_nic"] = "test_nic1"
        doc["host_info"]["host1"]["test_nic1"] = {"name": "eth0", "ip": "10.77.0.250"}

    rc, data = check_json(env_variant(unbound), "--hosts", "host1,host2")
    assert rc == 1, data
    cells = by_cell(data)
    addr = cells[("host1", "addr")]
    assert addr["status"] == "fail" and "test_nic1.ip 10.77.0.250 (the rendezvous and HCCL_IF_IP) is not bound" in \
        addr["summary"], addr
    assert cells[("host2", "addr")]["status"] == "ok", cells[("host2", "addr")]
    for host in ("host1", "host2"):
        rdzv = cells[(host, "rdzv")]
        assert rdzv["status"] == "fail" and "node 0 (host1) cannot listen on 10.77.0.250" in rdzv["summary"], rdzv
