"""camit's progress under pytest (issue 16, item 3): events on the terminal, ``camit.log`` in the run folder.

The hosts are this machine (``LocalTransport``, the ``local_env`` of test_resources.py). The tests
emit what the deploy and the launcher emit, through the same door (``resources.log_event``, the
``camit`` logger), from inside tests that hold the leased ``cluster``: what is checked is how the
plugin shows and records them (:mod:`framework.plugin.progress`).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests.plugin.test_resources import local_env  # noqa: F401 - the fixture

WORKTREE = Path(__file__).resolve().parents[2]
STAMP = r"\d\d:\d\d:\d\d"


@pytest.fixture(autouse=True)
def _this_camit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Subprocesses (pytest, its xdist workers) import this checkout's camit, not the installed one."""
    monkeypatch.setenv("PYTHONPATH", str(WORKTREE))


EVENTS = textwrap.dedent("""
    import logging

    from framework.plugin.resources import log_event

    log = logging.getLogger("camit")


    def test_a_deploy(cluster):
        log_event("node1", "deploy: upload 1.2 MiB")
        log_event("node2", "deploy: install-run FAILED: exit status 3")
        log.warning("node3: clock is 4 s off")
        log.info("lease detail: node4 taken")
        log.debug("ssh detail: node4 channel 7")


    def test_b_launch(cluster):
        log_event("node1", "launch 1: torchrun started (world 4)")
        log.error("node2: rank 1 lost")
""")


def folder(pytester: pytest.Pytester) -> Path:
    return (pytester.path / "out" / "latest").resolve()


def camit_lines(result: pytest.RunResult) -> list[str]:
    """The progress lines (``camit: [gwN] HH:MM:SS ...``; not the header's or the summary's ``camit:`` lines)."""
    return [line for line in result.outlines if re.match(rf"camit: (\[gw\d+\] )?{STAMP} ", line)]


def run(pytester: pytest.Pytester, env: Path, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_events=EVENTS)
    result = pytester.runpytest("--env", str(env), "--report-dir", "out", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=2)
    return result


def test_events_are_lines_of_their_own_as_they_happen(pytester, local_env):  # noqa: F811
    result = run(pytester, local_env)
    out = result.outlines
    upload = [i for i, line in enumerate(out) if re.fullmatch(rf"camit: {STAMP} node1: deploy: upload 1\.2 MiB", line)]
    launch = [i for i, line in enumerate(out) if re.fullmatch(rf"camit: {STAMP} node1: launch 1: torchrun started "
                                                              r"\(world 4\)", line)]
    assert len(upload) == 1 and len(launch) == 1, out
    # in the run, in the order of the tests, before pytest's summary (not collected and printed at the end)
    summary = next(i for i, line in enumerate(out) if re.search(r"=+ .*2 passed", line))
    assert upload[0] < launch[0] < summary, out
    # the test's progress dot is not glued onto an event line: each event is its line's whole text
    assert not any("camit:" in line and not line.startswith("camit:") for line in out), out


def test_the_default_shows_events_warnings_and_errors_not_info(pytester, local_env):  # noqa: F811
    lines = camit_lines(run(pytester, local_env))
    assert [re.sub(rf"^camit: {STAMP} ", "", line) for line in lines] == [
        "node1: deploy: upload 1.2 MiB",
        "node2: deploy: install-run FAILED: exit status 3",
        "warning: node3: clock is 4 s off",
        "node1: launch 1: torchrun started (world 4)",
        "error: node2: rank 1 lost",
    ], lines


def test_quiet_shows_only_failures_and_errors(pytester, local_env):  # noqa: F811
    lines = camit_lines(run(pytester, local_env, "-q"))
    assert [re.sub(rf"^camit: {STAMP} ", "", line) for line in lines] == [
        "node2: deploy: install-run FAILED: exit status 3",
        "error: node2: rank 1 lost",
    ], lines


def test_verbose_adds_info_and_very_verbose_debug(pytester, local_env):  # noqa: F811
    lines = camit_lines(run(pytester, local_env, "-v"))
    assert any(line.endswith("info: lease detail: node4 taken") for line in lines), lines
    assert not any("ssh detail" in line for line in lines), lines
    assert any("node1: deploy: upload 1.2 MiB" in line for line in lines), lines
    lines = camit_lines(run(pytester, local_env, "-vv"))
    assert any(line.endswith("debug: ssh detail: node4 channel 7") for line in lines), lines


def test_camit_log_in_the_run_folder_has_every_record_at_debug(pytester, local_env):  # noqa: F811
    run(pytester, local_env, "-q")
    log = (folder(pytester) / "camit.log").read_text()
    for level, text in [("INFO", "node1: deploy: upload 1.2 MiB"), ("INFO", "node2: deploy: install-run FAILED"),
                        ("WARNING", "node3: clock is 4 s off"), ("INFO", "lease detail: node4 taken"),
                        ("DEBUG", "ssh detail: node4 channel 7"), ("INFO", "node1: launch 1: torchrun started"),
                        ("ERROR", "node2: rank 1 lost")]:
        assert re.search(rf"^{STAMP}\.\d{{3}} {level} +camit: {re.escape(text)}", log, re.M), (text, log)


def test_host_text_with_control_characters_is_escaped(pytester, local_env):  # noqa: F811
    pytester.makepyfile(test_ctl=textwrap.dedent("""
        from framework.plugin.resources import log_event


        def test_ctl(cluster):
            log_event("node\\x1b[31m1", "said \\x07\\x1b]0;title\\x07 done")
    """))
    result = pytester.runpytest("--env", str(local_env), "--report-dir", "out", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "\x1b" not in text and "\x07" not in text
    lines = camit_lines(result)
    assert len(lines) == 1 and lines[0].endswith(r"node\x1b[31m1: said \x07\x1b]0;title\x07 done"), lines


def test_under_xdist_a_workers_events_reach_the_controller_with_its_id(pytester, local_env):  # noqa: F811
    pytester.makepyfile(test_shares=textwrap.dedent("""
        import pytest

        from framework.plugin.resources import log_event


        @pytest.mark.parametrize("i", range(2))
        def test_share(camit, cluster, i):
            log_event(camit.host_names()[0], f"deploy: test {i} on this share")
    """))
    result = pytester.runpytest_subprocess("--env", str(local_env), "-n", "2", "--report-dir", "out",
                                           "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(passed=2)
    lines = camit_lines(result)
    forwarded = [m for line in lines if (m := re.fullmatch(
        rf"camit: \[(gw[01])\] {STAMP} (node[13]): deploy: test (\d) on this share", line))]
    assert len(forwarded) == 2, lines
    run_folder = folder(pytester)
    for m in forwarded:
        worker, host, i = m.groups()
        assert host == {"gw0": "node1", "gw1": "node3"}[worker], lines
        # in the worker's own log as it happened, and in the controller's with the worker's id
        assert f"{host}: deploy: test {i} on this share" in (run_folder / f"camit-{worker}.log").read_text()
        assert f"[{worker}] " in (run_folder / "camit.log").read_text()


def test_an_unrelated_run_with_camit_env_set_prints_and_writes_nothing_of_camit(pytester, local_env,  # noqa: F811
                                                                               monkeypatch):
    monkeypatch.setenv("CAMIT_ENV", str(local_env))
    pytester.makepyfile(test_plain=textwrap.dedent("""
        import logging


        def test_plain():
            logging.getLogger("camit").warning("not ours to show")
    """))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not [line for line in result.outlines if "camit:" in line], result.outlines
    assert not list(pytester.path.rglob("camit*.log"))
