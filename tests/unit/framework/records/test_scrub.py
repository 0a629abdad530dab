"""Secrets out of the report as values (issue 17, item 3), and secret launch variables on the supervisor's stdin.

A run folder built by ``tests/data/reports/sample_run.py`` gets a password leaked into a rank log, a rank's
JUnit, pytest's junit.xml, the deploy manifest and the launch record; :func:`framework.report.finalize` with
an env holding that password as a host ``passwd`` must leave every file valid (junit-10 for both XML files,
JSON that parses, the page's own script intact) and hold the password nowhere it leaked, in any encoding —
for passwords that are common words and numbers as much as for ones with markup characters or non-ASCII.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from framework import report
from framework.config.effective import Secret
from framework.records import scrub
from framework.records.scrub import Scrubber, scrub_doc, scrub_folder, scrub_tree
from framework.remote import protocol
from framework.report.junit import validate_junit
from tests.support.builders import make_env, sample_run

REPO = Path(__file__).resolve().parents[4]
DATA = REPO / "tests" / "data"
PASSWORDS = ["test", "host", "error", "true", "123456", 'Pw&<"x>9', "pässwörd€"]


sr = sample_run()


@pytest.fixture(scope="module")
def junits(tmp_path_factory):
    base = tmp_path_factory.mktemp("junit")
    return (sr.pytest_junit(base / "pass", fail=False, name="rank"),
            sr.pytest_junit(base / "fail", fail=True, name="rank"))


def _leak(run: Path, pw: str) -> str:
    marker = f"[{pw}]"
    with open(run / "node1" / "rank0.log", "a", encoding="utf-8") as fh:
        fh.write(f"connecting with password {marker}\n")
    for xml in (run / "node1" / "rank1.xml", run / "junit.xml"):
        tree = ET.parse(xml)
        failure = next(tree.getroot().iter("failure"))
        failure.set("message", f"login failed {marker}")
        failure.text = f"{failure.text}\nlogin failed {marker}"
        tree.write(xml, encoding="utf-8", xml_declaration=True)
    deploy = json.loads((run / "deploy-manifest.json").read_text())
    deploy["hosts"]["node2"]["error"] = f"sudo said {marker}"
    (run / "deploy-manifest.json").write_text(json.dumps(deploy))
    launch = next(run.glob("launch-*.json"))
    record = json.loads(launch.read_text())
    record["failure"] = f"rank 1 failed: {marker}"
    launch.write_text(json.dumps(record))
    return marker


def _values(path: Path) -> list[str]:
    if path.suffix == ".xml":
        return [v for el in ET.parse(path).getroot().iter() for v in (el.text, el.tail, *el.attrib.values()) if v]
    if path.suffix == ".json":
        def walk(doc: object) -> list[str]:
            if isinstance(doc, dict):
                return [str(k) for k in doc] + [v for x in doc.values() for v in walk(x)]
            if isinstance(doc, list):
                return [v for x in doc for v in walk(x)]
            return [doc] if isinstance(doc, str) else []
        return walk(json.loads(path.read_text(encoding="utf-8")))
    return [path.read_text(encoding="utf-8", errors="replace")]


@pytest.mark.parametrize("pw", PASSWORDS)
def test_a_password_leaked_everywhere_leaves_every_report_file_valid_and_free_of_it(tmp_path, junits, pw):
    run = sr.build(tmp_path / "reports", *junits, controller_junit=junits[1])
    marker = _leak(run, pw)
    env = make_env({"node1": {"passwd": pw}, "node2": {}})
    report.finalize(run, env=env, argv=["pytest", "suites/cam"], status="failed", error=f"boom {marker}")
    for name in ("cluster.xml", "junit.xml"):
        assert validate_junit(run / name) == [], name
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["hosts"] and not manifest.get("report_problems")
    page = (run / "index.html").read_text(encoding="utf-8")
    for asset in ("report.js", "report.css"):  # the page's script and stylesheet, beside it, untouched
        assert (run / asset).read_bytes() == (REPO / "framework/data" / asset).read_bytes()
    files = [p for p in run.rglob("*") if p.is_file() and not p.name.startswith(".") and "cores" not in p.parts]
    for p in files:
        assert not [v for v in _values(p) if marker in v], p.relative_to(run)
        raw = p.read_bytes()
        forms = {marker, html.escape(marker), html.escape(marker, quote=False), json.dumps(marker)[1:-1]}
        assert not [f for f in forms if f.encode() in raw], p.relative_to(run)
    # the leak was there and is scrubbed, not dropped
    assert "[***]" in (run / "node1" / "rank0.log").read_text()
    assert any("[***]" in v for v in _values(run / "cluster.xml"))
    assert any("[***]" in v for v in _values(run / "junit.xml"))
    assert "[***]" in html.unescape(page)
    assert "[***]" in (run / "summary.txt").read_text()  # the build description: the error and the failures
    assert "[***]" in json.dumps(json.loads((run / "deploy-manifest.json").read_text()))


def test_values_are_scrubbed_never_names_keys_or_literals():
    scrub = Scrubber(["error", "true", "123456", "status"])
    doc = {"status": "error", "error": "an error", "ok": True, "pid": 123456, "list": ["true", 1], "true": "x"}
    assert scrub_doc(doc, scrub) == {"status": "error", "error": "an ***", "ok": True, "pid": 123456,
                                     "list": ["***", 1], "true": "x"}
    top = ET.fromstring('<testsuite name="error" tests="1" time="123456"><testcase name="t" classname="c">'
                        '<error message="true error" type="error">error text</error></testcase></testsuite>')
    assert scrub_tree(top, scrub)
    assert ET.tostring(top, encoding="unicode") == (
        '<testsuite name="error" tests="1" time="123456"><testcase name="t" classname="c">'
        '<error message="*** ***" type="error">*** text</error></testcase></testsuite>')
    assert not Scrubber([]) and scrub_folder("/nonexistent", Scrubber(["x"])) == []


def test_binary_files_and_symlinks_are_left_alone(tmp_path):
    core = tmp_path / "node1" / "cores" / "core.123"
    core.parent.mkdir(parents=True)
    core.write_bytes(b"\x7fELF\0\0secret")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("secret")
    (tmp_path / "link.txt").symlink_to(outside)
    (tmp_path / "a.log").write_text("the secret\n")
    backtrace = core.parent / "core.123.bt.txt"  # a core's backtrace is text: scrubbed
    backtrace.write_text("#0 login (pw=secret)\n")
    assert sorted(scrub_folder(tmp_path, Scrubber(["secret"]))) == ["a.log", "node1/cores/core.123.bt.txt"]
    assert backtrace.read_text() == "#0 login (pw=***)\n"
    assert core.read_bytes() == b"\x7fELF\0\0secret" and outside.read_text() == "secret"
    assert (tmp_path / "a.log").read_text() == "the ***\n"


def _supervisor(tmp_path: Path, *, env_stdin: bool, stdin: bytes) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    out = tmp_path / "seen"
    argv = [sys.executable, str(REPO / "framework/remote/supervisor.py"), "--run-id", "t-env-stdin",
            "--status-dir", str(tmp_path / "st"), "--deadline", "60", *(["--env-stdin"] if env_stdin else []), "--",
            "sh", "-c", f'printf %s "$CAMIT_SECRET_X" > {out}']
    # stdin stays open until the supervisor says DONE (its EOF would end the run), as the controller's channel
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            proc.stdin.write(stdin)
            proc.stdin.flush()
            lines = []
            for line in proc.stdout:  # the supervisor's own --deadline bounds this
                lines.append(line)
                if line.strip() == b"DONE":
                    break
            proc.stdin.close()
            proc.wait(30)
            stderr = proc.stderr.read()
        finally:
            proc.kill()
    return subprocess.CompletedProcess(argv, proc.returncode, b"".join(lines), stderr), out


def test_the_supervisor_takes_its_secret_variables_from_stdin(tmp_path):
    value = "Pw&<\"x>9 pässwörd€ $(id) '"
    proc, out = _supervisor(tmp_path, env_stdin=True, stdin=protocol.env_line({"CAMIT_SECRET_X": value}))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8") == value
    assert b"EXIT 0" in proc.stdout and proc.stdout.rstrip().endswith(b"DONE")


def test_the_supervisor_without_its_env_line_runs_nothing(tmp_path):
    proc, out = _supervisor(tmp_path, env_stdin=True, stdin=b"HB\n")
    assert proc.returncode == 2 and b"EXIT 2" in proc.stdout and not out.exists()
    assert b"no ENV line" in proc.stderr


def test_another_page_in_the_folder_has_its_text_scrubbed_never_its_markup_or_script(tmp_path):
    page = tmp_path / "coverage" / "index.html"
    page.parent.mkdir()
    page.write_text('<html><script>var ok = true;</script><p class="true">is true &amp; Pw&amp;&lt;x</p></html>')
    assert scrub_folder(tmp_path, Scrubber(["true", "Pw&<x"])) == ["coverage/index.html"]
    assert page.read_text() == '<html><script>var ok = true;</script><p class="true">is *** &amp; ***</p></html>'


def test_the_coverage_probe_line_holds_no_secret_variable():
    from framework.config.effective import Secret
    from framework.ranksuite.coverage import probe_argv

    argv = probe_argv("/usr/bin/python3", env={"HCCL_TOKEN": Secret("s3cret"), "X": "1"})
    assert "s3cret" not in " ".join(argv) and "HCCL_TOKEN" not in " ".join(argv) and "X=1" in argv[2]


def test_a_log_with_nul_bytes_and_escaped_secrets_is_scrubbed_every_form(tmp_path):
    """Security review 3, #10 as the review ran it: a rank log with a NUL (a progress bar) was never scrubbed,
    and a torchrun log printing the environment as JSON kept ``Pw\\"\\u00e49x``; also repr and URL-encoded."""
    token, pw = "tok-SUPERSECRET-42", 'Pw"ä9x'
    node = tmp_path / "h1"
    node.mkdir()
    (node / "rank0.log").write_bytes(b"step 1\0\0 binary progress bar\nenv: API_TOKEN=" + token.encode() + b"\n")
    (node / "torchrun.log").write_text("env " + json.dumps({"DB_PASSWORD": pw}) + "\n")
    (node / "repr.log").write_text(f"environ({ {'DB_PASSWORD': pw}!r}) {pw.encode()!r}\n")
    (node / "url.log").write_text("GET /login?pw=Pw%22%C3%A49x&q=Pw%22%C3%A49x+ok\n")
    (node / "json-unicode.log").write_text(json.dumps({"pw": pw}, ensure_ascii=False) + "\n")
    core = node / "core.4242"  # an ELF core is the one thing left as it is (gzip, xz... likewise)
    core.write_bytes(b"\x7fELF\2\1\1\0" + token.encode())
    done = scrub_folder(tmp_path, Scrubber([token, pw]))
    assert sorted(done) == ["h1/json-unicode.log", "h1/rank0.log", "h1/repr.log", "h1/torchrun.log", "h1/url.log"]
    for path in node.glob("*.log"):
        raw = path.read_bytes()
        for leaked in (token, pw, json.dumps(pw)[1:-1], repr(pw)[1:-1], "Pw%22%C3%A49x", "\\xc3\\xa4"):
            assert leaked.encode() not in raw, (path.name, raw)
        assert b"***" in raw
    assert (node / "rank0.log").read_bytes() == b"step 1\0\0 binary progress bar\nenv: API_TOKEN=***\n"
    assert token.encode() in core.read_bytes()
    assert Scrubber([pw]).text('{"p": "Pw\\"\\u00e49x"}') == '{"p": "***"}'


