"""``camit perf compare RUN_A RUN_B``: every configuration of two runs side by side, with its
delta and whether it is significant.

Design: docs/internals/perf.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from scipy.stats import mannwhitneyu

from framework.perf.row import Row, read_rows

__all__ = ["ALPHA", "MIN_EFFECT", "ROWS", "Delta", "compare", "load_run", "markdown"]

ROWS = "perf-rows.jsonl"
ALPHA = 0.01
MIN_EFFECT = 0.01


@dataclass(frozen=True)
class Delta:
    config: str
    a_us: float | None
    b_us: float | None
    delta: float | None
    p_value: float | None
    significant: bool
    a_busbw: float | None
    b_busbw: float | None
    note: str = ""


def load_run(path: Path) -> dict[str, Row]:
    """The rows of a run folder or a ``.jsonl`` file by configuration; a missing or bad file raises
    ``ValueError`` naming it."""
    file = path / ROWS if path.is_dir() else path
    if not file.is_file():
        raise ValueError(f"{path}: no {ROWS} (not a perf run folder nor a rows file)")
    return {r.key(): r for r in read_rows(file.read_text(encoding="utf-8"), str(file))}


def _delta(key: str, a: Row, b: Row) -> Delta:
    change = b.time_us.p50 / a.time_us.p50 - 1
    if len(a.iterations_us) > 1 and len(b.iterations_us) > 1 and a.iterations_us != b.iterations_us:
        p = float(mannwhitneyu(a.iterations_us, b.iterations_us, alternative="two-sided").pvalue)
    else:
        p = 1.0
    return Delta(key, a.time_us.p50, b.time_us.p50, change, p, p < ALPHA and abs(change) >= MIN_EFFECT,
                 a.bandwidth.busbw, b.bandwidth.busbw, ("slower" if change > 0 else "faster") if p < ALPHA else "")


def _only_in_a(key: str, row: Row) -> Delta:
    """The delta of a configuration only run A has."""
    return Delta(key, row.time_us.p50, None, None, None, False, row.bandwidth.busbw, None,
                 "only in A")


def _only_in_b(key: str, row: Row) -> Delta:
    """The delta of a configuration only run B has."""
    return Delta(key, None, row.time_us.p50, None, None, False, None, row.bandwidth.busbw,
                 "only in B")


def compare(a: dict[str, Row], b: dict[str, Row]) -> list[Delta]:
    """One :class:`Delta` per configuration of either run, sorted by configuration."""
    out = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            out.append(_only_in_a(key, a[key]))
        elif key not in a:
            out.append(_only_in_b(key, b[key]))
        else:
            out.append(_delta(key, a[key], b[key]))
    return out


def _fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


HEADERS = ("configuration", "A p50 µs", "B p50 µs", "delta", "p", "significant", "A busbw GB/s", "B busbw GB/s",
           "note")


def table(deltas: list[Delta]) -> list[list[str]]:
    """The rows of the comparison table (strings, :data:`HEADERS` order)."""
    return [[d.config, _fmt(d.a_us, ".1f"), _fmt(d.b_us, ".1f"),
             "—" if d.delta is None else f"{d.delta * 100:+.1f}%", _fmt(d.p_value, ".2g"),
             "yes" if d.significant else "no", _fmt(d.a_busbw, ".2f"), _fmt(d.b_busbw, ".2f"), d.note]
            for d in deltas]


def markdown(deltas: list[Delta], a: str, b: str) -> str:
    lines = [f"# camit perf compare\n\nA: `{a}`  \nB: `{b}`  \nsignificant: Mann-Whitney U p < {ALPHA:g} "
             f"and |delta| >= {MIN_EFFECT * 100:g}%\n", "| " + " | ".join(HEADERS) + " |",
             "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table(deltas)]
    return "\n".join(lines) + "\n"


def to_json(deltas: list[Delta], a: str, b: str) -> str:
    return json.dumps({"a": a, "b": b, "alpha": ALPHA, "min_effect": MIN_EFFECT,
                       "configurations": [asdict(d) for d in deltas]}, indent=2) + "\n"
