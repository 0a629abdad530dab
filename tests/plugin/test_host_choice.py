"""``--hosts`` / ``--exclude-hosts`` under pytest: validated, shown, the xdist shares cut from them; a
replacement xdist worker (after a crash) gets the dead worker's share from the controller."""

from __future__ import annotations

import json
import textwrap

import pytest

from framework.plugin.xdist import ShareBook

FIVE = textwrap.dedent("""\
    host_info:
      a: {manage_nic: {name: eth0, ip: 192.0.2.1}}
      b: {manage_nic: {name: eth0, ip: 192.0.2.2}}
      c: {manage_nic: {name: eth0, ip: 192.0.2.3}}
      d: {manage_nic: {name: eth0, ip: 192.0.2.4}}
      e: {manage_nic: {name: eth0, ip: 192.0.2.5}}
""")

RECORD_SHARE = textwrap.dedent("""
    import os
    import pytest

    @pytest.mark.parametrize("i", range(6))
    def test_share(camit, i, tmp_path_factory):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        out = os.path.join(os.environ["CAMIT_TEST_RECORD"], f"hosts-{worker}.txt")
        with open(out, "w") as fh:
            fh.write(",".join(camit.host_names()))
""")


@pytest.fixture
def five(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CAMIT_ENV", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # (this file itself may run under -n)
    monkeypatch.setenv("CAMIT_TEST_RECORD", str(pytester.mkdir("record")))
    return pytester.makefile(".yaml", five=FIVE)


def shares(pytester: pytest.Pytester) -> dict[str, str]:
    return {p.stem.removeprefix("hosts-"): p.read_text() for p in (pytester.path / "record").glob("hosts-*.txt")}


def test_hosts_and_exclude_hosts_choose_and_show(pytester, five):
    pytester.makepyfile(RECORD_SHARE)
    result = pytester.runpytest("--env", str(five), "--hosts", "b,d,e", "--exclude-hosts", "d",
                                "--report-dir", "out", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    assert shares(pytester) == {"main": "b,e"}
    result.stdout.fnmatch_lines(["camit: env *five.yaml (2 hosts: b, e), backend *",
                                 "camit: left out by --hosts/--exclude-hosts: a, c, d"])
    manifest = json.loads((pytester.path / "out" / "latest" / "manifest.json").read_text())
    assert manifest["extra"]["hosts_chosen"] == ["b", "e"]
    assert manifest["extra"]["hosts_left_out"] == ["a", "c", "d"]


@pytest.mark.parametrize("flag", ["--hosts", "--exclude-hosts"])
def test_an_unknown_host_is_a_usage_error_naming_it_and_the_env(pytester, five, flag):
    pytester.makepyfile(RECORD_SHARE)
    result = pytester.runpytest("--env", str(five), flag, "a,zz", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {flag} a,zz: unknown host 'zz': "
                                 "not in *five.yaml (its hosts: a, b, c, d, e)"])
    assert "Traceback" not in result.stderr.str()


def test_xdist_shares_are_cut_from_the_chosen_hosts(pytester, five):
    pytester.makepyfile(RECORD_SHARE)
    result = pytester.runpytest("--env", str(five), "--exclude-hosts", "c", "-n", "2", "-p", "no:cacheprovider",
                                "-p", "no:benchmark")
    result.assert_outcomes(passed=6)
    assert sorted(shares(pytester).values()) == ["a,b", "d,e"]


CRASH = textwrap.dedent("""
    import os
    import pytest

    @pytest.mark.parametrize("i", range(12))
    def test_share(camit, i):
        import pathlib, time

        base = pathlib.Path(os.environ["CAMIT_TEST_RECORD"])
        worker = os.environ["PYTEST_XDIST_WORKER"]
        names = ",".join(camit.host_names())
        with open(base / f"hosts-{worker}.txt", "w") as fh:
            fh.write(names)
        if worker == "gw0" and not (base / "killed").exists():
            (base / "killed").write_text(names)
            os._exit(3)  # the worker dies; xdist starts gw2 in its place
        time.sleep(0.5)  # work left for the replacement
""")


def test_a_replacement_worker_gets_the_dead_workers_share(pytester, five):
    pytester.makepyfile(CRASH)
    result = pytester.runpytest("--env", str(five), "-n", "2", "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.stdout.fnmatch_lines(["*node down*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 11 and outcomes.get("failed") == 1, result.stdout.str()[-2000:]
    got = shares(pytester)
    assert got["gw0"] == "a,b,c" and got["gw1"] == "d,e"
    assert got["gw2"] == "a,b,c", got  # not "" (the env has 0 host(s))
    assert "0 host(s)" not in result.stdout.str()


def test_sharebook_hands_a_dead_workers_share_to_its_replacement():
    book = ShareBook(list("abcde"), 2)
    assert book.hand_out("gw0") == ["a", "b", "c"]
    assert book.hand_out("gw1") == ["d", "e"]
    with pytest.raises(pytest.UsageError):
        book.hand_out("gw2")  # no share is free while both workers live
    book.give_back("gw1")
    assert book.hand_out("gw2") == ["d", "e"]
    book.give_back("gw0")
    book.give_back("gw2")
    assert book.hand_out("gw3") == ["a", "b", "c"]
    assert book.hand_out("gw4") == ["d", "e"]
