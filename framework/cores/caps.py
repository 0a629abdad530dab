"""What bounds a core before it reaches camit: systemd-coredump's size caps and the free space where
cores land.

Pure parsers of two preflight probe sections and the notes the ``core`` check adds
(docs/internals/cores.md).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence

from framework.cores.pattern import CorePattern

KEYS = ("ProcessSizeMax", "ExternalSizeMax", "MaxUse", "Storage")
#: coredump.conf(5) defaults (systemd >= 250)
DEFAULTS = {"ProcessSizeMax": "32G", "ExternalSizeMax": "32G", "MaxUse": "10% of the file system",
            "Storage": "external"}
MAIN_FILES = ("/usr/lib/systemd/coredump.conf", "/etc/systemd/coredump.conf")
DROPIN_DIRS = ("/usr/lib/systemd/coredump.conf.d", "/run/systemd/coredump.conf.d",
               "/etc/systemd/coredump.conf.d")
#: where systemd-coredump stores cores (Storage=external)
SYSTEMD_STORE = "/var/lib/systemd/coredump"
#: free space below this under the core directory is a warning (GiB); NPU hosts: two bounded rank
#: cores
MIN_FREE_GIB = 1.0
MIN_FREE_GIB_NPU = 8.0

#: sh printing ``@file <path>`` then the file for every coredump.conf and drop-in there is
CAPS_SCRIPT = (
    "core_caps() { for _f in " + " ".join(MAIN_FILES) + " "
    + " ".join(f"{d}/*.conf" for d in DROPIN_DIRS)
    + "; do [ -f \"$_f\" ] && { echo \"@file $_f\"; cat -- \"$_f\"; echo; }; done; return 0; }"
)


def space_script(workdir: str) -> str:
    """sh function ``core_space``: ``dir <d>`` and ``df -Pk`` of where the kernel pattern puts
    cores."""
    wd = "'" + workdir.replace("'", "'\\''") + "'"
    return (
        "core_space() { p=$(cat /proc/sys/kernel/core_pattern); "
        f"case $p in \"|\"*systemd-coredump*) d={SYSTEMD_STORE} ;; \"|\"*|@*|'') return 0 ;; "
        "/*) d=${p%%%*}; d=${d%/*}; [ -n \"$d\" ] || d=/ ;; "
        f"*) d={wd} ;; esac; "
        "while [ ! -d \"$d\" ]; do d=$(dirname \"$d\"); done; echo \"dir $d\"; df -Pk \"$d\"; }"
    )


def parse_coredump_conf(text: str) -> dict[str, str]:
    """The effective ``[Coredump]`` caps from :data:`CAPS_SCRIPT`'s output (main files, then
    drop-ins by name)."""
    files: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("@file "):
            files.append((line[6:].strip(), []))
        elif files:
            files[-1][1].append(line)
    out: dict[str, str] = {}
    for _, lines in _in_effect(files):
        out.update(_coredump_section(lines))
    return out


#: a drop-in folder's precedence: one name in several folders, the later folder's file wins
_DROPIN_RANK = {d: i for i, d in enumerate(DROPIN_DIRS)}


def _dropin_order(file: tuple[str, list[str]]) -> tuple[str, int]:
    return posixpath.basename(file[0]), _DROPIN_RANK.get(posixpath.dirname(file[0]), -1)


def _in_effect(files: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """The main files, then one drop-in per name (/etc hides /run hides /usr/lib), by name."""
    mains = [f for f in files if f[0] in MAIN_FILES]
    by_name: dict[str, tuple[str, list[str]]] = {}
    for f in sorted((f for f in files if f[0] not in MAIN_FILES), key=_dropin_order):
        by_name[posixpath.basename(f[0])] = f
    return [*mains, *(by_name[name] for name in sorted(by_name))]


def _coredump_section(lines: list[str]) -> dict[str, str]:
    """The known keys of one file's ``[Coredump]`` section."""
    out: dict[str, str] = {}
    section = None
    for line in (raw.strip() for raw in lines):
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif section == "Coredump":
            out.update(_assignment(line))
    return out


