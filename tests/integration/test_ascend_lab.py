"""camit on the emulated Ascend lab (``python -m framework.lab up --npu a3``): the NPU path end to end.

Preflight shows every NPU column; each fault knob is reported by preflight on its host only; the CAM suite runs
on the hccl path with ranks per node = the visible devices; a collective one rank never joins ends in HCCL's
exec-timeout plog line, whose signature the run's report shows; a rank killed on its device leaves the device
held, and preflight names the pid. The emulated lab is named by CAMIT_NPU_LAB_ENV (``make test`` brings it up
beside the CPU lab); without it every test here is skipped with the reason. Knob tests take
``/tmp/camit-npulab.lock``, as every user of that lab does.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.config.effective import EnvConfig
from framework.preflight.checks import CHECKS
from tests.support import one_rank_failure
from tests.support.ascend_lab import (
    CLEANROOM,
    REPO,
    check,
    lab_name,
    npu_lab_lock,
    run,
    run_script_failing,
    suite_env,
    variant,
)

pytestmark = pytest.mark.lab
@pytest.fixture(scope="module")
def npu(npu_lab_env_path: Path, npu_lab_env: EnvConfig) -> tuple[Path, EnvConfig, str]:
    return npu_lab_env_path, npu_lab_env, lab_name(npu_lab_env)


@pytest.fixture
def fault(npu) -> Iterator[Any]:
    """``fault(host, knob, *args)`` through the lab CLI; every host's knobs are cleared afterwards."""
    _, env, name = npu
    touched: set[str] = set()

    def set_knob(host: str, knob: str, *args: str) -> None:
        touched.add(host)
        proc = run("-m", "framework.lab", "fault", host, knob, *args, "--name", name)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    with npu_lab_lock():
        try:
            yield set_knob
        finally:
            for host in sorted(touched):
                proc = run("-m", "framework.lab", "fault", host, "clear", "--name", name)
                assert proc.returncode == 0, proc.stdout + proc.stderr


def test_preflight_shows_every_npu_column_on_emulated_a3_hosts(npu):
    path, env, _ = npu
    with npu_lab_lock():
        rc, cells = check(path)
    assert rc == 0, {k: v for k, v in cells.items() if v["status"] != "ok"}
    for host in env.hosts:
        for name in CHECKS:
            cell = cells[(host, name)]
            assert cell["status"] == ("ok" if name != "core" else cell["status"]), cell
            assert cell["status"] != "skip", cell
        assert cells[(host, "npu")]["value"].startswith("A3 16x"), cells[(host, "npu")]
        assert cells[(host, "torch_npu")]["value"].startswith("2.13.0"), cells[(host, "torch_npu")]
        assert "cann layout" in cells[(host, "cann")]["summary"], cells[(host, "cann")]
        assert cells[(host, "idle")]["value"] == "idle"


#: knob → (check, status, text of its summary on the faulty host)
KNOBS = {
    "tls-mismatch": ("tls", "fail", "TLS differs between devices"),
    "health-alarm": ("npu", "fail", "not healthy: NPU 0 chip 0: Alarm"),
    "link-down": ("hccn", "warn", "link DOWN"),  # A3: -link may read DOWN while HCCS works (ascend-hosts.md §5)
    "hccn-busy": ("tls", "fail", "hccn_tool stayed busy"),
    "held-device": ("idle", "fail", "busy: NPU 0 chip 0 pid "),
    "other-spod": ("spod", "fail", "differs from 0 on host1"),
    "no-driver": ("driver", "fail", "driver not installed"),
}


@pytest.mark.parametrize("knob", list(KNOBS))
def test_each_fault_knob_is_reported_by_preflight_on_its_host_only(npu, fault, knob):
    path, env, _ = npu
    good, bad = list(env.hosts)[:2]
    name, status, text = KNOBS[knob]
    fault(bad, knob)
    rc, cells = check(path)
    assert rc == (0 if status == "warn" else 1), cells
    cell = cells[(bad, name)]
    assert cell["status"] == status and text in cell["summary"], cell
    assert cells[(good, name)]["status"] == "ok", cells[(good, name)]


def test_cleared_knobs_leave_a_clean_host(npu, fault):
    """Clearing restores what the knob changed: the held device is free and the driver is back."""
    path, env, _ = npu
    host = list(env.hosts)[1]
    fault(host, "held-device")
    fault(host, "no-driver")
    proc = run("-m", "framework.lab", "fault", host, "clear", "--name", npu[2])
    assert proc.returncode == 0, proc.stderr
    rc, cells = check(path)
    assert rc == 0, {k: v for k, v in cells.items() if v["status"] not in ("ok",)}


