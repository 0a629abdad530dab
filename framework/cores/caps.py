"""What bounds a core before it reaches camit: systemd-coredump's size caps and the free space where cores land.

Pure parsers for two preflight probe sections (:data:`CAPS_SCRIPT`, :func:`space_script`) and the notes the
``core`` check adds. systemd-coredump truncates or drops cores above its caps (coredump.conf(5), section
``[Coredump]``): ``ProcessSizeMax`` (the largest core processed at all; default 32G, 2G before systemd 250),
``ExternalSizeMax`` (the largest core stored on disk; default 32G) and ``MaxUse`` (disk the store may use; default
10 % of its file system). Settings come from the main file, then the drop-ins of every ``coredump.conf.d/``
sorted by file name (systemd.syntax(7); a later assignment wins). NPU ranks run with a bounded core limit
(``framework.ascend.tools.NPU_CORE_LIMIT``): a cap below it cuts their cores, too little free space loses them.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from framework.cores.pattern import CorePattern

KEYS = ("ProcessSizeMax", "ExternalSizeMax", "MaxUse", "Storage")
#: coredump.conf(5) defaults (systemd >= 250)
DEFAULTS = {"ProcessSizeMax": "32G", "ExternalSizeMax": "32G", "MaxUse": "10% of the file system", "Storage": "external"}
MAIN_FILES = ("/usr/lib/systemd/coredump.conf", "/etc/systemd/coredump.conf")
DROPIN_DIRS = ("/usr/lib/systemd/coredump.conf.d", "/run/systemd/coredump.conf.d", "/etc/systemd/coredump.conf.d")
#: where systemd-coredump stores cores (Storage=external)
SYSTEMD_STORE = "/var/lib/systemd/coredump"
#: free space below this under the core directory is a warning (GiB); NPU hosts: two bounded rank cores
MIN_FREE_GIB = 1.0
MIN_FREE_GIB_NPU = 8.0

#: sh printing ``@file <path>`` then the file for every coredump.conf and drop-in there is
CAPS_SCRIPT = (
    "core_caps() { for _f in " + " ".join(MAIN_FILES) + " "
    + " ".join(f"{d}/*.conf" for d in DROPIN_DIRS)
    + "; do [ -f \"$_f\" ] && { echo \"@file $_f\"; cat -- \"$_f\"; echo; }; done; return 0; }"
)


def space_script(workdir: str) -> str:
    """sh function ``core_space``: ``dir <d>`` and ``df -Pk`` of where the kernel pattern puts cores."""
    wd = "'" + workdir.replace("'", "'\\''") + "'"
    return (
        "core_space() { p=$(cat /proc/sys/kernel/core_pattern); "
        f"case $p in \"|\"*systemd-coredump*) d={SYSTEMD_STORE} ;; \"|\"*|@*|'') return 0 ;; "
        "/*) d=${p%%%*}; d=${d%/*}; [ -n \"$d\" ] || d=/ ;; "
        f"*) d={wd} ;; esac; "
        "while [ ! -d \"$d\" ]; do d=$(dirname \"$d\"); done; echo \"dir $d\"; df -Pk \"$d\"; }"
    )


def parse_coredump_conf(text: str) -> dict[str, str]:
    """The effective ``[Coredump]`` caps from :data:`CAPS_SCRIPT`'s output (main files, then drop-ins by name)."""
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


def _in_effect(files: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """The main files, then one drop-in per name (/etc hides /run hides /usr/lib), by name."""
    mains = [f for f in files if f[0] in MAIN_FILES]
    # one name in several dirs: the later one in this order wins below
    rank = {d: i for i, d in enumerate(DROPIN_DIRS)}
    dropins = sorted((f for f in files if f[0] not in MAIN_FILES),
                     key=lambda f: (posixpath.basename(f[0]), rank.get(posixpath.dirname(f[0]), -1)))
    seen: dict[str, tuple[str, list[str]]] = {}
    for f in dropins:
        seen[posixpath.basename(f[0])] = f
    return [*mains, *sorted(seen.values(), key=lambda f: posixpath.basename(f[0]))]


def _coredump_section(lines: list[str]) -> dict[str, str]:
    """The known keys of one file's ``[Coredump]`` section."""
    out: dict[str, str] = {}
    section = None
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif section == "Coredump" and "=" in line:
            key, value = (s.strip() for s in line.split("=", 1))
            if key in KEYS:
                out[key] = value
    return out


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
    rows = [ln.split() for ln in lines if ln and not ln.startswith(("dir ", "Filesystem"))]
    if folder is None or not rows or len(rows[-1]) < 4 or not rows[-1][3].isdigit():
        return None
    return folder, int(rows[-1][3]) * 1024


def core_findings(pattern: CorePattern, caps_text: str | None, space_text: str | None, *, npu: bool,
                  core_limit_bytes: int | None) -> tuple[list[str], list[str]]:
    """(warnings, notes) of the ``core`` check: systemd-coredump's caps when the pattern pipes to it, the free
    space under the core directory."""
    warnings: list[str] = []
    notes: list[str] = []
    if pattern.kind == "systemd" and caps_text is not None:
        caps = {**DEFAULTS, **parse_coredump_conf(caps_text)}
        notes.append("systemd-coredump " + ", ".join(f"{k}={caps[k]}" for k in KEYS[:3]))
        if caps.get("Storage", "external") == "none":
            warnings.append("systemd-coredump Storage=none: cores are logged, not stored")
        for key in ("ProcessSizeMax", "ExternalSizeMax"):
            cap = size_bytes(caps[key])
            if cap is not None and core_limit_bytes is not None and cap < core_limit_bytes:
                warnings.append(f"systemd-coredump {key}={caps[key]} is below the ranks' core limit "
                                f"({core_limit_bytes / 1024 ** 3:g}G): their cores are cut or dropped")
    space = parse_space(space_text) if space_text is not None else None
    if space is not None:
        folder, free = space
        gib = free / 1024 ** 3
        floor = MIN_FREE_GIB_NPU if npu else MIN_FREE_GIB
        text = f"{gib:.1f}G free under {folder}"
        if gib < floor:
            warnings.append(f"only {text} (below {floor:g}G): cores may be lost")
        else:
            notes.append(text)
    return warnings, notes


def sections_text(sec: Mapping[str, object], name: str) -> str | None:
    s = sec.get(name)
    return getattr(s, "text", None) if s is not None else None
