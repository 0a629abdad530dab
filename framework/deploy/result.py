"""What a deploy came to, per host (``deploy-manifest.json``), and how two deploys of one run merge."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from framework.errors import FrameworkError, MultiHostError


@dataclass
class ArtifactRecord:
    kind: str
    name: str
    sha256: str
    size: int
    via: str  # cached | relay | direct


@dataclass
class HostManifest:
    host: str
    status: str = "pending"  # deployed | unchanged | failed
    artifacts: list[ArtifactRecord] = field(default_factory=list)
    install_path: str = ""
    vendor: str | None = None
    interpreter: str = ""
    installed_version: str | None = None
    ops: list[str] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)
    #: CPU seconds on the host per install step (user + sys of the step's process tree, reported by the host)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    step: str | None = None


@dataclass
class DeployResult:
    manifests: dict[str, HostManifest]
    errors: dict[str, FrameworkError]
    duration: float = 0.0
    relay_used: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_on_failure(self) -> DeployResult:
        if self.errors:
            raise MultiHostError(self.errors, total=len(self.manifests))
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "duration": round(self.duration, 3), "relay_used": self.relay_used, "notes": self.notes,
            "hosts": {h: asdict(m) for h, m in self.manifests.items()},
        }


def merge_manifest(old: Any, new: dict[str, Any]) -> dict[str, Any]:
    """One run's ``deploy-manifest.json`` after another deploy of the same run (an xdist worker's share):
    the hosts of both (the newer entry wins for a host in both), notes of both, the longer duration."""
    if not isinstance(old, dict) or not isinstance(old.get("hosts"), dict):
        return new
    before, after = _RunSummary.read(old), _RunSummary.read(new)
    return {
        "duration": max(before.duration, after.duration),
        "relay_used": before.relay_used or after.relay_used,
        "notes": list(dict.fromkeys([*before.notes, *after.notes])),
        "hosts": {**before.hosts, **after.hosts},
    }


@dataclass(frozen=True)
class _RunSummary:
    """The run-wide fields of a ``deploy-manifest.json`` document, read once (null: none)."""

    duration: float
    relay_used: bool
    notes: list[str]
    hosts: dict[str, Any]

    @classmethod
    def read(cls, doc: dict[str, Any]) -> _RunSummary:
        return cls(duration=float(doc.get("duration") or 0.0),
                   relay_used=bool(doc.get("relay_used")),
                   notes=list(doc.get("notes") or []), hosts=dict(doc["hosts"]))