#: own_workdir: the two library tests deploy at a workdir of their own each run. With venv false the wheel goes
#: into the host's python, shared by every workdir; deploy judges what it holds by the installed RECORD's hash
#: (tests/unit/framework/test_deploy_first.py), and own workdirs keep the two libraries' deploy states apart besides.
#: the modules the library tests also run at world 8 (four hosts, two visible dies each), in one launch
#: (``--launch-per world``, no redeploy): the prefill dispatch/combine cases (routing across four nodes; uneven
#: tokens, zero rows, two communicators, more tokens than vector cores) and the fuzz module, whose fused "valid"
#: cases are where the clean-room library first disagreed at world 8. The fused module stays at world 4: its
#: shapes shrink with the world (cases.experts), it costs twice the two others together on two cores, and the
#: fuzz module's fused cases already run it at 8.
WORLD_8 = ("suites/cam/test_prefill.py", "suites/cam/test_fuzz.py")


def passes_at_world_8(env: Path, reports: Path) -> None:
    """WORLD_8's modules at world 8 on the env deployed already: every rank-side case passes on all 8 ranks,
    two on each of the four hosts. The caller holds the lab's lock (the deployed workdir is the env's)."""
    proc = run("-m", "pytest", *WORLD_8, "--env", str(env), "--world-sizes", "8", "--launch-per", "world",
               "--no-deploy", "--report-dir", str(reports), "-p", "no:cacheprovider", "-q", "-rs", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    tail = proc.stdout.strip().splitlines()[-1]
    assert re.search(rf"\b{len(WORLD_8)} passed", tail) and not re.search(r"\b\d+ (failed|error)", tail), tail
    folder = (reports / "latest").resolve()
    launches = [json.loads(p.read_text()) for p in folder.glob("launch-*.json")]
    assert len(launches) == 1 and launches[0]["world_size"] == 8, [x["launch_id"] for x in launches]
    hosts = [launches[0]["ranks"][str(r)]["host"] for r in range(8)]
    assert hosts == [f"host{1 + r // 2}" for r in range(8)], hosts   # two visible dies a host
    xmls = sorted(folder.glob("host*/*/rank*.xml"))
    assert len(xmls) == 8, xmls
    for xml in xmls:
        cases = list(ET.parse(xml).getroot().iter("testcase"))
        bad = [c.get("name") for c in cases if any(e.tag in ("failure", "error", "skipped") for e in c)]
        assert len(cases) > 10 and not bad, (xml, bad)


def test_cam_suite_passes_on_the_hccl_path_with_ranks_per_node_the_visible_devices(npu, tmp_path):
    """npu.count 16 with npu.visible [0, 1]: world 4 needs two hosts, two ranks (devices) each; then WORLD_8's
    modules at world 8 across all four hosts (``make test``'s A3 lab has four)."""
    def visible(doc: dict[str, Any]) -> None:
        doc["defaults"]["npu"]["visible"] = [0, 1]
        doc["defaults"]["workdir"] = f"/var/tmp/camit/hccl-suite-{secrets.token_hex(4)}"   # see own_workdir

    env = suite_env(npu, tmp_path, visible)
    with npu_lab_lock():
        proc = run("-m", "pytest", "suites/cam", "--env", str(env), "--world-sizes", "4", "--report-dir",
                   str(tmp_path / "r"), "-p", "no:cacheprovider", "-q", "-rs", timeout=1800)
        if proc.returncode == 0:
            passes_at_world_8(env, tmp_path / "r8")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    tail = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"\b\d+ passed", tail) and not re.search(r"\b\d+ (failed|error)", tail), tail
    folder = (tmp_path / "r" / "latest").resolve()
    launches = [json.loads(p.read_text()) for p in folder.glob("launch-*.json")]
    # five CAM tests at world 4, plus the two out-of-range-id observations, each alone in a launch (a device
    # fault, should one come on a real cluster, poisons its process)
    assert len(launches) == 7, [p.name for p in folder.glob("launch-*.json")]
    bad_ids = [p for p in folder.glob("launch-*test_bad_ids_rank*.json")]
    assert len(bad_ids) == 2 and all(json.loads(p.read_text())["ok"] for p in bad_ids), bad_ids
    for launch in launches:  # two visible devices per host: world 4 takes both hosts, two ranks each
        assert launch["world_size"] == 4 and sorted(launch["nodes"]) == ["host1", "host2"], launch
        # HCCL_BUFFSIZE=4096 only where the prefill dispatch/combine run (every CAM module but the fused one and
        # the bad-id cases, which call the rank-local get_dispatch_layout alone); timeouts ordered
        prefill = not any(m in launch["launch_id"] for m in ("test_fused_rank", "test_bad_ids_rank"))
        for node in launch["nodes"].values():
            comm = node["comm_env"]
            assert comm.get("HCCL_BUFFSIZE") == ("4096" if prefill else None), (launch["launch_id"], comm)
            assert int(comm["HCCL_CONNECT_TIMEOUT"]) < int(comm["HCCL_EXEC_TIMEOUT"]) < int(comm["CAMIT_PG_TIMEOUT"])
    # the process-group timeout is above the exec timeout: torch_npu's watchdog warning is gone from every rank
    for log in folder.glob("host*/**/rank*.log"):
        assert "The plog may not be recorded" not in log.read_text(errors="replace"), log
    # the hccl path ran: the graph-mode case (torchair, NPU only; skipped on gloo) passed on every rank
    for xml in folder.glob("host*/*test_fused_rank*/rank*.xml"):
        cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
        graph = [c for n, c in cases.items() if n and n.startswith("test_fused_deep_moe_graph_mode")]
        assert graph and all(not list(c) for c in graph), (xml, {n: [e.tag for e in c] for n, c in cases.items()})


