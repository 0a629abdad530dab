"""The line protocol between the controller and the shipped programs: one set of words, parsed one way.

The shipped scripts cannot import ``framework.remote.protocol`` on the host (each is one file run
by the host's base python), so they keep their own copies; these tests keep the copies equal.
"""

from __future__ import annotations

import ast

import pytest

from framework.remote import protocol, script


def constants(name: str) -> dict[str, object]:
    """Module-level ``NAME = <literal>`` assignments of a shipped script (read, not imported)."""
    path, _ = script(name)
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


@pytest.mark.parametrize(("name", "aliases"), [
    ("supervisor.py", {"TAG": "RUN_TAG", "GONE_STATES": None, "NO_PYSPY": None}),
    ("rankwrap.py", {"BOOTSTRAP": None}),
    ("relay.py", {"CHUNK": None, "TOKEN_WAIT": None, "IO_TIMEOUT": None, "MAX_PENDING": None,
                  "MAX_PER_PEER": None}),
])
def test_shipped_scripts_use_the_protocol_words(name, aliases):
    found = constants(name)
    assert found, name
    for const, value in found.items():
        shared = aliases.get(const, const)
        if shared is None:
            continue
        assert getattr(protocol, shared) == value, f"{name}: {const} = {value!r} differs from protocol.{shared}"


def test_shipped_scripts_are_stdlib_only_and_import_nothing_of_camit():
    for name in ("supervisor.py", "rankwrap.py", "relay.py", "wheelinst.py"):
        path, _ = script(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module and not node.module.startswith("framework"), (name, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("framework") for a in node.names), name


def test_the_pgid_marker_is_the_one_the_transports_parse():
    from framework import commands

    assert commands.PGID_MARKER == protocol.PGID_MARKER


@pytest.mark.parametrize(("line", "expected"), [
    ("RANK 3 exit 0 pid 17", protocol.SupervisorLine("RANK", rank=3, exit_code=0)),
    ("RANK 3 exit -11 pid 17", protocol.SupervisorLine("RANK", rank=3, exit_code=-11)),
    ("RANK 2 SIG SIGSEGV pid 9", protocol.SupervisorLine("RANK", rank=2, signal="SIGSEGV")),
    ("RANK x exit None pid None", protocol.SupervisorLine("RANK", rank=-1, exit_code=None)),
    ("RANK 3 SIG", protocol.SupervisorLine("RANK", rank=3, signal="?")),
    ("RANK 3 exit", protocol.SupervisorLine("RANK", rank=3, exit_code=None)),
    ("RANK 3", protocol.SupervisorLine("")),
    ("EXIT 1", protocol.SupervisorLine("EXIT", exit_code=1)),
    ("EXIT", protocol.SupervisorLine("")),
    ("SWEPT", protocol.SupervisorLine("")),
    ("SWEPT many", protocol.SupervisorLine("SWEPT", count=0)),
    ("STARTED", protocol.SupervisorLine("")),
    ("KILLED silence", protocol.SupervisorLine("KILLED", reason="silence")),
    ("KILLED", protocol.SupervisorLine("KILLED", reason="?")),
    ("SWEPT 4", protocol.SupervisorLine("SWEPT", count=4)),
    ("STACKS 2", protocol.SupervisorLine("STACKS", count=2)),
    ("LEFT 812 913", protocol.SupervisorLine("LEFT", pids=(812, 913))),
    ("LEFT 812 x -3 0", protocol.SupervisorLine("LEFT", pids=(812,))),
    ("TREE 5 6 7", protocol.SupervisorLine("TREE", pids=(5, 6, 7))),
    ("LEFT", protocol.SupervisorLine("LEFT")),
    ("STARTED 4711", protocol.SupervisorLine("STARTED", pid=4711)),
    ("DONE", protocol.SupervisorLine("DONE")),
    ("HB", protocol.SupervisorLine("HB")),
    ("", protocol.SupervisorLine("")),
    ("Traceback (most recent call last):", protocol.SupervisorLine("")),
])
def test_parse_supervisor_line(line, expected):
    assert protocol.parse_supervisor_line(line) == expected


def test_a_job_timeout_asks_for_stacks_instead_of_a_bare_kill():
    assert protocol.kill_line() == b"KILL\n"
    assert protocol.kill_line(stacks=True) == b"STACKS\n"


def test_relay_lines():
    assert protocol.next_line("10.0.0.2", 4000, "t0k") == b"NEXT 10.0.0.2 4000 t0k\n"
    assert protocol.next_line() == b"NEXT -\n"
    assert protocol.token_line("t") == b"TOKEN t\n"
    assert protocol.parse_port("PORT 41234\n") == 41234
    assert protocol.parse_port("ERR bind") is None and protocol.parse_port(None) is None
    out = "NEXT-FAILED connect 10.0.0.3:1: refused\nOK " + "a" * 64 + "\n"
    assert protocol.relay_verdict(out, "a" * 64) == (True, ["NEXT-FAILED connect 10.0.0.3:1: refused"], None)
    assert protocol.relay_verdict("ERR sha256 mismatch\n", "a" * 64) == (False, [], "ERR sha256 mismatch")
