"""What the plugin reports: the terminal header and the repro line, the run folder's finalize,
the camit summary.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import console

if TYPE_CHECKING:
    import pytest

    from framework.plugin.context import RunContext

#: the session's exit status as manifest.json's ``status``
STATUS = {0: "ok", 1: "failed", 2: "interrupted", 5: "no tests", 6: "unreachable", 7: "lease", 8: "deploy failed"}
INTERRUPTED = "camit: interrupted; every launch was torn down, the report folder is kept\n"


def repro(config: pytest.Config, seed: int) -> str:
    """The pytest command line of this run with its seed pinned (``--random-seed N`` replaces any given).

    Built by the one reproduce-line builder, so the header, the terminal summary, manifest.json and
    index.html show the same command.
    """
    from framework.report import repro_command

    return repro_command(["pytest", *config.invocation_params.args], seed, program=["pytest"]) or "pytest"


def header_lines(ctx: RunContext) -> list[str] | None:
    """``pytest_report_header``: env, backend and seed; the report folder; the repro line (None: inert)."""
    env = ctx.env
    if env is None or not ctx.active:
        return None
    suspect = ctx.load_suspects() if not ctx.config.option.collectonly else {}
    chosen = ctx.chosen_hosts()
    lines = [f"camit: env {env.source} ({len(chosen)} hosts: {', '.join(chosen)}), "
             f"backend {env.launch.backend}, seed {ctx.seed}"]
    lines += _left_out_lines(env.hosts, chosen, suspect)
    lines += suspect_lines(ctx, suspect, chosen)
    if ctx.rundir is not None:
        lines.append(f"camit: report folder {ctx.rundir.path}")
    lines.append(f"camit: reproduce with: {repro(ctx.config, ctx.seed)}")
    return lines


def _left_out_lines(hosts: Iterable[str], chosen: list[str],
                    suspect: Mapping[str, Any]) -> list[str]:
    """The line naming the hosts ``--hosts``/``--exclude-hosts`` left out (none if none)."""
    left_out = [n for n in hosts if n not in chosen and n not in suspect]
    if not left_out:
        return []
    return [f"camit: left out by --hosts/--exclude-hosts: {', '.join(left_out)}"]


def suspect_lines(ctx: RunContext, suspect: Mapping[str, Any], chosen: list[str]) -> list[str]:
    """One line per suspect host (framework.suspects): left out, or run on with a warning
    (``--hosts``)."""
    lines = []
    for name, mark in suspect.items():
        used = name in chosen
        what = "WARNING: --hosts names suspect host" if used else "suspect host left out:"
        lines.append(f"camit: {what} {name} ({console.printable(mark.describe())})"
                     + ("; running there" if used else "; camit check --heal re-admits it"))
    return lines


def record_suspects(ctx: RunContext) -> None:
    """The suspects just read: a JUnit global property each (``camit_suspect_<host>``: used or
    left out)."""
    from _pytest.junitxml import xml_key

    suspect = ctx.suspects or {}
    chosen = ctx.chosen_hosts() if suspect else []
    xml = ctx.config.stash.get(xml_key, None)
    for name, mark in suspect.items():
        if xml is not None:
            used = "used" if name in chosen else "left out"
            xml.add_global_property(f"camit_suspect_{name}", f"{used}: {mark.describe()}")


def show_header(config: pytest.Config, ctx: RunContext) -> None:
    """camit found in use after collection (``$CAMIT_ENV`` or the ini key): its header lines now."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    lines = header_lines(ctx) if ctx.is_controller else None
    if reporter is None or not lines:
        return
    reporter.ensure_newline()
    for line in lines:
        reporter.write_line(line)


def register_junit(config: pytest.Config, ctx: RunContext, path: Path) -> None:
    """pytest's JUnit writer (``LogXML``, as ``--junitxml`` would make it) into the run folder, writing only
    if camit was used: with ``$CAMIT_ENV`` alone an unrelated run gets no file (and under xdist only the
    controller, which collects nothing, sees every report: the writer must be there from the start)."""
    from _pytest.junitxml import LogXML, xml_key

    class CamitXML(LogXML):
        def pytest_sessionfinish(self) -> None:
            if ctx.in_use():
                super().pytest_sessionfinish()

        def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
            if ctx.in_use():
                super().pytest_terminal_summary(terminalreporter, config)

    xml = CamitXML(str(path), config.option.junitprefix, config.getini("junit_suite_name"),
                   config.getini("junit_logging"), config.getini("junit_duration_report"),
                   config.getini("junit_family"), config.getini("junit_log_passing_tests"))
    config.stash[xml_key] = xml
    config.pluginmanager.register(xml, "camit-junitxml")


