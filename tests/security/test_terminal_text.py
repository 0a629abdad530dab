"""Text that hosts or the environment provide never reaches the terminal raw (issue 16 item 11, issue 17 item 8).

The lab tests beside this file (``test_terminal_output.py``) check ``camit exec``'s table on real hosts;
these check, without a lab, the other places the CLI and the lab tools print such text: the deploy notes
(a relay's or a host's words), the preflight's skip reasons (node 0's listener output), the lease owner
(``--owner`` or ``$BUILD_URL``) and the lab tools' error lines. Each goes through
:func:`framework.console.printable`: an escape arrives as the characters ``\\x1b``.
"""

from __future__ import annotations

from framework.cli import check, deploy, lease
from framework.deploy.result import DeployResult, HostManifest
from framework.errors import LabError
from framework.lab import artifacts, manage
from framework.preflight import rendezvous
from framework.preflight.checks import Report
from framework.records.folder import RunDir

#: retitle the terminal (OSC 0 ... BEL), clear the screen (ED 2), a right-to-left override
HOSTILE = "\x1b]0;pwned\x07 \x1b[2J \u202e"
SHOWN = r"\x1b]0;pwned\x07 \x1b[2J \u202e"


def _raw_free(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, repr(text)


def test_deploy_notes_are_escaped(capsys, tmp_path):
    result = DeployResult({"h1": HostManifest("h1", status="deployed", install_path="/w/opp")}, {},
                          notes=[f"h1: relay: {HOSTILE}"])
    deploy.print_deploy(result, RunDir(tmp_path, tmp_path.name))
    out = capsys.readouterr().out
    _raw_free(out)
    assert f"note: h1: relay: {SHOWN}\n" in out


def test_preflight_skip_reasons_from_a_host_are_escaped(capsys):
    # node 0's listener printed an error line: every host's rdzv check is skipped for that reason
    why = rendezvous.parse_listener(f"error bind failed {HOSTILE}")
    assert isinstance(why, str), why
    report = Report(["h1", "h2"], {(r.host, r.check): r for r in rendezvous.verdicts(["h1", "h2"], why, {}).values()},
                    checks=("rdzv",))
    check.print_check(report)
    out = capsys.readouterr().out
    _raw_free(out)
    assert f"skipped rdzv on h1, h2: bind failed {SHOWN}\n" in out


def test_the_lease_owner_is_escaped():
    line = lease.held_line(["h1", "h2"], f"https://ci/job/{HOSTILE}")
    _raw_free(line)
    assert line == f"camit: lease held on h1, h2 by https://ci/job/{SHOWN}"


def test_lab_error_lines_are_escaped(capsys, tmp_path):
    assert manage._usage_error(LabError(f"ip netns add failed: {HOSTILE}")) == 2
    rc = artifacts.main(["build", "--out", str(tmp_path / "out"), "--env-in", str(tmp_path / f"{HOSTILE}.yaml"),
                         "--env-out", str(tmp_path / "o.yaml")])
    assert rc == 1
    err = capsys.readouterr().err
    _raw_free(err)
    assert f"lab: error: ip netns add failed: {SHOWN}\n" in err
    assert f"{SHOWN}.yaml: file not found" in err


def test_the_pytest_terminal_summary_escapes_what_the_run_recorded(tmp_path):
    import json

    from framework import report

    (tmp_path / "manifest.json").write_text(json.dumps({"status": "failed", "error": f"rank 0 said {HOSTILE}"}))
    text = report.terminal_summary(tmp_path)
    _raw_free(text)
    assert text.splitlines()[0] == f"camit run {tmp_path.name}: FAILED (rank 0 said {SHOWN})"
