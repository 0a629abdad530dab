"""Unit tests of the lab's pure planning (framework.lab.plan): no root, no namespaces."""

from __future__ import annotations

import ipaddress
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from framework.errors import EXIT_USAGE, LabError
from framework.lab.plan import (
    ENV_HEADER,
    HostPlan,
    LabPlan,
    build_commands,
    default_state_dir,
    env_document,
    in_host_argv,
    iptables_forward_rule,
    known_hosts_text,
    lab_ns_re,
    lab_veth_re,
    max_name_len,
    nsenter_argv,
    overlapping_routes,
    parse_subnet,
    plan_lab,
    public_key_of,
    render_env_yaml,
    setup_script,
    small_workdir_size,
    sshd_argv,
    sshd_config_lines,
    sshd_config_text,
    teardown_commands,
    validate_name,
    validate_state_dir,
)

STATE = Path("/run/camit-lab/camit")
PY = "/usr/bin/python3"


def make(n: int = 4, **kw: Any) -> LabPlan:
    args: dict[str, Any] = {"state_dir": STATE, "env_file": Path("/repo/env/lab.yaml"), "python": PY}
    args.update(kw)
    return plan_lab(n, **args)


# --------------------------------------------------------------------------- names and addresses


def test_four_hosts_addresses_and_names() -> None:
    plan = make(4)
    assert plan.bridge == "camitbr0"
    assert plan.bridge_ip == "10.77.0.1"
    assert plan.prefixlen == 24
    assert [h.name for h in plan.hosts] == ["host1", "host2", "host3", "host4"]
    assert [h.ns for h in plan.hosts] == [f"camit-host{i}" for i in range(1, 5)]
    assert [h.ip for h in plan.hosts] == ["10.77.0.11", "10.77.0.12", "10.77.0.13", "10.77.0.14"]
    assert [h.veth for h in plan.hosts] == ["camit-v1", "camit-v2", "camit-v3", "camit-v4"]
    assert plan.hosts[0].mac == "02:ca:0a:4d:00:0b"
    assert len({h.mac for h in plan.hosts}) == 4


def test_other_subnet_and_name() -> None:
    plan = make(2, name="lab2", subnet="192.168.50.0/24")
    assert plan.bridge == "lab2br0"
    assert plan.bridge_ip == "192.168.50.1"
    assert [h.ip for h in plan.hosts] == ["192.168.50.11", "192.168.50.12"]
    assert plan.hosts[1].ns == "lab2-host2"


def test_paths_live_under_the_state_dir() -> None:
    plan = make(2)
    h = plan.hosts[1]
    assert h.dir == STATE / "hosts" / "host2"
    assert (h.tmp_dir, h.work_dir, h.core_dir) == (h.dir / "tmp", h.dir / "work", h.dir / "cores")
    assert h.host_key == h.dir / "ssh_host_ed25519_key"
    assert plan.client_key == STATE / "id_ed25519"
    assert plan.known_hosts == STATE / "known_hosts"
    assert plan.authorized_keys == STATE / "authorized_keys"
    assert plan.state_file == STATE / "lab.json"
    assert plan.host("host2") is h
    with pytest.raises(LabError, match="no host 'host9'"):
        plan.host("host9")


def test_interface_names_fit_ifnamsiz() -> None:
    for n in (1, 4, 9, 10, 64, 128, 1024):
        name = "a" * max_name_len(n)
        plan = make(n, name=name, subnet="10.64.0.0/16")
        names = [plan.bridge, *(h.veth for h in plan.hosts)]
        assert max(len(x) for x in names) <= 15, names


def test_name_too_long_is_refused() -> None:
    validate_name("abcdefghijkl", 4)  # 12: "abcdefghijklbr0" is 15
    with pytest.raises(LabError, match=r"too long \(13 chars, at most 12.*15-character"):
        make(4, name="abcdefghijklm")
    with pytest.raises(LabError, match="at most 11"):
        make(10, name="abcdefghijkl")


@pytest.mark.parametrize("bad", ["", "Camit", "cam_it", "-camit", "cam--it", "camit-", "1lab", "ca mit"])
def test_invalid_names_are_refused(bad: str) -> None:
    with pytest.raises(LabError, match="invalid lab name"):
        validate_name(bad)


@pytest.mark.parametrize("n", [0, -1, 1025])
def test_host_count_bounds(n: int) -> None:
    with pytest.raises(LabError, match="--hosts must be between 1 and 1024"):
        make(n, subnet="10.64.0.0/16")


