"""``index.html`` for a run folder: one static page a person can read, offline.

:func:`render` turns a :class:`~framework.report.model.RunView` into HTML;
:func:`write_index` writes it with its assets (:data:`ASSETS`), :func:`write_fallback_index` the
minimal page left when it cannot be built. The page works under Jenkins' Content-Security-Policy:
docs/internals/report.md.
"""

from __future__ import annotations

import html as _html
import json
import math
import os
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from framework import __version__
from framework.cores import faultbundle
from framework.records.folder import write_atomic
from framework.report.fmt import dur, iso, ranges
from framework.report.model import (
    OUTCOMES,
    PHASE_ORDER,
    CoreView,
    DeployHost,
    LaunchView,
    Phase,
    RankView,
    RunFacts,
    RunView,
    by_host,
    case_outcome,
    log_tail,
    read_run,
)

if TYPE_CHECKING:
    from framework.records.scrub import Scrub

__all__ = ["ASSETS", "render", "write_fallback_index", "write_index"]

#: the files of ``framework/data`` that ``index.html`` loads, copied beside it into the run folder
ASSETS = ("report.css", "report.js")

#: the scrubber of the page being rendered: every value goes through it before it is escaped
_SCRUB: ContextVar[Scrub | None] = ContextVar("camit_report_scrub", default=None)


def escape(text: str, quote: bool = True) -> str:
    """``text`` scrubbed of the secrets (the value, before escaping: never the markup) and HTML-escaped."""
    scrub = _SCRUB.get()
    text = str(text)
    return _html.escape(scrub(text) if scrub is not None else text, quote)


#: the height of one timeline lane (px; a bar is 18 px)
_LANE = 21
_NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)


def write_index(rundir_path: str | os.PathLike[str], *, scrub: Scrub | None = None) -> Path:
    """Write ``index.html`` and its :data:`ASSETS`: offline page with the phase timeline and the rank grid
    (``scrub``: secrets out)."""
    root = Path(rundir_path)
    page = render(read_run(root), scrub=scrub)
    for name in ASSETS:
        write_atomic(root / name, _asset(name))
    return write_atomic(root / "index.html", page)


def write_fallback_index(root: Path, status: str, error: str, problem: str) -> Path:
    """The ``index.html`` left when the page cannot be built: status, error, the ``problem`` and the links."""
    return write_atomic(root / "index.html", f"<!doctype html><meta charset=utf-8><title>{escape(root.name)}</title>"
                        f"<h1>camit run {escape(root.resolve().name)}: {escape(status)}</h1><p>{escape(error)}</p>"
                        f"<p>The report page could not be built: {escape(problem)}</p>"
                        "<p><a href='cluster.xml'>cluster.xml</a> · <a href='junit.xml'>junit.xml</a> · "
                        "<a href='manifest.json'>manifest.json</a></p>")


def render(run: RunView, *, scrub: Scrub | None = None) -> str:
    """The whole page as a string (no I/O besides reading the run's own files); ``scrub`` is applied to
    every value shown, before it is escaped (links into the run folder stay as they are)."""
    token = _SCRUB.set(scrub)
    try:
        return _render(run)
    finally:
        _SCRUB.reset(token)


def _render(run: RunView) -> str:
    status = run.facts.status or "unknown"
    parts = [
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>camit {escape(run.run_id)} — {escape(status)}</title>",
        "<link rel='stylesheet' href='report.css'><script src='report.js' defer></script></head>",
        f"<body class='status-{_cls(status)}'>",
        _header(run, status),
        "<main>",
        _banners(run),
        _tiles(run),
        _timeline(run.phases, run.facts),
        _grid(run),
        _cluster_timeline(run),
        _fault_bundle(run),
        _problems(run),
        _cores(run),
        _controller(run),
        _deployed(run),
        _files(run),
        f"<footer>camit {escape(__version__)} · report of {escape(str(run.path.resolve()))}</footer>",
        "</main>",
        "</body></html>\n",
    ]
    return "\n".join(p for p in parts if p)


