"""``perf.html``: the run's performance page, beside ``index.html`` (which links it), from the
folder's ``perf-rows.jsonl`` and ``perf-history.json``.

Design: docs/internals/perf.md.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from framework.perf import plots
from framework.perf.row import Row, read_rows
from framework.records.folder import write_atomic

__all__ = ["HISTORY", "PAGE", "ROWS", "write_perf_page"]

PAGE = "perf.html"
ROWS = "perf-rows.jsonl"
HISTORY = "perf-history.json"
_DIR = "perf"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:120]


def _img(root: Path, name: str, svg: str, alt: str) -> str:
    (root / _DIR).mkdir(exist_ok=True)
    write_atomic(root / _DIR / name, svg)
    return f"<figure><img src='{_DIR}/{_e(name)}' alt='{_e(alt)}'><figcaption>{_e(alt)}</figcaption></figure>"


def _table(rows: list[Row]) -> str:
    head = ("configuration", "p50 µs", "p99 µs", "algbw GB/s", "busbw GB/s", "intra GB/s", "inter GB/s",
            "reference busbw", "speed-up", "straggler")
    body = ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in _cells(r)) + "</tr>" for r in rows]
    return ("<table class='perf'><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(body) + "</tbody></table>")


def _cells(r: Row) -> tuple[str, ...]:
    """One configuration's cells of the table (``—`` where it has no reference or speed-up)."""
    ref = r.reference.bandwidth.busbw if r.reference else None
    return (r.key(), f"{r.time_us.p50:.1f}", f"{r.time_us.p99:.1f}", f"{r.bandwidth.algbw:.2f}",
            f"{r.bandwidth.busbw:.2f}", f"{r.bandwidth.intra:.2f}", f"{r.bandwidth.inter:.2f}",
            "—" if ref is None else f"{ref:.2f}",
            "—" if r.speedup is None else f"{r.speedup:.2f}x", r.straggler or "none")


def _history(root: Path) -> list[dict[str, Any]]:
    path = root / HISTORY
    if not path.exists():
        return []
    series: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["series"]
    return series


def _history_parts(root: Path, series: list[dict[str, Any]]) -> list[str]:
    """The history section: one picture per series (none without a history)."""
    if not series:
        return []
    parts = ["<h2>History and change points</h2>"]
    for s in series:
        title = f"{s['config']} {s['metric']}"
        svg = plots.history_svg(title, s["values"], s["change_points"], bool(s["regression"]))
        parts.append(_img(root, f"history-{_name(title)}.svg", svg,
                          title + (" — regression" if s["regression"] else "")))
    return parts


def write_perf_page(root: Path) -> Path | None:
    """Write ``perf.html`` and its pictures when the folder holds perf rows; ``None`` when it does not."""
    rows_file = root / ROWS
    if not rows_file.exists():
        return None
    rows = read_rows(rows_file.read_text(encoding="utf-8"), str(rows_file))
    parts = [f"<h2>Configurations ({len(rows)})</h2>", _table(rows), "<h2>Bandwidth against message size</h2>"]
    for op in sorted({r.config.op for r in rows}):
        parts.append(_img(root, f"bandwidth-{_name(op)}.svg", plots.bandwidth_svg(rows, op),
                          f"{op}: bus bandwidth per world, the reference dashed"))
    if rows:
        slowest = max(rows, key=lambda r: r.time_us.p50)
        parts += ["<h2>Per rank: the slowest configuration</h2>",
                  _img(root, "heatmap.svg", plots.heatmap_svg(slowest), f"{slowest.key()}: p50 per rank")]
    parts += _history_parts(root, _history(root))
    page = ("<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>camit performance — "
            f"{_e(root.name)}</title><link rel='stylesheet' href='report.css'></head><body><main>"
            f"<h1>Performance of run <code>{_e(root.name)}</code></h1><p><a href='index.html'>back to the run</a> · "
            f"<a href='{ROWS}'>{ROWS}</a></p>" + "\n".join(parts) + "</main></body></html>\n")
    return write_atomic(root / PAGE, page)
