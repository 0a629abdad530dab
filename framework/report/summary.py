"""The run's report: one JUnit file for Jenkins, a manifest, a summary and a page, all from the run folder.

Everything here reads ``reports/<run-id>/`` (through :func:`framework.report_read.read_run`)
and nothing else, so a report can be rebuilt at any time — after a crash, from an archived
folder — and an interrupted run still leaves a consistent folder (:func:`finalize` never
raises). Only the controller calls these functions; every file is written atomically.

This module is the entry point: :func:`finalize` writes ``cluster.xml``
(:mod:`framework.report.junit`), ``manifest.json`` (:func:`write_manifest`, here) and
``index.html`` (:mod:`framework.report.html`), each replaced by a minimal file saying so when
it cannot be built, with known secrets scrubbed from all three. :func:`record_phase` appends
to ``phases.json`` during the run and :func:`terminal_summary` is the screen at its end.
What the folder holds and how it is read is described in :mod:`framework.report.model`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import re
import shlex
import socket
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from framework import __version__
from framework.hosts import sha256_file
from framework.report.folder import update_json, write_atomic
from framework.report.junit import _write_cluster, _xml_text
from framework.report.model import OUTCOMES, RankView, RunView, _counts, _dur, _iso, _ranges, read_run

log = logging.getLogger("camit.report")

__all__ = ["finalize", "record_phase", "terminal_summary", "write_index", "write_manifest"]

HASH_LIMIT = 256 * 1024 * 1024  # files above this are listed in the manifest without a sha256


# -- phases ---------------------------------------------------------------------
def record_phase(rundir_path: str | os.PathLike[str], host: str, phase: str, start: float, end: float) -> None:
    """Append ``{host, phase, start, end}`` (epoch seconds) to ``phases.json``.

    Atomic and safe from several threads (and processes: a file lock next to it).
    Example: ``record_phase(rundir.path, "node1", "deploy", t0, time.time())``.
    """
    root = Path(rundir_path)
    start, end = float(start), float(end)
    if end < start:
        log.warning("phase %s on %s ends before it starts (%s < %s): recorded as zero length", phase, host, end, start)
        end = start
    entry = {"host": str(host), "phase": str(phase), "start": round(start, 3), "end": round(end, 3)}

    def add(phases: Any) -> list[Any]:
        if phases is not None and not isinstance(phases, list):
            log.warning("%s is not a list: starting it again", root / "phases.json")
            phases = None
        return [*(phases or []), entry]

    update_json(root / "phases.json", add, indent=1)


# -- manifest.json --------------------------------------------------------------------
def write_manifest(rundir_path: str | os.PathLike[str], *, env: Any = None, seed: Any = None,
                   argv: Sequence[str] | None = None, started: Any = None, ended: Any = None, status: str = "ok",
                   error: Any = None, extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``manifest.json``: what ran, where, with what, and how it ended.

    Values left ``None`` keep what an earlier call recorded, so the plugin can write
    ``status="running"`` with env, seed and argv at the start and only the status at
    the end. ``env`` is an ``EnvConfig`` (stored as ``env.redacted()``: no secret is
    ever written), a mapping (secret-looking keys redacted) or a path.
    """
    return _write_manifest(Path(rundir_path), _Scrubber.from_env(env), env=env, seed=seed, argv=argv,
                           started=started, ended=ended, status=status, error=error, extra=extra)


