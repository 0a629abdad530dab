"""Suspect hosts: a host a host-level failure was attributed to, kept out of later runs for a while.

Design: docs/internals/core.md; for users: docs/failures.md.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from framework import commands
from framework.commands import ShellScript
from framework.errors import ConfigError
from framework.lease import default_owner, lease_path
from framework.remote.layout import HostLayout

if TYPE_CHECKING:  # pragma: no cover
    from framework.hosts import Cluster, Host

__all__ = [
    "DEFAULT_TTL",
    "SUSPECT_DIR",
    "Suspect",
    "clear",
    "mark",
    "read",
    "suspect_key",
]

log = logging.getLogger("camit.suspects")

SUSPECT_DIR = "camit-suspects"
#: seconds a mark keeps a host out (``$CAMIT_SUSPECT_TTL`` overrides; 0 turns suspect hosts off:
#: nothing is
#: marked, and runs do not read marks)
DEFAULT_TTL = 4 * 3600.0
_NOW, _EXPIRES = "__NOW__", "__EXPIRES__"
_TIMEOUT = 20.0


@dataclass(frozen=True)
class Suspect:
    """One mark: which host (env name and SSH address), why, and until when (host epoch seconds)."""

    host: str
    address: str
    kind: str
    reason: str
    since: float
    expires: float
    by: str = ""
    run_id: str = ""

    @classmethod
    def parse(cls, text: str) -> Suspect | None:
        """The mark in a file's text; None when it is not one of ours."""
        try:
            d = json.loads(text)
            return cls(
                host=str(d["host"]),
                address=str(d["address"]),
                kind=str(d["kind"]),
                reason=str(d["reason"]),
                since=float(d["since"]),
                expires=float(d["expires"]),
                by=str(d.get("by", "")),
                run_id=str(d.get("run_id", "")),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def describe(self) -> str:
        """``kind: reason (marked by B, run R)`` for headers, reports and warnings."""
        run = f", run {self.run_id}" if self.run_id else ""
        return f"{self.kind}: {self.reason} (marked by {self.by or '?'}{run})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def default_ttl() -> float:
    """``$CAMIT_SUSPECT_TTL`` seconds, else :data:`DEFAULT_TTL`."""
    raw = os.environ.get("CAMIT_SUSPECT_TTL", "")
    try:
        return float(raw) if raw else DEFAULT_TTL
    except ValueError:
        raise ConfigError(
            "$CAMIT_SUSPECT_TTL", None, f"{raw!r} is not a number of seconds"
        ) from None


def address_of(host: Host) -> str:
    """``ip:port`` of a host's SSH endpoint (its name when it has no spec)."""
    spec = getattr(host, "spec", None)
    ip = getattr(spec, "ssh_ip", "") or host.name
    return f"{ip}:{getattr(spec, 'ssh_port', 22)}"


def suspect_key(address: str) -> str:
    """The mark's file stem: the address with every character but ``[A-Za-z0-9._-]`` as ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", address)


def suspect_dir(host: Host) -> str:
    return posixpath.join(posixpath.dirname(lease_path(host)) or "/", SUSPECT_DIR)


# --------------------------------------------------------------------------- host scripts (pure)


def mark_script(workdir: str, key: str, content: str, ttl: int) -> ShellScript:
    """Write ``<workdir>/camit-suspects/<key>.json`` atomically; the host's clock sets the times."""
    q = commands.quote
    d = posixpath.join(workdir, SUSPECT_DIR)
    return ShellScript(
        "\n".join(
            [
                f"_g=$( ( {HostLayout(workdir).guard_script()} ) 2>&1 ) "
                "|| { echo 'RESULT error unsafe workdir'; exit 0; }",
                f'D={q(d)}; F="$D/"{q(key + ".json")}; T="$F.$$.tmp"; now=$(date +%s)',
                "mkdir -p -- \"$D\" || { echo 'RESULT error mkdir'; exit 0; }",
                f"printf '%s\\n' {q(content)} "
                f'| sed "s/{_NOW}/$now/g; s/{_EXPIRES}/$((now + {ttl}))/g" > "$T" '
                "&& mv -f -- \"$T\" \"$F\" && echo 'RESULT marked' "
                "|| { rm -f -- \"$T\"; echo 'RESULT error write'; }",
            ]
        )
        + "\n"
    )


def read_script(workdir: str) -> ShellScript:
    """Print the host's clock and every mark file; change nothing."""
    d = posixpath.join(workdir, SUSPECT_DIR)
    return ShellScript(
        f'echo "NOW $(date +%s)"; for f in {commands.quote(d)}/*.json; do [ -f "$f" ] || continue; '
        'echo MARK-BEGIN; cat -- "$f"; echo; echo MARK-END; done\n'
    )


def clear_script(workdir: str, keys: Iterable[str]) -> ShellScript:
    """Remove the named marks (absent ones are fine)."""
    d = posixpath.join(workdir, SUSPECT_DIR)
    files = " ".join(commands.quote(posixpath.join(d, k + ".json")) for k in keys)
    return ShellScript(f"rm -f -- {files} && echo 'RESULT cleared'\n")


def parse_read(stdout: str) -> tuple[float, list[Suspect]]:
    """The host's clock and the marks :func:`read_script` printed (unparsable ones skipped)."""
    now, marks, body = 0.0, list[Suspect](), None
    for line in stdout.splitlines():
        if body is not None:
            if line == "MARK-END":
                found = Suspect.parse("\n".join(body))
                marks += [found] if found else []
                body = None
            else:
                body.append(line)
        elif line.startswith("NOW "):
            now = float(line[4:] or 0)
        elif line == "MARK-BEGIN":
            body = list[str]()
    return now, marks


def render(host: str, address: str, kind: str, reason: str, *, by: str, run_id: str) -> str:
    doc = {
        "version": 1,
        "host": host,
        "address": address,
        "kind": kind,
        "reason": reason,
        "since": _NOW,
        "expires": _EXPIRES,
        "by": by,
        "run_id": run_id,
    }
    return json.dumps(doc).replace(f'"{_NOW}"', _NOW).replace(f'"{_EXPIRES}"', _EXPIRES)


# --------------------------------------------------------------------------- on the cluster


def _workdir(host: Host) -> str:
    return posixpath.dirname(lease_path(host)) or "/"


def mark(
    cluster: Cluster,
    faults: Mapping[str, tuple[str, str]],
    *,
    ttl: float | None = None,
    run_id: str | None = None,
    on: Iterable[str] | None = None,
) -> dict[str, str]:
    """Mark each ``host → (kind, reason)`` of ``faults`` on every host of ``cluster`` (or of
    ``on``: the ones known reachable) it can reach.

    Best effort (a host that cannot be written to is logged); returns host → where it was
    written."""
    seconds = int(ttl if ttl is not None else default_ttl())
    if not faults or seconds <= 0:
        return {}
    docs = _mark_docs(cluster, faults, run_id)

    def one(host: Host) -> str:
        for address, content in docs.items():
            out = host.check(
                mark_script(_workdir(host), suspect_key(address), content, seconds),
                timeout=_TIMEOUT,
            ).stdout
            if "RESULT marked" not in out:
                raise OSError(f"could not write the mark of {address}: {out.strip()[:200]}")
        return host.name

    got = cluster.map(one, None if on is None else list(on))
    for name, err in got.failed.items():
        log.warning("%s: could not record the suspect mark(s) there: %s", name, err)
    written = ", ".join(got.succeeded)
    for n, (kind, reason) in faults.items():
        log.warning("%s: marked suspect (%s: %s) for %.0fs; written on %s", n, kind, reason,
                    seconds, written or "no host")
    return {n: written for n in faults}


def _mark_docs(cluster: Cluster, faults: Mapping[str, tuple[str, str]], run_id: str | None
               ) -> dict[str, str]:
    """Each faulty host's mark document by its address, signed by this controller and run."""
    by = f"{default_owner()} (pid {os.getpid()} on {socket.gethostname()})"
    run = run_id if run_id is not None else os.environ.get("CAMIT_RUN_ID", "")
    return {
        address_of(cluster[n]): render(n, address_of(cluster[n]), kind, reason, by=by, run_id=run)
        for n, (kind, reason) in faults.items()
    }

def read(cluster: Cluster) -> dict[str, Suspect]:
    """The live (unexpired) marks of ``cluster``'s hosts, read from every host it can reach (the
    newest mark of each wins); host name → mark. Unreachable hosts are skipped (logged at debug level)."""
    names = {address_of(h): h.name for h in cluster}

    def one(host: Host) -> tuple[float, list[Suspect]]:
        return parse_read(host.check(read_script(_workdir(host)), timeout=_TIMEOUT).stdout)

    got = cluster.map(one)
    for name, err in got.failed.items():
        log.debug("%s: suspect marks not read: %s", name, err)
    out: dict[str, Suspect] = {}
    for now, marks in got.succeeded.values():
        for m in marks:
            found = names.get(m.address)
            if (
                found is not None
                and m.expires > now
                and (found not in out or m.since > out[found].since)
            ):
                out[found] = m
    return out


def clear(cluster: Cluster, names: Iterable[str]) -> dict[str, str]:
    """Remove the marks of ``names`` from every reachable host of ``cluster``; host → outcome."""
    keys = [suspect_key(address_of(cluster[n])) for n in names]
    if not keys:
        return {}
    got = cluster.map(lambda h: h.check(clear_script(_workdir(h), keys), timeout=_TIMEOUT).stdout)
    return {
        n: "cleared" if "RESULT cleared" in str(v) else f"not cleared: {v}" for n, v in got.items()
    }