def _assignment(line: str) -> dict[str, str]:
    """A known key's ``Key=value`` (nothing for a blank line, a comment or another key)."""
    key, eq, value = line.partition("=")
    key = key.strip()
    if not eq or key not in KEYS:
        return {}
    return {key: value.strip()}


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGTPE]?)i?B?$", re.IGNORECASE)


def size_bytes(value: str) -> int | None:
    """``2G`` → 2 GiB (systemd sizes are base 1024); ``infinity`` and percentages → None."""
    m = _SIZE.match(value.strip())
    if not m:
        return None
    return int(float(m.group(1)) * 1024 ** " KMGTPE".index((m.group(2) or " ").upper()))


def parse_space(text: str) -> tuple[str, int] | None:
    """(directory, free bytes) from :func:`space_script`'s output."""
    lines = text.splitlines()
    folder = next((ln[4:].strip() for ln in lines if ln.startswith("dir ")), None)
    free = _available_kib(lines)
    if folder is None or free is None:
        return None
    return folder, free * 1024


#: a ``df -Pk`` row: file system, size, used, available (KiB), …
_DF_ROW = re.compile(r"^\s*(?:\S+\s+){3}(\d+)(?:\s|$)")


def _available_kib(lines: Sequence[str]) -> int | None:
    """The available KiB of ``df -Pk``'s last row (None: not a row of numbers)."""
    rows = [ln for ln in lines if ln and not ln.startswith(("dir ", "Filesystem"))]
    m = _DF_ROW.match(rows[-1]) if rows else None
    return int(m[1]) if m else None


def core_findings(pattern: CorePattern, caps_text: str | None, space_text: str | None, *, npu: bool,
                  core_limit_bytes: int | None) -> tuple[list[str], list[str]]:
    """(warnings, notes) of the ``core`` check: systemd-coredump's caps when the pattern pipes to
    it, the free space under the core directory."""
    warnings: list[str] = []
    notes: list[str] = []
    if pattern.kind == "systemd" and caps_text is not None:
        warnings, notes = _caps_findings(caps_text, core_limit_bytes)
    space = None if space_text is None else parse_space(space_text)
    if space is None:
        return warnings, notes
    floor = MIN_FREE_GIB_NPU if npu else MIN_FREE_GIB
    gib = space[1] / 1024 ** 3
    text = f"{gib:.1f}G free under {space[0]}"
    if gib < floor:
        return warnings + [f"only {text} (below {floor:g}G): cores may be lost"], notes
    return warnings, notes + [text]


def _caps_findings(caps_text: str, core_limit_bytes: int | None) -> tuple[list[str], list[str]]:
    """(warnings, notes) on systemd-coredump's caps: storage off, a size cap below the ranks' core
    limit."""
    caps = {**DEFAULTS, **parse_coredump_conf(caps_text)}
    notes = ["systemd-coredump " + ", ".join(f"{k}={caps[k]}" for k in KEYS[:3])]
    warnings = []
    if caps["Storage"] == "none":
        warnings.append("systemd-coredump Storage=none: cores are logged, not stored")
    if core_limit_bytes is None:
        return warnings, notes
    for key in ("ProcessSizeMax", "ExternalSizeMax"):
        if _below(caps[key], core_limit_bytes):
            warnings.append(f"systemd-coredump {key}={caps[key]} is below the ranks' core limit "
                            f"({core_limit_bytes / 1024 ** 3:g}G): their cores are cut or dropped")
    return warnings, notes


def _below(cap: str, limit: int) -> bool:
    """Whether a size cap (``infinity`` and percentages are none) is below ``limit`` bytes."""
    size = size_bytes(cap)
    return size is not None and size < limit


def sections_text(sec: Mapping[str, object], name: str) -> str | None:
    s = sec.get(name)
    return getattr(s, "text", None) if s is not None else None
