"""Secrets through a full run (issue 17, item 3): passwords that are common words or numbers, or hold XML/JSON
metacharacters or non-ASCII, configured as host ``passwd`` and as secret ``launch.env`` values of one real
``pytest`` run through the camit plugin on the lab.

The run leaks every secret on purpose where a real one ends up: each rank prints them to its log and one rank
fails with them in its exit message (rank log, cluster.xml's log tail), the controller test records them as a
property and fails with them in its assertion (pytest's junit.xml). ``camit run`` of the same ranks too (its
folder: rank logs, launch record). Expected:

- every report file stays valid — cluster.xml and junit.xml junit-10 (what Jenkins' xunit plugin reads),
  every ``.json`` parses, index.html parses with its inlined script and style untouched;
- no report file holds a secret where it leaked, in any encoding (raw, XML/HTML entities, JSON escapes);
- the ranks still received every secret value (each writes a sha256 of it);
- no process on any host ever had a secret (or the name of a secret variable) in its command line, sampled
  from ``/proc/*/cmdline`` for the whole run (the lab's hosts share this machine's PID namespace).

One run for all the passwords: each is its own secret variable.
"""

from __future__ import annotations

import hashlib
import html
import html.parser
import json
import os
import secrets
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from framework.report.junit import validate_junit
from tests.support.camit_labtools import REPO

pytestmark = pytest.mark.lab

TOKEN = secrets.token_hex(4)
#: common words and numbers (they appear in tags, attribute names, literals and numbers of the report files)
COMMON = ["test", "host", "error", "true", "123456"]
#: values that survive a text replacement after escaping, and one no file can hold by chance
DISTINCT = ['Pw&<"x>9', "pässwörd€", f"tok-{TOKEN}"]
LAUNCH_SECRETS = {f"CAMIT_SECRET_{i}": v for i, v in enumerate(COMMON + DISTINCT)}
#: host passwords (the lab authenticates with keys; the passwords are secrets the report must not hold)
HOST_PASSWORDS = {"host1": 'Pw&<"x>9', "host2": "pässwörd€", "host3": "123456", "host4": "true"}

RANK_SCRIPT = """\
import hashlib, os, sys, time
names = sorted(k for k in os.environ if k.startswith("CAMIT_SECRET_"))
for k in names:
    print(f"HASH {k} {hashlib.sha256(os.environ[k].encode()).hexdigest()}", flush=True)
    print(f"LEAK {k}=[{os.environ[k]}]", flush=True)
if os.environ.get("RANK") == "1":
    time.sleep(1)
    sys.exit("rank 1 LEAK " + " ".join(f"[{os.environ[k]}]" for k in names))
"""
CONTROLLER_TEST = """\
import json, os
from framework.launch import Target


def test_leaky(env, launcher, record_property):
    leak = " ".join(f"[{v}]" for v in json.loads(os.environ["CAMIT_TEST_SECRETS"]))
    leak += " " + " ".join(f"[{h.password.reveal()}]" for h in env.hosts.values() if h.password is not None)
    record_property("leak", leak)
    result = launcher.run(Target(script=os.environ["CAMIT_TEST_RANK_SCRIPT"]), timeout=180)
    assert result.ok, "LEAK " + leak
"""


class _CmdlineWatch(threading.Thread):
    """Samples every process's command line on this machine until stopped; keeps what showed a secret."""

    def __init__(self, needles: list[bytes]) -> None:
        super().__init__(daemon=True)
        self.needles = needles
        self.hits: dict[int, bytes] = {}
        self.supervisors = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for d in Path("/proc").iterdir():
                if not d.name.isdigit():
                    continue
                try:
                    cmd = (d / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"supervisor" in cmd and b"--status-dir" in cmd:
                    self.supervisors += 1
                if any(n in cmd for n in self.needles):
                    self.hits[int(d.name)] = cmd
            self.done.wait(0.02)


class _Values(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: list[str] = []
        self.script: list[str] = []
        self.style: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        self._in = tag
        self.values += [v for _, v in attrs if v]

    def handle_endtag(self, tag):  # noqa: ANN001
        self._in = None

    def handle_data(self, data):  # noqa: ANN001
        {"script": self.script, "style": self.style}.get(self._in or "", self.values).append(data)


def _xml_values(path: Path) -> list[str]:
    out = []
    for el in ET.parse(path).getroot().iter():
        out += [t for t in (el.text, el.tail) if t] + list(el.attrib.values())
    return out


def _json_values(doc) -> list[str]:  # noqa: ANN001
    if isinstance(doc, dict):
        return [str(k) for k in doc] + [v for x in doc.values() for v in _json_values(x)]
    if isinstance(doc, list):
        return [v for x in doc for v in _json_values(x)]
    return [doc] if isinstance(doc, str) else []


def _encodings(value: str) -> list[bytes]:
    forms = {value, html.escape(value), html.escape(value, quote=False), json.dumps(value)[1:-1],
             json.dumps(value, ensure_ascii=False)[1:-1], value.encode("ascii", "xmlcharrefreplace").decode()}
    return [f.encode() for f in forms]


def _leaked(value: str) -> list[str]:
    """How a leaked secret is written by the run (``[value]``): a common word is only a leak in that form."""
    return [f"[{value}]"] if value in COMMON else [value]


@pytest.fixture
def leaky(env_variant, tmp_path):
    """The env with every secret (launch variables and host passwords) and the rank script that leaks them."""
    def change(doc):
        doc.setdefault("launch", {})["env"] = dict(LAUNCH_SECRETS)
        for host, pw in HOST_PASSWORDS.items():
            doc["host_info"][host]["passwd"] = pw

    env = env_variant(change, "secrets.yaml")
    script = tmp_path / "rank_leak.py"
    script.write_text(RANK_SCRIPT)
    return env, script


def _watched(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], _CmdlineWatch]:
    """Run ``argv`` while every command line on the machine is sampled for a secret or a secret's name."""
    watch = _CmdlineWatch([v.encode() for v in DISTINCT] + [f"{k}=".encode() for k in LAUNCH_SECRETS])
    watch.start()
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=420,
                              env={**os.environ, "PYTHONPATH": str(REPO), **env})
    finally:
        watch.done.set()
        watch.join(5)
    # ps on the hosts during the run: the supervisors were seen, never a secret or a secret's name
    assert watch.supervisors, "the sampler never saw a supervisor: it sampled nothing of the run"
    assert watch.hits == {}, {p: c.replace(b"\0", b" ")[:300] for p, c in watch.hits.items()}
    return proc, watch


