"""Two small files of a run folder for a CI server: ``summary.txt`` and ``perf.csv``.

:func:`write_summary_txt` writes the short block a Jenkinsfile puts in the build description;
:func:`write_perf_csv` the one-row CSV the Jenkins Plot plugin reads (none without ``perf-*.json``).
Formats: docs/internals/report.md.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from framework.records.folder import write_atomic
from framework.report.fmt import capped, dur, short
from framework.report.model import RankView, RunView, case_counts, outcome_tally, read_run

if TYPE_CHECKING:
    from framework.records.scrub import Scrub

__all__ = ["MAX_NAMED", "perf_table", "summary_text", "write_fallback_summary", "write_perf_csv", "write_summary_txt"]

#: failing tests and ranks named in summary.txt; the rest are counted
MAX_NAMED = 8
_MAX_HOSTS = 8
_WIDTH = 160


def write_summary_txt(rundir_path: str | os.PathLike[str], *, scrub: Scrub | None = None) -> Path:
    """Write ``summary.txt`` (:func:`summary_text`) into the run folder."""
    root = Path(rundir_path)
    return write_atomic(root / "summary.txt", summary_text(read_run(root), scrub=scrub) + "\n")


def write_fallback_summary(root: Path, status: str, error: str, problem: str) -> Path:
    """The ``summary.txt`` left when it cannot be built: the status, the error and the ``problem``."""
    lines = [f"camit {status.upper()} · run {root.resolve().name}"] + ([f"error: {short(error, 120)}"] if error else [])
    return write_atomic(root / "summary.txt", "\n".join([*lines, f"summary.txt could not be built: {problem}"]) + "\n")


def summary_text(run: RunView, *, scrub: Scrub | None = None) -> str:
    """The build-description block of ``run``: a few plain lines, no markup, secrets scrubbed."""
    keep = scrub or str
    cluster = _cluster_root(run.path)
    lines = [*_head_lines(run), *_missing_cores(run.path), *_hosts_line(run.hosts), *_counts_line(run, cluster),
             *_ranks_line(run), *_failed_lines(_failures(run, cluster))]
    repro = run.facts.repro
    lines.append(f"reproduce: {repro}" if repro else "reproduce: (no command line recorded)")
    return "\n".join(keep(line) for line in lines)


def _head_lines(run: RunView) -> list[str]:
    """The status line (with the duration), the error and up to 3 launches' causes."""
    facts = run.facts
    head = f"camit {(facts.status or 'unknown').upper()} · run {run.run_id}"
    if facts.duration is not None:
        head += f" · {dur(facts.duration)}"
    lines = [head]
    if facts.error:
        lines.append("error: " + short(facts.error, 120))
    return lines + [f"CAUSE {short(f'{name}: {text}', _WIDTH)}" for name, text in run.causes[:3]]


def _hosts_line(hosts: list[str]) -> list[str]:
    if not hosts:
        return []
    more = f" (+{len(hosts) - _MAX_HOSTS} more)" if len(hosts) > _MAX_HOSTS else ""
    return [f"hosts ({len(hosts)}): " + ", ".join(hosts[:_MAX_HOSTS]) + more]


def _counts_line(run: RunView, cluster: ET.Element | None) -> list[str]:
    counts = []
    if cluster is not None:
        counts.append("cluster.xml " + _counts(case_counts(cluster.iter("testcase"))))
    if run.junit:
        counts.append("junit.xml " + _counts(run.junit.counts))
    return [" · ".join(counts)] if counts else []


def _ranks_line(run: RunView) -> list[str]:
    """``ranks: 3 pass, 1 crash, 1 core dump``: the outcomes some rank had, and the core dumps."""
    ranks = outcome_tally(run.ranks)
    if run.cores:
        ranks.append(f"{len(run.cores)} core dump" + ("s" if len(run.cores) > 1 else ""))
    return ["ranks: " + ", ".join(ranks)] if ranks else []


