"""index.html: self-contained, and it really renders — checked in headless Chromium.

The Chromium tests skip with a reason when no ``chromium`` is installed (Debian:
``apt-get install -y chromium``; the Makefile installs it for CI).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from builders import sample_run

from framework import report

DATA = Path(__file__).resolve().parents[1] / "data"


sr = sample_run()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("html")
    junits = sr.pytest_junit(base / "pass", fail=False, name="rank"), sr.pytest_junit(base / "fail", fail=True, name="rank")
    path = sr.build(base / "reports", *junits, controller_junit=junits[1])
    report.finalize(path, cores=[sr.core_for(path)], seed=1234, started=sr.T0, ended=sr.T0 + 61, status="failed",
                    argv=["pytest", "tests/cluster", "--env-file", "env/lab.yaml"])
    return path


def chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)


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
            if t == tag and all(re.fullmatch(v, attrs.get(k.rstrip("_").replace("_", "-"), "") or "") for k, v in want.items()):
                out.append(attrs)
        return out


def test_index_loads_nothing_from_outside(run):
    html = (run / "index.html").read_text()
    assert "<style>" in html and "<script>" in html
    assert not re.search(r"\b(src|href)\s*=\s*['\"]?(https?:)?//", html)
    assert not re.search(r"<link\b|<script\s+src|@import|url\(\s*['\"]?https?:", html)
    for href in re.findall(r"href='([^'#]+)'", html):  # every link stays inside the run folder
        assert not href.startswith(("/", "..")) and (run / href).exists(), href


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
    phases = {s["data-phase"] for s in dom.find("div", class_="seg .*")}
    assert phases == {"connect", "deploy", "launch", "run", "collect", "teardown"}
    assert "python -m pytest tests/cluster --env-file env/lab.yaml --random-seed 1234" in text
