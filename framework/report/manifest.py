"""``manifest.json``: what ran, where, with what, and how it ended, and THE command line that
reproduces a run.

Design: docs/internals/report.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import shlex
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from framework import __version__
from framework.hosts import sha256_file
from framework.records.folder import write_atomic
from framework.records.scrub import Scrubber, redact_mapping, scrub_doc
from framework.report.fmt import iso
from framework.report.model import OUTCOMES, RankView, RunView, read_run

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.records.scrub import Scrub

__all__ = ["HASH_LIMIT", "PYTEST", "EnvLike", "Moment", "repro_command", "write_fallback_manifest", "write_manifest"]

HASH_LIMIT = 256 * 1024 * 1024  # files above this are listed in the manifest without a sha256
#: how the reproduce line spells a pytest run by default
PYTEST = ("python", "-m", "pytest")
_PYTEST_ENTRIES = ("pytest", "py.test", "__main__.py")
_SEED_OPTIONS = ("--random-seed", "--random_seed")

#: a run's env as the manifest takes it: the loaded env, a plain document (secret keys redacted) or its path
EnvLike = Union["EnvConfig", Mapping[str, Any], str, "os.PathLike[str]"]
#: a point in time: epoch seconds, a datetime or ISO 8601 text
Moment = float | datetime | str


# -- the reproduce line ------------------------------------------------------------------
def repro_command(argv: Sequence[str] | None, seed: int | None = None, *,
                  program: Sequence[str] | None = None) -> str | None:
    """The shell line that reproduces a run: its command line with the seed pinned; None without one.

    ``argv`` is the command line, program first. The program is spelled ``program`` when given, else a
    pytest entry (``pytest``, ``py.test``, ``…/pytest/__main__.py``) becomes ``python -m pytest`` and any
    other program stays. With a ``seed`` every seed option in ``argv`` (``--random-seed N``,
    ``--random-seed=N``, the ``_`` spelling too) is dropped and ``--random-seed <seed>`` appended.
    Example: ``repro_command(["pytest", "suites/cam", "--random_seed", "1"], 7)`` →
    ``python -m pytest suites/cam --random-seed 7``.
    """
    if not argv:
        return None
    args = list(argv[1:])
    if program is not None:
        head = list(program)
    elif Path(argv[0]).name in _PYTEST_ENTRIES:
        head = list(PYTEST)
    else:
        head = [argv[0]]
    if seed is not None:
        args = [*_without_seed(args), "--random-seed", str(seed)]
    return shlex.join(head + args)


def _without_seed(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in _SEED_OPTIONS:
            skip = True
        elif not a.startswith(tuple(f"{o}=" for o in _SEED_OPTIONS)):
            out.append(a)
    return out


# -- manifest.json ------------------------------------------------------------------------
def write_manifest(rundir_path: str | os.PathLike[str], *, env: EnvLike | None = None, seed: int | None = None,
                   argv: Sequence[str] | None = None, repro: str | None = None, started: Moment | None = None,
                   ended: Moment | None = None, status: str = "ok", error: BaseException | str | None = None,
                   extra: Mapping[str, Any] | None = None, scrub: Scrub | None = None,
                   report_errors: Sequence[str] = ()) -> Path:
    """Write ``manifest.json``: what ran, where, with what, and how it ended.

    Values left ``None`` keep what an earlier call recorded, so the plugin can write
    ``status="running"`` with env, seed and argv at the start and only the status at the
    end. ``env`` is an ``EnvConfig`` (stored as ``env.redacted()``: no secret is ever
    written), a mapping (secret-looking keys redacted) or a path. ``repro`` is the reproduce
    line when the caller built it (:func:`repro_command` with its own spelling), else it is
    built from ``argv`` and ``seed``. ``scrub`` (default: the env's secrets) filters every
    string value (:func:`~framework.records.scrub.scrub_doc`); ``report_errors`` are listed
    as ``report_problems``.
    """
    root = Path(rundir_path)
    scrub = scrub or Scrubber.from_env(env)
    run = read_run(root)
    old = run.manifest
    doc: dict[str, Any] = {"schema": 1, "run_id": run.run_id, "status": status,
                           "error": _error_doc(error, status, old)}
    doc.update(_times(run, started, ended, status))
    doc["seed"], doc["command"] = _seed_and_command(old, argv, seed, repro)
    doc["framework"] = {"name": "camit", "version": __version__, "git": _git_sha(), "python": platform.python_version()}
    doc["controller"] = {"hostname": socket.gethostname(), "platform": platform.platform()}
    doc["env"] = _env_doc(env) if env is not None else old.get("env")
    doc["hosts"] = _hosts_doc(run, env, _mapping(old.get("hosts")))
    doc["artifacts"], doc["versions"] = _artifacts_doc(run.deploy)
    doc["launches"] = _launches_doc(run)
    doc["results"] = _results(run)
    doc["files"] = _files(root)
    doc["extra"] = {**_mapping(old.get("extra")), **_mapping(extra)}
    problems = [*report_errors, *run.problems]
    if problems:
        doc["report_problems"] = problems
    # the values, before serialising: a password that is a common word never hits a key or a literal
    text = json.dumps(scrub_doc(json.loads(json.dumps(doc, default=str)), scrub), indent=2) + "\n"
    return write_atomic(root / "manifest.json", text)


def _seed_and_command(old: Mapping[str, Any], argv: Sequence[str] | None, seed: int | None,
                      repro: str | None) -> tuple[int | None, Mapping[str, Any] | None]:
    """The run's seed and ``command``: this call's, else what ``old`` (the manifest so far) says."""
    if repro is None and argv is None and seed is None:  # nothing new: the recorded line stands
        repro = _mapping(old.get("command")).get("repro")
    seed = seed if seed is not None else old.get("seed")
    return seed, _command(old.get("command"), argv, seed, repro)


def _error_doc(error: BaseException | str | None, status: str, old: Mapping[str, Any]) -> Any:
    """This call's error; else the recorded one while the status is unchanged."""
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    if error is not None:
        return str(error)
    return old.get("error") if status == old.get("status") else None


def _launches_doc(run: RunView) -> list[dict[str, Any]]:
    return [{"launch_id": lv.launch_id, "name": lv.name, "ok": lv.record.ok,
             "world_size": lv.world_size, "duration": lv.record.duration, "failure": lv.failure,
             "failure_kind": lv.record.failure_kind, "superseded": lv.superseded}
            for lv in run.launches]


def write_fallback_manifest(root: Path, status: str, error: str, problem: str) -> Path:
    """The ``manifest.json`` left when the full one cannot be built: status, error and the ``problem``."""
    doc = {"schema": 1, "run_id": root.resolve().name, "status": status, "error": error or None,
           "framework": {"name": "camit", "version": __version__}, "report_problems": [problem]}
    return write_atomic(root / "manifest.json", json.dumps(doc, indent=2) + "\n")


def _times(run: RunView, started: Moment | None, ended: Moment | None, status: str) -> dict[str, Any]:
    t0 = _epoch(started) or run.facts.started or _first_phase(run)
    t1 = _epoch(ended) or _recorded_end(run, status)
    return {"started": _moment_doc(t0), "ended": _moment_doc(t1),
            "duration": round(t1 - t0, 3) if t0 and t1 else None}


def _first_phase(run: RunView) -> float | None:
    """The earliest time a phase of the run names (None without phases)."""
    return min((t for p in run.phases for t in (p.start, p.end)), default=None)


def _recorded_end(run: RunView, status: str) -> float | None:
    """When the run ended by its records (now when they do not say); None while it is running."""
    if status == "running":
        return None
    return run.facts.ended or time.time()


def _moment_doc(epoch: float | None) -> dict[str, Any] | None:
    return {"epoch": round(epoch, 3), "iso": iso(epoch)} if epoch else None


def _command(old: Mapping[str, Any] | None, argv: Sequence[str] | None, seed: int | None,
             repro: str | None) -> Mapping[str, Any] | None:
    """``{argv, cwd, repro}``: this call's argv, else the earlier call's; ``repro`` unless built from them."""
    old = old or {}
    args = list(argv) if argv is not None else old.get("argv")
    if not args:
        return old or None
    return {"argv": args, "cwd": os.getcwd() if argv is not None else old.get("cwd"),
            "repro": repro or repro_command(args, seed)}


def _results(run: RunView) -> dict[str, Any]:
    outcomes = {o: 0 for o in OUTCOMES}
    for r in run.ranks:
        outcomes[r.outcome] += 1
    controller = dict(run.junit.counts) if run.junit is not None else None
    return {"ranks": outcomes, "cores": len(run.cores), "controller": controller}


def _env_doc(env: EnvLike) -> dict[str, Any]:
    if hasattr(env, "redacted"):
        return {"file": str(getattr(env, "path", "") or getattr(env, "source", "")) or None,
                "document": env.redacted()}
    if isinstance(env, Mapping):
        return {"file": None, "document": redact_mapping(env)}
    return {"file": os.fspath(env), "document": None}  # a path: never read here (it may hold clear secrets)


def _hosts_doc(run: RunView, env: EnvLike | None, old: Mapping[str, Any]) -> dict[str, Any]:
    """Every host the env, the manifest so far or the run folder names, by name."""
    specs = getattr(env, "hosts", None) or {}
    deployed = _deploy_records(run.deploy)
    return {h: _host_doc(run, h, _mapping(old.get(h)), specs.get(h), deployed.get(h))
            for h in dict.fromkeys([*specs, *old, *run.hosts])}


def _host_doc(run: RunView, host: str, old: Mapping[str, Any], spec: Any,
              deployed: Mapping[str, Any] | None) -> dict[str, Any]:
    """A host's entry: what the manifest so far said, then its env spec, its deploy record and
    results."""
    entry = dict(old)
    if spec is not None:
        entry.update(_spec_doc(spec))
    if deployed is not None:
        entry["deploy"] = {k: deployed.get(k) for k in _DEPLOY_KEYS}
    return entry | _host_results(run, host)


def _mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a mapping (a JSON object), else an empty one."""
    return value if isinstance(value, Mapping) else {}


def _deploy_records(deploy: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """deploy-manifest.json's host records by host (malformed ones left out)."""
    hosts = _mapping(_mapping(deploy).get("hosts"))
    return {host: m for host, m in hosts.items() if isinstance(m, dict)}


#: the keys of a host's deploy record manifest.json repeats under the host
_DEPLOY_KEYS = ("status", "installed_version", "vendor", "install_path", "interpreter", "durations", "step", "error")


def _spec_doc(spec: Any) -> dict[str, Any]:
    """What the env file says of a host: address, user, NPU."""
    describe = getattr(getattr(spec, "npu", None), "describe", None)
    return {"address": getattr(spec, "address", None), "user": getattr(spec, "user", None),
            "npu": describe() if describe is not None else None}


def _host_results(run: RunView, host: str) -> dict[str, Any]:
    """The host's rank outcomes and files in the run folder (keys only where there are some)."""
    out: dict[str, Any] = {}
    ranks = {_rank_key(r): r.outcome for r in run.ranks if r.host == host}
    if ranks:
        out["ranks"] = ranks
    folder = run.path / host
    if folder.is_dir():
        out["files"] = _visible_files(run.path, folder)
    return out


def _rank_key(r: RankView) -> str:
    """A rank's key under its host: ``[<launch>.]rank<N>``."""
    return (f"{r.launch}." if r.launch else "") + f"rank{r.rank}"


def _visible_files(root: Path, folder: Path) -> list[str]:
    """The files under ``folder`` not named with a leading dot, relative to ``root``, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in folder.rglob("*")
                  if p.is_file() and not p.name.startswith("."))


def _artifacts_doc(deploy: Mapping[str, Any] | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    arts: dict[str, dict[str, Any]] = {}
    versions: dict[str, Any] = {}
    for host, m in _deploy_records(deploy).items():
        for a in m.get("artifacts") or []:
            rec = arts.setdefault(a.get("sha256", "?"), _artifact_doc(a))
            rec["hosts"][host] = a.get("via")
        versions[host] = {"installed_version": m.get("installed_version"), "vendor": m.get("vendor"),
                          "ops": m.get("ops") or []}
    return list(arts.values()), versions


def _artifact_doc(a: Mapping[str, Any]) -> dict[str, Any]:
    """An artifact's entry before its hosts are added: kind, name, sha256, size."""
    return {k: a.get(k) for k in ("kind", "name", "sha256", "size")} | {"hosts": {}}


def _files(root: Path) -> list[dict[str, Any]]:
    """The run folder's files manifest.json lists: path, size and sha256 (None above
    :data:`HASH_LIMIT`)."""
    return [_file_doc(p, p.relative_to(root).as_posix()) for p in sorted(root.rglob("*"))
            if _is_listed(root, p)]


def _is_listed(root: Path, path: Path) -> bool:
    """A file neither hidden (no part of its path starts with a dot) nor the manifest or the
    page."""
    rel = path.relative_to(root)
    hidden = any(part.startswith(".") for part in rel.parts)
    return path.is_file() and not hidden and rel.as_posix() not in ("manifest.json", "index.html")


def _file_doc(path: Path, rel: str) -> dict[str, Any]:
    size = path.stat().st_size
    return {"path": rel, "size": size, "sha256": sha256_file(path) if size <= HASH_LIMIT else None}


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


def _epoch(value: Moment | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(str(value)).timestamp()
    return None