def test_the_cam_suite_and_the_upstream_runner_pass_against_the_clean_room_library(npu, tmp_path):
    """The same suite, deployed with the clean-room library's wheel instead of the stand-in's, at world 4 across
    two hosts (two visible dies each): every CAM test passes; the upstream runner (the miniature checkout) too;
    then WORLD_8's modules at world 8 across four hosts. Where the two libraries disagreed, upstream decided and
    the contract records it (camcontract.py)."""
    def visible(doc: dict[str, Any]) -> None:
        doc["defaults"]["npu"]["visible"] = [0, 1]
        doc["defaults"]["workdir"] = f"/var/tmp/camit/cleanroom-suite-{secrets.token_hex(4)}"   # see own_workdir

    env = suite_env(npu, tmp_path, visible, wheel_source=CLEANROOM)
    fake = REPO / "tests" / "data" / "fake_umdk"
    with npu_lab_lock():
        proc = run("-m", "pytest", "suites/cam", "--env", str(env), "--world-sizes", "4", "--umdk-src", str(fake),
                   "--report-dir", str(tmp_path / "r"), "-p", "no:cacheprovider", "-q", "-rs", timeout=1800)
        if proc.returncode == 0:
            passes_at_world_8(env, tmp_path / "r8")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    tail = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"\b\d+ passed", tail) and not re.search(r"\b\d+ (failed|error)", tail), tail
    folder = (tmp_path / "r" / "latest").resolve()
    deploy = json.loads((folder / "deploy-manifest.json").read_text())
    wheels = {a["name"] for m in deploy["hosts"].values() for a in m["artifacts"] if a["name"].endswith(".whl")}
    assert wheels == {"umdk_cam_op_lib-0.1.0-py3-none-any.whl"}, wheels   # the clean-room build, not 209.0.0b1
    cases = {c.get("name"): c for c in ET.parse(folder / "junit.xml").getroot().iter("testcase")}
    upstream = [c for n, c in cases.items() if n and n.startswith("test_upstream_ut")]
    bad = ("failure", "error", "skipped")
    assert any(not any(e.tag in bad for e in c) for c in upstream), {n: [e.tag for e in c] for n, c in cases.items()}


def test_a_test_failing_on_one_rank_ends_the_launch_in_seconds_on_hccl(npu, tmp_path):
    """Rank 1's dispatch is refused while ranks 0, 2, 3 wait in the op's collective on the hccl group, whose
    exec timeout (1836 s by default) would otherwise end it: the harness's agreement ends it within its bound."""
    env = suite_env(npu, tmp_path, lambda doc: doc["defaults"].update(workdir="/var/tmp/camit/one-rank"))
    ctl = one_rank_failure.write(tmp_path / "ctl")
    with npu_lab_lock():
        proc = one_rank_failure.run(ctl, env, tmp_path / "r")
    one_rank_failure.check(proc, tmp_path / "r")


HANG = textwrap.dedent("""\
    import os, time
    import torch, torch_npu  # noqa: F401
    import torch.distributed as dist

    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
    t = torch.ones(8).npu()
    dist.all_reduce(t)                 # everyone is there
    if dist.get_rank() == 3:
        time.sleep(120)                # rank 3 never joins the second one
    dist.all_reduce(t)
    torch.npu.synchronize()
""")


