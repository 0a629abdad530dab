"""``camit collect``: diagnostics (npu-smi, hccn_tool, versions; ``--logs``: ~/ascend/log;
``--diag``: the ascend-fd fault bundle) from every host into a run folder, holding the lease."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import console
from framework.cli.common import (
    cluster_run,
    env_arg,
    host_error_text,
    hosts_arg,
    lease_args,
    leased,
    scrub_folder,
)
from framework.errors import EXIT_INFRA, EXIT_OK

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster, Host
    from framework.records.folder import RunDir

#: ``collect --logs``: the newest files of ``~/ascend/log`` packed, up to this many bytes
#: (uncompressed)
COLLECT_LOG_BYTES = 1 << 30


def add_parser(sub: Any) -> None:
    co = sub.add_parser("collect", help="collect diagnostics (npu-smi, hccn_tool, versions, logs) "
                                        "from every host")
    env_arg(co)
    hosts_arg(co)
    co.add_argument("--report-dir", metavar="D", default="reports",
                    help="run folders go here (default: reports)")
    co.add_argument("--logs", action="store_true",
                    help="also fetch ~/ascend/log from every host (a tarball each)")
    co.add_argument("--json", action="store_true", help="print what was collected as JSON")
    co.add_argument("--diag", action="store_true",
                    help="also write fault-bundle/<host>/ in ascend-fd's input layout "
                         "(and run ascend-fd if installed)")
    lease_args(co)


def _safe_name(section: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in section).strip("_") + ".txt"


def _fetch_logs(env: EnvConfig, workdir: str, rundir: RunDir, host: Host) -> str:
    """One host's ``~/ascend/log``, packed in its workdir and fetched: what the table says of it."""
    from framework.cores import logs as hostlogs
    from framework.fetchcaps import FetchCapError
    from framework.remote.layout import UNSAFE_RC, HostLayout, unsafe_message, unsafe_reason

    remote = f"{workdir}/camit-ascend-log.tgz"
    # the archive goes into the workdir: made and checked as deploy and launch do (issue 17)
    guard = HostLayout.of(env.hosts[host.name]).guard_script()
    # read through the host program (framework.remote.hostfile): no folder followed through
    # a symlink, each file opened once and judged by its descriptor
    made = host.run(hostlogs.home_logs_script(guard, remote, COLLECT_LOG_BYTES), timeout=600)
    if made.rc == UNSAFE_RC:
        return f"error: {unsafe_message(unsafe_reason(made.stdout) or workdir)}"
    if made.rc == 3:
        return "no ~/ascend/log"
    if not made.ok:
        return f"packing failed: {made.tail(2)}"
    local = rundir.file("collect", host.name, "ascend-log.tgz")
    try:  # bounded (framework.fetchcaps): a cut archive keeps its first part
        host.get(remote, local, keep_partial=True)
    except FetchCapError as exc:
        return f"{local.stat().st_size // 1024} KiB, cut: {exc.reason}"
    finally:
        host.run(["rm", "-f", "--", remote], timeout=60)
    return f"{local.stat().st_size // 1024} KiB"


def _host_rows(samples: Mapping[str, Any], logs: Mapping[str, str], rundir: RunDir
               ) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """Each host's table row and JSON entry; a reachable host's sections written to the run
    folder."""
    rows: list[list[str]] = []
    payload: list[dict[str, Any]] = []
    for name, sample in samples.items():
        if isinstance(sample, BaseException):
            rows.append([name, "UNREACHABLE", host_error_text(name, sample), "-"])
            payload.append({"host": name, "error": host_error_text(name, sample)})
            continue
        for section in sample.sections.values():
            rundir.write_text(f"collect/{name}/{_safe_name(section.name)}", section.text + "\n")
        rows.append([name, "ok", f"{len(sample.sections)} sections", logs.get(name, "-")])
        payload.append({"host": name, "sections": sorted(sample.sections), "logs": logs.get(name)})
    return rows, payload


def run(args: argparse.Namespace) -> int:
    from framework.preflight.checks import evaluate
    from framework.preflight.run import Preflight

    env, cluster, rundir = cluster_run(args)
    with cluster, console.terminate_as_interrupt(), leased(args, cluster):
        pre = Preflight(env, cluster)
        plans = pre.plans()
        samples = pre.samples(plans)
        logs = _all_logs(env, cluster, plans, rundir) if args.logs else {}
        if args.diag:
            _collect_diag(env, cluster, rundir.path, plans)
    report = evaluate(plans, samples)
    rundir.write_json("preflight.json", report.to_json())
    rows, payload = _host_rows(samples, logs, rundir)
    scrub_folder(rundir, env)
    if args.json:
        console.print_json({"report": str(rundir.path), "hosts": payload})
    else:
        console.print_table(["host", "status", "collected", "ascend logs"], rows)
        print(f"collected into {rundir.path / 'collect'} "
              f"(checks: {rundir.path / 'preflight.json'})")
    return _unreachable_code(samples)


def _all_logs(env: EnvConfig, cluster: Cluster, plans: Mapping[str, Any], rundir: RunDir
              ) -> dict[str, str]:
    """``collect --logs``: every host's ``~/ascend/log`` fetched; what the table says of each."""
    def fetch(host: Host) -> str:
        return _fetch_logs(env, plans[host.name].workdir, rundir, host)

    return {h: (v if isinstance(v, str) else f"error: {host_error_text(h, v)}")
            for h, v in cluster.map(fetch).items()}


def _unreachable_code(samples: Mapping[str, Any]) -> int:
    """The exit status: the worst of the unreachable hosts' (infra), else 0."""
    return max((getattr(s, "exit_code", EXIT_INFRA) for s in samples.values()
                if isinstance(s, BaseException)), default=EXIT_OK)


def _collect_diag(env: Any, cluster: Any, root: Path, plans: Any) -> None:
    """``collect --diag``: the fault bundle of every host (framework.cores.diagcollect)."""
    from framework.cores.diagcollect import collect_diag
    from framework.records.scrub import Scrubber
    from framework.remote.layout import HostLayout

    bundle, verdict, failed = collect_diag(
        cluster, root, lambda h: plans[h.name].workdir, lambda h: env.hosts[h.name].npu.count,
        guard_of=lambda h: HostLayout.of(env.hosts[h.name]).guard_script(),
        scrub=Scrubber.from_env(env).text)
    for host, why in sorted(failed.items()):
        print(console.printable(f"{host}: no diagnostics: {why}"), file=sys.stderr)
    print(f"fault bundle (ascend-fd input, one tree per host): {bundle}", file=sys.stderr)
    said = (f"ascend-fd: {verdict}" if verdict is not None
            else "ascend-fd: not installed on this machine (run it on the bundle by hand)")
    print(console.printable(said), file=sys.stderr)
