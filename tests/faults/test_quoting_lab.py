"""Hostile text end to end: a workdir, a script path, its arguments and an env value with spaces, quotes,
``$()``, backticks, ``;`` and unicode reach the host literally through ``camit exec`` and ``camit run``.

A ``$(touch …)`` or backtick that got evaluated would leave a file in the host's /tmp, which the
footprint check reports; the values themselves must come back byte for byte.
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
import sys
import time

import pytest

from framework.report.junit import validate_junit
from tests.support.camit_labtools import REPO, Footprint, wait_none_left

pytestmark = pytest.mark.lab

TOKEN = secrets.token_hex(3)
HOSTILE = [
    "two words",
    "it's",
    'say "hi"',
    f"$(touch /tmp/camit-dollar-{TOKEN})",
    f"`touch /tmp/camit-tick-{TOKEN}`",
    "a; touch /tmp/camit-semi",
    "ünïcødé → ∑ 测试",
    "$HOME",
    "--not-an-option",
    "",
]
SCRIPT = """\
import json, os, sys
print("ARGS " + json.dumps({"argv": sys.argv[1:], "env": os.environ.get("CAMIT_HOSTILE"),
                           "file": os.path.abspath(__file__)}, ensure_ascii=True), flush=True)
"""


def camit(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def hostile_env(env_variant, workdir_name):
    workdir = f"/var/tmp/camit/{workdir_name}/wd it's \"q\" $(touch x) `id`; ü"

    def change(doc):
        doc["defaults"]["workdir"] = workdir
        doc.setdefault("launch", {})["env"] = {"CAMIT_HOSTILE": " | ".join(HOSTILE)}

    return env_variant(change, "hostile.yaml"), workdir


def test_exec_delivers_a_quoted_script_literally(lab, hostile_env, workdir_name):
    env, _ = hostile_env
    fp = Footprint(lab, ["host1", "host2"], workdir_name)
    script = shlex.join(["printf", "%s\\n", *HOSTILE])
    t0 = time.monotonic()
    proc = camit("exec", "--env", str(env), "--hosts", "host1,host2", "--json", "--", script)
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 0, proc.stderr
    results = {r["host"]: r for r in json.loads(proc.stdout)}
    for host in ("host1", "host2"):
        assert results[host]["stdout"].split("\n")[:-1] == HOSTILE
    assert fp.strays() == {}


def test_run_of_a_script_at_a_hostile_path_with_hostile_args(lab, hostile_env, workdir_name, tmp_path):
    env, workdir = hostile_env
    where = tmp_path / "dir with 'q' \"dq\" $(x) `y`; ü"
    where.mkdir()
    script = where / "my script ü.py"
    script.write_text(SCRIPT)
    reports = tmp_path / "reports"
    fp = Footprint(lab, ["host1", "host2"], workdir_name)
    t0 = time.monotonic()
    proc = camit("run", "--env", str(env), "--hosts", "host1,host2", "--nproc-per-node", "1", "--report-dir",
                 str(reports), "--timeout", "180", "--json", "--", str(script), *HOSTILE)
    assert time.monotonic() - t0 < 240
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["ok"] and result["world_size"] == 2
    folder = (reports / "latest").resolve()
    for rank, host in ((0, "host1"), (1, "host2")):
        log = (folder / host / f"rank{rank}.log").read_text(encoding="utf-8")
        line = next(ln for ln in log.splitlines() if ln.startswith("ARGS "))
        got = json.loads(line[5:])
        assert got["argv"] == HOSTILE
        assert got["env"] == " | ".join(HOSTILE)
        assert got["file"].startswith(workdir + "/targets/") and got["file"].endswith("/my script ü.py")
    assert (folder / f"launch-{result['launch_id']}.json").exists()
    # a passing camit run finishes its report folder too (issue 16, item 10), the hostile argv kept as given
    assert result["report"] == str(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["command"]["argv"][-len(HOSTILE):] == HOSTILE
    assert validate_junit(folder / "cluster.xml") == [] and (folder / "index.html").is_file()
    assert wait_none_left(result["launch_id"], 5) == []
    assert fp.strays() == {}
    # the run folder on each host was removed after the fetch; the shipped scripts stay in the workdir
    for host in ("host1", "host2"):
        inside = fp.in_workdir(host)
        assert not [p for p in inside if "/runs/" in p and p.count("/") > 2], inside
