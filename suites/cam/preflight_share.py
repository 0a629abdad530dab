"""The preflight suite's probe through the session's resources, and the host shares' reports
under xdist.

Design: docs/internals/cam-suite.md.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from framework import RunContext, context_of, host_share, resources_of
from framework.ranksuite import Report

#: how long a worker waits for another worker's share report (the probe is bounded by its own timeouts)
SHARE_WAIT = 900.0


def probe(config: pytest.Config) -> Report:
    """Preflight of this process's hosts (under ``-n`` the worker's share) on the session's leased cluster."""
    from framework.ranksuite import Preflight

    ctx = context_of(config)
    cluster = resources_of(config).open_cluster(allow_unreachable=True)
    return Preflight(ctx.require_env(), cluster).run()


def _share_file(shared: Path, ctx: RunContext, first_host: str) -> Path:
    return shared / f"camit-preflight-{ctx.ensure_rundir().run_id}-{first_host}.json"


def publish_share(config: pytest.Config, shared: Path) -> None:
    """A worker: probe its own share and write the report for the other workers (an error says why not)."""
    ctx = context_of(config)
    names = ctx.host_names()
    try:
        data = probe(config).to_json()
    except Exception as exc:  # written all the same: the other workers must not wait for nothing
        data = {"error": f"worker {ctx.worker and ctx.worker.get('workerid')}: preflight of {', '.join(names)} "
                         f"failed: {exc}"}
    out = _share_file(shared, ctx, names[0])
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(out)


def _read_share(path: Path) -> Report:
    deadline = time.monotonic() + SHARE_WAIT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no preflight report {path.name} after {SHARE_WAIT:.0f}s (its worker is gone?)")
        time.sleep(0.2)
    data = json.loads(path.read_text())
    if "error" in data:
        raise RuntimeError(data["error"])
    return Report.from_json(data)


def _merge(reports: list[Report]) -> Report:
    merged = Report(hosts=[], results={}, duration=max((r.duration for r in reports), default=0.0))
    for r in reports:
        merged.hosts.extend(r.hosts)
        merged.results.update(r.results)
    return merged


def cluster_report(camit: RunContext, shared: Path) -> Report:
    """A worker: the report of every host, its own share's and the other workers' (waiting for them)."""
    names = list(camit.require_env().hosts)
    count = int(str(camit.worker.get("workercount", 1))) if camit.worker else 1
    shares = [host_share(names, {"workerid": f"gw{i}", "workercount": count}) for i in range(count)]
    return _merge([_read_share(_share_file(shared, camit, share[0])) for share in shares])
