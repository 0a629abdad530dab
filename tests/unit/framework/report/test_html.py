"""index.html: self-contained, and it really renders — checked in headless Chromium, also under Jenkins'
default Content-Security-Policy for archived files (served over HTTP on 127.0.0.1 with that header).

The Chromium tests skip with a reason when no ``chromium`` is installed (Debian:
``apt-get install -y chromium``; the Makefile installs it for CI).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import re
import shutil
import struct
import subprocess
import threading
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from framework import report
from framework.report import html as report_html
from framework.report.model import Phase, RunFacts
from tests.support.builders import sample_run

DATA = Path(__file__).resolve().parents[3] / "data"


sr = sample_run()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
#: Jenkins' default Content-Security-Policy for files it serves from a build (archived artifacts, workspace)
JENKINS_CSP = "sandbox; default-src 'none'; img-src 'self'; style-src 'self';"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("html")
    junits = (sr.pytest_junit(base / "pass", fail=False, name="rank"),
              sr.pytest_junit(base / "fail", fail=True, name="rank"))
    path: Path = sr.build(base / "reports", *junits, controller_junit=junits[1])
    report.finalize(path, cores=[sr.core_for(path)], seed=1234, started=sr.T0, ended=sr.T0 + 61, status="failed",
                    argv=["pytest", "tests/cluster", "--env-file", "env/lab.yaml"])
    return path


def chromium(args: list[str], tmp_path: Path, profile: str = "chromium-profile") -> subprocess.CompletedProcess:
    assert CHROMIUM is not None  # the tests that call it are skipped without it (needs_chromium)
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / profile}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)


@contextlib.contextmanager
def serve(root: Path, csp: str | None) -> Iterator[str]:
    """The folder ``root`` over HTTP on 127.0.0.1 (an ephemeral port), every response with the
    ``Content-Security-Policy`` header ``csp`` when given; yields the base URL."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def end_headers(self) -> None:
            if csp:
                self.send_header("Content-Security-Policy", csp)
            self.send_header("Cache-Control", "no-store")
            super().end_headers()

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def png_pixels(path: Path, max_rows: int) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (the first ``max_rows`` rows) with the standard library."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
        elif kind == b"IDAT":
            idat += body
    bpp = 3 if color == 2 else 4
    stride = width * bpp
    raw = zlib.decompressobj().decompress(idat, (stride + 1) * min(height, max_rows))
    rows, prev = [], bytearray(stride)
    for y in range(min(height, max_rows)):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif kind == 4:
            for i in range(stride):
                a, b, c = (line[i - bpp] if i >= bpp else 0), prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