def _asset(name: str) -> str:
    return (resources.files("framework") / "data" / name).read_text(encoding="utf-8")


def _cls(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def _href(rel: str) -> str:
    return _html.escape(quote(rel, safe="/"), quote=True)


def _when(epoch: float | None) -> str:
    if not epoch:
        return "—"
    return f"<span data-epoch='{epoch:.3f}'>{escape((iso(epoch) or '').replace('T', ' '))}</span>"


def _header_facts(run: RunView) -> list[tuple[str, str]]:
    """The header's (term, HTML) pairs: when, how long, seed, env file, hosts, camit's version."""
    f = run.facts
    facts = [("started", _when(f.started)), ("ended", _when(f.ended))]
    if f.duration is not None:
        facts.append(("duration", escape(dur(f.duration))))
    if f.seed is not None:
        facts.append(("seed", f"<code>{escape(f.seed)}</code>"))
    if f.env_file:
        facts.append(("env", f"<code>{escape(f.env_file)}</code>"))
    facts.append(("hosts", str(len(run.hosts))))
    git = f" <small>{escape(f.git[:12])}</small>" if f.git else ""
    facts.append(("camit", escape(f.version or __version__) + git))
    return facts


#: the run folder's files the header links first, when present
_FIRST_LINKS = ("cluster.xml", "junit.xml", "manifest.json", "phases.json", "deploy-manifest.json")


def _folder_links(root: Path) -> list[str]:
    """The run folder's files to link: the main records first, then the rest by name (no assets, no dot files)."""
    if not root.is_dir():
        return []
    skip = {*_FIRST_LINKS, "index.html", *ASSETS}
    others = sorted(p.name for p in root.iterdir() if _is_visible_file(p) and p.name not in skip)
    return [n for n in _FIRST_LINKS if (root / n).exists()] + others


def _is_visible_file(path: Path) -> bool:
    """A file not hidden by a leading dot."""
    return path.is_file() and not path.name.startswith(".")


def _header(run: RunView, status: str) -> str:
    facts = _header_facts(run)
    dl = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts)
    repro = run.facts.repro
    repro_html = ("<div class='repro'><span class='muted'>reproduce</span>"
                  f"<code id='repro'>{escape(repro)}</code></div>" if repro else "")
    nav = "".join(f"<a href='{_href(n)}'>{escape(n)}</a>" for n in _folder_links(run.path))
    return (f"<header><div class='inner'><h1>camit run <code>{escape(run.run_id)}</code>"
            f"<span class='badge s-{_cls(status)}'>{escape(status)}</span></h1>"
            f"<dl class='facts'>{dl}</dl>{repro_html}<nav class='links'>{nav}</nav></div></header>")


def _banners(run: RunView) -> str:
    out = []
    facts = run.facts
    if facts.error:
        out.append(f"<div class='banner' id='run-error'><b>{escape(str(facts.status))}:</b> "
                   f"{escape(facts.error)}</div>")
    out += [f"<div class='banner cause'><b>{escape(name)} failed:</b> {escape(cause)}</div>"
            for name, cause in run.causes]  # what failed and why, before anything else
    problems = [*run.problems, *facts.problems]
    if problems:
        items = "".join(f"<li>{escape(p)}</li>" for p in dict.fromkeys(problems))
        out.append(f"<div class='banner warn'>Parts of this folder could not be read:<ul>{items}</ul></div>")
    return "\n".join(out)


def _outcome_tiles(ranks: list[RankView]) -> list[str]:
    """A tile per outcome some rank had (pass always, when there are ranks)."""
    if not ranks:
        return []
    counts = Counter(r.outcome for r in ranks)
    return [f"<div class='tile o-{o}'><b>{counts[o]}</b>{o}</div>"
            for o in OUTCOMES if o == "pass" or counts[o]]


