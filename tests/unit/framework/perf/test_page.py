"""The performance page: perf.html and its SVG pictures from a run's perf rows and history, linked from
index.html, and really drawn in headless Chromium under Jenkins' default Content-Security-Policy."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PIL import Image

from framework import report
from framework.perf import plots
from framework.perf.changepoint import assess
from framework.perf.row import Config, build_row
from tests.unit.framework.perf.test_row import ENV
from tests.unit.framework.report.test_html import JENKINS_CSP, chromium, needs_chromium, serve


def _rows(seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for op in ("dispatch", "combine"):
        for world in (2, 4):
            hosts = [f"host{r // 2}" for r in range(world)]
            for tokens in (64, 256, 1024, 4096):
                cfg = Config(op=op, tokens=tokens, hidden=1024, top_k=2, experts=8, world=world,
                             dtype="bfloat16", quant="none")
                sent = [[tokens * 1024 * 2 // world] * world for _ in range(world)]
                base = 10 + tokens * 0.05 * (1 + world / 4)
                times = [[base * (1 + rng.gauss(0, 0.02)) * (1.2 if r == world - 1 else 1) for r in range(world)]
                         for _ in range(10)]
                ref = [[base * 1.5 for _ in range(world)] for _ in range(10)]
                lines.append(build_row(run_id="run1", seed=1, config=cfg, warmup=2, times_us=times, hosts=hosts,
                                       sent=sent, environment=ENV, output_hashes=["a"] * 10,
                                       reference_us=ref).to_json())
    return lines


def _history() -> dict:
    rng = random.Random(2)
    values = [100 * (1.1 if i >= 30 else 1) * (1 + rng.gauss(0, 0.03)) for i in range(40)]
    v = assess(values)
    return {"series": [{"config": "dispatch.t4096.h1024.k2.e8.w4.bfloat16.none", "metric": "p50_us",
                        "values": values, "change_points": v.change_points, "regression": v.regression}]}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("perfpage") / "run-1"
    root.mkdir()
    (root / "perf-rows.jsonl").write_text("\n".join(_rows()) + "\n")
    (root / "perf-history.json").write_text(json.dumps(_history()))
    report.finalize(root, status="ok")
    return root


def test_the_page_and_its_pictures_are_written_and_linked(run):
    page = (run / "perf.html").read_text()
    pictures = sorted(p.name for p in (run / "perf").iterdir())
    assert pictures == ["bandwidth-combine.svg", "bandwidth-dispatch.svg", "heatmap.svg",
                        "history-dispatch.t4096.h1024.k2.e8.w4.bfloat16.none_p50_us.svg"]
    for name in pictures:
        assert f"<img src='perf/{name}'" in page
        ET.fromstring((run / "perf" / name).read_bytes())  # well-formed SVG
        assert b"<script" not in (run / "perf" / name).read_bytes()
    assert "<script" not in page and "style=" not in page and "<style" not in page
    assert "straggler: rank 3 on host1 x1.2" in page  # the slow rank, named in the table
    assert "href='perf.html'" in (run / "index.html").read_text()


def test_the_pictures_say_what_they_show():
    rows = [json.loads(line) for line in _rows()]
    from framework.perf.row import Row

    parsed = [Row.model_validate(r) for r in rows]
    svg = plots.bandwidth_svg(parsed, "dispatch")
    assert "dispatch world 2" in svg and "all_to_all_single world 4" in svg and "stroke-dasharray" in svg
    assert plots.COLOURS[0] in svg and plots.COLOURS[1] in svg
    hist = plots.history_svg("x p50", _history()["series"][0]["values"], [30], True)
    assert "REGRESSION" in hist and hist == plots.history_svg("x p50", _history()["series"][0]["values"], [30], True)
    heat = plots.heatmap_svg(parsed[-1])
    assert "host0" in heat and "host1" in heat and "r3" in heat


def test_no_rows_no_page(tmp_path):
    report.finalize(tmp_path, status="ok")
    assert not (tmp_path / "perf.html").exists() and "perf.html" not in (tmp_path / "index.html").read_text()


def _colours(shot: Path) -> set[tuple[int, int, int]]:
    with Image.open(shot) as im:
        return {c for _, c in im.convert("RGB").getcolors(maxcolors=1 << 24)}


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return r, g, b


@needs_chromium
def test_the_page_renders_its_pictures_under_jenkins_csp(run, tmp_path):
    drawn = {}
    # the control: the same page with images forbidden must lose the plot colours, else the check proves nothing
    for name, csp in (("jenkins", JENKINS_CSP), ("no-images", JENKINS_CSP.replace("img-src 'self'", "img-src 'none'"))):
        shot = tmp_path / f"{name}.png"
        with serve(run, csp) as base:
            chromium(["--window-size=1280,3200", f"--screenshot={shot}", base + "perf.html"], tmp_path,
                     profile=f"profile-{name}")
        drawn[name] = _colours(shot)
    for colour in plots.COLOURS[:3]:  # world 2, world 4 and the history's segment means
        assert _rgb(colour) in drawn["jenkins"], colour
        assert _rgb(colour) not in drawn["no-images"], colour
    assert len(drawn["jenkins"]) > 200  # the heat map's gradient, anti-aliased text and lines