class Dom(HTMLParser):
    """Elements of a dumped DOM as (tag, attributes) plus all text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, **want: str) -> list[dict[str, str]]:
        out = []
        for t, attrs in self.elements:
            if t == tag and all(re.fullmatch(v, attrs.get(k.rstrip("_").replace("_", "-"), "") or "")
                                for k, v in want.items()):
                out.append(attrs)
        return out


def test_index_loads_nothing_from_outside(run):
    html = (run / "index.html").read_text()
    assert not re.search(r"\b(src|href)\s*=\s*['\"]?(https?:)?//", html)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", html)
    # what it loads is its own stylesheet and script, copied beside it from the package
    assert re.findall(r"<link\b[^>]*>", html) == ["<link rel='stylesheet' href='report.css'>"]
    assert re.findall(r"<script\b[^>]*>", html) == ["<script src='report.js' defer>"]
    for name in ("report.css", "report.js"):
        assert (run / name).read_bytes() == (Path(report.__file__).parents[1] / "data" / name).read_bytes()
    for href in re.findall(r"href='([^'#]+)'", html):  # every link stays inside the run folder
        assert not href.startswith(("/", "..")) and (run / href).exists(), href


def test_index_has_no_inline_style_or_script(run):
    """A Content-Security-Policy with ``style-src 'self'`` (Jenkins' default) blocks ``<style>`` elements,
    ``style=`` attributes and inline scripts: the page has none; positions and colours are SVG
    attributes and classes."""
    html = (run / "index.html").read_text()
    assert not re.search(r"<style\b", html, re.I)
    assert not re.search(r"<[a-z][^>]*\sstyle\s*=", html, re.I)
    assert not re.search(r"<script\b(?![^>]*\bsrc=)", html, re.I)
    assert not re.search(r"\son[a-z]+\s*=", html, re.I)  # no inline event handlers either
    assert "<svg class='tl-track'" in html and re.search(r"<svg class='seg ph-deploy[^']*' data-phase='deploy' "
                                                          r"x='[0-9.]+%' y='\d+' width='[0-9.]+%'", html)


def test_index_of_an_interrupted_run_without_launches(tmp_path):
    report.finalize(tmp_path, status="interrupted", error="KeyboardInterrupt")
    html = (tmp_path / "index.html").read_text()
    assert "id='run-error'" in html and "KeyboardInterrupt" in html
    assert "No launch was recorded in this run" in html and "No phase was recorded" in html


@needs_chromium
def test_index_renders_in_headless_chromium(run, tmp_path):
    url = (run / "index.html").resolve().as_uri()
    shot = tmp_path / "index.png"
    chromium(["--window-size=1280,1100", f"--screenshot={shot}", url], tmp_path)
    width, bpp, rows = png_pixels(shot, max_rows=700)
    assert width == 1280
    pixels = [row[i:i + 3] for row in rows[::4] for i in range(0, len(row), bpp * 4)]
    colours = set(pixels)
    background = max(colours, key=pixels.count)
    drawn = sum(p != background for p in pixels) / len(pixels)
    assert len(colours) > 50 and drawn > 0.10, (len(colours), drawn)  # not blank: text, timeline, cells
    # the outcome colours of the rank grid are on screen (pass green, fail orange, crash red)
    for colour in (b"\x2f\x8f\x46", b"\xd9\x82\x2b", b"\xc0\x39\x2b"):
        assert colour in colours, colour.hex()

    dom = Dom(chromium(["--dump-dom", url], tmp_path).stdout)
    (body,) = dom.find("body")
    assert body.get("data-js") == "ready"  # the inline script ran without an error
    cells = {(c["data-host"], c["data-rank"]): c["data-outcome"] for c in dom.find("div", class_="rank-cell .*")}
    assert cells == {("node1", "0"): "pass", ("node1", "1"): "fail", ("node2", "2"): "crash", ("node2", "3"): "killed"}
    for href in ("node1/rank0.log", "node1/rank0.xml", "node1/rank1.xml", "node2/rank2.log", "node2/rank3.log",
                 "#core-node2-4242", "#rank-run-2", "node2/cores/core.python3.4242", "cluster.xml", "junit.xml",
                 "manifest.json", "node2/dmesg.txt"):
        assert dom.find("a", href=re.escape(href)), href
    assert dom.find("details", id="core-node2-4242") and dom.find("details", id="rank-run-2")
    text = " ".join(dom.text)
    assert "cam::dispatch_prefill" in text and "Fatal Python error: Segmentation fault" in text
    assert {r["data-host"] for r in dom.find("div", class_="tl-row")} == {"node1", "node2"}
    phases = {s["data-phase"] for s in dom.find("svg", class_="seg .*")}
    assert phases == {"connect", "deploy", "launch", "run", "collect", "teardown"}
    assert "python -m pytest tests/cluster --env-file env/lab.yaml --random-seed 1234" in text


def screenshot(shot: Path, height: int) -> tuple[list[bytes], set[bytes]]:
    """The screenshot's rows (bytes each) and the set of its RGB colours."""
    width, bpp, rows = png_pixels(shot, max_rows=height)
    assert width == 1280 and len(rows) == height
    return rows, {row[i:i + 3] for row in rows for i in range(0, len(row), bpp)}


@needs_chromium
def test_index_under_jenkins_csp_renders_as_without_it(run, tmp_path):
    """Served with Jenkins' default CSP the page looks exactly as without it (the stylesheet beside it is
    'self'; the timeline's positions are SVG attributes), and Chromium refuses nothing: only the script
    is blocked (``sandbox`` without ``allow-scripts``), and the page does not need it."""
    shots, logs, doms = {}, {}, {}
    for name, csp in (("plain", None), ("jenkins", JENKINS_CSP)):
        with serve(run, csp) as url:
            shots[name] = tmp_path / f"{name}.png"
            # the window 200 px taller than the rows compared: headless Chromium sometimes gives a page less of
            # the window than asked (CI: the plain page painted to y=1016 of 1100, the Jenkins one to the end)
            done = chromium(["--window-size=1280,1300", f"--screenshot={shots[name]}", "--dump-dom",
                             "--enable-logging=stderr", "--v=0", url + "index.html"], tmp_path,
                            profile=f"profile-{name}")
            logs[name], doms[name] = done.stderr, Dom(done.stdout)
    # Chromium's console says "Refused to apply inline style …" or "Applying inline style violates the
    # following Content Security Policy directive …", depending on its version
    refused = [line for name in logs for line in logs[name].splitlines()
               if "Refused" in line or "Content Security Policy" in line]
    assert not refused, refused
    # the header really reached Chromium: the script ran without it and was blocked with it
    (plain_body,), (csp_body,) = doms["plain"].find("body"), doms["jenkins"].find("body")
    assert plain_body.get("data-js") == "ready" and "data-js" not in csp_body
    assert "Blocked script execution" in logs["jenkins"] and "allow-scripts" in logs["jenkins"]
    (plain_rows, _), (csp_rows, colours) = screenshot(shots["plain"], 1100), screenshot(shots["jenkins"], 1100)
    differing = [y for y, (a, b) in enumerate(zip(plain_rows, csp_rows)) if a != b]
    assert not differing, f"{len(differing)} screenshot rows differ, first at y={differing[0]}"
    # and what both show is the styled page: the phase colours of the timeline and the outcome colours
    for colour in ("3d7fbf", "8a63c6", "2f8f46", "d9822b", "c0392b"):  # deploy, launch, pass/run, fail, crash
        assert bytes.fromhex(colour) in colours, colour


def test_a_failed_tests_failed_commands_are_in_the_page(tmp_path):
    """The "failed commands" section of a controller test's failure text (a gcc error, `command not found`)
    is in index.html under the test's message, escaped; a failure without one shows the message alone."""
    (tmp_path / "junit.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2" failures="2" '
        'errors="0" skipped="0"><testcase classname="test_suites.UMS.test" name="test_compile">'
        '<failure message="RuntimeError: Test case failed with return code: 1">Traceback ...\n'
        '--- failed commands (last first) ---\nhost1: cd app/mini &amp;&amp; gcc -o mini mini.c (exit 1)\n'
        "mini.c:1:10: fatal error: mini_api.h: No such file or directory &lt;b&gt;</failure></testcase>"
        '<testcase classname="t" name="test_plain"><failure message="AssertionError: 1 != 2">x</failure>'
        "</testcase></testsuite></testsuites>")
    report.finalize(tmp_path, status="failed")
    html = (tmp_path / "index.html").read_text()
    assert "<summary>failed commands</summary>" in html
    assert "mini_api.h: No such file or directory &lt;b&gt;" in html and "<b>" not in html.split("failed commands")[-1]
    assert html.count("<summary>failed commands</summary>") == 1


def test_the_timeline_spans_its_phases_widened_to_the_runs_recorded_start_and_end():
    phases = [Phase("node1", "deploy", 110.0, 150.0), Phase("node2", "run", 120.0, 160.0)]
    scale = report_html._timeline_scale(phases, RunFacts(started=100.0, ended=200.0))
    assert (scale.t0, scale.span) == (100.0, 100.0)
    # a manifest without times: the phases' own span
    scale = report_html._timeline_scale(phases, RunFacts())
    assert (scale.t0, scale.span) == (110.0, 50.0)
