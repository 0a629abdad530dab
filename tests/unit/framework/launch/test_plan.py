"""The pure half of launch: backend variables, the exact node command line, targets."""

from __future__ import annotations

import base64
import shlex
from typing import Any

import pytest

from framework.ascend.nic import HostNet
from framework.ascend.timeouts import derive
from framework.config.effective import HostSpec, NicSpec, NpuSpec, Secret, TestNicSpec
from framework.errors import UsageError
from framework.launch import NodePlan, Target, backend_env, launch_label, node_command
from framework.launch.plan import Deployed, check_ranks_fit, deployed, secret_env
from framework.ranksuite.suite import slots_per_node
from framework.remote import protocol
from framework.remote.layout import DeployState
from tests.support.builders import make_env

A3 = HostSpec(name="node1", manage_nic=NicSpec("enp1s0", "192.0.2.11"),
              test_nic1=TestNicSpec(name="eth1", ip="198.51.100.11"),
              npu=NpuSpec(count=16, soc="ascend910_93", visible=(0, 1, 2, 3)))
LAB = HostSpec(name="host1", manage_nic=NicSpec("eth0", "10.77.0.11"))


A3_NET = HostNet(frozenset({"lo", "enp1s0", "eth1"}), {"192.0.2.11": "enp1s0", "198.51.100.11": "eth1"})
LAB_NET = HostNet(frozenset({"lo", "eth0"}), {"10.77.0.11": "eth0"})
T300 = derive(300)