def test_a_slash_24_holds_128_hosts_and_the_subnet_sets_the_limit() -> None:
    plan = make(128, name="scale", subnet="10.85.0.0/24")
    assert [h.ip for h in plan.hosts][-1] == "10.85.0.138"
    assert len({h.mac for h in plan.hosts}) == len({h.veth for h in plan.hosts}) == 128
    assert len(make(244, subnet="10.85.0.0/24").hosts) == 244
    with pytest.raises(LabError, match="too small for 245 hosts"):
        make(245, subnet="10.85.0.0/24")


# --------------------------------------------------------------------------- subnets


@pytest.mark.parametrize("subnet", ["10.0.0.0/8", "10.77.0.0/24", "172.16.5.0/24", "192.168.0.0/16"])
def test_private_subnets_are_accepted(subnet: str) -> None:
    assert str(parse_subnet(subnet, 4)) == subnet


@pytest.mark.parametrize(
    ("subnet", "why"),
    [
        ("8.8.8.0/24", "not private"),
        ("192.0.2.0/24", "not private"),  # TEST-NET: "private" to Python, but not RFC 1918
        ("127.0.0.0/8", "not private"),
        ("169.254.0.0/16", "not private"),
        ("172.32.0.0/24", "not private"),
        ("fd00::/64", "not IPv4"),
        ("10.77.0.1/24", "has host bits set"),
        ("10.77.0.0/33", "invalid subnet"),
        ("nonsense", "invalid subnet"),
        ("10.77.0.0/29", "too small for 4 hosts"),
    ],
)
def test_bad_subnets_are_refused(subnet: str, why: str) -> None:
    with pytest.raises(LabError, match=why):
        parse_subnet(subnet, 4)


def test_smallest_subnet_that_fits() -> None:
    parse_subnet("10.77.0.0/28", 4)  # .11-.14, broadcast .15
    with pytest.raises(LabError, match=r"host 5 would get 10\.77\.0\.15"):
        parse_subnet("10.77.0.0/28", 5)


ROUTES = [
    "default via 192.0.2.1 dev eth0",
    "192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2",
    "10.77.0.0/24 dev camitbr0 proto kernel scope link src 10.77.0.1",
    "blackhole 10.99.0.0/16",
    "172.17.0.0/16 dev docker0 proto kernel scope link src 172.17.0.1 linkdown",
]
ADDRS = [
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever",
    "4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever preferred_lft forever",
    "7: camitbr0    inet 10.77.0.1/24 scope global camitbr0\\       valid_lft forever preferred_lft forever",
    "9: wg0    inet 192.168.7.5/32 scope global wg0\\       valid_lft forever preferred_lft forever",
]


def test_overlap_ignores_default_route_and_our_bridge() -> None:
    net = ipaddress.IPv4Network("10.77.0.0/24")
    assert overlapping_routes(net, ROUTES, ADDRS, ignore_dev="camitbr0") == []


def test_overlap_with_our_bridge_counts_for_another_lab() -> None:
    net = ipaddress.IPv4Network("10.77.0.0/16")
    hits = overlapping_routes(net, ROUTES, ADDRS, ignore_dev="otherbr0")
    assert hits[0].startswith("10.77.0.0/24 dev camitbr0")
    assert any("inet 10.77.0.1/24" in h for h in hits)


def test_overlap_with_routes_and_addresses() -> None:
    assert overlapping_routes(ipaddress.IPv4Network("10.99.1.0/24"), ROUTES, ADDRS) == ["blackhole 10.99.0.0/16"]
    assert overlapping_routes(ipaddress.IPv4Network("172.16.0.0/12"), ROUTES, ADDRS)[0].startswith("172.17.0.0/16")
    hits = overlapping_routes(ipaddress.IPv4Network("192.168.7.0/24"), ROUTES, ADDRS)
    assert hits == ["9: wg0    inet 192.168.7.5/32 scope global wg0"]
    assert overlapping_routes(ipaddress.IPv4Network("10.78.0.0/24"), ROUTES, ADDRS) == []


# --------------------------------------------------------------------------- state dir


def test_default_state_dir_and_override() -> None:
    assert default_state_dir("camit", {}) == Path("/run/camit-lab/camit")
    assert default_state_dir("x", {"CAMIT_LAB_DIR": "/srv/lab"}) == Path("/srv/lab")


@pytest.mark.parametrize("bad", ["/tmp/lab", "/tmp", "/var/tmp/camit/x", "/var/crash/camit", "relative/dir"])
def test_state_dir_must_not_be_hidden_by_the_host_mounts(bad: str) -> None:
    with pytest.raises(LabError):
        validate_state_dir(Path(bad))
    validate_state_dir(Path("/var/tmp/camit-lab"))  # a sibling is fine


# --------------------------------------------------------------------------- sshd


