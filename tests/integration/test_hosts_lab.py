"""Host/Cluster and `camit exec` against the lab's real sshd hosts."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.commands import ShellScript
from framework.errors import CommandTimedOut, HostKeyError, HostUnreachable, MultiHostError
from framework.hosts import Cluster, Host

HOSTILE = ["a b", "it's", 'say "hi"', "$(id -u)", "`id -u`", "a;b", "line1\nline2", "ünïcødé ✓", ""]


def camit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_exec_hostname_gives_distinct_names(lab_env_path, lab_env):
    proc = camit("exec", "--env", str(lab_env_path), "--json", "--", "hostname")
    assert proc.returncode == 0, proc.stderr
    import json

    rows = json.loads(proc.stdout)
    names = [r["stdout"].strip() for r in rows]
    assert len(rows) == len(lab_env.hosts) >= 4
    assert len(set(names)) == len(names) and all(names)


def test_exec_table_lists_every_host(lab_env_path, lab_env):
    proc = camit("exec", "--env", str(lab_env_path), "--", "echo", "hello")
    assert proc.returncode == 0, proc.stderr
    for name in lab_env.hosts:
        assert any(line.startswith(name + " ") and "hello" in line for line in proc.stdout.splitlines())


def _pids_with(arg: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if arg in (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


def _wait_gone(arg: str, within: float) -> list[int]:
    """Pids still carrying ``arg`` after up to ``within`` seconds (a loaded machine reaps slowly)."""
    end = time.monotonic() + within
    left = _pids_with(arg)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = _pids_with(arg)
    return left


def test_timeout_ends_the_remote_command_fast(lab_env_path, lab_env):
    first = next(iter(lab_env.hosts))
    start = time.monotonic()
    proc = camit("exec", "--env", str(lab_env_path), "--hosts", first, "--timeout", "2", "--json", "--",
                 "sleep 60.417")
    elapsed = time.monotonic() - start
    assert proc.returncode == 1
    import json

    row = json.loads(proc.stdout)[0]
    assert row["timed_out"] and row["rc"] is None
    # the command (timeout, kill, return) well before the 60 s sleep; the CLI's start-up on top
    assert row["duration"] < 8, row
    assert elapsed < 10, f"took {elapsed:.2f}s"
    assert _wait_gone("sleep 60.417", 10.0) == []


def test_timeout_kills_background_children_too(cluster):
    host = next(iter(cluster))
    with pytest.raises(CommandTimedOut):
        host.check("sleep 61.733 & sleep 61.734 & wait", timeout=1)
    assert _wait_gone("sleep 61.73", 10.0) == []


def test_stopped_sshd_is_reported_by_name_while_others_succeed(lab, lab_env_path, lab_env):
    victim = list(lab_env.hosts)[2]
    lab.stop_sshd(victim)
    try:
        start = time.monotonic()
        proc = camit("exec", "--env", str(lab_env_path), "--", "true")
        elapsed = time.monotonic() - start
    finally:
        lab.start_sshd(victim)
    assert proc.returncode == 3
    assert elapsed < lab_env.hosts[victim].connect_timeout + 10  # + interpreter start-up on a loaded machine
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[2:] if line.strip()}
    assert "UNREACHABLE" in lines[victim] and "connection refused" in lines[victim]
    for name in lab_env.hosts:
        if name != victim:
            assert lines[name].split()[1] == "0"


def test_changed_host_key_is_refused(env_variant, lab_env, tmp_path):
    names = list(lab_env.hosts)
    other_key = lab_env.hosts[names[1]].host_key

    def swap(doc):
        doc["host_info"][names[0]]["host_key"] = other_key

    path = env_variant(swap)
    proc = camit("exec", "--env", str(path), "--hosts", names[0], "--", "true")
    assert proc.returncode == 3
    assert "HOST KEY CHANGED" in proc.stdout and names[0] in proc.stdout


def test_unknown_key_refused_under_strict_then_recorded_with_accept_new(env_variant, lab_env, tmp_path):
    name = next(iter(lab_env.hosts))
    kh = tmp_path / "known_hosts"

    def unpinned(policy):
        def change(doc):
            doc["defaults"]["known_hosts"] = str(kh)
            doc["defaults"]["host_key_policy"] = policy
            for h in doc["host_info"].values():
                h.pop("host_key", None)
        return change

    from framework.config.effective import load

    strict = Cluster.from_env(load(env_variant(unpinned("strict"), "strict.yaml")), [name])
    with pytest.raises(HostKeyError, match="unknown host key"):
        strict[name].run(ShellScript("true"))
    assert not kh.exists()
    accept = Cluster.from_env(load(env_variant(unpinned("accept-new"), "accept.yaml")), [name])
    assert accept[name].run(ShellScript("true")).ok
    recorded = kh.read_text()
    assert lab_env.hosts[name].host_key.split()[1] in recorded
    again = Cluster.from_env(load(env_variant(unpinned("strict"), "strict2.yaml")), [name])
    assert again[name].run(ShellScript("true")).ok  # now known: strict accepts it


def test_wrong_key_file_is_an_authentication_failure(env_variant, lab_env, tmp_path):
    key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    name = next(iter(lab_env.hosts))
    path = env_variant(lambda d: d["defaults"].__setitem__("key_file", str(key)))
    proc = camit("exec", "--env", str(path), "--hosts", name, "--", "true")
    assert proc.returncode == 3
    assert "authentication" in proc.stdout.lower()


def test_hostile_values_arrive_literally_over_ssh(cluster):
    host = next(iter(cluster))
    res = host.check(["printf", "%s\\0", *HOSTILE])
    assert res.stdout.split("\0")[:-1] == HOSTILE
    env = {f"V{i}": v for i, v in enumerate(HOSTILE)}
    script = "printf '%s\\0' " + " ".join(f'"$V{i}"' for i in range(len(HOSTILE)))
    assert host.check(script, env=env).stdout.split("\0")[:-1] == HOSTILE
    weird = "/tmp/camit it's $(x) `y` ;z"
    host.check(["mkdir", "-p", weird])
    assert host.check(["pwd"], cwd=weird).stdout.strip() == weird


def test_large_stderr_is_bounded_over_ssh(cluster):
    host = next(iter(cluster))
    res = host.run("head -c 50000000 /dev/zero | tr '\\0' e >&2; echo done", max_output=1 << 20, timeout=60)
    assert res.ok and res.stdout == "done\n"
    assert res.truncated and len(res.stderr) == 1 << 20


def test_put_get_verified_and_isolated_per_host(cluster, tmp_path):
    h1, h2 = list(cluster)[:2]
    src = tmp_path / "blob with space.bin"
    src.write_bytes(bytes(range(256)) * 4096)
    remote = "/var/tmp/camit/it/blob with space.bin"
    digest = h2.put(src, remote)
    assert h2.check(["sha256sum", remote]).stdout.split()[0] == digest
    assert h1.run(["test", "-e", remote]).rc == 1  # host1 has its own workdir
    back = tmp_path / "back.bin"
    assert h2.get(remote, back) == digest and back.read_bytes() == src.read_bytes()
    h2.check(["rm", "-rf", "/var/tmp/camit/it"])


def test_cluster_check_raises_one_error_naming_only_the_failed_host(cluster):
    names = list(cluster.hosts)
    bad = names[1]
    bad_hostname = cluster[bad].check("hostname").stdout.strip()
    with pytest.raises(MultiHostError) as info:
        cluster.check('if [ "$(hostname)" = "$BAD" ]; then echo dying >&2; exit 9; fi', env={"BAD": bad_hostname})
    text = str(info.value)
    assert text.splitlines()[0] == f"1 of {len(names)} hosts failed:"
    assert f"{bad}: exit status 9" in text and "dying" in text
    assert all(f"{n}:" not in text for n in names if n != bad)


def test_unreachable_address_reports_within_connect_timeout(env_variant, lab_env):
    name = next(iter(lab_env.hosts))
    lab_ip = lab_env.hosts[name].ssh_ip
    # the same lab host on a port nobody listens on: a refusal, reported at once
    path = env_variant(lambda d: d["host_info"][name].__setitem__("ssh_port", 2))
    from framework.config.effective import load

    c = Cluster.from_env(load(path), [name])
    start = time.monotonic()
    with pytest.raises(HostUnreachable, match=f"{lab_ip}:2: connection refused"):
        c[name].run(ShellScript("true"))
    assert time.monotonic() - start < 5  # at once: far below the connect timeout


def test_many_parallel_commands_on_one_connection(cluster):
    host: Host = next(iter(cluster))
    from concurrent.futures import ThreadPoolExecutor

    # many short commands at once: a client EOF racing the server's close of an ended command made sshd
    # drop the whole connection ("ieof packet referred to nonexistent channel"), ~1 in 500 commands
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: host.check(["echo", str(i)]).stdout.strip(), range(400)))
    assert results == [str(i) for i in range(400)]
    assert host.check(ShellScript("cat; echo read-all")).stdout == "read-all\n"  # stdin is at EOF without any EOF sent


def test_connections_do_not_wait_on_delayed_acks(cluster):
    """TCP_NODELAY on camit's sockets (paramiko sets none): without it every channel open waited ~40 ms
    for the peer's delayed ACK (48 ms per warm `true` here; bench/fanout.py measures the effect)."""
    import socket

    host = next(iter(cluster))
    host.run("true")
    sock = host.transport._client.get_transport().sock
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_commands_after_the_first_run_in_the_posix_login_shell_directly(cluster):
    """The first command names the login shell (bash on the lab); later ones skip the /bin/sh exec and
    still get the same pid/pgid, quoting and exit status."""
    host = next(iter(cluster))
    first = host.run("echo $$; ps -o comm= -p $$")
    assert host.transport._shell == "bash"
    assert first.stdout.split()[1] in ("sh", "dash")  # ran in /bin/sh
    later = host.run("echo $$; ps -o comm= -p $$; printf '%s|' \"it's\" '$(x)'; exit 7")
    pid, comm, rest = later.stdout.split("\n", 2)
    assert comm == "bash" and later.rc == 7 and rest == "it's|$(x)|"