@pytest.mark.parametrize(("spec", "backend", "net", "expected"), [
    # the rendezvous uses manage_nic by default; HCCL_BUFFSIZE is left to the CAM prefill launches
    (A3, "hccl", A3_NET, {"HCCL_IF_IP": "192.0.2.11", "HCCL_SOCKET_IFNAME": "=enp1s0", "GLOO_SOCKET_IFNAME": "enp1s0",
                          "HCCL_CONNECT_TIMEOUT": "120", "HCCL_EXEC_TIMEOUT": "220",
                          "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}),
    (LAB, "hccl", LAB_NET, {"HCCL_IF_IP": "10.77.0.11", "HCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0",
                            "HCCL_CONNECT_TIMEOUT": "120", "HCCL_EXEC_TIMEOUT": "220"}),
    (A3, "gloo", A3_NET, {"GLOO_SOCKET_IFNAME": "enp1s0"}),
    (LAB, "gloo", LAB_NET, {"GLOO_SOCKET_IFNAME": "eth0"}),
    (A3, "nccl", A3_NET, {"NCCL_SOCKET_IFNAME": "enp1s0"}),
    # a host not probed: no device is named at all
    (LAB, "gloo", None, {}),
])
def test_backend_env(spec, backend, net, expected):
    assert backend_env(spec, backend, net=net, timeouts=T300) == expected


def test_backend_env_follows_the_rendezvous_nic_and_names_only_listed_devices():
    env = backend_env(A3, "hccl", nic="test_nic1", net=A3_NET, timeouts=T300)
    assert env["HCCL_IF_IP"] == "198.51.100.11" and env["HCCL_SOCKET_IFNAME"] == "=eth1"
    # test_nic1.name is a URMA device (bonding_dev_0), not a netdev: the device holding the address is used
    urma = HostSpec(name="n", manage_nic=NicSpec("enp1s0", "192.0.2.11"),
                    test_nic1=TestNicSpec(name="bonding_dev_0", dev="udma0", ip="198.51.100.11"))
    assert backend_env(urma, "gloo", nic="test_nic1", net=A3_NET) == {"GLOO_SOCKET_IFNAME": "eth1"}
    # the address on no device and the names no device of ip -o link: nothing is pinned
    ghost = HostNet(frozenset({"lo", "enp1s0"}), {"192.0.2.11": "enp1s0"})
    env = backend_env(urma, "hccl", nic="test_nic1", net=ghost)
    assert env == {"HCCL_IF_IP": "198.51.100.11"}
    # without derived timeouts (a bare call) no timeout variable appears
    assert "HCCL_EXEC_TIMEOUT" not in backend_env(LAB, "hccl", net=LAB_NET)


def test_ranks_per_node_are_the_visible_devices():
    """npu.visible, not npu.count, is what a node can take (ASCEND_RT_VISIBLE_DEVICES hides the rest)."""
    check_ranks_fit([A3, LAB], 4)  # 4 visible devices; CPU hosts declare none and take any number
    with pytest.raises(UsageError, match=r"host node1: 5 ranks per node, but it has 4 usable devices "
                                         r"\(npu.visible \[0, 1, 2, 3\]\)"):
        check_ranks_fit([A3], 5)
    full = HostSpec(name="node2", manage_nic=NicSpec("eth0", "192.0.2.12"), npu=NpuSpec(count=16, soc="ascend910_93"))
    check_ranks_fit([full], 16)
    with pytest.raises(UsageError, match=r"17 ranks per node, but it has 16 usable devices \(npu.count 16\)"):
        check_ranks_fit([full], 17)


def test_suite_slots_follow_npu_visible():
    env = make_env(npu={"soc": "ascend910_93", "count": 16, "visible": [0, 1]})
    assert slots_per_node(env) == 2
    assert slots_per_node(make_env(npu={"soc": "ascend910_93", "count": 16})) == 16
    assert slots_per_node(env, 3) == 3


def test_unknown_backend():
    with pytest.raises(UsageError, match="unknown backend 'mpi'"):
        backend_env(LAB, "mpi")


def plan(**kw):
    base: dict[str, Any] = dict(host="node1", node_rank=1, nnodes=2, nproc_per_node=8, master_addr="198.51.100.10",
                master_port=29512, python="/w/venv/bin/python", run_dir="/w/runs/r1", supervisor="/w/bin/sup.py",
                rankwrap="/w/bin/wrap.py", launch_id="r1", env={"GLOO_SOCKET_IFNAME": "eth1"})
    base.update(kw)
    return NodePlan(**base)


def test_node_command_exact_line():
    line = node_command(plan(cann_set_env="/usr/local/Ascend/cann/set_env.sh",
                             vendor_set_env="/w/opp/vendors/CAM/bin/set_env.bash", deadline=660.0),
                        Target(module="pytest", args=("t.py", "--junitxml=rank{rank}.xml")))
    argv = shlex.split(line.text)
    assert argv[:2] == ["bash", "-c"]
    assert argv[2] == (
        "{ _um=$(umask); umask 077; mkdir -p /w/runs/r1/tmp; umask \"$_um\"; } && cd /w/runs/r1 && "
        "{ ulimit -S -c unlimited 2>/dev/null || ulimit -S -c \"$(ulimit -H -c)\"; } && "
        ". /usr/local/Ascend/cann/set_env.sh && . /w/opp/vendors/CAM/bin/set_env.bash && "
        # old-template packages leave op_api/lib off LD_LIBRARY_PATH: the line adds it once
        'case ":${LD_LIBRARY_PATH:-}:" in *:/w/opp/vendors/CAM/op_api/lib:*|*:/w/opp/vendors/CAM/op_api/lib/:*) ;; '
        '*) export LD_LIBRARY_PATH=/w/opp/vendors/CAM/op_api/lib"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac && '
        "export TMPDIR=/w/runs/r1/tmp GLOO_SOCKET_IFNAME=eth1 && "
        "exec /w/venv/bin/python /w/bin/sup.py --run-id r1.node1 --status-dir /w/runs/r1 --deadline 660 "
        "--grace 2 --heartbeat 2 --silence 25 --stack-wait 3 -- "
        "/w/venv/bin/python -m torch.distributed.run --nnodes 2 --nproc-per-node 8 --node-rank 1 "
        "--master-addr 198.51.100.10 --master-port 29512 --no-python /w/venv/bin/python /w/bin/wrap.py "
        "--status-dir /w/runs/r1 -- -m pytest t.py '--junitxml=rank{rank}.xml'"
    )


def test_node_command_without_cann_vendor_or_core_limit():
    text = shlex.split(node_command(plan(core_limit=None), Target(script="/w/t/a b.py", args=("$(x)",))).text)[2]
    assert "set_env" not in text and "ulimit" not in text
    assert text.endswith("-- '/w/t/a b.py' '$(x)'")


def test_secrets_stay_out_of_the_command_line_and_go_to_the_supervisors_stdin():
    p = plan(env={"HCCL_TOKEN": Secret("s3cret"), "X": "it's"})
    line = node_command(p, Target(module="m"))
    # the line is any local user's to read in /proc/<pid>/cmdline: the secret is not in it, not even its name
    assert "s3cret" not in line.text and "HCCL_TOKEN" not in line.text
    assert "s3cret" not in line.display and "HCCL_TOKEN" not in line.display
    text = shlex.split(line.text)[2]
    assert "X='it'\"'\"'s'" in text  # the public variables are still exported
    assert " --env-stdin -- " in text.split("exec ", 1)[1]
    assert secret_env(p.env) == {"HCCL_TOKEN": "s3cret"}
    assert base64.b64decode(protocol.env_line(secret_env(p.env)).split()[1]) == b'{"HCCL_TOKEN": "s3cret"}'


def test_no_secret_no_env_stdin():
    assert "--env-stdin" not in node_command(plan(env={"X": "1"}), Target(module="m")).text


def test_hostile_env_values_arrive_literally_in_bash(tmp_path):
    import subprocess

    value = "a b 'q' \"d\" $(id) `id` ; ünï\nline2"
    p = plan(run_dir=str(tmp_path / "run dir"), env={"V": value}, core_limit=None, python="/bin/echo",
             supervisor="x")
    text = shlex.split(node_command(p, Target(module="m")).text)[2]
    # stop before the exec of the supervisor: check the exported value in the same shell
    probe = text.split(" && exec ")[0] + ' && printf %s "$V"'
    assert subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout == value
    assert (tmp_path / "run dir" / "tmp").is_dir()


@pytest.mark.parametrize(("argv", "target"), [
    (["--", "-m", "pytest", "-x"], Target(module="pytest", args=("-x",))),
    (["train.py", "--lr", "1"], Target(script="train.py", args=("--lr", "1"))),
])
def test_target_parse(argv, target):
    assert Target.parse(argv) == target


@pytest.mark.parametrize("argv", [[], ["--"], ["-m"]])
def test_target_parse_errors(argv):
    with pytest.raises(UsageError):
        Target.parse(argv)


@pytest.mark.parametrize(("name", "label"), [
    (None, "launch"),
    ("", "launch"),
    ("test_prefill_rank", "test_prefill_rank"),
    ("ut/odd/test_odd names; ü $(x)", "ut_odd_test_odd_names_x"),
    ("'\"`;$()", "launch"),
    ("a" * 50, "a" * 32),
    ("v1.2-rc", "v1.2-rc"),
])
def test_launch_label_is_safe_as_a_path_and_a_tag(name, label):
    assert launch_label(name) == label


def test_the_deployed_interpreter_install_path_and_vendor_win_over_the_envs() -> None:
    spec = make_env({"h": dict(workdir="/w", python="python3", install_path="/w/opp")}).hosts["h"]
    assert deployed(spec, "/w", DeployState()) == Deployed("python3", "/w/opp")
    state = DeployState(install_path="/srv/opp", interpreter="/w/venv/bin/python", vendor="CAM")
    assert deployed(spec, "/w", state) == Deployed("/w/venv/bin/python", "/srv/opp", "CAM",
                                                   "/srv/opp/vendors/CAM/bin/set_env.bash")