def test_sshd_config_exact_lines() -> None:
    plan = make(4)
    h = plan.hosts[2]
    assert sshd_config_lines(plan, h) == [
        "ListenAddress 10.77.0.13:22",
        "HostKey /run/camit-lab/camit/hosts/host3/ssh_host_ed25519_key",
        "PidFile /run/camit-lab/camit/hosts/host3/sshd.pid",
        "AuthorizedKeysFile /run/camit-lab/camit/authorized_keys",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "X11Forwarding no",
        "Subsystem sftp internal-sftp",
        "MaxStartups 100:30:200",
        "MaxSessions 100",
        "LogLevel VERBOSE",
        "AcceptEnv none",
    ]
    text = sshd_config_text(plan, h)
    assert text.startswith("# ")
    assert text.endswith("AcceptEnv none\n")


def test_setup_script_sets_hostname_mounts_then_execs() -> None:
    h = make(2).hosts[1]
    lines = setup_script(h).splitlines()
    assert lines == [
        "set -eu",
        "echo host2 > /proc/sys/kernel/hostname",
        "mount --bind /run/camit-lab/camit/hosts/host2/work /var/tmp/camit",
        "mount --bind /run/camit-lab/camit/hosts/host2/cores /var/crash/camit",
        "mount --bind /run/camit-lab/camit/hosts/host2/tmp /tmp",
        "if [ -f /root/.bashrc ]; then mount --bind /run/camit-lab/camit/hosts/host2/shell-rc /root/.bashrc; fi",
        'exec "$@"',
    ]


def test_setup_script_small_workdir_stacks_a_tmpfs_after_the_binds() -> None:
    h = make(3).hosts[2]
    lines = setup_script(h, "8m").splitlines()
    assert lines[-2] == "mount -t tmpfs -o size=8m,mode=0755 camit-small-workdir /var/tmp/camit"
    assert lines.index(lines[-2]) > lines.index("mount --bind /run/camit-lab/camit/hosts/host3/work /var/tmp/camit")


def test_setup_script_quotes_paths() -> None:
    plan = make(1, state_dir=Path("/srv/my lab"))
    assert "mount --bind '/srv/my lab/hosts/host1/tmp' /tmp" in setup_script(plan.hosts[0])


def test_sshd_argv_is_an_exec_chain() -> None:
    h = make(4).hosts[0]
    argv = sshd_argv(h)
    assert argv[:10] == ["ip", "netns", "exec", "camit-host1", "unshare", "--mount", "--uts", "--propagation",
                         "private", "sh"]
    assert argv[10] == "-c"
    assert argv[11] == setup_script(h)
    assert argv[12] == "camit-host1"  # $0 of the script
    assert argv[13:] == ["/usr/sbin/sshd", "-D", "-e", "-f", str(h.sshd_config), "-E", str(h.sshd_log)]
    assert "--fork" not in argv  # unshare must exec, so the started pid is sshd's


def test_in_host_and_nsenter_argv() -> None:
    h = make(2).hosts[1]
    argv = in_host_argv(h, ["cat", "/tmp/x"], "4m")
    assert argv[-2:] == ["cat", "/tmp/x"]
    assert "size=4m" in argv[11]
    assert nsenter_argv(123, ["true"]) == ["nsenter", "-t", "123", "-n", "-m", "-u", "--", "true"]
    assert nsenter_argv(5, ["umount", "/x"], net=False, uts=False) == ["nsenter", "-t", "5", "-m", "--", "umount", "/x"]


@pytest.mark.parametrize(
    ("size", "norm"), [("8m", "8m"), ("8M", "8m"), ("512k", "512k"), ("1G", "1g"), ("4096", "4096")]
)
def test_small_workdir_sizes(size: str, norm: str) -> None:
    assert small_workdir_size(size) == norm


@pytest.mark.parametrize("bad", ["", "0m", "8 m", "8mb", "-1m", "8m,uid=0"])
def test_bad_small_workdir_sizes(bad: str) -> None:
    with pytest.raises(LabError, match="invalid tmpfs size"):
        small_workdir_size(bad)


# --------------------------------------------------------------------------- network commands


def test_build_commands() -> None:
    plan = make(2)
    cmds = [shlex.join(c) for c in build_commands(plan)]
    assert cmds[:3] == [
        "ip link add camitbr0 type bridge",
        "ip addr add 10.77.0.1/24 dev camitbr0",
        "ip link set camitbr0 up",
    ]
    assert cmds[3:11] == [
        "ip netns add camit-host1",
        "ip link add camit-v1 type veth peer name eth0 netns camit-host1",
        "ip link set camit-v1 master camitbr0",
        "ip link set camit-v1 up",
        "ip -n camit-host1 link set lo up",
        "ip -n camit-host1 link set eth0 address 02:ca:0a:4d:00:0b",
        "ip -n camit-host1 addr add 10.77.0.11/24 dev eth0",
        "ip -n camit-host1 link set eth0 up",
    ]
    assert len(cmds) == 3 + 8 * 2
    assert not any("default" in c or "route" in c for c in cmds)  # hosts get no way out of the lab