class RerunRecorder:
    """Notes each failed attempt pytest-rerunfailures reran (a report with outcome ``rerun``) as pytest's
    ``junit.xml`` names its test (:class:`~framework.report.junit.RerunRecord`): pytest's writer leaves such an
    attempt as an empty, passing testcase, :func:`finalize` folds it into the final one. The controller sees
    every report, under xdist too."""

    def __init__(self, config: pytest.Config, ctx: RunContext) -> None:
        self.config, self.ctx = config, ctx

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if str(report.outcome) != "rerun":  # rerunfailures sets it; pytest types only its own three
            return
        from _pytest.junitxml import mangle_test_address

        from framework.report.junit import RerunRecord

        names = mangle_test_address(report.nodeid)
        prefix = self.config.option.junitprefix
        if prefix:
            names[0] = f"{prefix}.{names[0]}"
        self.ctx.reruns.append(RerunRecord(".".join(names[:-1]), names[-1], int(getattr(report, "rerun", 0)) + 1,
                                           report.when, _crash_line(report.longrepr),
                                           str(report.longrepr or "")))


def _crash_line(longrepr: object) -> str:
    """A failed attempt's cause: pytest's crash message, else the last line of its report."""
    crash = getattr(longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or "")
    return message or (str(longrepr).strip().splitlines() or [""])[-1]


def junit_path(config: pytest.Config) -> str | None:
    """Where pytest's JUnit file is written this session (``--junitxml``, or camit's into the run folder)."""
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    return getattr(xml, "logfile", None) or getattr(config.option, "xmlpath", None) or None


def reports_here(ctx: RunContext) -> bool:
    """This process writes the run folder's reports: an env, the controller, and camit used (a folder made)."""
    return ctx.env is not None and ctx.is_controller and ctx.rundir is not None and ctx.in_use()


def _host_choice(ctx: RunContext) -> dict[str, Any] | None:
    """The manifest's record of the hosts chosen and left out (and the suspect ones), when the run chose."""
    if ctx.env is None or not _hosts_chosen(ctx):
        return None
    chosen = ctx.chosen_hosts()
    extra: dict[str, Any] = {"hosts_chosen": chosen,
                             "hosts_left_out": [n for n in ctx.env.hosts if n not in chosen]}
    if ctx.suspects:
        extra["suspect_hosts"] = {n: {**m.to_json(), "used": n in chosen} for n, m in ctx.suspects.items()}
    return extra


def _hosts_chosen(ctx: RunContext) -> bool:
    """Whether the run chose its hosts: by ``--hosts``/``--exclude-hosts``, or left suspects out."""
    return ctx.options.picks_hosts or bool(ctx.suspects)


def finalize(ctx: RunContext, exitstatus: int, *, error: str | None = None) -> None:
    """Coverage (before the manifest, so it lists the coverage report), then cluster.xml, manifest, index;
    ``error``: why the session ended early (manifest's ``error``, the summary's headline)."""
    if not reports_here(ctx) or ctx.rundir is None:
        return
    from framework import report

    if ctx.cov_ranks:
        from framework.ranksuite import coverage

        ctx.cov_summary = coverage.finish(ctx.rundir.path)
    extra = _host_choice(ctx)
    xml = junit_path(ctx.config)
    report.finalize(ctx.rundir.path, junit=Path(xml) if xml else None, reruns=ctx.reruns, env=ctx.env, seed=ctx.seed,
                    argv=["pytest", *ctx.config.invocation_params.args], repro=repro(ctx.config, ctx.seed),
                    started=ctx.started,
                    ended=time.time(), status=STATUS.get(int(exitstatus), "error"), error=error, extra=extra)


def summary_lines(ctx: RunContext) -> list[str] | None:
    """The ``camit`` section of the terminal summary (None: none); it never hides the run's outcome."""
    if not reports_here(ctx) or ctx.rundir is None:
        return None
    try:
        from framework import report
        from framework.records.scrub import Scrubber

        text = report.terminal_summary(ctx.rundir.path, repro=repro(ctx.config, ctx.seed),
                                       scrub=Scrubber.from_env(ctx.env))
    except Exception as exc:  # the summary must never hide the run's outcome
        text = f"(no cluster summary: {exc})"
    lines = text.splitlines()
    if ctx.suspects and ctx.env is not None:
        lines += suspect_lines(ctx, ctx.suspects, ctx.chosen_hosts())
    if ctx.cov_summary:
        lines.append(ctx.cov_summary)
    return lines


def say_interrupted(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """A real Ctrl-C (not pytest's collection-error ``Interrupted`` or ``pytest.exit``): say what was kept."""
    import pytest

    if isinstance(excinfo.value, (pytest.Session.Interrupted, pytest.exit.Exception)):
        return
    sys.stderr.write(INTERRUPTED)