def _write_manifest(root: Path, scrub: _Scrubber, *, env: Any, seed: Any, argv: Sequence[str] | None,
                    started: Any, ended: Any, status: str, error: Any, extra: Mapping[str, Any] | None,
                    report_errors: Sequence[str] = ()) -> Path:
    run = read_run(root)
    old = run.manifest
    doc: dict[str, Any] = {"schema": 1, "run_id": run.run_id, "status": status, "error": None}
    if error is not None:
        doc["error"] = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    elif status == old.get("status"):
        doc["error"] = old.get("error")
    times = [p.start for p in run.phases] + [p.end for p in run.phases]
    t0 = _epoch(started) or (old.get("started") or {}).get("epoch") or (min(times) if times else None)
    t1 = _epoch(ended) or (None if status == "running" else (old.get("ended") or {}).get("epoch") or time.time())
    doc["started"] = {"epoch": round(t0, 3), "iso": _iso(t0)} if t0 else None
    doc["ended"] = {"epoch": round(t1, 3), "iso": _iso(t1)} if t1 else None
    doc["duration"] = round(t1 - t0, 3) if t0 and t1 else None
    args = list(argv) if argv is not None else (old.get("command") or {}).get("argv")
    seed = seed if seed is not None else old.get("seed")
    doc["seed"] = seed
    doc["command"] = {"argv": args, "cwd": os.getcwd() if argv is not None else (old.get("command") or {}).get("cwd"),
                      "repro": _repro(args, seed)} if args else old.get("command")
    doc["framework"] = {"name": "camit", "version": __version__, "git": _git_sha(), "python": platform.python_version()}
    doc["controller"] = {"hostname": socket.gethostname(), "platform": platform.platform()}
    doc["env"] = _env_doc(env) if env is not None else old.get("env")
    doc["hosts"] = _hosts_doc(run, env, old.get("hosts") or {})
    doc["artifacts"], doc["versions"] = _artifacts_doc(run.deploy)
    doc["launches"] = [{"launch_id": lv.launch_id, "name": lv.name, "ok": lv.data.get("ok"),
                        "world_size": lv.world_size, "duration": lv.data.get("duration"),
                        "failure": lv.failure, "failure_kind": lv.data.get("failure_kind"),
                        "superseded": lv.superseded} for lv in run.launches]
    outcomes = {o: 0 for o in OUTCOMES}
    for r in run.ranks:
        outcomes[r.outcome] += 1
    doc["results"] = {"ranks": outcomes, "cores": len(run.cores), "controller": {k: v for k, v in (run.junit or {})
                                                                                 .items() if k != "failed"} or None}
    doc["files"] = _files(root)
    doc["extra"] = {**(old.get("extra") or {}), **dict(extra or {})}
    if report_errors or run.problems:
        doc["report_problems"] = list(report_errors) + run.problems
    text = json.dumps(doc, indent=2, default=str) + "\n"
    return write_atomic(root / "manifest.json", scrub(text))


def _env_doc(env: Any) -> dict[str, Any]:
    if hasattr(env, "redacted"):
        return {"file": str(getattr(env, "path", "") or getattr(env, "source", "")) or None,
                "document": env.redacted()}
    if isinstance(env, Mapping):
        return {"file": None, "document": _redact_mapping(env)}
    return {"file": os.fspath(env), "document": None}  # a path: never read here (it may hold clear secrets)