def _cluster_tile(cx: Path) -> list[str]:
    """cluster.xml's totals, when it is there and parses."""
    if not cx.exists():
        return []
    try:
        top = ET.parse(cx).getroot()
    except ET.ParseError:
        return []
    return [f"<div class='tile'><b>{escape(top.get('tests', '?'))}</b>cluster tests "
            f"<small>{escape(top.get('failures', '?'))} failed · {escape(top.get('errors', '?'))} errors"
            "</small></div>"]


def _tiles(run: RunView) -> str:
    tiles = [*_outcome_tiles(run.ranks), *_cluster_tile(run.path / "cluster.xml")]
    if run.junit is not None:
        j = run.junit.counts
        tiles.append(f"<div class='tile'><b>{j['tests']}</b>controller tests <small>{j['failures']} failed · "
                     f"{j['errors']} errors · {j['skipped']} skipped</small></div>")
    if run.cores:
        tiles.append(f"<div class='tile o-crash'><b>{len(run.cores)}</b>core dumps</div>")
    return f"<section class='tiles' id='summary'>{''.join(tiles)}</section>" if tiles else ""


# -- timeline ---------------------------------------------------------------------
def _lanes(phases: Sequence[Phase]) -> list[tuple[Phase, int]]:
    """Greedy lanes so overlapping phases of one host stack instead of hiding each other."""
    ends: list[float] = []
    out = []
    for p in sorted(phases, key=lambda p: (p.start, _phase_rank(p.phase))):
        lane = next((i for i, e in enumerate(ends) if e <= p.start + 1e-6), len(ends))
        if lane == len(ends):
            ends.append(p.end)
        else:
            ends[lane] = p.end
        out.append((p, lane))
    return out


def _phase_rank(name: str) -> int:
    return PHASE_ORDER.index(name) if name in PHASE_ORDER else len(PHASE_ORDER)