def test_an_hccl_hang_ends_in_the_exec_timeout_plog_signature_the_report_shows(npu, tmp_path):
    path, _, _ = npu
    env = variant(path, tmp_path / "hang.yaml", lambda doc: doc.setdefault("launch", {}).setdefault(
        "env", {}).update({"HCCL_EXEC_TIMEOUT": "8"}))
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    with npu_lab_lock():
        proc, folder = run_script_failing(env, "host1", script, tmp_path, nproc=4, job_timeout=150, timeout=400)
    sigs = (folder / "signatures.txt").read_text()
    # HCCL's own diagnosis, before camit's job timeout: the exec timeout's notify-wait line names rank 3
    assert "EI0002" in sigs, sigs[-3000:]
    assert "[remote rank 3]" in sigs, sigs[-3000:]
    assert "EI0002" in proc.stdout, proc.stdout[-3000:]
    # the plogs came back with the run folder (ASCEND_PROCESS_LOG_PATH pointed there), not from the host's
    # $HOME/ascend/log: <host>/ascend/debug/plog/ is the run folder's own root
    plogs = list(folder.glob("host1/ascend/debug/plog/plog-*.log"))
    assert plogs and any("EI0002" in p.read_text(errors="replace") for p in plogs), \
        sorted(str(p) for p in folder.rglob("*"))[:60]
    assert "host1/ascend/debug/plog/plog-" in sigs, sigs[-3000:]
    result = json.loads((folder / next(p.name for p in folder.glob("launch-*.json"))).read_text())
    assert not result["timed_out"], result  # the ranks ended (SIGABRT from the watchdog), not camit's timeout


KILLED = textwrap.dedent("""\
    import os, signal, time
    import torch, torch_npu  # noqa: F401

    local = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local)
    torch.ones(4).npu()
    if local == 1:
        print("HOLDER", os.getpid(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # dies on its device, as a rank killed mid-kernel
    time.sleep(2)
""")


def test_a_rank_killed_on_its_device_leaves_it_held_and_preflight_names_the_pid(npu, fault, tmp_path):
    path, env, _ = npu
    host = list(env.hosts)[0]
    fault(host, "linger", "--linger", "300")
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    proc, folder = run_script_failing(path, host, script, tmp_path, nproc=2, job_timeout=120, timeout=300)
    logs = "\n".join(p.read_text(errors="replace") for p in folder.rglob("rank*.log"))
    pid = next(line.split()[1] for line in logs.splitlines() if line.startswith("HOLDER "))
    rc, cells = check(path)
    idle = cells[(host, "idle")]
    assert rc == 1 and idle["status"] == "fail" and f"pid {pid}" in idle["summary"], idle
    assert "NPU 0 chip 1" in idle["summary"], idle  # logical device 1 = NPU 0's second die on A3


