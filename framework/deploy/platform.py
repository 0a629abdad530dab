"""Which ``CAM_<soc>_<os>_<arch>.run`` belongs on which host.

The naming rule and the upstream files it mirrors: docs/internals/deploy-ascend.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

from framework.config.document import Soc

PREFIX = "CAM_"
SUFFIX = ".run"
#: SoC names a package name can start with (the env's ``npu.soc`` values), longest first
SOCS = tuple(sorted(get_args(Soc), key=len, reverse=True))


@dataclass(frozen=True)
class Platform:
    """What a ``.run`` is built for, or what a host is: SoC, os-release ``ID``, ``uname -m``."""

    soc: str
    os_id: str
    arch: str

    @property
    def run_name(self) -> str:
        return f"{PREFIX}{self.soc}_{self.os_id}_{self.arch}{SUFFIX}"

    def __str__(self) -> str:
        return f"soc {self.soc}, os {self.os_id}, arch {self.arch}"


def parse_run_name(name: str, arches: Sequence[str] = ()) -> Platform | None:
    """The platform a ``CAM_<soc>_<os>_<arch>.run`` name declares, or None when it does not follow the rule.

    ``soc`` and ``arch`` may hold ``_`` (``ascend910_93``, ``x86_64``): the SoC is one of :data:`SOCS`, the
    architecture the longest of ``arches`` (a host's ``uname -m``), ``x86_64`` or the last ``_`` field that
    leaves a non-empty OS id.
    """
    if not (name.startswith(PREFIX) and name.endswith(SUFFIX)):
        return None
    rest = name[len(PREFIX):-len(SUFFIX)]
    soc = _leading_soc(rest)
    if soc is None:
        return None
    os_id, arch = _split_arch(rest[len(soc) + 1:], arches)
    return Platform(soc, os_id, arch) if os_id and arch else None


def _leading_soc(rest: str) -> str | None:
    """The SoC of :data:`SOCS` that ``<soc>_<os>_<arch>`` starts with, or None."""
    return next((s for s in SOCS if rest.startswith(s + "_")), None)


def _split_arch(rest: str, arches: Sequence[str]) -> tuple[str, str]:
    """``<os>_<arch>`` split at the longest known architecture that leaves an OS id, else at the
    last ``_`` (("", "") without one)."""
    for arch in sorted({*arches, "x86_64"}, key=len, reverse=True):
        if arch and rest.endswith("_" + arch) and len(rest) > len(arch) + 1:
            return rest[:-len(arch) - 1], arch
    os_id, sep, arch = rest.rpartition("_")
    return (os_id, arch) if sep else ("", "")


def mismatch(built: Platform, host: Platform) -> str:
    """``soc ascend910b != host ascend910_93, arch ...``: every field where the package and the host differ."""
    parts = [f"{field} {getattr(built, field)} (host: {getattr(host, field)})"
             for field in ("soc", "os_id", "arch") if getattr(built, field) != getattr(host, field)]
    return ", ".join(p.replace("os_id", "os") for p in parts)


@dataclass(frozen=True)
class Choice:
    """The package picked for one host (``index`` into the candidates), or why none fits (``error``)."""

    index: int | None
    error: str | None = None
    note: str | None = None


def choose(names: Sequence[str], host: Platform) -> Choice:
    """Pick the package of ``names`` built for ``host``; an error naming every file and the mismatch otherwise.

    One candidate must match as well (a single ``.run`` for another platform is refused, never installed).
    """
    parsed = [parse_run_name(n, (host.arch,)) for n in names]
    for i, plat in enumerate(parsed):
        if plat == host:
            note = f"picked {names[i]} of {len(names)} .run files (matches {host})" if len(names) > 1 else None
            return Choice(i, note=note)
    why = [_why_not(name, plat, host) for name, plat in zip(names, parsed, strict=True)]
    return Choice(None, f"no .run package for this host ({host}; expected {host.run_name}): " + "; ".join(why))


def _why_not(name: str, built: Platform | None, host: Platform) -> str:
    """``<name>: <why>``: how the package ``name`` misses ``host`` (``built``: its platform; None:
    not named by the rule)."""
    if built is None:
        return f"{name}: not named {PREFIX}<soc>_<os>_<arch>{SUFFIX}"
    return f"{name}: {mismatch(built, host)}"