def _ticks(span: float) -> list[float]:
    step = next((s for s in _NICE_STEPS if span / s <= 8), _NICE_STEPS[-1] * math.ceil(span / 8 / _NICE_STEPS[-1]))
    return [i * step for i in range(int(span // step) + 1)]


def _tick_label(sec: float) -> str:
    s = int(round(sec))
    if s < 60:
        return f"+{s}s"
    if s < 3600:
        return f"+{s // 60}m" + (f"{s % 60:02d}s" if s % 60 else "")
    return f"+{s // 3600}h" + (f"{s % 3600 // 60:02d}m" if s % 3600 else "")


class _Scale:
    """Maps epoch seconds onto a percentage of the timeline's width."""

    def __init__(self, t0: float, t1: float) -> None:
        self.t0 = t0
        self.span = max(t1 - t0, 1e-3)

    def pct(self, x: float) -> float:
        return max(0.0, min(100.0, (x - self.t0) / self.span * 100))


def _timeline_scale(phases: Sequence[Phase], facts: RunFacts) -> _Scale:
    """The phases' span, widened to the run's recorded start and end."""
    starts = [p.start for p in phases] + ([facts.started] if facts.started else [])
    ends = [p.end for p in phases] + ([facts.ended] if facts.ended else [])
    return _Scale(min(starts), max(ends))


def _text_anchor(x: float) -> str:
    """SVG text-anchor keeping a tick label near an edge inside the track."""
    if x < 2:
        return "start"
    return "end" if x > 97 else "middle"


def _axis(scale: _Scale) -> str:
    ticks = "".join(f"<text class='tl-tick' x='{scale.pct(scale.t0 + s):.3f}%' y='13' text-anchor='"
                    f"{_text_anchor(scale.pct(scale.t0 + s))}'>{_tick_label(s)}</text>"
                    for s in _ticks(scale.span))
    return (f"<div class='tl-axis'><div></div><svg class='tl-scale' width='100%' height='18' "
            f"aria-hidden='true'>{ticks}</svg></div>")


def _clock(epoch: float) -> str:
    """HH:MM:SS (UTC) of an epoch."""
    return (iso(epoch) or "")[11:19]


def _seg_tip(host: str, p: Phase) -> str:
    tip = f"{host} {p.phase}: {dur(p.duration)} ({_clock(p.start)}–{_clock(p.end)} UTC)"
    if p.detail:
        tip += f" — {p.detail}"
    return tip + (" — estimated" if p.derived else "")


def _segment(host: str, p: Phase, lane: int, scale: _Scale) -> str:
    """One phase's bar: a nested <svg> placed by attributes, which clips its label to the bar."""
    left, width = scale.pct(p.start), max(scale.pct(p.end) - scale.pct(p.start), 0.25)
    derived = " derived" if p.derived else ""
    return (f"<svg class='seg ph-{_cls(p.phase)}{derived}' "
            f"data-phase='{escape(p.phase, quote=True)}' "
            f"x='{left:.3f}%' y='{lane * _LANE + 2}' width='{width:.3f}%' height='18'>"
            f"<title>{escape(_seg_tip(host, p), quote=False)}</title>"
            "<rect width='100%' height='100%' rx='3'/>"
            f"<text x='4' y='13'>{escape(p.phase)} {escape(dur(p.duration))}</text></svg>")


def _host_track(host: str, phases: Sequence[Phase], scale: _Scale) -> str:
    """A host's row of the timeline: its phases in as many lanes as overlap."""
    placed = _lanes([p for p in phases if p.host == host])
    height = (max(lane for _, lane in placed) + 1) * _LANE
    segs = "".join(_segment(host, p, lane, scale) for p, lane in placed)
    name = escape(host, quote=True)
    return (f"<div class='tl-row' data-host='{name}'><div class='tl-host' title='{name}'>"
            f"{escape(host)}</div><svg class='tl-track' width='100%' height='{height + 2}' "
            f"role='img' aria-label='{name} phases'>{segs}</svg></div>")


def _tl_legend(phases: Sequence[Phase]) -> str:
    names = sorted({p.phase for p in phases}, key=lambda n: (_phase_rank(n), n))
    legend = "".join(f"<span><i class='seg-key ph-{_cls(n)}'></i>{escape(n)}</span>" for n in names)
    return legend + "<span><i class='seg-key derived'></i>estimated</span>"


def _timeline(phases: Sequence[Phase], facts: RunFacts) -> str:
    head = "<section id='timeline'><h2>Timeline</h2>"
    if not phases:
        return head + ("<p class='muted'>No phase was recorded (phases.json) or could be derived."
                       "</p></section>")
    scale = _timeline_scale(phases, facts)
    rows = [_axis(scale)]
    rows += [_host_track(host, phases, scale) for host in dict.fromkeys(p.host for p in phases)]
    return head + (f"<div class='card'>{''.join(rows)}<div class='legend'>{_tl_legend(phases)}"
                   "</div>"
                   "</div></section>")


# -- rank grid --------------------------------------------------------------------
def _rank_id(r: RankView) -> str:
    return _cls(f"rank-{r.launch or 'run'}-{r.rank}")


def _cell_meta(r: RankView) -> list[str]:
    """A rank cell's facts: outcome, duration, then its tests or how it ended."""
    c = r.counts()
    meta = [r.outcome]
    if r.duration is not None:
        meta.append(dur(r.duration))
    bad = c["failures"] + c["errors"]
    if c["tests"]:
        meta.append(f"{c['tests']} tests" + (f", {bad} bad" if bad else ""))
    elif r.signal:
        meta.append(r.signal)
    elif r.exit_code not in (0, None):
        meta.append(f"exit {r.exit_code}")
    return meta


def _cell_links(r: RankView) -> list[str]:
    """A rank cell's links: its log, its JUnit, its cores and, unless it passed, why."""
    named = [("log", r.log), ("xml", r.junit)]
    files = [f"<a href='{_href(path)}'>{label}</a>" for label, path in named if path]
    files += [f"<a href='#{escape(core.anchor)}'>core</a>" for core in r.cores]
    if r.outcome != "pass":
        files.append(f"<a href='#{_rank_id(r)}'>why</a>")
    return files


def _cell(r: RankView) -> str:
    title = r.reason or f"rank {r.rank} on {r.host}: {r.outcome}"
    main = f"<a href='{_href(r.log)}'>r{r.rank}</a>" if r.log else f"r{r.rank}"
    return (f"<div class='rank-cell o-{r.outcome}' data-host='{escape(r.host, quote=True)}' "
            f"data-rank='{r.rank}' data-outcome='{r.outcome}' title='{escape(title, quote=True)}'>"
            f"<span class='r'>{main}</span><span class='meta'>{escape(' · '.join(_cell_meta(r)))}"
            f"</span><span class='files'>{' '.join(_cell_links(r))}</span></div>")


def _host_rows(ranks: Iterable[RankView]) -> str:
    """A row per host (in the order the ranks name them) of its ranks' cells, by rank."""
    return "".join(_host_row(host, mine) for host, mine in by_host(ranks).items())


def _host_row(host: str, mine: list[RankView]) -> str:
    return (f"<div class='host-row'><div class='host' title='{escape(host, quote=True)}'>"
            f"{escape(host)}<br><small>ranks {ranges([r.rank for r in mine])}</small></div>"
            "<div class='cells'>"
            f"{''.join(_cell(r) for r in mine)}</div></div>")


def _launch_info(lv: LaunchView) -> list[str]:
    """A launch card's facts: world size, nodes, duration, master, what it retried."""
    record = lv.record
    info = [f"world size {lv.world_size}", f"{len(record.nodes)} nodes", dur(record.duration)]
    if record.master:
        info.append(f"master {record.master}")
    if lv.superseded:
        info.append(f"retry of {', '.join(lv.superseded)}")
    return info


def _launch_banners(lv: LaunchView) -> str:
    """A launch's first failure, cause and grouped stacks."""
    record = lv.record
    out = ""
    if lv.failure:
        out += (f"<div class='banner'><b>first failure</b> ({escape(record.failure_kind or '?')}): "
                f"{escape(lv.failure)}</div>")
    if record.cause:
        out += f"<div class='banner'><b>cause</b>: {escape(record.cause)}</div>"
    if lv.stacks:
        out += ("<div class='banner'><b>stacks</b> (identical stacks grouped, majority first):<ul>"
                + "".join(f"<li>{escape(line)}</li>" for line in lv.stacks) + "</ul></div>")
    return out


def _launch_card(lv: LaunchView) -> str:
    return (f"<div class='launch card' data-launch='{escape(lv.launch_id, quote=True)}'><h3>"
            f"{escape(lv.name)} <small>{escape(' · '.join(_launch_info(lv)))}</small></h3>{_launch_banners(lv)}"
            f"{_host_rows(lv.ranks)}</div>")


def _grid(run: RunView) -> str:
    if not run.ranks:
        return ("<section id='ranks'><h2>Ranks</h2><p class='muted'>No launch was recorded in this run "
                "(no launch-*.json, no &lt;host&gt;/rank*.* files).</p></section>")
    # the filter is a checkbox and a CSS rule (a sibling selector): it works where scripts are blocked
    out = ["<section id='ranks'><h2>Ranks</h2>",
           "<input type='checkbox' id='only-problems' class='filter-toggle'>"
           "<label for='only-problems' class='filter'>problems only</label>"]
    out += [_launch_card(lv) for lv in run.launches]
    if run.orphans:
        out.append("<div class='launch card'><h3>rank files without a launch record <small>the launch did not "
                   f"finish writing its record</small></h3>{_host_rows(run.orphans)}</div>")
    out.append("</section>")
    return "".join(out)


def _shown(event: dict[str, Any]) -> bool:
    """A timeline event the page lists: causes, consequences, the kernel's lines, the supervisors'
    but their first and last words (STARTED, DONE)."""
    quiet = event["source"] == "supervisor" and str(event["text"]).startswith(("STARTED", "DONE"))
    return event["kind"] != "info" or (event["source"] in ("dmesg", "supervisor") and not quiet)


def _root_line(root: dict[str, Any]) -> str:
    """The cluster timeline's root cause sentence."""
    if not root:
        return "<p class='muted'>no causal event found: only a peer's absence was reported</p>"
    return (f"<p><b>root cause</b>: rank {escape(str(root.get('rank')))} on "
            f"{escape(str(root.get('host')))}, {escape(str(root.get('what')))}: "
            f"{escape(str(root.get('text')))}</p>")


def _is_root(event: dict[str, Any], root: dict[str, Any]) -> bool:
    return bool(event["t"] == root.get("t") and event["text"] == root.get("text"))


def _event_row(event: dict[str, Any], root: dict[str, Any]) -> str:
    cells = "".join(f"<td>{escape(str(event[k]))}</td>"
                    for k in ("host", "rank", "source", "kind", "text"))
    return (f"<tr class='{'root' if _is_root(event, root) else ''}'>"
            f"<td>{float(event['dt']):+.3f}s</td>{cells}</tr>")


def _cluster_timeline(run: RunView, limit: int = 15) -> str:
    """timeline.json in short: the root cause and the first causes and consequences after it."""
    try:
        data = json.loads((run.path / "timeline.json").read_text(encoding="utf-8"))
        events = [e for e in data["events"] if _shown(e)]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    root = data.get("root_cause") or {}
    rows = "".join(_event_row(e, root) for e in events[:limit])
    note = escape(str((data.get("clock") or {}).get("note", "")))
    return (f"<section id='cluster-timeline'><h2>Cluster timeline</h2>{_root_line(root)}"
            f"<p class='muted'>{note}</p><table><tr><th>t</th><th>host</th><th>rank</th>"
            f"<th>source</th><th>kind</th><th>event</th></tr>{rows}</table>"
            f"{_more(len(events), limit, 'in timeline.json')}</section>")


def _more(count: int, limit: int, what: str) -> str:
    """``… N more <what>`` when ``count`` items were cut to ``limit``."""
    return f"<p class='muted'>… {count - limit} more {what}</p>" if count > limit else ""


def _fault_bundle(run: RunView) -> str:
    """Where ascend-fd's input trees are, and its verdict when it ran on the controller."""
    bundle = run.path / faultbundle.BUNDLE
    if not bundle.is_dir():
        return ""
    hosts = sorted(p.name for p in bundle.iterdir() if p.is_dir() and p.name not in ("parsed", "diag"))
    verdict = bundle / faultbundle.VERDICT
    said = (f"<p><b>ascend-fd</b>: {escape(faultbundle.verdict_line(verdict.read_text(errors='replace')))} "
            f"(<a href='{_href(f'{faultbundle.BUNDLE}/{faultbundle.VERDICT}')}'>output</a>)</p>"
            if verdict.is_file() else "<p class='muted'>ascend-fd is not installed here: run "
            "<code>ascend-fd parse</code> on each host's tree, then <code>ascend-fd diag</code></p>")
    return (f"<section id='fault-bundle'><h2>Fault bundle</h2><p><a href='{_href(faultbundle.BUNDLE)}'>"
            f"{faultbundle.BUNDLE}/</a>: MindCluster FaultDiag's input, one tree per host "
            f"({escape(', '.join(hosts))})</p>{said}</section>")


def _launch_prefix(r: RankView) -> str:
    return f"{r.launch} · " if r.launch else ""


def _bad_rank(run: RunView, r: RankView) -> str:
    """A rank that did not pass: its outcome, its reason and its log's last lines, folded."""
    where = _launch_prefix(r) + f"rank {r.rank} on {r.host}"
    reason = r.reason.removeprefix(f"rank {r.rank} on {r.host} ")
    body = ""
    if r.log:
        body = f"<p class='muted'>last lines of <a href='{_href(r.log)}'>{escape(r.log)}</a></p>" \
               f"<pre>{escape(log_tail(run.path, r.log))}</pre>"
    elif r.exit_code is None:
        body = "<p class='muted'>no log was fetched for this rank</p>"
    return (f"<details class='o-{r.outcome}' id='{_rank_id(r)}'><summary><span class='kind'>{r.outcome}"
            f"</span>{escape(where)}: {escape(reason)}</summary>{body}</details>")


def _failing_case(r: RankView, c: ET.Element) -> str:
    """A rank's failing test case: its message's first line, its text's end folded."""
    el = c.find(case_outcome(c))  # the error when it has one, else the failure
    assert el is not None
    where = _launch_prefix(r) + f"{r.host} rank {r.rank}"
    text = (el.text or "").strip()
    first = next(iter(el.get("message", "").splitlines()), "")
    return (f"<details class='o-fail'><summary><span class='kind'>{escape(el.tag)}</span>{escape(where)} · "
            f"<code>{escape(c.get('classname', ''))}::{escape(c.get('name', ''))}</code> — "
            f"{escape(first)}</summary><pre>{escape(text[-6000:])}</pre></details>")


def _has_failure(case: ET.Element) -> bool:
    return case.find("failure") is not None or case.find("error") is not None


def _failing_cases(run: RunView) -> list[tuple[RankView, ET.Element]]:
    """Every rank's test cases that failed or errored, in rank order."""
    return [(r, c) for r in run.ranks for c in r.cases if _has_failure(c)]


def _problems(run: RunView, limit: int = 200) -> str:
    bad = [r for r in run.ranks if r.outcome != "pass"]
    failing = _failing_cases(run)
    if not (bad or failing):
        return ""
    out = ["<section id='problems'><h2>Problems</h2>"]
    out += [_bad_rank(run, r) for r in bad]
    out += [_failing_case(r, c) for r, c in failing[:limit]]
    out += [_more(len(failing), limit, "failing tests: see cluster.xml"), "</section>"]
    return "".join(out)


def _core_links(run: RunView, core: CoreView) -> str:
    """The core file (a link when it was fetched into the run folder) and its backtrace file."""
    links = ""
    if core.local_path and (run.path / core.local_path).exists():
        links = f" · <a href='{_href(core.local_path)}'>{escape(core.local_path)}</a>"
    elif core.local_path:
        links = f" · <code>{escape(core.local_path)}</code>"
    if core.backtrace_path:
        links += f" · <a href='{_href(core.backtrace_path)}'>backtrace file</a>"
    return links


def _core_details(run: RunView, core: CoreView) -> str:
    """A core dump, open: what it is, where it came from, its backtrace."""
    facts = [f"host {core.host}", f"pid {core.pid}", f"exe {core.exe}", f"signal {core.signal}"]
    if core.rank is not None:
        facts.insert(1, f"rank {core.rank}")
    return (f"<details class='o-core' id='{escape(core.anchor)}' open><summary>"
            "<span class='kind'>core"
            f"</span>{escape(core.description or str(core.exe))}</summary><p class='muted'>"
            f"{escape(' · '.join(facts))}{_core_links(run, core)}</p>"
            f"<pre class='backtrace'>{escape(core.backtrace or '(no backtrace)')}</pre></details>")


def _cores(run: RunView) -> str:
    if not run.cores:
        return ""
    details = "".join(_core_details(run, core) for core in run.cores)
    return f"<section id='cores'><h2>Core dumps</h2>{details}</section>"


#: the heading framework.plugin.failtext gives the failed commands' section of a failure text
FAILED_COMMANDS = "failed commands"


def _failed_commands(text: str) -> str:
    """The "failed commands" section of a failure text (framework.plugin.failtext: each failed host command
    with its output's tail), folded under the message; nothing when the text has none."""
    at = text.find(FAILED_COMMANDS)
    if at < 0:
        return ""
    return (f"<details><summary>{FAILED_COMMANDS}</summary><pre class='backtrace'>"
            f"{escape(text[at:][:8000])}</pre></details>")


def _controller(run: RunView) -> str:
    if run.junit is None:
        return ""
    j = run.junit.counts
    rows = "".join(f"<tr><td>{escape(f.kind)}</td><td><code>{escape(f.classname)}::{escape(f.name)}"
                   f"</code></td><td>{escape(f.first_line)}{_failed_commands(f.text)}</td></tr>"
                   for f in run.junit.failed)
    table = (f"<table class='plain'><tr><th>kind</th><th>test</th><th>message</th></tr>{rows}</table>"
             if rows else "<p class='muted'>every controller-level test passed or was skipped.</p>")
    return (f"<section id='controller'><h2>Controller tests <small><a href='junit.xml'>junit.xml</a>: "
            f"{j['tests']} tests, {j['failures']} failed, {j['errors']} errors, {j['skipped']} skipped</small></h2>"
            f"{table}</section>")


def _deploy_row(d: DeployHost, recorded: str | None) -> str:
    """A deployed host's row; ``recorded`` is the version manifest.json's ``versions`` gives the
    host."""
    steps = ", ".join(f"{k} {v:.1f}s" for k, v in d.durations.items())
    installed = d.installed_version or recorded or "—"
    return (f"<tr><td>{escape(d.host)}</td><td>{escape(str(d.status))}</td><td>{escape(str(installed))}"
            f"</td><td>{escape(d.vendor or '—')}</td><td>{escape(steps)}</td><td>"
            f"{escape(d.error or '')}</td></tr>")


def _artifact_row(a: Mapping[str, Any]) -> str:
    """An artifact's row: kind, name, short sha256, size and how it reached each host."""
    hosts = ", ".join(f"{h} ({v})" for h, v in (a.get("hosts") or {}).items())
    return (f"<tr><td>{escape(str(a.get('kind')))}</td><td>{escape(str(a.get('name')))}</td>"
            f"<td><code>{escape(str(a.get('sha256'))[:16])}…</code></td>"
            f"<td>{escape(str(a.get('size')))}</td><td>{escape(hosts)}</td></tr>")


_DEPLOY_HEAD = ("<table class='plain'><tr><th>host</th><th>status</th><th>version</th>"
                "<th>vendor</th><th>steps</th><th>error</th></tr>")
_ARTIFACT_HEAD = ("<h3>Artifacts</h3><table class='plain'><tr><th>kind</th><th>name</th>"
                  "<th>sha256</th><th>bytes</th><th>hosts (how it arrived)</th></tr>")


def _deployed(run: RunView) -> str:
    facts, hosts = run.facts, run.deploy_hosts
    if not (facts.artifacts or hosts):
        return ""
    rows = "".join(_deploy_row(d, facts.versions.get(d.host)) for d in hosts)
    art_rows = "".join(_artifact_row(a) for a in facts.artifacts)
    tables = [(_DEPLOY_HEAD, rows), (_ARTIFACT_HEAD, art_rows)]
    body = "".join(f"{head}{body}</table>" for head, body in tables if body)
    return f"<section id='deploy'><h2>Deployed</h2>{body}</section>"


def _host_files(run: RunView, host: str) -> str:
    """A host's collected files, folded when there are many; nothing when it has none."""
    folder = run.path / host
    if not folder.is_dir():
        return ""
    files = sorted(p for p in folder.rglob("*") if _is_visible_file(p))
    if not files:
        return ""
    items = "".join(f"<li><a href='{_href(p.relative_to(run.path).as_posix())}'>"
                    f"{escape(p.relative_to(folder).as_posix())}</a> "
                    f"<small>{_size(p.stat().st_size)}</small></li>" for p in files)
    return (f"<details class='files' {'open' if len(files) <= 12 else ''}><summary>"
            f"<b>{escape(host)}"
            f"</b> <small>{len(files)} files</small></summary><ul class='files-list'>{items}</ul>"
            "</details>")


def _files(run: RunView) -> str:
    groups = "".join(_host_files(run, host) for host in run.hosts)
    if not groups:
        return ""
    return ("<section id='files'><h2>Files collected from the hosts</h2>"
            f"<div class='card'>{groups}</div></section>")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"