def test_the_upstream_runner_takes_the_hccl_path_at_4_and_16_ranks(npu, tmp_path):
    """The miniature checkout, like upstream, goes through torch_npu and hccl; 16 ranks fit one A3 node."""
    path, _, _ = npu
    fake = REPO / "tests" / "data" / "fake_umdk"
    with npu_lab_lock():
        proc = run("-m", "pytest", "suites/cam/test_upstream.py", "--env", str(path), "--umdk-src", str(fake),
                   "--no-deploy", "--report-dir", str(tmp_path / "r"), "-p", "no:cacheprovider", "-q", "-rs",
                   timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "2 passed" in proc.stdout, proc.stdout[-2000:]
    folder = (tmp_path / "r" / "latest").resolve()
    worlds = sorted(json.loads(p.read_text())["world_size"] for p in folder.glob("launch-*.json"))
    assert worlds == [4, 16], worlds
    logs = "\n".join(p.read_text(errors="replace") for p in folder.rglob("rank*.log"))
    assert logs.count("backend hccl group ") == 4, logs[-2000:]  # the fused file's 4 ranks, on hccl


def test_spread_places_world_4_on_both_nodes_and_ge_mode_compiles_one_graph(npu, tmp_path):
    """--spread 2: world 4, which one 16-device node holds, runs 2+2 on both (torchrun --nnodes 2
    --nproc-per-node 2), the test's report says so; the fused file's graph-mode case (aclgraph, the mode CAM
    supports) compiled the op as one graph."""
    env = suite_env(npu, tmp_path, lambda doc: doc["defaults"].update(workdir="/var/tmp/camit/spread"))
    with npu_lab_lock():
        proc = run("-m", "pytest", "suites/cam/test_fused.py", "--env", str(env), "--world-sizes", "4",
                   "--spread", "2", "--report-dir", str(tmp_path / "r"), "-p", "no:cacheprovider", "-q", "-rs",
                   timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    folder = (tmp_path / "r" / "latest").resolve()
    (launch,) = [json.loads(p.read_text()) for p in folder.glob("launch-*.json")]
    assert launch["world_size"] == 4 and sorted(launch["nodes"]) == ["host1", "host2"], launch
    ranks_on = {h: sorted(int(r) for r, v in launch["ranks"].items() if v["host"] == h) for h in launch["nodes"]}
    assert ranks_on == {"host1": [0, 1], "host2": [2, 3]}, ranks_on
    # the placement is in the test's system-out (testcase properties are invalid in junit-10), and the file validates
    from framework.report.junit import validate_junit

    outs = [c.findtext("system-out") or "" for c in ET.parse(folder / "junit.xml").getroot().iter("testcase")]
    assert any("property placement = 4 ranks on 2 node(s) x 2 (host1, host2)" in o for o in outs), outs
    assert validate_junit(folder / "junit.xml") == []
    for xml in folder.glob("host*/*test_fused_rank*/rank*.xml"):
        cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
        graph = [c for n, c in cases.items() if n and n.startswith("test_fused_deep_moe_graph_mode")]
        assert graph and all(not list(c) for c in graph), (xml, {n: [e.tag for e in c] for n, c in cases.items()})


def test_an_upstream_file_that_ran_nothing_fails_with_the_skip_reasons(npu, tmp_path):
    """Every case of the file skips at this rank count (upstream's SKIP_ENV_RANKSIZE_UNEQUAL): it fails."""
    import shutil

    path, _, _ = npu
    checkout = tmp_path / "umdk"
    shutil.copytree(REPO / "tests" / "data" / "fake_umdk", checkout)
    shutil.rmtree(checkout / "test" / "cam" / "ut" / "moe_dispatch_combine_prefill")
    (checkout / "test" / "cam" / "ut" / "fused_deep_moe" / "test_fused_deep_moe.py").write_text(textwrap.dedent("""\
        import os
        import pytest

        @pytest.mark.skipif(int(os.environ["WORLD_SIZE"]) != 8, reason="skip if ranksize is not equal to 8")
        @pytest.mark.parametrize("mode", ["GE", "Eager"])
        def test_base_test(mode):
            pass
    """))
    with npu_lab_lock():
        proc = run("-m", "pytest", "suites/cam/test_upstream.py", "--env", str(path), "--umdk-src", str(checkout),
                   "--no-deploy", "--report-dir", str(tmp_path / "r"), "-p", "no:cacheprovider", "-q", "-rs",
                   timeout=600)
    assert proc.returncode == 1, proc.stdout[-4000:]
    out = proc.stdout
    assert "ut/fused_deep_moe/test_fused_deep_moe.py (world 4) ran nothing: 8 skipped, 0 passed over 4 ranks" in out, \
        out[-4000:]
    assert "skip if ranksize is not equal to 8" in out, out[-4000:]


def test_cam_cases_skip_with_the_reason_on_an_emulated_a2_lab(npu_a2_lab_env_path, tmp_path):
    """CAMIT_NPU_A2_LAB_ENV (``python -m framework.lab up --npu a2``): every CAM case and the upstream
    runner are A3-only, skipped with the reason, none failed, nothing deployed or launched."""
    from framework.config.effective import load

    a2 = str(npu_a2_lab_env_path)

    assert {h.npu.soc for h in load(a2).hosts.values()} == {"ascend910b"}, a2
    fake = REPO / "tests" / "data" / "fake_umdk"
    files = [f"suites/cam/test_{n}.py" for n in ("abnormal", "fused", "fuzz", "perf", "prefill", "upstream")]
    proc = run("-m", "pytest", *files, "--env", a2, "--umdk-src", str(fake), "--report-dir",
               str(tmp_path / "r"), "-p", "no:cacheprovider", "-q", "-rs", timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert re.search(r"^SKIPPED \[\d+\] \S+: a3_test case; the env's hosts are \['ascend910b'\]$", proc.stdout,
                     re.M), proc.stdout[-3000:]
    tail = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"\b\d+ skipped", tail) and not re.search(r"passed|failed|error", tail), tail
    folder = (tmp_path / "r" / "latest").resolve()
    assert not list(folder.glob("launch-*.json")), "an A3-only case launched on A2 hosts"


STUCK = textwrap.dedent("""\
    import os, time
    import torch, torch_npu  # noqa: F401

    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    print("ENV", os.environ.get("TORCH_HCCL_DUMP_ON_TIMEOUT"), os.environ.get("ASCEND_PROCESS_LOG_PATH"), flush=True)

    def stuck_in_a_collective():
        time.sleep(600)

    stuck_in_a_collective()
""")


def test_a_job_timeout_leaves_each_ranks_stacks_in_its_log_and_the_failure_saves_the_npu_state(npu, tmp_path):
    path, _, _ = npu
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    with npu_lab_lock():
        proc, folder = run_script_failing(path, "host1", script, tmp_path, nproc=2, job_timeout=25, timeout=300)
    result = json.loads(next(folder.glob("launch-*.json")).read_text())
    assert result["timed_out"] and result["nodes"]["host1"]["stacks"] == 2, result
    for rank in (0, 1):
        log = (folder / "host1" / f"rank{rank}.log").read_text(errors="replace")
        # faulthandler's dump from SIGUSR1, before the kill: where each rank hangs
        assert "most recent call first" in log and "in stuck_in_a_collective" in log, log[-3000:]
        env_line = next(line for line in log.splitlines() if line.startswith("ENV "))
        dump, plog_root = env_line.split()[1:]
        assert dump == "1" and plog_root.endswith(f"/runs/{result['launch_id']}/ascend"), env_line
    # what a failed launch on an NPU host saves, per host, into the report folder
    state = folder / "host1" / "npu-state"
    assert "Process id" in (state / "npu-smi-info.txt").read_text(), sorted(state.iterdir())
    hccn = (state / "hccn.txt").read_text()
    assert "== hccn_tool -i 15 -net_health -g" in hccn and "link status: UP" in hccn, hccn[:2000]
    assert "export device logs of 16 devices" in (state / "msnpureport.txt").read_text()
    assert not (state / "notes.txt").exists()  # every tool is installed there (the emulated export is empty)


DIRTY_TESTS = textwrap.dedent("""\
    from pathlib import Path

    from framework.launch import Target

    KILLED = str(Path(__file__).with_name("killed.py"))


    def test_a_rank_dies_on_its_device(launcher):
        result = launcher.run(Target(script=KILLED), hosts=["host1"], nproc_per_node=2, timeout=120, name="killed")
        assert not result.ok and result.held, result.message()


    def test_the_next_launch_on_that_host(launcher):
        launcher.run(Target(script=KILLED), hosts=["host1"], nproc_per_node=2, timeout=120, name="next")
""")


def test_a_device_held_after_a_launch_marks_the_host_dirty_and_the_next_test_fails_fast_naming_it(
        npu, fault, tmp_path):
    path, env, _ = npu
    fault("host1", "linger", "--linger", "300")
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "killed.py").write_text(KILLED)
    (tests / "test_dirty.py").write_text(DIRTY_TESTS)
    proc = run("-m", "pytest", str(tests / "test_dirty.py"), "--env", str(path), "--report-dir", str(tmp_path / "r"),
               "--core-policy", "ignore", "--junitxml", str(tmp_path / "j.xml"), "-p", "no:cacheprovider", "-q",
               timeout=600)
    assert proc.returncode == 1, proc.stdout[-4000:]
    folder = (tmp_path / "r" / "latest").resolve()
    logs = "\n".join(p.read_text(errors="replace") for p in folder.rglob("rank*.log"))
    pid = next(line.split()[1] for line in logs.splitlines() if line.startswith("HOLDER "))
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")}
    first, second = cases["test_a_rank_dies_on_its_device"], cases["test_the_next_launch_on_that_host"]
    assert not list(first), ET.tostring(first)[:2000]
    failure = second.find("failure")
    assert failure is not None, ET.tostring(second)[:2000]
    text = failure.get("message", "") + (failure.text or "")
    # fails at once, before any process starts, naming the device and the pid (not an HCCL init failure)
    assert "host1: dirty since launch" in text and f"NPU 0 chip 1 held by pid {pid}" in text, text[:3000]
    assert "npu-smi set -t reset -i 0 -c 1" in text
    assert float(second.get("time", "99")) < 5, second.get("time")
    assert len(list(folder.glob("launch-*.json"))) == 1  # the second test launched nothing
    dirty = json.loads((folder / "dirty-hosts.json").read_text())
    assert (0, 1, pid, "npu-smi set -t reset -i 0 -c 1") in [
        (d["npu"], d["chip"], str(d["pid"]), d["reset"]) for d in dirty["host1"]], dirty
    # the terminal summary tells the operator; camit never resets a device itself
    assert f"DIRTY  host1: NPU 0 chip 1 held by pid {pid} — reset (operator): npu-smi set -t reset -i 0 -c 1" \
        in proc.stdout, proc.stdout[-3000:]


#: a rank that creates its group as the CAM suite's rank harness does (suites/cam/rank/conftest.py: the
#: process-group timeout camit derived, else the case timeout as before) and prints what it was given
COMM = textwrap.dedent("""\
    import datetime, os, warnings
    import torch, torch_npu  # noqa: F401
    import torch.distributed as dist

    warnings.simplefilter("always")
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    pg = float(os.environ.get("CAMIT_PG_TIMEOUT") or os.environ.get("CAMIT_CASE_TIMEOUT", "600"))
    dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=pg))
    t = torch.ones(4).npu()
    dist.all_reduce(t)
    try:  # hccl is registered for npu only (torch_npu/_init/registry/distributed.py): a CPU tensor is refused
        dist.all_reduce(torch.ones(1))
        cpu = "accepted"
    except RuntimeError as exc:
        cpu = str(exc).splitlines()[0]
    print("CPU", dist.get_rank(), cpu, flush=True)
    keys = ("MASTER_ADDR", "HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HCCL_CONNECT_TIMEOUT",
            "HCCL_EXEC_TIMEOUT", "CAMIT_PG_TIMEOUT", "HCCL_BUFFSIZE")
    print("ENV", dist.get_rank(), int(t[0].item()), *(f"{k}={os.environ.get(k, '-')}" for k in keys), flush=True)
    dist.barrier()  # nobody leaves while a peer still talks (a gloo pair torn down mid-exchange aborts)
    dist.destroy_process_group()
""")


def _comm_run(env_path: Path, tmp_path: Path) -> dict[int, dict[str, str]]:
    """``camit run`` of COMM on host1 and host2, two ranks each: rank → the variables it printed (and its logs'
    text). The lab may have more hosts (``make test``'s has four): world 4 stays on the first two."""
    script = tmp_path / "comm.py"
    script.write_text(COMM)
    proc = run("-m", "framework.cli", "run", "--env", str(env_path), "--hosts", "host1,host2", "--nproc-per-node",
               "2", "--report-dir", str(tmp_path / "r"), "--core-policy", "ignore", "--", str(script), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out: dict[int, dict[str, str]] = {}
    for log in (tmp_path / "r" / "latest").resolve().glob("host*/rank*.log"):
        text = log.read_text(errors="replace")
        line = next(ln for ln in text.splitlines() if ln.startswith("ENV "))
        _, rank, total, *pairs = line.split()
        assert total == "4", line
        cpu = next(ln for ln in text.splitlines() if ln.startswith(f"CPU {rank} "))
        out[int(rank)] = {**dict(p.split("=", 1) for p in pairs), "log": text, "cpu": cpu.split(" ", 2)[2]}
    assert sorted(out) == [0, 1, 2, 3], out
    return out


def test_a_default_hccl_launch_orders_the_timeouts_without_the_watchdog_warning_or_a_big_buffer(npu, tmp_path):
    """Before: the case timeout (600 s) as watchdog timeout, at or below HCCL's default exec timeout (1836 s):
    torch_npu warned on every rank that the plog may not be recorded; and every launch reserved 4096 MB buffers.
    On every rank a CPU tensor in an hccl collective fails as on a real NPU host (hccl is npu-only)."""
    path, env, _ = npu
    with npu_lab_lock():
        ranks = _comm_run(path, tmp_path)
    for rank, got in ranks.items():
        assert "The plog may not be recorded" not in got["log"], got["log"][-2000:]
        assert int(got["HCCL_CONNECT_TIMEOUT"]) < int(got["HCCL_EXEC_TIMEOUT"]) < int(got["CAMIT_PG_TIMEOUT"]) < 600
        assert got["HCCL_BUFFSIZE"] == "-", got  # only the CAM prefill launches ask for 4096
        assert got["cpu"] == "No backend type associated with device type cpu", got  # as on a real NPU host
        host = "host1" if rank < 2 else "host2"
        assert got["HCCL_IF_IP"] == env.hosts[host].manage_nic.ip, got
        assert got["MASTER_ADDR"] == env.hosts["host1"].manage_nic.ip, got
        assert got["HCCL_SOCKET_IFNAME"] == "=eth0" and got["GLOO_SOCKET_IFNAME"] == "eth0", got


@contextlib.contextmanager
def _addresses(env_path: Path, adds: dict[str, tuple[str, str]]) -> Iterator[None]:
    """host → (address/prefix, device) added for the block, removed after (camit exec on the lab's hosts)."""
    def each(verb: str) -> None:
        for host, (addr, dev) in adds.items():
            proc = run("-m", "framework.cli", "exec", "--env", str(env_path), "--hosts", host, "--", "ip", "addr",
                       verb, addr, "dev", dev)
            assert proc.returncode == 0 or verb == "del", proc.stdout + proc.stderr

    each("add")
    try:
        yield
    finally:
        each("del")


def _test_nic1(ips: dict[str, str]):
    def change(doc: dict[str, Any]) -> None:
        doc.setdefault("launch", {})["rendezvous_nic"] = "test_nic1"
        for host, ip in ips.items():
            doc["host_info"][host]["test_nic1"] = {"name": "eth0", "ip": ip}
    return change


def test_the_rendezvous_nic_is_honoured(npu, tmp_path):
    """launch.rendezvous_nic test_nic1: the master address and HCCL_IF_IP are each host's test_nic1.ip (a second
    address of eth0 here), the socket interfaces the device that holds it."""
    path, env, _ = npu
    ips = {"host1": "10.81.0.211", "host2": "10.81.0.212"}
    variant_path = variant(path, tmp_path / "nic.yaml", _test_nic1(ips))
    with npu_lab_lock(), _addresses(path, {h: (f"{ip}/24", "eth0") for h, ip in ips.items()}):
        rc, cells = check(variant_path)
        ranks = _comm_run(variant_path, tmp_path)
    assert cells[("host1", "rdzv")]["status"] == "ok" and "10.81.0.211" in cells[("host1", "rdzv")]["summary"], cells
    assert cells[("host2", "addr")]["summary"] == "test_nic1.ip 10.81.0.212 is on eth0", cells[("host2", "addr")]
    for rank, got in ranks.items():
        assert got["MASTER_ADDR"] == "10.81.0.211", got
        assert got["HCCL_IF_IP"] == ips["host1" if rank < 2 else "host2"], got
        assert got["HCCL_SOCKET_IFNAME"] == "=eth0", got


def test_preflight_reports_an_unbound_address_an_unreachable_rendezvous_and_unreserved_hccl_ports(npu, tmp_path):
    """Real failures: host2's test_nic1.ip is bound nowhere; node 0's rendezvous address sits on host1's loopback,
    which host2 has no route to (host1 reaches it, host2 cannot); host2's HCCL ports are not reserved."""
    path, env, _ = npu
    variant_path = variant(path, tmp_path / "bad.yaml", _test_nic1({"host1": "10.81.9.1", "host2": "10.81.0.250"}))
    sysctl = "/proc/sys/net/ipv4/ip_local_reserved_ports"
    with npu_lab_lock(), _addresses(path, {"host1": ("10.81.9.1/32", "lo")}):
        proc = run("-m", "framework.cli", "exec", "--env", str(path), "--hosts", "host2", "--",
                   f"echo 61000 > {sysctl} && cat {sysctl}")
        assert proc.returncode == 0 and "61000" in proc.stdout, proc.stdout + proc.stderr
        try:
            rc, cells = check(variant_path)
        finally:
            proc = run("-m", "framework.cli", "exec", "--env", str(path), "--hosts", "host2", "--",
                       f"echo 60000-60031 > {sysctl} && cat {sysctl}")
    # restored as the lab set it up, and read back: `camit exec` joins its argv into one shell line as ssh does,
    # so a `sh -c 'echo … > f'` split into words had written an empty line and left later preflights warning
    assert proc.returncode == 0 and "60000-60031" in proc.stdout, proc.stdout + proc.stderr
    assert rc == 1, cells
    assert cells[("host1", "addr")]["status"] == "ok" and cells[("host1", "rdzv")]["status"] == "ok", cells
    addr = cells[("host2", "addr")]
    assert addr["status"] == "fail" and "test_nic1.ip 10.81.0.250 (the rendezvous and HCCL_IF_IP) is not bound" in \
        addr["summary"], addr
    rdzv = cells[("host2", "rdzv")]
    assert rdzv["status"] == "fail" and rdzv["summary"].startswith("cannot reach node 0's rendezvous 10.81.9.1:"), rdzv
    ports = cells[("host2", "ports")]
    assert ports["status"] == "warn" and "60000-60031 missing" in ports["summary"], ports
    assert cells[("host1", "ports")]["status"] == "ok", cells[("host1", "ports")]
