"""The one-screen terminal summary at the end of a pytest run: :func:`terminal_summary`.

Design: docs/internals/report.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from framework.console import printable
from framework.report.fmt import capped, dur, ranges, short
from framework.report.model import (
    CoreView,
    RankView,
    RunView,
    by_host,
    case_counts,
    outcome_tally,
    read_run,
)

if TYPE_CHECKING:
    from framework.records.scrub import Scrub

__all__ = ["terminal_summary"]

_CHAR = {"pass": ".", "fail": "F", "crash": "C", "killed": "K", "lost": "L"}
_RANKS_A_LINE = 64  # 64 ranks a line keeps a 1024-rank host on one screen
_WIDTH = 100


def terminal_summary(rundir_path: str | os.PathLike[str], repro: str | None = None, *,
                     scrub: Scrub | None = None) -> str:
    """One screen for the end of a pytest run: ranks per host, problems, slowest phases, how to reproduce.

    Pure: reads the folder's files only. ``repro`` overrides the command recorded in the
    manifest (:func:`framework.report.manifest.repro_command`'s line). ``scrub`` takes the secrets out of
    every line but the report folder's path (which must stay one to open); control characters come out
    escaped (:func:`framework.console.printable`).
    """
    run = read_run(rundir_path)
    keep = scrub or str
    lines = [keep(line) for line in [_headline(run), *_counts(run), *_causes(run), *_rank_grid(run), *_bad_ranks(run),
                                     *_stacks(run), *_cores(run), *_missing_cores(run), *_dirty_hosts(run),
                                     *_failed_tests(run), *_slowest_phases(run)]]
    lines += [f"  report: {run.path / 'index.html'}", keep(_reproduce(run, repro))]
    if run.problems:
        lines.append(keep("  report problems: " + short("; ".join(run.problems), 90)))
    # errors, failure messages and core facts quote the hosts: text on the terminal, never control
    return "\n".join(printable(line) for line in lines)


def _headline(run: RunView) -> str:
    facts = run.facts
    head = f"camit run {run.run_id}: {(facts.status or 'unknown').upper()}"
    if facts.error:
        head += f" ({short(facts.error, 60)})"
    if facts.duration:
        head += f" in {dur(facts.duration)}"
    return head


def _counts(run: RunView) -> list[str]:
    counts = []
    cx = run.path / "cluster.xml"
    if cx.exists():
        with contextlib.suppress(ET.ParseError, OSError):
            counts.append("cluster.xml " + _count_text(case_counts(ET.parse(cx).getroot().iter("testcase"))))
    if run.junit:
        counts.append("junit.xml " + _count_text(run.junit.counts))
    return ["  " + "; ".join(counts)] if counts else []


def _count_text(c: Mapping[str, int]) -> str:
    return f"{c['tests']} tests, {c['failures']} failed, {c['errors']} errors, {c['skipped']} skipped"


def _rank_grid(run: RunView) -> list[str]:
    if not run.ranks:
        return []
    lines = ["  ranks  (. pass  F fail  C crash  K killed  L lost)"]
    width = max((len(h) for h in run.hosts), default=4)
    for name, ranks in _rank_groups(run):
        lines += [f"  {name}"] if name else []
        lines += _group_rows(ranks, width)
    return lines


def _rank_groups(run: RunView) -> list[tuple[str, list[RankView]]]:
    """The ranks by launch (named when there are several), then those without a launch record."""
    several = len(run.launches) > 1
    groups = [(lv.name if several else "", lv.ranks) for lv in run.launches]
    if run.orphans:
        groups.append(("(no launch record)", run.orphans))
    return groups


def _group_rows(ranks: list[RankView], width: int) -> list[str]:
    """A launch's ranks, host by host in the order they first appear, each host's by rank."""
    return [row for host, mine in by_host(ranks).items() for row in _host_rows(host, mine, width)]


def _host_rows(host: str, mine: list[RankView], width: int) -> list[str]:
    """One host's ranks as characters, :data:`_RANKS_A_LINE` a line; the first line names them and tallies."""
    chars = "".join(_CHAR[r.outcome] for r in mine)
    tally = ", ".join(outcome_tally(mine))
    label = f"r{ranges([r.rank for r in mine])}"
    cells = min(_RANKS_A_LINE, len(chars))
    lines = [chars[i:i + _RANKS_A_LINE] for i in range(0, len(chars), _RANKS_A_LINE)]
    first = f"    {host:<{width}}  {label:<9} {lines[0]:<{cells}}  {tally}"
    return [first] + [f"    {'':<{width}}  {'':<9} {line:<{cells}}" for line in lines[1:]]


def _bad_ranks(run: RunView) -> list[str]:
    """The ranks that did not pass (the first five): outcome, where, why."""
    lines = [_bad_rank(r) for r in run.ranks if r.outcome != "pass"]
    return capped(lines, 5, "  … {n} more rank(s) not passing: see index.html")


def _bad_rank(r: RankView) -> str:
    where = (f"{r.launch} " if r.launch else "") + f"{r.host} r{r.rank}"
    reason = r.reason.removeprefix(f"rank {r.rank} on {r.host} ")
    return f"  {r.outcome.upper():6} {where}: " + short(reason, 90)


def _causes(run: RunView) -> list[str]:
    """What failed and why, first: each failed launch's cause in its rank's own words (at most three)."""
    lines = ["  CAUSE  " + short(f"{name}: {text}", 2 * _WIDTH) for name, text in run.causes]
    return capped(lines, 3, "  … {n} more failed launch(es) with a cause: see index.html")


def _stacks(run: RunView) -> list[str]:
    """Where the ranks of each launch that was asked for its stacks stood: the majority, then the odd ones."""
    lines = []
    for lv in run.launches:
        groups = lv.stacks
        if groups:
            odd = f"; odd: {'; '.join(groups[1:])}" if groups[1:] else ""
            lines.append("  STACKS " + short(f"{lv.name}: {groups[0]}{odd}", 2 * _WIDTH))
    return lines


def _cores(run: RunView) -> list[str]:
    """The first three core dumps: where, what, the crashing frame."""
    return capped([_core_line(core) for core in run.cores], 3, "  … {n} more core dump(s)")


def _core_line(core: CoreView) -> str:
    frame = core.top_frame
    where = f"{core.host} r{core.rank}" if core.rank is not None else core.host
    what = f"{Path(core.exe or '?').name} pid {core.pid} {core.signal or ''}".rstrip()
    return "  CORE   " + short(f"{where}: {what}" + (f" — {frame}" if frame else ""), _WIDTH)


def _missing_cores(run: RunView) -> list[str]:
    """Ranks that died of a core-dumping signal and left no core, with why (``cores-missing.json``)."""
    try:
        entries = json.loads((run.path / "cores-missing.json").read_text())
    except (OSError, ValueError):
        return []
    lines = [f"  NOCORE {e.get('host')} r{e.get('rank')} {e.get('signal')}: " + short(str(e.get("why")), _WIDTH)
             for e in entries[:3] if isinstance(e, dict)]
    if len(entries) > 3:
        lines.append(f"  … {len(entries) - 3} more rank(s) without a core: see cores-missing.json")
    return lines


def _dirty_hosts(run: RunView) -> list[str]:
    """Devices a launch's process still held (``dirty-hosts.json``) and the operator's reset command for each."""
    from framework.launch.devices import read_dirty, reset_lines

    return ["  DIRTY  " + line for line in reset_lines(read_dirty(run.path))]


def _failed_tests(run: RunView) -> list[str]:
    lines = []
    for failed in run.failed_tests[:3]:
        test = f"{failed.classname}::{failed.name}: {failed.first_line}"
        lines.append("  TEST   " + short(test, _WIDTH))
    return lines


def _slowest_phases(run: RunView) -> list[str]:
    slow = sorted(run.phases, key=lambda p: -p.duration)[:6]
    if not slow:
        return []
    lines = []
    row = "  slowest phases (~ estimated):"
    for p in slow:
        item = f"  {p.host} {p.phase} {dur(p.duration)}{'~' if p.derived else ''}"
        if len(row) + len(item) > _WIDTH:
            lines.append(row)
            row = "   "
        row += item
    lines.append(row)
    return lines


def _reproduce(run: RunView, repro: str | None) -> str:
    command = repro or run.facts.repro
    return f"  reproduce: {command}" if command else "  reproduce: (no command line recorded)"