def _redact_mapping(doc: Any, key: str = "") -> Any:
    if isinstance(doc, Mapping):
        return {k: _redact_mapping(v, str(k)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_redact_mapping(v, key) for v in doc]
    if re.search(r"passw|pass$|token|secret|credential", key, re.I) or type(doc).__name__ == "Secret":
        return "***"
    return doc


def _hosts_doc(run: RunView, env: Any, old: Mapping[str, Any]) -> dict[str, Any]:
    specs = getattr(env, "hosts", None) or {}
    deploy_hosts = (run.deploy or {}).get("hosts") or {}
    out: dict[str, Any] = {}
    for h in dict.fromkeys([*specs, *old, *run.hosts]):
        entry = dict(old.get(h) or {})
        spec = specs.get(h)
        if spec is not None:
            entry.update({"address": getattr(spec, "address", None), "user": getattr(spec, "user", None),
                          "npu": spec.npu.describe() if hasattr(getattr(spec, "npu", None), "describe") else None})
        m = deploy_hosts.get(h)
        if isinstance(m, dict):
            entry["deploy"] = {k: m.get(k) for k in ("status", "installed_version", "vendor", "install_path",
                                                     "interpreter", "durations", "step", "error")}
        ranks = [r for r in run.ranks if r.host == h]
        if ranks:
            entry["ranks"] = {(f"{r.launch}." if r.launch else "") + f"rank{r.rank}": r.outcome for r in ranks}
        folder = run.path / h
        if folder.is_dir():
            entry["files"] = sorted(p.relative_to(run.path).as_posix() for p in folder.rglob("*")
                                    if p.is_file() and not p.name.startswith("."))
        out[h] = entry
    return out


def _artifacts_doc(deploy: Mapping[str, Any] | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    arts: dict[str, dict[str, Any]] = {}
    versions: dict[str, Any] = {}
    for host, m in ((deploy or {}).get("hosts") or {}).items():
        if not isinstance(m, dict):
            continue
        for a in m.get("artifacts") or []:
            rec = arts.setdefault(a.get("sha256", "?"), {k: a.get(k) for k in ("kind", "name", "sha256", "size")}
                                  | {"hosts": {}})
            rec["hosts"][host] = a.get("via")
        versions[host] = {"installed_version": m.get("installed_version"), "vendor": m.get("vendor"),
                          "ops": m.get("ops") or []}
    return list(arts.values()), versions


def _files(root: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or any(part.startswith(".") for part in p.relative_to(root).parts) \
                or rel in ("manifest.json", "index.html"):
            continue
        size = p.stat().st_size
        out.append({"path": rel, "size": size, "sha256": sha256_file(p) if size <= HASH_LIMIT else None})
    return out


@functools.lru_cache(maxsize=1)
def _git_sha() -> str | None:
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _repro(argv: Sequence[str] | None, seed: Any) -> str | None:
    if not argv:
        return None
    args = list(argv)
    if Path(args[0]).name in ("pytest", "py.test", "__main__.py"):
        args[:1] = ["python", "-m", "pytest"]
    if seed is not None and not any(a == "--random-seed" or a.startswith("--random-seed=") for a in args):
        args += ["--random-seed", str(seed)]
    return shlex.join(args)


# -- index.html, finalize ------------------------------------------------------------
def write_index(rundir_path: str | os.PathLike[str]) -> Path:
    """Write ``index.html``: offline page with the phase timeline and the rank grid."""
    from framework.report.html import render

    root = Path(rundir_path)
    return write_atomic(root / "index.html", render(read_run(root)))


def finalize(rundir_path: str | os.PathLike[str], *, cores: Sequence[Any] = (), **manifest_kwargs: Any) -> None:
    """Write ``cluster.xml``, ``manifest.json`` and ``index.html`` from whatever the folder holds.

    Never raises: a step that fails is logged, replaced by a minimal file saying so
    and listed in the manifest's ``report_problems``. Call it from ``finally:`` with
    ``status="interrupted", error=exc`` when the run did not complete.
    """
    root = Path(rundir_path)
    try:
        root.mkdir(parents=True, exist_ok=True)
        scrub = _Scrubber.from_env(manifest_kwargs.get("env"))
    except Exception:
        log.exception("cannot prepare the report folder %s", root)
        return
    kw = {"env": None, "seed": None, "argv": None, "started": None, "ended": None, "status": "ok", "error": None,
          "extra": None, **manifest_kwargs}
    err = kw["error"]
    err_text = (f"{type(err).__name__}: {err}" if isinstance(err, BaseException) else str(err)) if err else None
    problems: list[str] = []
    steps = [
        ("cluster.xml", lambda: _write_cluster(root, cores, scrub, kw["status"], err_text), _fallback_cluster),
        ("manifest.json", lambda: _write_manifest(root, scrub, report_errors=problems, **kw), _fallback_manifest),
        ("index.html", lambda: write_atomic(root / "index.html", scrub(_render(root))), _fallback_index),
    ]
    for name, step, fallback in steps:
        try:
            step()
        except Exception as exc:
            log.exception("report: writing %s failed", name)
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            try:
                fallback(root, kw["status"], scrub(err_text or ""), scrub(problems[-1]))
            except Exception:
                log.exception("report: even the fallback %s failed", name)


def _render(root: Path) -> str:
    from framework.report.html import render

    return render(read_run(root))


def _fallback_cluster(root: Path, status: str, error: str, problem: str) -> None:
    top = ET.Element("testsuites", name=root.resolve().name, tests="1", failures="0", errors="1", time="0")
    suite = ET.SubElement(top, "testsuite", name="cluster", tests="1", failures="0", errors="1", time="0")
    case = ET.SubElement(suite, "testcase", classname="camit.report", name="cluster_report", time="0")
    ET.SubElement(case, "error", type="ReportFailed", message=_xml_text(f"could not merge rank results: {problem}")
                  ).text = _xml_text(f"run status: {status}\n{error}")
    write_atomic(root / "cluster.xml", ET.tostring(top, encoding="unicode", xml_declaration=True))


def _fallback_manifest(root: Path, status: str, error: str, problem: str) -> None:
    doc = {"schema": 1, "run_id": root.resolve().name, "status": status, "error": error or None,
           "framework": {"name": "camit", "version": __version__}, "report_problems": [problem]}
    write_atomic(root / "manifest.json", json.dumps(doc, indent=2) + "\n")


def _fallback_index(root: Path, status: str, error: str, problem: str) -> None:
    from html import escape

    write_atomic(root / "index.html", f"<!doctype html><meta charset=utf-8><title>{escape(root.name)}</title>"
                 f"<h1>camit run {escape(root.resolve().name)}: {escape(status)}</h1><p>{escape(error)}</p>"
                 f"<p>The report page could not be built: {escape(problem)}</p>"
                 "<p><a href='cluster.xml'>cluster.xml</a> · <a href='junit.xml'>junit.xml</a> · "
                 "<a href='manifest.json'>manifest.json</a></p>")


# -- terminal summary ------------------------------------------------------------------
_CHAR = {"pass": ".", "fail": "F", "crash": "C", "killed": "K", "lost": "L"}


def terminal_summary(rundir_path: str | os.PathLike[str], repro: str | None = None) -> str:
    """One screen for the end of a pytest run: ranks per host, problems, slowest phases, how to reproduce.

    Pure: reads the folder's files only. ``repro`` overrides the command built from the
    manifest's argv and seed.
    """
    run = read_run(rundir_path)
    m = run.manifest
    status = str(m.get("status") or "unknown")
    head = f"camit run {run.run_id}: {status.upper()}"
    if m.get("error"):
        head += f" ({_short(str(m['error']), 60)})"
    if m.get("duration"):
        head += f" in {_dur(float(m['duration']))}"
    lines = [head]
    cx = run.path / "cluster.xml"
    counts = []
    if cx.exists():
        with contextlib.suppress(ET.ParseError, OSError):
            counts.append("cluster.xml " + _count_text(_counts(ET.parse(cx).getroot().iter("testcase"))))
    if run.junit:
        counts.append("junit.xml " + _count_text(run.junit))
    if counts:
        lines.append("  " + "; ".join(counts))
    if run.ranks:
        lines.append("  ranks  (. pass  F fail  C crash  K killed  L lost)")
        groups: list[tuple[str, list[RankView]]] = [(lv.name if len(run.launches) > 1 else "", lv.ranks)
                                                    for lv in run.launches]
        if run.orphans:
            groups.append(("(no launch record)", run.orphans))
        width = max(len(h) for h in run.hosts) if run.hosts else 4
        for name, ranks in groups:
            if name:
                lines.append(f"  {name}")
            for host in dict.fromkeys(r.host for r in ranks):
                mine = sorted((r for r in ranks if r.host == host), key=lambda r: r.rank)
                chars = "".join(_CHAR[r.outcome] for r in mine)
                tally = ", ".join(f"{n} {o}" for o in OUTCOMES if (n := sum(r.outcome == o for r in mine)))
                label = f"r{_ranges([r.rank for r in mine])}"
                for i in range(0, len(chars), 64):  # 64 ranks a line keeps a 1024-rank host on one screen
                    first = i == 0
                    row = f"    {host if first else '':<{width}}  {label if first else '':<9} {chars[i:i + 64]:<{min(64, len(chars))}}"
                    lines.append(f"{row}  {tally}" if first else row)
    bad = [r for r in run.ranks if r.outcome != "pass"]
    for r in bad[:5]:
        where = (f"{r.launch} " if r.launch else "") + f"{r.host} r{r.rank}"
        lines.append(f"  {r.outcome.upper():6} {where}: " + _short(r.reason.removeprefix(f"rank {r.rank} on {r.host} "), 90))
    if len(bad) > 5:
        lines.append(f"  … {len(bad) - 5} more rank(s) not passing: see index.html")
    for core in run.cores[:3]:
        frame = core.top_frame
        where = f"{core.host} r{core.rank}" if core.rank is not None else core.host
        what = f"{Path(core.exe or '?').name} pid {core.pid} {core.signal or ''}".rstrip()
        lines.append("  CORE   " + _short(f"{where}: {what}" + (f" — {frame}" if frame else ""), 100))
    if len(run.cores) > 3:
        lines.append(f"  … {len(run.cores) - 3} more core dump(s)")
    for failed in (run.junit or {}).get("failed", [])[:3]:
        first = (failed["message"].splitlines() or [""])[0]
        lines.append("  TEST   " + _short(f"{failed['classname']}::{failed['name']}: {first}", 100))
    slow = sorted(run.phases, key=lambda p: -p.duration)[:6]
    if slow:
        row = "  slowest phases (~ estimated):"
        for p in slow:
            item = f"  {p.host} {p.phase} {_dur(p.duration)}{'~' if p.derived else ''}"
            if len(row) + len(item) > 100:
                lines.append(row)
                row = "   "
            row += item
        lines.append(row)
    lines.append(f"  report: {run.path / 'index.html'}")
    command = repro or (m.get("command") or {}).get("repro")
    lines.append(f"  reproduce: {command}" if command else "  reproduce: (no command line recorded)")
    if run.problems:
        lines.append("  report problems: " + _short("; ".join(run.problems), 90))
    return "\n".join(lines)


def _count_text(c: Mapping[str, int]) -> str:
    return f"{c['tests']} tests, {c['failures']} failed, {c['errors']} errors, {c['skipped']} skipped"


# -- small helpers ------------------------------------------------------------------------
class _Scrubber:
    """Replaces known secret values (the env's passwords and secret launch variables) by ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True)

    @classmethod
    def from_env(cls, env: Any) -> _Scrubber:
        found = []
        for spec in (getattr(env, "hosts", None) or {}).values():
            pw = getattr(spec, "password", None)
            if pw is not None and hasattr(pw, "reveal"):
                found.append(pw.reveal())
        for value in (getattr(getattr(env, "launch", None), "env", None) or {}).values():
            if hasattr(value, "reveal"):
                found.append(value.reveal())
        return cls(found)

    def __call__(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, "***")
        return text


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(str(value)).timestamp()
    return None


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
