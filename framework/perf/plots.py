"""The performance page's pictures: static SVG files drawn by matplotlib (the Agg backend).

Design: docs/internals/perf.md.
"""

from __future__ import annotations

import io
import statistics
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display, no GUI toolkit: before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from framework.perf.row import RankStats, Row  # noqa: E402

__all__ = ["COLOURS", "bandwidth_svg", "heatmap_svg", "history_svg"]

#: one colour per world (and its reference), in order of world size; tests look for them on screen
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _style() -> AbstractContextManager[None]:
    """Deterministic SVG (a fixed hash salt for the ids), text kept as text, a small font."""
    return plt.rc_context({"svg.hashsalt": "camit", "svg.fonttype": "none", "font.size": 9})


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _plot_world(ax: Any, rows: Sequence[Row], op: str, world: int, colour: str) -> None:
    """The bus bandwidth line of ``op`` at ``world`` ranks, and its reference's dashed line."""
    mine = _world_rows(rows, op, world)
    sizes = [r.bytes.total / world for r in mine]
    ax.plot(sizes, [r.bandwidth.busbw for r in mine], "o-", color=colour, linewidth=2.5,
            label=f"{op} world {world}")
    ref = [(s, r.reference) for s, r in zip(sizes, mine) if r.reference]
    if ref:
        ax.plot([s for s, _ in ref], [r.bandwidth.busbw for _, r in ref], "--", color=colour,
                linewidth=2, label=f"{ref[0][1].collective} world {world}")


def _world_rows(rows: Sequence[Row], op: str, world: int) -> list[Row]:
    """The rows of ``op`` at ``world`` ranks, smallest message per rank first."""
    return sorted((r for r in rows if (r.config.op, r.config.world) == (op, world)),
                  key=lambda r: r.bytes.total / world)


def bandwidth_svg(rows: Sequence[Row], op: str) -> str:
    """Bus bandwidth (GB/s) of ``op`` against the message size per rank, one line per world."""
    with _style():
        fig, ax = plt.subplots(figsize=(7, 3.6))
        worlds = sorted({r.config.world for r in rows if r.config.op == op})
        for world, colour in zip(worlds, COLOURS * (len(worlds) // len(COLOURS) + 1)):
            _plot_world(ax, rows, op, world, colour)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size per rank (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"{op}: bus bandwidth against message size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        return _svg(fig)


def _factors(by_host: dict[str, list[RankStats]], width: int, mid: float) -> list[list[float]]:
    """Each rank's p50 over ``mid``, one row per host padded with NaN to ``width``."""
    nan = [float("nan")] * width
    return [([r.p50 / mid for r in rs] + nan)[:width] for rs in by_host.values()]


def heatmap_svg(row: Row) -> str:
    """Each rank's p50 over the median rank's, hosts down and local ranks across, the factor in
    each cell."""
    hosts = list(dict.fromkeys(r.host for r in row.ranks))
    by_host = {h: [r for r in row.ranks if r.host == h] for h in hosts}
    width = max(len(v) for v in by_host.values())
    grid = _factors(by_host, width, statistics.median(r.p50 for r in row.ranks))
    with _style():
        fig, ax = plt.subplots(figsize=(min(1.0 + 0.8 * width, 12), 1.0 + 0.5 * len(hosts)))
        image = ax.imshow(grid, cmap="viridis", aspect="auto")
        _label_cells(ax, list(by_host.values()), grid)
        ax.set_yticks(range(len(hosts)), hosts)
        ax.set_xticks(range(width), [str(i) for i in range(width)])
        ax.set_xlabel("local rank")
        ax.set_title(f"{row.key()}: p50 per rank / median rank")
        fig.colorbar(image, ax=ax)
        return _svg(fig)


def _label_cells(ax: Any, ranks: list[list[RankStats]], grid: list[list[float]]) -> None:
    """Each heatmap cell's rank and factor, written in the cell."""
    for y, rs in enumerate(ranks):
        for x, r in enumerate(rs):
            ax.text(x, y, f"r{r.rank}\n{grid[y][x]:.2f}", ha="center", va="center", fontsize=7,
                    color="white")


def history_svg(title: str, values: Sequence[float], change_points: Sequence[int], regression: bool) -> str:
    """A metric over the runs, each change point a dashed line, each segment's mean drawn across it."""
    with _style():
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.plot(range(len(values)), values, ".-", color=COLOURS[0], linewidth=1.5)
        bounds = [0, *change_points, len(values)]
        for start, end in zip(bounds, bounds[1:]):
            if end > start:
                ax.hlines(statistics.mean(values[start:end]), start, end - 1, colors=COLOURS[2], linewidth=2)
        for cp in change_points:
            ax.axvline(cp - 0.5, color=COLOURS[1], linestyle="--", linewidth=1.5)
        ax.set_xlabel("run")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title + ("  — REGRESSION" if regression else ""))
        ax.grid(True, alpha=0.3)
        return _svg(fig)
