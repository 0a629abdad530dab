"""``camit check``: the preflight (a host x check table; hosts that fail become suspect, ``--heal``
re-admits the clean ones), or ``--pairs``: gloo round trips between node pairs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from framework import console
from framework.cli.common import env_arg, env_cluster, hosts_arg
from framework.errors import EXIT_FAILED, EXIT_INFRA, EXIT_OK

# stdlib-only: the probe module imports framework.launch
from framework.preflight.limits import Limits

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster


def add_parser(sub: Any) -> None:
    ck = sub.add_parser("check", help="preflight: is every host ready? (a host x check table)")
    env_arg(ck)
    hosts_arg(ck)
    ck.add_argument("--json", action="store_true", help="machine-readable results")
    ck.add_argument("--min-free-gb", type=float, default=Limits.min_free_gb, metavar="G",
                    help=f"free space needed in the workdir (default {Limits.min_free_gb:g})")
    ck.add_argument("--max-skew", type=float, default=Limits.max_skew, metavar="S",
                    help="clock skew allowed between hosts and to this machine "
                         f"(default {Limits.max_skew:g})")
    ck.add_argument("--timeout", type=float, default=Limits.probe_timeout, metavar="S",
                    help=f"per-host probe timeout (default {Limits.probe_timeout:g})")
    ck.add_argument("--heal", action="store_true",
                    help="re-admit suspect hosts that pass the preflight and a two-node smoke run")
    ck.add_argument("--pairs", action="store_true",
                    help="instead of the preflight: time gloo send-recv round trips between node "
                         "pairs in rounds, name a slow node")
    ck.add_argument("--rounds", type=int, default=4, metavar="N",
                    help="--pairs: rounds to run (default 4)")


def run(args: argparse.Namespace) -> int:
    from framework.preflight.run import Preflight

    env, cluster = env_cluster(args)
    if args.pairs:
        return _check_pairs(args, env, cluster)
    limits = Limits(min_free_gb=args.min_free_gb, max_skew=args.max_skew,
                    probe_timeout=args.timeout)
    with cluster:
        report = Preflight(env, cluster, limits).run()
        verdicts = _suspects_after_check(env, cluster, report, args.heal)
    if args.json:
        console.print_json({**report.to_json(), "suspects": verdicts})
        return report.exit_code
    print_check(report)
    for host, what in verdicts.items():
        print(f"suspect {host}: {console.printable(what)}")
    return report.exit_code or _heal_code(verdicts, args.heal)


def _heal_code(verdicts: dict[str, str], heal: bool) -> int:
    """Exit 1 when ``--heal`` left a host suspect."""
    if not heal:
        return EXIT_OK
    healed_all = all(w.startswith("re-admitted") for w in verdicts.values())
    return EXIT_OK if healed_all else EXIT_FAILED


def _check_pairs(args: argparse.Namespace, env: EnvConfig, cluster: Cluster) -> int:
    """``check --pairs``: the pair rounds on the leased hosts (framework.pairs); exit 1 names a
    slow node."""
    from framework import pairs
    from framework.lease import Lease
    from framework.records.folder import RunDir

    rundir = RunDir.create("reports")
    with cluster, Lease(cluster):
        report = pairs.run_pairs(env, cluster, rundir, rounds=args.rounds)
    for line in report.lines():
        print(console.printable(line))
    print(f"report: {rundir.path}")
    return EXIT_INFRA if report.failure else EXIT_FAILED if report.slow else EXIT_OK


def _suspects_after_check(env: EnvConfig, cluster: Cluster, report: Any,
                          heal: bool) -> dict[str, str]:
    """Hosts the preflight failed become suspect; ``--heal`` re-admits the clean ones
    (framework.heal)."""
    from framework import heal as healing
    from framework import suspects

    suspects.mark(cluster, report.host_faults())
    marks = suspects.read(cluster)
    if not heal:
        return {n: f"{m.describe()} (camit check --heal re-admits it)" for n, m in marks.items()}
    return {v.host: ("re-admitted: " if v.healed else "still suspect: ") + v.why
            for v in healing.heal(env, cluster, report, marks)}


#: the preflight's last line, by its exit status
_VERDICT = {EXIT_OK: "all checks passed", EXIT_FAILED: "some checks FAILED",
            EXIT_INFRA: "host(s) UNREACHABLE"}


def _skipped(report: Any) -> dict[str, dict[str, list[str]]]:
    """The skipped checks: reason → check → hosts."""
    from framework.preflight.checks import SKIP

    skipped: dict[str, dict[str, list[str]]] = {}
    for r in report.results.values():
        if r.status == SKIP:
            skipped.setdefault(r.summary, {}).setdefault(r.check, []).append(r.host)
    return skipped


def print_check(report: Any) -> None:
    """The preflight table, each problem, the clock and what was skipped why (a reason can quote a
    host)."""
    headers, rows = report.table()
    console.print_table(headers, rows, title=f"preflight of {len(report.hosts)} host(s)")
    for r in report.problems:
        print(_problem_line(r))
    _print_clock(report.clock)
    skipped = _skipped(report)
    _print_skipped(skipped, report.hosts)
    skipped_n = sum(len(hs) for by in skipped.values() for hs in by.values())
    print(f"{_VERDICT[report.exit_code]} ({skipped_n} skipped) in {report.duration:.2f}s")


def _problem_line(r: Any) -> str:
    """A failed or warning check: host, check, status, its summary (which can quote the host)."""
    from framework.preflight.checks import WARN

    status = "warning" if r.status == WARN else r.status.upper()
    return f"{r.host} {r.check}: {status}: {console.printable(r.summary)}"


def _print_clock(clock: Any) -> None:
    """The widest clock skew between two hosts, when the preflight measured one."""
    if clock is None or not clock.pair:
        return
    a, b = clock.pair
    print(f"clock: max pairwise skew {clock.max_pairwise:.3f}s ({a} vs {b})")


def _print_skipped(skipped: dict[str, dict[str, list[str]]], order: list[str]) -> None:
    """One line per reason checks were skipped: which checks, on which hosts (in ``order``)."""
    for reason, by_check in skipped.items():
        hosts = sorted({h for hs in by_check.values() for h in hs}, key=order.index)
        print(f"skipped {', '.join(by_check)} on {', '.join(hosts)}: {console.printable(reason)}")