def _failed_lines(named: list[str]) -> list[str]:
    if not named:
        return []
    lines = [f"  {short(n, _WIDTH)}" for n in named]
    return [f"failed ({len(named)}):", *capped(lines, MAX_NAMED, "  … {n} more: see index.html")]


def _missing_cores(root: Path) -> list[str]:
    """A line per rank that died of a core-dumping signal and left no core, with why (cores-missing.json)."""
    try:
        entries = json.loads((root / "cores-missing.json").read_text())
    except (OSError, ValueError):
        return []
    return [f"NOCORE {short(str(e.get('host')) + ' r' + str(e.get('rank')) + ': ' + str(e.get('why')), _WIDTH)}"
            for e in entries[:3] if isinstance(e, dict)]


def _counts(c: dict) -> str:
    text = f"{c['tests']} tests, {c['failures']} failed, {c['errors']} errors"
    return text + (f", {c['skipped']} skipped" if c.get("skipped") else "")


def _cluster_root(root: Path) -> ET.Element | None:
    with contextlib.suppress(ET.ParseError, OSError):
        return ET.parse(root / "cluster.xml").getroot()
    return None


def _failures(run: RunView, cluster: ET.Element | None) -> list[str]:
    """The failing tests by name: cluster.xml's (a rank that did not pass is one of them), the controller's,
    and the ranks that did not pass when there is no cluster.xml."""
    names = dict.fromkeys(_cluster_failures(cluster))
    for failed in run.failed_tests:
        names.setdefault(_named(failed.classname, failed.name, failed.message))
    if cluster is None:
        names.update(dict.fromkeys(_bad_rank_line(r) for r in run.ranks if r.outcome != "pass"))
    return list(names)


def _bad_rank_line(r: RankView) -> str:
    """``<outcome> [<launch> ]rank <N> on <host>: <reason>``."""
    where = (f"{r.launch} " if r.launch else "") + f"rank {r.rank} on {r.host}"
    return f"{r.outcome} {where}: " + r.reason.removeprefix(f"rank {r.rank} on {r.host} ")


def _cluster_failures(cluster: ET.Element | None) -> list[str]:
    """cluster.xml's failing and erring cases by name, with their message's first line."""
    out = []
    for case in cluster.iter("testcase") if cluster is not None else ():
        bad = next((el for el in case if el.tag in ("failure", "error")), None)
        if bad is not None:
            out.append(_named(case.get("classname", ""), case.get("name", ""), bad.get("message", "").strip()))
    return out


def _named(classname: str, name: str, message: str) -> str:
    """``classname::name — <the message's first line>``."""
    first = message.splitlines()[:1]
    return f"{classname}::{name}" + (f" — {first[0]}" if first else "")


def perf_table(root: str | os.PathLike[str]) -> dict[str, float]:
    """``{"<case>.<metric>": value}`` from the folder's ``perf-<case>.json`` files (sorted by label);
    a file that cannot be read or a value that is not a finite number is left out."""
    out: dict[str, float] = {}
    for path in sorted(Path(root).glob("perf-*.json")):
        case = path.name.removeprefix("perf-").removesuffix(".json")
        try:
            numbers = json.loads(path.read_text(encoding="utf-8")).get("numbers") or {}
        except (OSError, ValueError, AttributeError):
            continue
        out.update((f"{case}.{metric}", float(value)) for metric, value in sorted(numbers.items())
                   if _is_measure(value))
    return out


def _is_measure(value: object) -> bool:
    """A finite int or float (a bool is not a measure)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def write_perf_csv(rundir_path: str | os.PathLike[str], *, scrub: Scrub | None = None) -> Path | None:
    """Write ``perf.csv`` (labels row, values row: the Plot plugin's CSV series) when the folder holds
    performance results; returns its path, or ``None`` when there were none."""
    root = Path(rundir_path)
    table = perf_table(root)
    if not table:
        return None
    keep = scrub or str
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([keep(label) for label in table])
    writer.writerow([f"{v:.6g}" for v in table.values()])
    return write_atomic(root / "perf.csv", buf.getvalue())
