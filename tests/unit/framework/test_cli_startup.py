"""``camit``'s start-up imports only what the command needs before its first connection; its exit skips the
final garbage collections (issue 18).

No timing: a fresh interpreter on this checkout reports what is in ``sys.modules`` (a) after
``import framework.cli`` and ``build_parser()``, and (b) at the moment ``camit exec`` opens its first
TCP connection (``socket.socket.connect`` wrapped in that interpreter only; the port is a loopback
port nobody listens on, so the host is unreachable and exec ends with 3). The env loader (pydantic,
yaml) and paramiko are needed by then; the launch runner, the preflight probe, the report writers,
``tarfile`` (fetches only), filelock (recording a new host key only) and rich (output only, on a terminal) are not.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: never imported by the parser, nor before ``camit exec``'s first connection
NOT_BEFORE_CONNECT = ("rich", "torch", "numpy", "lxml", "framework.preflight.probe", "framework.ascend.parse",
                      "framework.preflight.run", "framework.launch.runner", "framework.launch.plan",
                      "framework.launch.devices", "framework.launch.fetch", "framework.report", "framework.lease",
                      "framework.deploy", "framework.launch.runwatch", "tarfile",
                      # only a host key not yet recorded takes the known_hosts lock
                      "filelock")
#: and not by the parser either: the parser is argparse and stdlib-only modules of camit
NOT_IN_PARSER = ("paramiko", "pydantic", "yaml", "framework.config.document", "framework.hosts",
                 "framework.transport.ssh", *NOT_BEFORE_CONNECT)

_DUMP = ("import json, sys\n"
         "def dump(path):\n"
         "    with open(path, 'w') as f:\n"
         "        json.dump({'modules': sorted(sys.modules), 'file': sys.modules['framework'].__file__}, f)\n")


def _run(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CAMIT_ENV", None)
    return subprocess.run([sys.executable, "-c", _DUMP + code, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _loaded(path: Path) -> set[str]:
    got = json.loads(path.read_text())
    assert Path(got["file"]).resolve() == ROOT / "framework" / "__init__.py"  # this checkout, not another
    return set(got["modules"])


def _present(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` (a package counts with its submodules) are in ``modules``."""
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def test_building_the_parser_imports_no_schema_no_ssh_no_launch(tmp_path):
    out = tmp_path / "modules.json"
    proc = _run("import framework.cli\nframework.cli.build_parser()\ndump(sys.argv[1])\n", str(out))
    assert proc.returncode == 0, proc.stderr
    modules = _loaded(out)
    assert "argparse" in modules and "framework.cli" in modules  # the probe saw the import
    assert _present(modules, NOT_IN_PARSER) == []


def test_check_help_still_shows_the_preflight_defaults_from_the_light_module():
    proc = _run("from framework.cli import main\nsys.exit(main(['check', '--help']))\n")
    assert proc.returncode == 0, proc.stderr
    from framework.preflight.probe import Limits

    assert f"(default {Limits.min_free_gb:g})" in proc.stdout and f"(default {Limits.probe_timeout:g})" in proc.stdout


def test_exec_reaches_its_first_connection_with_only_the_env_loader_and_ssh(tmp_path):
    key = tmp_path / "key"
    key.write_text("not read: the connection is refused first\n")
    (tmp_path / "known_hosts").write_text("")
    with socket.socket() as closed:  # bound, never listening: connecting to it is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        env = tmp_path / "env.yaml"
        env.write_text("defaults:\n  user: root\n  key_file: key\n  known_hosts: known_hosts\n  connect_timeout: 5\n"
                       f"host_info:\n  n1:\n    manage_nic: {{name: lo, ip: 127.0.0.1}}\n    ssh_port: {port}\n")
        out = tmp_path / "modules.json"
        code = ("import socket, threading\n"
                "real, lock, first = socket.socket.connect, threading.Lock(), []\n"
                "def connect(self, address):\n"
                "    with lock:\n"
                "        if not first:\n"
                "            first.append(address)\n"
                "            dump(sys.argv[1])\n"
                "    return real(self, address)\n"
                "socket.socket.connect = connect\n"
                "from framework.cli import main\n"
                "sys.exit(main(sys.argv[2:]))\n")
        proc = _run(code, str(out), "exec", "--env", str(env), "--", "true")
    assert proc.returncode == 3, proc.stdout + proc.stderr  # unreachable: the connection was attempted
    assert "connection refused" in proc.stdout
    modules = _loaded(out)
    assert {"pydantic", "yaml", "paramiko", "framework.transport.ssh"} <= modules  # what it needs, and the probe works
    assert _present(modules, NOT_BEFORE_CONNECT) == []


def test_the_console_entry_leaves_its_objects_out_of_the_exit_collections():
    """``main()`` as the process's entry freezes the collector's objects: Python's finalization then skips
    full collections over pydantic's and paramiko's objects (0.1-0.3 s of ``camit exec``'s wall time)."""
    code = ("import atexit, gc\n"
            "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
            "sys.argv = ['camit', 'completion', 'bash']\n"
            "from framework.cli import main\n"
            "sys.exit(main())\n")
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    assert "complete" in proc.stdout  # the command ran as usual
    assert proc.stdout.rstrip().endswith("frozen at exit: True")


def test_main_called_with_argv_leaves_the_callers_collector_alone():
    code = ("import gc, io, contextlib\n"
            "from framework.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = main(['completion', 'bash'])\n"
            "print('rc', rc, 'frozen', gc.get_freeze_count())\n")
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "rc 0 frozen 0"


def test_a_controller_session_of_the_suite_never_imports_hypothesis(tmp_path):
    """pyproject's ``-p no:hypothesispytest``: that plugin imports all of hypothesis at the terminal summary (~1 s
    of every ``pytest suites/cam`` on the lab); nothing of ours uses it."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("_hypothesis_pytestplugin") is None:
        pytest.skip("hypothesis is not installed here: nothing to keep out")
    out = tmp_path / "modules.json"
    code = _DUMP + ("import pytest\n"
                    f"rc = pytest.main(['suites/cam', '--collect-only', '-q', '-p', 'no:cacheprovider'])\n"
                    f"dump({str(out)!r})\n"
                    "sys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    modules = json.loads(out.read_text())["modules"]
    assert "_hypothesis_pytestplugin" not in modules and "hypothesis" not in modules