def test_teardown_commands_order() -> None:
    cmds = teardown_commands(["camit-host1"], ["camit-v1"], "camitbr0")
    assert cmds == [
        ["ip", "link", "del", "camit-v1"], ["ip", "netns", "del", "camit-host1"], ["ip", "link", "del", "camitbr0"],
    ]
    assert teardown_commands([], [], None) == []


def test_discovery_patterns_match_only_this_lab() -> None:
    ns = lab_ns_re("camit")
    assert ns.match("camit-host12")
    assert not ns.match("camit-x-host1") and not ns.match("camitx-host1") and not ns.match("camit-host")
    veth = lab_veth_re("camit")
    assert veth.match("camit-v3") and not veth.match("camit-x-v3")
    assert iptables_forward_rule("camitbr0") == ["FORWARD", "-i", "camitbr0", "-o", "camitbr0", "-j", "ACCEPT"]


# --------------------------------------------------------------------------- env file


def _keys(plan: LabPlan) -> dict[str, str]:
    return {h.name: f"ssh-ed25519 AAAAkey{h.index}" for h in plan.hosts}


def test_env_document() -> None:
    plan = make(2)
    doc = env_document(plan, _keys(plan), {"host1": "aa:bb:cc:dd:ee:01"}, "x86_64")
    d = doc["defaults"]
    assert d == {
        "user": "root", "key_file": "/run/camit-lab/camit/id_ed25519",
        "known_hosts": "/run/camit-lab/camit/known_hosts", "host_key_policy": "strict",
        "connect_timeout": 5, "command_timeout": 300, "workdir": "/var/tmp/camit", "python": PY,
        "venv": True, "npu": {"count": 0, "soc": "cpu"},
    }
    assert doc["launch"] == {"backend": "gloo"}
    assert list(doc["host_info"]) == ["host1", "host2"]
    h1 = doc["host_info"]["host1"]
    assert h1 == {
        "user": "root",
        "manage_nic": {"name": "eth0", "ip": "10.77.0.11", "mac": "aa:bb:cc:dd:ee:01"},
        "ssh_ip": "10.77.0.11", "ssh_port": 22,
        "test_nic1": {"name": "eth0", "dev": "eth0", "ip": "10.77.0.11"},
        "host_key": "ssh-ed25519 AAAAkey1", "env_type": "lab", "arch": "x86_64",
    }
    assert doc["host_info"]["host2"]["manage_nic"]["mac"] == plan.hosts[1].mac  # planned mac as fallback


def test_env_yaml_round_trips_with_header() -> None:
    plan = make(3)
    doc = env_document(plan, _keys(plan), {}, "aarch64")
    text = render_env_yaml(doc)
    assert text.startswith(ENV_HEADER)
    assert text.splitlines()[1] == "defaults:"
    assert yaml.safe_load(text) == doc


def test_known_hosts_and_public_key() -> None:
    assert public_key_of("ssh-ed25519 AAAAxyz host1@camit-lab\n") == "ssh-ed25519 AAAAxyz"
    with pytest.raises(LabError):
        public_key_of("garbage")
    text = known_hosts_text([("10.77.0.11", "ssh-ed25519 AAAA1"), ("10.77.0.12", "ssh-ed25519 AAAA2")])
    assert text == "10.77.0.11 ssh-ed25519 AAAA1\n10.77.0.12 ssh-ed25519 AAAA2\n"


def test_host_plan_is_immutable() -> None:
    h = make(1).hosts[0]
    assert isinstance(h, HostPlan)
    with pytest.raises(AttributeError):
        setattr(h, "ip", "1.2.3.4")  # noqa: B010 - what the type forbids, refused at run time too


# --------------------------------------------------------------------------- executor entry points that need no root


def test_load_without_a_lab_raises(tmp_path: Path) -> None:
    from framework.lab.manage import Lab

    with pytest.raises(LabError, match="no lab 'camit' is up"):
        Lab.load("camit", tmp_path / "nothing")


def test_cli_refuses_bad_plan_with_usage_exit(capsys: pytest.CaptureFixture[str]) -> None:
    from framework.lab.manage import main

    assert main(["up", "--hosts", "4", "--name", "a-very-long-lab-name"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("lab: error: lab name 'a-very-long-lab-name' is too long")
    assert len(err.strip().splitlines()) == 1
    assert main(["up", "--hosts", "4", "--subnet", "8.8.8.0/24"]) == EXIT_USAGE
    assert "not private" in capsys.readouterr().err
