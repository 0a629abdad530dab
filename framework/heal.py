"""``camit check --heal``: re-admit suspect hosts (framework.suspects) that pass a preflight and a
smoke run.

A suspect host is cleared only when every preflight check passed on it and a two-node torchrun (one
gloo all_reduce, :mod:`framework.launch.smoke_allreduce`) over it and one healthy host succeeded,
under the lease of both; otherwise it stays suspect, its mark renewed with the new reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from framework import suspects
from framework.errors import FrameworkError, one_line

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster
    from framework.preflight.checks import Report

SMOKE = Path(__file__).parent / "launch" / "smoke_allreduce.py"
SMOKE_TIMEOUT = 120.0


@dataclass(frozen=True)
class Verdict:
    """What ``--heal`` decided for one suspect host."""

    host: str
    healed: bool
    why: str


def smoke(env: EnvConfig, cluster: Cluster, pair: tuple[str, str]) -> str | None:
    """The two-node smoke run over ``pair`` (leased); None when it passed, else why not."""
    from framework.hosts import Cluster as _Cluster
    from framework.launch import Launcher, Target
    from framework.lease import Lease

    sub = _Cluster([cluster[n] for n in pair], max_parallel=2)
    try:
        with Lease(sub, ttl=300, wait=0):
            result = Launcher(env, sub, nproc_per_node=1).run(
                Target(script=str(SMOKE)),
                hosts=list(pair),
                timeout=SMOKE_TIMEOUT,
                name="heal-smoke",
            )
    except FrameworkError as exc:
        return f"smoke run with {pair[1]}: {one_line(exc)}"
    return None if result.ok else f"smoke run with {pair[1]} failed: {result.message()}"


def _judge(
    env: EnvConfig, cluster: Cluster, name: str, failed: Mapping[str, tuple[str, str]],
    healthy: list[str],
) -> Verdict:
    """The verdict for suspect ``name``: its preflight fault, else the smoke run's outcome."""
    if name in failed:
        return Verdict(name, False, failed[name][1])
    if not healthy:
        return Verdict(name, False, "no healthy host to pair it with for the smoke run")
    why = smoke(env, cluster, (name, healthy[0]))
    if why is not None:
        return Verdict(name, False, why)
    return Verdict(name, True, f"preflight clean, smoke run with {healthy[0]} passed")


def _renewals(out: list[Verdict], failed: Mapping[str, object]) -> dict[str, tuple[str, str]]:
    """The marks to renew: hosts the smoke run (not the preflight, which marks its own) kept
    suspect."""
    return {v.host: ("heal", v.why) for v in out if not (v.healed or v.host in failed)}


def _partners(names: list[str], marks: Mapping[str, object],
              failed: Mapping[str, object]) -> list[str]:
    """The hosts a suspect's smoke run may pair it with: neither suspect nor failed in the
    preflight, in cluster order."""
    return [n for n in names if n not in marks and n not in failed]


def heal(
    env: EnvConfig, cluster: Cluster, report: Report, marks: Mapping[str, suspects.Suspect]
) -> list[Verdict]:
    """Judge each suspect of ``cluster`` after ``report`` (a preflight of it): clear it or renew
    its mark."""
    failed = report.host_faults()
    names = list(cluster.hosts)
    healthy = _partners(names, marks, failed)
    out = [_judge(env, cluster, n, failed, healthy) for n in names if n in marks]
    suspects.clear(cluster, [v.host for v in out if v.healed])
    suspects.mark(cluster, _renewals(out, failed))
    return out
