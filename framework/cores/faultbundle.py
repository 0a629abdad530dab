"""A fault bundle MindCluster's fault-diagnosis tool (``ascend-fd``) reads: one collection tree per host.

Layout (``framework/data/ascend-fd-layout.json``, from MindCluster Ascend FaultDiag's "log collection directory
structure": hiascend.com/document/detail/en/mindcluster/730/faultdiag/faultdiagug/mindxdlFDUG019.html and
mindx-dl/60rc3/faultdiag/fdug/mindxdlFDUG014.html): ``rank-<r>.txt`` console logs (the tool reads their last
1 MB), ``process_log/`` the CANN plogs (< 20 MB a file), ``device_log/`` msnpureport's export,
``environment_check/npu_info_{before,after}.txt`` (npu-smi and hccn_tool), ``dmesg``; camit's own additions
(environment, versions, notes) go to ``camit/``, which the tool does not read. Built on the controller from a
host's fetched run folder (``npu-state/`` is the launch's after-failure snapshot), every text scrubbed of the
env's secrets, each file and each host bounded. Where ``ascend-fd`` is on the controller's PATH it is run
(``parse`` per host, then ``diag``) and its output kept as the verdict.
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
    text = (resources.files("framework") / "data" / "ascend-fd-layout.json").read_text(encoding="utf-8")
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


def host_tree(src: Path, dest: Path, *, scrub: Callable[[str], str] = str,
              env: Mapping[str, str] | None = None, versions: Mapping[str, str] | None = None) -> list[str]:
    """Write one host's collection tree ``dest`` from its fetched run folder ``src``; the notes on what was
    cut or missing (also in ``camit/notes.txt``)."""
    lim = _limits()
    w = _Writer(dest, scrub)
    for log_path in sorted(src.glob("rank*.log")):
        m = _RANK_LOG.match(log_path.name)
        if m:
            w.copy(f"rank-{m[1]}.txt", log_path, lim["console_log_read_bytes"])
    for plog in sorted(src.rglob("plog-*.log")):
        w.copy(f"process_log/plog/{plog.name}", plog, lim["cann_log_file_bytes"])
    (dest / "process_log").mkdir(parents=True, exist_ok=True)
    _device_logs(w, src / "npu-state" / "msnpureport", lim["cann_log_file_bytes"])
    _npu_info(w, src / BEFORE, "npu_info_before.txt", lim["metric_file_bytes"])
    _npu_info(w, src / "npu-state", "npu_info_after.txt", lim["metric_file_bytes"])
    if (src / "dmesg.txt").is_file():
        w.copy("dmesg", src / "dmesg.txt", lim["metric_file_bytes"])
    w.text("camit/environment.txt", "".join(f"{k}={v}\n" for k, v in sorted((env or {}).items())), 1 << 20)
    w.text("camit/versions.txt", "".join(f"{k}: {v}\n" for k, v in sorted((versions or {}).items())), 1 << 20)
    w.text("camit/notes.txt", "".join(n + "\n" for n in w.notes), 1 << 20)
    return w.notes


def _device_logs(w: _Writer, folder: Path, cap: int) -> None:
    (w.root / "device_log").mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) if folder.is_dir() else []
    if not files:
        w.notes.append("device_log: msnpureport " + ("exported no file" if folder.is_dir() else "did not run")
                       + " on this host")
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
    """``dmesg`` into ``host``'s tree of the run's bundle, when a failed launch wrote one (the kernel lines are
    collected after the launch's bundle; the tool reads the newest 100000 lines)."""
    tree = root / BUNDLE / host
    if tree.is_dir():
        lines = text.splitlines(keepends=True)[-int(_limits()["dmesg_lines"]):]
        _Writer(tree, str).text("dmesg", "".join(lines), int(_limits()["metric_file_bytes"]))


def check_tree(tree: Path, manifest: Mapping[str, Any] | None = None) -> list[str]:
    """What in one host's ``tree`` departs from the layout: a missing required entry, a file over its limit."""
    man = manifest or layout()
    lim = {k: int(v) for k, v in man["limits"].items()}
    problems = []
    for entry in man["entries"]:
        pattern = str(entry["path"])
        found = list(tree.glob(pattern.replace("{rank}", "[0-9]*"))) if "{" in pattern else \
            [tree / pattern] if (tree / pattern).exists() else []
        kinds = {"file": Path.is_file, "dir": Path.is_dir}
        if entry["required"] and not [p for p in found if kinds[entry["type"]](p)]:
            problems.append(f"{tree.name}: {pattern} ({entry['what']}) is missing")
        cap = lim.get(str(entry.get("max_file_bytes", "")))
        if cap is None:
            continue
        for p in found:
            for f in p.rglob(entry.get("files", "*")) if p.is_dir() else [p]:
                if f.is_file() and f.stat().st_size > cap:
                    problems.append(f"{tree.name}: {f.relative_to(tree)} is over {cap} bytes")
    files = [p for p in tree.rglob("*") if p.is_file()]
    if len(files) > lim["total_files"] or sum(p.stat().st_size for p in files) > lim["total_bytes"]:
        problems.append(f"{tree.name}: over the tool's input bounds")
    return problems


def run_tool(bundle: Path, hosts: list[str], *, timeout: float = TOOL_TIMEOUT) -> str | None:
    """Run ``ascend-fd parse`` on each host's tree, then ``ascend-fd diag``; the verdict text (None: the tool
    is not installed on the controller). Its output is kept in ``<bundle>/ascend-fd.txt``."""
    tool = shutil.which(TOOL)
    if tool is None:
        return None
    steps = [[tool, "parse", "-i", str(bundle / h), "-o", str(bundle / "parsed" / h)] for h in hosts]
    steps.append([tool, "diag", "-i", str(bundle / "parsed"), "-o", str(bundle / "diag")])
    out = []
    for argv in steps:
        Path(argv[-1]).mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            out.append(f"$ {' '.join(argv[1:3])}: did not finish: {exc}")
            break
        out.append(f"$ {' '.join(argv[1:3])} (exit {done.returncode})\n{(done.stdout + done.stderr)[-20000:]}")
        if done.returncode != 0:
            break
    text = "\n".join(out)
    write_atomic(bundle / VERDICT, text + "\n")
    return text


#: a row of the tool's report table: ``| <section> | <label> | <value> |``
_ROW = re.compile(r"^\|[^|]*\|\s*(?P<label>[^|]+?)\s*\|\s*(?P<value>[^|]*?)\s*\|$")
#: its labels in both languages it is built in (mind-cluster ascend_fd/utils/i18n.py:
#: root_cause_device, status_code, fault_source / faulty_workers)
_LABELS = {"node": ("根因节点", "Root Cause Node(s)"), "code": ("状态码", "Status Code"),
           "devices": ("故障设备", "Faulty Device(s)", "Faulty Workers")}


def _rows(text: str) -> dict[str, str]:
    """The first value of each of :data:`_LABELS`' rows in the tool's report table."""
    found: dict[str, str] = {}
    for m in filter(None, map(_ROW.match, (ln.strip() for ln in text.splitlines()))):
        key = next((k for k, labels in _LABELS.items() if m["label"] in labels), None)
        if key and m["value"] and key not in found:
            found[key] = m["value"]
    return found


def verdict_line(text: str) -> str:
    """The verdict in one line: the report table's root-cause node(s) and first suspected fault (its
    code and devices) where the tool printed its table, else its last non-empty output line."""
    rows = _rows(text)
    if rows:
        node, code, devices = (rows.get(k, "?") for k in ("node", "code", "devices"))
        return f"root cause node(s) {node}; first suspected fault {code} on {devices}"[:300]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    return lines[-1][:300] if lines else "(no output)"


def write_bundle(root: Path, folders: Mapping[str, Path], *, scrub: Callable[[str], str] = str,
                 env: Mapping[str, Mapping[str, str]] | None = None,
                 versions: Mapping[str, str] | None = None) -> tuple[Path, str | None]:
    """``<root>/fault-bundle/<host>/`` for each host's fetched folder (the last failed launch's); then the tool
    where installed. Returns the bundle's path and the tool's verdict line (None: not installed)."""
    bundle = root / BUNDLE
    for host, src in sorted(folders.items()):
        shutil.rmtree(bundle / host, ignore_errors=True)  # a later failed launch's tree replaces, never mixes
        host_tree(src, bundle / host, scrub=scrub, env=(env or {}).get(host), versions=versions)
    text = run_tool(bundle, sorted(folders))
    return bundle, None if text is None else verdict_line(text)


__all__ = ["BEFORE", "BUNDLE", "VERDICT", "add_dmesg", "check_tree", "host_tree", "layout", "run_tool", "verdict_line", "write_bundle"]
