"""Why a rank that died of a core-dumping signal left no core on its host, in one sentence (pure).

The facts come from the core scan after the run (the pattern, the hard ``ulimit -c``) and one check
of the pattern's directory by the SSH user; the ranks run as that user with camit's ``ulimit -c``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from framework.cores.scan import HostScan


@dataclass(frozen=True)
class MissingCore:
    """A rank that died of ``signal`` on ``host`` and whose core camit did not find, and why."""

    launch_id: str
    rank: int
    host: str
    signal: str
    why: str

    def describe(self) -> str:
        return f"rank {self.rank} on {self.host} died of {self.signal} and left no core: {self.why}"

    def to_json(self) -> dict[str, object]:
        return {"launch_id": self.launch_id, "rank": self.rank, "host": self.host,
                "signal": self.signal, "why": self.why}


def _handler(scan: HostScan, _: bool | None) -> str:
    return (f"core_pattern pipes cores to {scan.pattern.handler!r}, a handler camit cannot read: "
            "any core is in that handler's store")


def _store(scan: HostScan, _: bool | None) -> str:
    return (f"the {scan.pattern.kind} handler stored no core for it within the settle time "
            "(its own size or rate limits may have dropped it)")


def _file(scan: HostScan, writable: bool | None) -> str:
    if writable is False:
        return (f"core_pattern's directory {scan.pattern.directory} is not writable by the SSH "
                "user: the kernel could not create the core")
    return _unknown(scan, writable)


def _unknown(scan: HostScan, _: bool | None) -> str:
    return ("nothing on the host explains it: the process may have handled the signal itself "
            "(a fault handler that exits), or it was not dumpable")


_BY_KIND: dict[str, Callable[[HostScan, bool | None], str]] = {
    "none": lambda s, w: "core_pattern is empty: the kernel writes no core",
    "socket": lambda s, w: (f"core_pattern sends cores to the socket {s.pattern.handler!r}, "
                            "which camit cannot read"),
    "pipe": _handler,
    "systemd": _store, "apport": _store, "abrt": _store,
    "file": _file,
}


def why(scan: HostScan, dir_writable: bool | None) -> str:
    """The reason, first that applies: a zero hard core limit, then what the pattern's kind says."""
    if scan.limit_hard == "0":
        return ("the hard core size limit (ulimit -H -c) is 0 for the SSH user: no process can "
                "dump core")
    return _BY_KIND.get(scan.pattern.kind, _unknown)(scan, dir_writable)


__all__ = ["MissingCore", "why"]