def test_the_env_gives_its_host_passwords_and_secret_launch_variables():
    """Only values that are secrets (``reveal()``): a plain launch variable, a host without a
    password and a non-env object give none."""
    hosts = {"h1": SimpleNamespace(password=Secret("pw-one")), "h2": SimpleNamespace()}
    launch = SimpleNamespace(env={"TOKEN": Secret("tok-two"), "PLAIN": "visible"})
    env = SimpleNamespace(hosts=hosts, launch=launch)
    assert Scrubber.from_env(env)("pw-one tok-two visible") == "*** *** visible"
    assert not Scrubber.from_env(None) and not Scrubber.from_env({"hosts": {}})


def test_a_file_that_cannot_be_scrubbed_is_a_warning_and_the_sweep_goes_on(tmp_path, monkeypatch,
                                                                            caplog):
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_text("pw=hunter22\n")
    real = scrub.scrub_file

    def failing_on_a(path: Path, scrubber: Scrubber) -> bool:
        if path.name == "a.log":
            raise OSError("disk gone")
        return real(path, scrubber)

    monkeypatch.setattr(scrub, "scrub_file", failing_on_a)
    assert scrub_folder(tmp_path, Scrubber(["hunter22"])) == ["b.log"]
    assert "cannot scrub" in caplog.text and "disk gone" in caplog.text
    assert (tmp_path / "b.log").read_text() == "pw=***\n"
