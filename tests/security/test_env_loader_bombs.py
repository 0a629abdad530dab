"""Adversarial env files through the real ``camit env validate`` (issue 17, item 7).

Each file is built to make a YAML loader run away: an alias bomb of about 450 bytes (with and without
``${VAR}``, whose expansion used to unshare the aliases), a merge-key bomb, nesting far deeper than
Python's recursion allows (literal and through a chain of aliases), recursive aliases, a raw NUL or
escape byte, a 5000-digit integer, CPU ranges up to 99999999999, device counts of that size, a device
file, a FIFO and a file over the size cap. Every one must end with exit 2 and ONE line
``camit: error: <file>: [<key path>: ]<problem>``, no traceback, within a CPU-time bound and a
peak-memory bound of the process (measured with ``os.wait4``; the child also runs under
``RLIMIT_DATA``/``RLIMIT_CPU`` so an unbounded loader is stopped instead of taking the machine).

Needs no lab.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.security._env_terminal import CliRun, run_cli

#: what a rejected file may cost the CLI process (a normal `env validate` takes ~0.5 s and ~40 MiB)
CPU_BOUND_S = 3.0
RSS_BOUND_MIB = 150.0
#: a hang is a hang even on a machine at load 10: the wall clock only catches those
WALL_BOUND_S = 45.0

HOST = "host_info:\n  host1:\n    manage_nic: {name: eth0, ip: 192.0.2.11}\n"


def _laughs(leaf: str) -> str:
    """The billion laughs: nine levels of nine aliases each, 9**9 leaves from ~450 bytes."""
    lines = [f"a: &a [{', '.join([leaf] * 9)}]"]
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    return HOST + "\n".join(lines) + "\n"


def _merge_bomb() -> str:
    lines = ["m0: &m0 {k: v}"]
    for i in range(1, 10):
        lines.append(f"m{i}: &m{i} {{<<: [{','.join([f'*m{i - 1}'] * 9)}]}}")
    return HOST + "\n".join(lines) + "\n"


def _alias_chain(length: int) -> str:
    lines = ["c0: &c0 [x]"] + [f"c{i}: &c{i} [*c{i - 1}]" for i in range(1, length)]
    return HOST + "\n".join(lines) + "\n"


def _deep_block(levels: int) -> str:
    return HOST + "".join(f"{'  ' * i}k{i}:\n" for i in range(levels)) + f"{'  ' * levels}x\n"


#: name -> (file text, key path the line must name or None, words the problem must contain)
CASES: dict[str, tuple[str, str | None, str]] = {
    "alias_bomb_with_var": (_laughs('"${HOME}"'), None, "aliases"),
    "alias_bomb_plain": (_laughs('"lol"'), None, "aliases"),
    "merge_key_bomb": (_merge_bomb(), None, "aliases"),
    "nested_1000_flow": (HOST + "deep: " + "[" * 1000 + "]" * 1000 + "\n", "deep", "nested deeper than"),
    "nested_600_block": (_deep_block(600), "k0", "nested deeper than"),
    "alias_chain_3000": (_alias_chain(3000), None, "nested deeper than"),
    "recursive_alias_list": (HOST + "r: &r [*r]\n", "r[0]", "recursive alias"),
    "recursive_alias_map": (HOST + "r: &r {a: *r}\n", "r.a", "recursive alias"),
    "recursive_merge": (HOST + "r: &r {<<: *r}\n", "r.<<", "recursive alias"),
    "raw_nul": (HOST + "    bmc: a\0b\n", None, "NUL byte at line 4"),
    "raw_escape": (HOST + "    bmc: a\x1b[2Jb\n", None, "U+001B at line 4"),
    "int_5000_digits": (HOST + "    ssh_port: " + "7" * 5000 + "\n", "host_info.host1.ssh_port", "integer"),
    "hex_5000_digits": (HOST + "    ssh_port: 0x" + "f" * 5000 + "\n", "host_info.host1.ssh_port", "integer"),
    "isolcpu_huge_range": (HOST + '    isolcpu: "0-99999999999"\n', "host_info.host1.isolcpu", "out of range"),
    "isolcpu_5000_digits": (HOST + f'    isolcpu: "0-{"9" * 5000}"\n', "host_info.host1.isolcpu", "out of range"),
    "npu_count_huge": (HOST + "    npu: {count: 99999999999}\n", "host_info.host1.npu.count", "<= 1024"),
    "nproc_huge": (HOST + "launch: {nproc_per_node: 99999999999}\n", "launch.nproc_per_node", "<= 1024"),
    "timeout_huge": (HOST + "defaults: {command_timeout: 1.0e+300}\n", "defaults.command_timeout", "<= 604800"),
}


def check_one_line(run: CliRun, path: str, key_path: str | None, words: str) -> None:
    assert run.rc == 2, run.describe()
    assert "Traceback" not in run.stderr + run.stdout, run.describe()
    assert run.stdout == "", run.describe()
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.describe()
    head = f"camit: error: {path}: " + (f"{key_path}: " if key_path else "")
    assert lines[0].startswith(head), (head, run.describe())
    assert words in lines[0], (words, run.describe())
    assert len(lines[0]) < 400, run.describe()
    assert run.cpu_s < CPU_BOUND_S, f"took {run.cpu_s:.2f}s of CPU: {run.describe()}"
    assert run.max_rss_mib < RSS_BOUND_MIB, f"peak RSS {run.max_rss_mib:.0f} MiB: {run.describe()}"
    assert run.wall_s < WALL_BOUND_S, run.describe()


def test_the_bomb_is_small():
    assert len(_laughs('"${HOME}"').encode()) - len(HOST) < 460


@pytest.mark.parametrize("name", list(CASES))
def test_adversarial_env_file(tmp_path: Path, name: str) -> None:
    text, key_path, words = CASES[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(text.encode())
    check_one_line(run_cli("env", "validate", str(path)), str(path), key_path, words)


def test_device_file_is_refused_without_reading_it():
    check_one_line(run_cli("env", "validate", "/dev/zero"), "/dev/zero", None, "character device")


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "env.yaml"
    os.mkfifo(fifo)
    check_one_line(run_cli("env", "validate", str(fifo), wall_limit=20), str(fifo), None, "FIFO")


def test_fifo_as_exec_env_is_refused_too(tmp_path: Path) -> None:
    fifo = tmp_path / "env.yaml"
    os.mkfifo(fifo)
    check_one_line(run_cli("exec", "--env", str(fifo), "--", "true", wall_limit=20), str(fifo), None, "FIFO")


def test_file_over_the_size_cap_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w") as f:  # valid YAML: the cap, not a syntax error, must stop it
        f.write(HOST)
        for _ in range(5 * 1024):
            f.write("# " + "x" * 1021 + "\n")
    assert path.stat().st_size > 5 << 20
    check_one_line(run_cli("env", "validate", str(path)), str(path), None, "MiB")


def test_a_normal_env_still_validates_within_the_bounds(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(HOST + '    isolcpu: "0-8191"\n    npu: {count: 16, visible: "0,15"}\n'
                    "  host2: &h2\n    manage_nic: {name: eth0, ip: 192.0.2.12}\n"
                    "defaults: {workdir: /var/tmp/camit, command_timeout: 86400}\n")
    run = run_cli("env", "validate", str(path))
    assert run.rc == 0, run.describe()
    assert "valid, 2 host(s)" in run.stdout
    assert run.cpu_s < CPU_BOUND_S and run.max_rss_mib < RSS_BOUND_MIB, run.describe()
