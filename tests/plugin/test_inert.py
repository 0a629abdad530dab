"""The plugin is inert unless camit is used: ``$CAMIT_ENV`` alone makes nothing for unrelated tests (no
run folder, no moved ``--junitxml``, no error for an unset ``${VAR}``); a test using a camit fixture gets
everything. ``--random_seed`` is left to a conftest that registers it (the URMA harness's)."""

from __future__ import annotations

import textwrap

import pytest

ENV = textwrap.dedent("""\
    host_info:
      node1:
        manage_nic: {name: eth0, ip: 192.0.2.11}
        passwd: ${CAMIT_INERT_PW}
      node2:
        manage_nic: {name: eth0, ip: 192.0.2.12}
    launch: {backend: gloo}
""")


@pytest.fixture
def env_file(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CAMIT_INERT_PW", raising=False)
    path = pytester.makefile(".yaml", test_env=ENV)
    monkeypatch.setenv("CAMIT_ENV", str(path))
    return path


def test_camit_env_alone_changes_nothing_for_unrelated_tests(pytester, env_file):
    """An unset ${VAR} in the env, no camit fixture: the tests run as without camit, --junitxml stays put."""
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest("--junitxml", "mine.xml", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "camit:" not in result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "reports").exists()
    assert (pytester.path / "mine.xml").is_file()
    # and without --junitxml: no JUnit written anywhere by camit
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "reports").exists()


def test_camit_env_alone_under_xdist_makes_nothing(pytester, env_file, monkeypatch):
    monkeypatch.setenv("CAMIT_INERT_PW", "pw")
    pytester.makepyfile("import pytest\n\n@pytest.mark.parametrize('i', range(4))\ndef test_plain(i):\n    pass\n")
    result = pytester.runpytest("-n", "2", "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(passed=4)
    assert not (pytester.path / "reports").exists()
    assert "camit:" not in result.stdout.str()


def test_a_camit_test_gets_everything_with_camit_env_alone(pytester, env_file, monkeypatch):
    monkeypatch.setenv("CAMIT_INERT_PW", "pw")
    pytester.makepyfile("def test_x(env):\n    assert len(env.hosts) == 2\n\ndef test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["camit: env *test_env.yaml (2 hosts: node1, node2), backend gloo, seed *",
                                 "*reproduce*"])
    latest = pytester.path / "reports" / "latest"
    for name in ("junit.xml", "manifest.json", "index.html", "cluster.xml"):
        assert (latest / name).is_file(), name
    assert "test_plain" in (latest / "junit.xml").read_text()  # every test, not only camit's


def test_a_camit_test_under_xdist_with_camit_env_alone_gets_the_folder(pytester, env_file, monkeypatch):
    monkeypatch.setenv("CAMIT_INERT_PW", "pw")
    pytester.makepyfile("import pytest\n\n@pytest.mark.parametrize('i', range(4))\ndef test_x(camit, i):\n"
                        "    assert camit.host_names()\n")
    result = pytester.runpytest("-n", "2", "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(passed=4)
    latest = pytester.path / "reports" / "latest"
    assert (latest / "junit.xml").read_text().count("<testcase") == 4
    assert (latest / "manifest.json").is_file()


def test_an_env_error_surfaces_once_when_camit_is_used(pytester, env_file):
    pytester.makepyfile("def test_a(cluster):\n    pass\n\ndef test_b(env):\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("CAMIT_INERT_PW") == 1, err
    assert "test_env.yaml" in err and "Traceback" not in err
    assert not (pytester.path / "reports").exists()


URMA_CONFTEST = textwrap.dedent("""
    import random

    def pytest_addoption(parser):
        parser.addoption("--random_seed", action="store", default=None, help="URMA's own")

    def pytest_configure(config):
        seed = config.getoption("--random_seed")
        random.seed(int(seed) if seed else 7)
""")


def test_a_conftest_that_owns_random_seed_starts_and_gives_the_seed(pytester, monkeypatch):
    monkeypatch.delenv("CAMIT_ENV", raising=False)
    pytester.makeconftest(URMA_CONFTEST)
    env = pytester.makefile(".yaml", plain=ENV.replace("    passwd: ${CAMIT_INERT_PW}\n", ""))
    pytester.makepyfile("def test_x(camit, request):\n    assert request.config.getoption('--random_seed') == '99'\n"
                        "    assert camit.seed == 99\n\ndef test_plain():\n    pass\n")
    result = pytester.runpytest("--random_seed", "99", "--env", str(env), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["camit: env *seed 99*"])
    # the URMA run itself (no env): starts and runs
    pytester.runpytest("--random_seed", "5", "-k", "plain", "-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.parametrize("flag", ["--random-seed", "--random_seed"])
def test_both_seed_spellings_without_a_conftest(pytester, monkeypatch, flag):
    monkeypatch.delenv("CAMIT_ENV", raising=False)
    env = pytester.makefile(".yaml", plain=ENV.replace("    passwd: ${CAMIT_INERT_PW}\n", ""))
    pytester.makepyfile("def test_x(camit):\n    assert camit.seed == 31\n")
    pytester.runpytest("--env", str(env), flag, "31", "-p", "no:cacheprovider").assert_outcomes(passed=1)