def _check_folder(folder: Path, ranks: int) -> dict[Path, list[str]]:
    """Every file of the run folder parses, holds no secret where one leaked, in any encoding, and the ranks
    got every secret (their logs hold its sha256); returns each file's values."""
    logs = sorted(folder.rglob("rank*.log"))
    assert len(logs) == ranks, logs
    for log in logs:
        text = log.read_text(encoding="utf-8")
        for name, value in LAUNCH_SECRETS.items():
            assert f"HASH {name} {hashlib.sha256(value.encode()).hexdigest()}" in text, (log, name)
        assert "LEAK CAMIT_SECRET_0=[***]" in text, log  # the leak happened and was scrubbed
    files = [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")]
    values: dict[Path, list[str]] = {}
    for p in files:
        if p.suffix == ".json":
            values[p] = _json_values(json.loads(p.read_text(encoding="utf-8")))
        elif p.suffix == ".xml":
            values[p] = _xml_values(p)
        elif p.suffix == ".html":
            parser = _Values()
            parser.feed(p.read_text(encoding="utf-8"))
            parser.close()
            values[p] = parser.values
            if p.name == "index.html":  # no inline script or style; its own, beside it, are not secrets to scrub
                assert parser.script == [] and parser.style == []
                for asset in ("report.js", "report.css"):
                    assert (p.parent / asset).read_bytes() == (REPO / "framework/data" / asset).read_bytes()
        else:
            values[p] = [p.read_text(encoding="utf-8", errors="replace")]
    secret_values = list(LAUNCH_SECRETS.values()) + list(HOST_PASSWORDS.values())
    for p, vals in values.items():
        for secret in secret_values:
            for form in _leaked(secret):
                assert not [v for v in vals if form in v], (p.relative_to(folder).as_posix(), secret)
        raw = p.read_bytes()
        for secret in DISTINCT + list(HOST_PASSWORDS.values())[:2]:
            assert not [f for f in _encodings(secret) if f in raw], (p.relative_to(folder).as_posix(), secret)
    return values


def test_no_secret_reaches_a_report_file_or_a_command_line(lab, leaky, tmp_path):
    env, script = leaky
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    (ctl / "test_leaky.py").write_text(CONTROLLER_TEST)
    reports = tmp_path / "reports"
    proc, _ = _watched([sys.executable, "-m", "pytest", "test_leaky.py", "--env", str(env), "--no-deploy",
                        "--report-dir", str(reports), "-p", "no:cacheprovider", "-q"], ctl,
                       {"CAMIT_TEST_RANK_SCRIPT": str(script),
                        "CAMIT_TEST_SECRETS": json.dumps(list(LAUNCH_SECRETS.values()))})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "1 failed" in proc.stdout, out[-4000:]
    assert "Traceback (most recent call last)" not in proc.stderr, proc.stderr[-3000:]
    folder = (reports / "latest").resolve()
    for name in ("junit.xml", "cluster.xml"):  # what Jenkins' xunit plugin reads
        assert validate_junit(folder / name) == [], name
    values = _check_folder(folder, ranks=4)
    assert {"junit.xml", "cluster.xml", "manifest.json", "index.html"} <= {p.name for p in values}, sorted(values)
    assert any("[***]" in v for v in values[folder / "cluster.xml"]), "the rank's leak is not in cluster.xml"
    assert any("[***]" in v for v in values[folder / "junit.xml"]), "the controller's leak is not in junit.xml"


def test_camit_run_keeps_the_secrets_out_of_its_folder_and_command_lines(lab, leaky, tmp_path):
    env, script = leaky
    reports = tmp_path / "reports"
    proc, _ = _watched([sys.executable, "-m", "framework.cli", "run", "--env", str(env), "--hosts", "host1,host2",
                        "--nproc-per-node", "1", "--report-dir", str(reports), "--timeout", "180", "--json", "--",
                        str(script)], REPO, {})
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(proc.stdout)["failure_rank"] == 1
    folder = (reports / "latest").resolve()
    values = _check_folder(folder, ranks=2)
    assert [p for p in values if p.name.startswith("launch-")], sorted(values)
    assert any("rank 1 LEAK [***]" in v for p, vs in values.items() if p.name == "rank1.log" for v in vs)
