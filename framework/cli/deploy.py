"""``camit deploy``: the .run package and the wheel onto every host, holding the lease; a table or
``--json`` of each host's manifest. ``--dry-run`` prints the plan and contacts no host."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from framework import console
from framework.cli.common import (
    DRY_RUN_HEADER,
    cluster_run,
    env_arg,
    env_cluster,
    hosts_arg,
    lease_args,
    leased,
    progress,
    say,
    scrub_folder,
)
from framework.errors import EXIT_OK

if TYPE_CHECKING:  # pragma: no cover
    from framework.records.folder import RunDir


def add_parser(sub: Any) -> None:
    dp = sub.add_parser("deploy", help="deploy the .run package and the wheel to every host")
    env_arg(dp)
    hosts_arg(dp)
    dp.add_argument("--no-relay", action="store_true", help="push directly from here to every host")
    dp.add_argument("--report-dir", metavar="D", default="reports",
                    help="run folders go here (default: reports)")
    dp.add_argument("--json", action="store_true", help="print the manifest as JSON")
    dp.add_argument("--dry-run", action="store_true",
                    help="print what would be sent and run on each host; no connection, no lease, "
                         "nothing changed")
    lease_args(dp)


def run(args: argparse.Namespace) -> int:
    from framework.deploy import Deployer

    if args.dry_run:
        return dry_run(args)
    env, cluster, rundir = cluster_run(args)

    with cluster, console.terminate_as_interrupt(), leased(args, cluster), progress(args) as event:
        result = Deployer(env, cluster, relay=_relay(args), rundir=rundir, on_event=event).run()
    scrub_folder(rundir, env)
    if args.json:
        console.print_json(result.to_json())
    else:
        print_deploy(result, rundir)
    return max((e.exit_code for e in result.errors.values()), default=EXIT_OK)


def _relay(args: argparse.Namespace) -> bool | None:
    """``--no-relay``: push from here to every host (False); else the env decides (None)."""
    return False if args.no_relay else None


def _manifest_row(name: str, m: Any) -> list[str]:
    """One host's row of the deploy table: status, artifacts, version or error, time."""
    arts = "\n".join(f"{a.name} {a.sha256[:12]} ({a.via})" for a in m.artifacts) or "-"
    took = sum(m.durations.values())
    detail = m.error if m.error else f"{m.installed_version or '-'} @ {m.install_path}"
    return [name, m.status.upper(), arts, detail, f"{took:.2f}s"]


def print_deploy(result: Any, rundir: RunDir) -> None:
    """The deploy table, its notes (which quote hosts: escaped) and where the manifest is."""
    rows = [_manifest_row(name, m) for name, m in result.manifests.items()]
    console.print_table(["host", "status", "artifacts", "version @ install path / error", "time"],
                        rows)
    for note in result.notes:
        print(f"note: {console.printable(note)}")
    print(f"manifest: {rundir.path / 'deploy-manifest.json'}  ({result.duration:.2f}s)")


def _say_host_plan(p: dict[str, Any], scrub: Callable[[str], str]) -> None:
    """One host's part of ``camit deploy --dry-run``: where, which .run, the uploads and the
    steps."""
    venv = f" (venv {p['venv']} on {p['python']})" if p["venv"] else ""
    say(f"{p['host']}: workdir {p['workdir']}, install path {p['install_path']}, "
        f"interpreter {p['interpreter']}{venv}", scrub)
    if p["run_package_choice"]:
        say(f"  .run: {p['run_package_choice']}", scrub)
    for a in p["artifacts"]:
        say(f"  upload {a['name']} -> {a['remote']}", scrub)
    for st in p["steps"]:
        say(f"  {_step_line(st)}", scrub)


def _step_line(st: dict[str, Any]) -> str:
    """A deploy step as the dry run says it: its name, its condition, what it does."""
    when = f" [when {st['when']}]" if st.get("when") else ""
    return f"{st['step']}{when}: {_step_action(st)}"


def _step_action(st: dict[str, Any]) -> str:
    """What a deploy step does: its command, or what it sends or writes."""
    if "command" in st:
        return str(st["command"])
    return f"sends {st['sends']}" if "sends" in st else f"writes {st['writes']}"


#: what a deploy's dry run cannot know: each host's probe decides it when the deploy runs
_LATER = (
    "which artifacts each host has staged already (only the missing ones are sent)",
    "whether a host is unchanged (hashes and install record match: then nothing is sent or "
    "installed)",
    "which steps a host needs (the venv when its interpreter is not the host's python)",
    "the vendor the .run installs (the import check is shown for the default vendor)",
)


def dry_run(args: argparse.Namespace) -> int:
    from framework.deploy import Deployer
    from framework.records.scrub import Scrubber, scrub_doc

    env, cluster = env_cluster(args)
    plans = Deployer(env, cluster, relay=_relay(args)).plan_only()
    scrub = Scrubber.from_env(env)
    later = _later(plans)
    if args.json:
        doc = {"dry_run": True, "hosts": plans, "resolved_at_run_time": later}
        console.print_json(scrub_doc(doc, scrub))
        return EXIT_OK
    say(DRY_RUN_HEADER, scrub)
    _say_artifacts(plans, scrub)
    for p in plans:
        _say_host_plan(p, scrub)
    say("resolved at run time, by each host's probe: " + "; ".join(later), scrub)
    return EXIT_OK


def _later(plans: list[dict[str, Any]]) -> list[str]:
    """What this dry run leaves to each host's probe (which .run fits: only when there is a
    choice)."""
    later = list(_LATER)
    if any(p["run_package_choice"] for p in plans):
        later.append("which .run fits each host (its os-release ID and uname -m)")
    return later


def _say_artifacts(plans: list[dict[str, Any]], scrub: Callable[[str], str]) -> None:
    """The dry run's first lines: how many artifacts go to how many hosts, and each artifact."""
    from framework.deploy.plan import mb

    first: dict[str, Any] = plans[0] if plans else {"artifacts": [], "transfer": "-"}
    say(f"deploy {len(first['artifacts'])} artifact(s) to {len(plans)} host(s); "
        f"transfer: {first['transfer']}", scrub)
    for a in first["artifacts"]:
        say(f"  {a['kind']} {a['name']} ({mb(a['size'])}, sha256 {a['sha256'][:12]}) "
            f"from {a['local']}", scrub)
