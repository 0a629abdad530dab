"""The fault bundle MindCluster's ``ascend-fd`` reads: one collection tree per host, scrubbed and
bounded.

Layout and sources: ``framework/data/ascend-fd-layout.json``; design notes:
docs/internals/cores.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from framework.records.folder import write_atomic

log = logging.getLogger("camit.faultbundle")

BUNDLE = "fault-bundle"
#: a host folder's NPU state before the launch (``npu-smi info``; the runner writes it on a failure)
BEFORE = "npu-state-before"
VERDICT = "ascend-fd.txt"
#: camit's bound per host (far below the tool's 5 GB)
HOST_BYTES = 256 * 1024 * 1024
TOOL = "ascend-fd"
TOOL_TIMEOUT = 300.0
_RANK_LOG = re.compile(r"^rank(\d+)\.log$")


def layout() -> dict[str, Any]:
    """The tool's input layout, as data (with its sources)."""
    path = resources.files("framework") / "data" / "ascend-fd-layout.json"
    text = path.read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@dataclass
class _Writer:
    """Files into one host's tree, scrubbed and bounded (per file and in total)."""

    root: Path
    scrub: Callable[[str], str]
    left: int = HOST_BYTES
    notes: list[str] = field(default_factory=list)

    def text(self, rel: str, text: str, cap: int, *, tail: bool = True) -> None:
        data = self.scrub(text).encode("utf-8", "replace")
        keep = min(cap, self.left)
        if len(data) > keep:
            self.notes.append(f"{rel}: cut to {keep} of {len(data)} bytes")
            data = data[-keep:] if tail else data[:keep]
        self.left -= len(data)
        write_atomic(self.root / rel, data)

    def copy(self, rel: str, src: Path, cap: int) -> None:
        if src.is_symlink():  # the fetched folder holds none; never follow one out of it
            self.notes.append(f"{rel}: a symlink, not followed")
            return
        try:
            with open(src, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(max(0, size - cap))
                raw = fh.read()
        except OSError as exc:
            self.notes.append(f"{rel}: not read: {exc.strerror}")
            return
        if size > cap:
            self.notes.append(f"{rel}: cut to {cap} of {size} bytes (the newest kept)")
        self.text(rel, raw.decode(errors="replace"), cap)


def _limits() -> Mapping[str, int]:
    return {k: int(v) for k, v in layout()["limits"].items()}


#: no mapping (the default of the optional ``env``/``versions`` arguments)
_NONE: Mapping[str, Any] = MappingProxyType({})
#: the bound of each of camit's own files in a tree
_CAMIT_FILE_BYTES = 1 << 20


def host_tree(src: Path, dest: Path, *, scrub: Callable[[str], str] = str,
              env: Mapping[str, str] = _NONE, versions: Mapping[str, str] = _NONE) -> list[str]:
    """Write one host's collection tree ``dest`` from its fetched run folder ``src``; the notes on
    what was cut or missing (also in ``camit/notes.txt``)."""
    lim = _limits()
    w = _Writer(dest, scrub)
    _console_logs(w, src, lim["console_log_read_bytes"])
    _process_logs(w, src, lim["cann_log_file_bytes"])
    _device_logs(w, src / "npu-state" / "msnpureport", lim["cann_log_file_bytes"])
    _npu_info(w, src / BEFORE, "npu_info_before.txt", lim["metric_file_bytes"])
    _npu_info(w, src / "npu-state", "npu_info_after.txt", lim["metric_file_bytes"])
    if (src / "dmesg.txt").is_file():
        w.copy("dmesg", src / "dmesg.txt", lim["metric_file_bytes"])
    w.text("camit/environment.txt", _lines(env, "{}={}"), _CAMIT_FILE_BYTES)
    w.text("camit/versions.txt", _lines(versions, "{}: {}"), _CAMIT_FILE_BYTES)
    w.text("camit/notes.txt", "".join(n + "\n" for n in w.notes), _CAMIT_FILE_BYTES)
    return w.notes


def _lines(values: Mapping[str, str], fmt: str) -> str:
    """One ``fmt``-formatted line per key and value, sorted by key."""
    return "".join(fmt.format(k, v) + "\n" for k, v in sorted(values.items()))


def _console_logs(w: _Writer, src: Path, cap: int) -> None:
    """The ranks' console logs ``rank<N>.log`` as ``rank-<N>.txt``."""
    for log_path in sorted(src.glob("rank*.log")):
        m = _RANK_LOG.match(log_path.name)
        if m:
            w.copy(f"rank-{m[1]}.txt", log_path, cap)


def _process_logs(w: _Writer, src: Path, cap: int) -> None:
    """The CANN plogs anywhere in the run folder into ``process_log/plog/`` (the folder always
    exists)."""
    for plog in sorted(src.rglob("plog-*.log")):
        w.copy(f"process_log/plog/{plog.name}", plog, cap)
    (w.root / "process_log").mkdir(parents=True, exist_ok=True)


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _device_logs(w: _Writer, folder: Path, cap: int) -> None:
    """msnpureport's export into ``device_log/`` (the folder always exists; a note when it is
    empty)."""
    (w.root / "device_log").mkdir(parents=True, exist_ok=True)
    if not folder.is_dir():
        w.notes.append("device_log: msnpureport did not run on this host")
        return
    files = sorted(filter(_regular, folder.rglob("*")))
    if not files:
        w.notes.append("device_log: msnpureport exported no file on this host")
    for path in files:
        w.copy(f"device_log/{path.relative_to(folder).as_posix()}", path, cap)


def _npu_info(w: _Writer, folder: Path, name: str, cap: int) -> None:
    """npu-smi info and hccn_tool's link statistics in one ``environment_check/<name>``."""
    parts = [f"== {p.name}\n{p.read_text(errors='replace')}" for p in
             (folder / "npu-smi-info.txt", folder / "hccn.txt") if p.is_file()]
    (w.root / "environment_check").mkdir(parents=True, exist_ok=True)
    if not parts:
        w.notes.append(f"environment_check/{name}: not captured on this host")
        return
    w.text(f"environment_check/{name}", "".join(parts), cap)


def add_dmesg(root: Path, host: str, text: str) -> None:
    """``dmesg`` into ``host``'s tree of the run's bundle, when a failed launch wrote one (the
    kernel lines are collected after the launch's bundle; the tool reads the newest 100000
    lines)."""
    tree = root / BUNDLE / host
    if tree.is_dir():
        lines = text.splitlines(keepends=True)[-int(_limits()["dmesg_lines"]):]
        _Writer(tree, str).text("dmesg", "".join(lines), int(_limits()["metric_file_bytes"]))


_KINDS: Mapping[str, Callable[[Path], bool]] = {"file": Path.is_file, "dir": Path.is_dir}


@dataclass(frozen=True)
class _Entry:
    """One row of the layout's ``entries``: a path (``{rank}`` for any rank) and what it must
    hold."""

    path: str
    kind: str
    required: bool
    what: str
    files: str = "*"
    #: the name of the limit in the layout's ``limits`` that bounds each file ("": none)
    limit: str = ""

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> _Entry:
        return cls(str(row["path"]), str(row["type"]), bool(row["required"]), str(row["what"]),
                   str(row.get("files", "*")), str(row.get("max_file_bytes", "")))

    def found(self, tree: Path) -> list[Path]:
        """The paths in ``tree`` this entry names."""
        if "{" in self.path:
            return list(tree.glob(self.path.replace("{rank}", "[0-9]*")))
        return [p for p in (tree / self.path,) if p.exists()]

    def missing(self, found: list[Path]) -> bool:
        """Whether a required entry has no path of its kind among ``found``."""
        return self.required and not any(map(_KINDS[self.kind], found))

    def files_in(self, found: list[Path]) -> list[Path]:
        """The files the entry's limit applies to: a found file, or the matching files below a
        folder."""
        return [f for p in found for f in _walk(p, self.files) if f.is_file()]


def _walk(path: Path, pattern: str) -> list[Path]:
    return list(path.rglob(pattern)) if path.is_dir() else [path]


def _entry_problems(tree: Path, entry: _Entry, lim: Mapping[str, int]) -> list[str]:
    """A required entry that is missing; a file over the entry's limit."""
    found = entry.found(tree)
    problems = []
    if entry.missing(found):
        problems.append(f"{tree.name}: {entry.path} ({entry.what}) is missing")
    cap = lim.get(entry.limit)
    if cap is not None:
        problems += [f"{tree.name}: {f.relative_to(tree)} is over {cap} bytes"
                     for f in entry.files_in(found) if f.stat().st_size > cap]
    return problems


def _over_bounds(tree: Path, lim: Mapping[str, int]) -> bool:
    """Whether ``tree`` holds more files or bytes than the tool reads."""
    files = [p for p in tree.rglob("*") if p.is_file()]
    if len(files) > lim["total_files"]:
        return True
    return sum(p.stat().st_size for p in files) > lim["total_bytes"]


def check_tree(tree: Path, manifest: Mapping[str, Any] | None = None) -> list[str]:
    """What in one host's ``tree`` departs from the layout: a missing required entry, a file over
    its limit."""
    man = layout() if manifest is None else manifest
    lim = {k: int(v) for k, v in man["limits"].items()}
    problems: list[str] = []
    for row in man["entries"]:
        problems += _entry_problems(tree, _Entry.of(row), lim)
    if _over_bounds(tree, lim):
        problems.append(f"{tree.name}: over the tool's input bounds")
    return problems


def run_tool(bundle: Path, hosts: list[str], *, timeout: float = TOOL_TIMEOUT) -> str | None:
    """Run ``ascend-fd parse`` on each host's tree, then ``ascend-fd diag``; the verdict text (None:
    the tool is not installed on the controller). Its output is kept in
    ``<bundle>/ascend-fd.txt``."""
    tool = shutil.which(TOOL)
    if tool is None:
        return None
    steps = [[tool, "parse", "-i", str(bundle / h), "-o", str(bundle / "parsed" / h)]
             for h in hosts]
    steps.append([tool, "diag", "-i", str(bundle / "parsed"), "-o", str(bundle / "diag")])
    out = []
    for argv in steps:
        said, ok = _run_step(argv, timeout)
        out.append(said)
        if not ok:
            break
    text = "\n".join(out)
    write_atomic(bundle / VERDICT, text + "\n")
    return text


def _run_step(argv: list[str], timeout: float) -> tuple[str, bool]:
    """One of the tool's steps (its output folder is ``argv``'s last word): what it said, whether it
    succeeded."""
    Path(argv[-1]).mkdir(parents=True, exist_ok=True)
    step = " ".join(argv[1:3])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"$ {step}: did not finish: {exc}", False
    said = f"$ {step} (exit {done.returncode})\n{(done.stdout + done.stderr)[-20000:]}"
    return said, done.returncode == 0


#: a row of the tool's report table: ``| <section> | <label> | <value> |``
_ROW = re.compile(r"^\|[^|]*\|\s*(?P<label>[^|]+?)\s*\|\s*(?P<value>[^|]*?)\s*\|$")
#: its labels in both languages it is built in (mind-cluster ascend_fd/utils/i18n.py:
#: root_cause_device, status_code, fault_source / faulty_workers)
_LABELS = {"node": ("根因节点", "Root Cause Node(s)"), "code": ("状态码", "Status Code"),
           "devices": ("故障设备", "Faulty Device(s)", "Faulty Workers")}


#: each label in either language, to its key in :data:`_LABELS`
_KEY_OF = {label: key for key, labels in _LABELS.items() for label in labels}


def _rows(text: str) -> dict[str, str]:
    """The first value of each of :data:`_LABELS`' rows in the tool's report table."""
    found: dict[str, str] = {}
    for m in filter(None, map(_ROW.match, (ln.strip() for ln in text.splitlines()))):
        if m["label"] in _KEY_OF and m["value"]:
            found.setdefault(_KEY_OF[m["label"]], m["value"])
    return found


def verdict_line(text: str) -> str:
    """The verdict in one line: the report table's root-cause node(s) and first suspected fault (its
    code and devices) where the tool printed its table, else its last non-empty output line."""
    rows = _rows(text)
    if rows:
        return _table_verdict(rows)
    return _last_line(text)


def _table_verdict(rows: Mapping[str, str]) -> str:
    node, code, devices = (rows.get(k, "?") for k in ("node", "code", "devices"))
    return f"root cause node(s) {node}; first suspected fault {code} on {devices}"[:300]


def _last_line(text: str) -> str:
    """The tool's last non-empty output line (not one of camit's ``$ <step>`` headers)."""
    lines = [ln.strip() for ln in text.splitlines() if not ln.startswith("$ ")]
    return next((ln[:300] for ln in reversed(lines) if ln), "(no output)")


def write_bundle(root: Path, folders: Mapping[str, Path], *, scrub: Callable[[str], str] = str,
                 env: Mapping[str, Mapping[str, str]] = _NONE,
                 versions: Mapping[str, str] = _NONE) -> tuple[Path, str | None]:
    """``<root>/fault-bundle/<host>/`` for each host's fetched folder (the last failed launch's);
    then the tool where installed. Returns the bundle's path and the tool's verdict line (None: not
    installed)."""
    bundle = root / BUNDLE
    for host, src in sorted(folders.items()):
        # a later failed launch's tree replaces, never mixes
        shutil.rmtree(bundle / host, ignore_errors=True)
        host_tree(src, bundle / host, scrub=scrub, env=env.get(host, _NONE), versions=versions)
    text = run_tool(bundle, sorted(folders))
    return bundle, None if text is None else verdict_line(text)


__all__ = ["BEFORE", "BUNDLE", "VERDICT", "add_dmesg", "check_tree", "host_tree", "layout",
           "run_tool", "verdict_line", "write_bundle"]
