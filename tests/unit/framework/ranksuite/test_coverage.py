"""Coverage mode without a lab: switching it on, the wrapped rank command, the host probe (scripted and in a
real local shell), the one clear error for a host without coverage, .gcda discovery and unpacking, the
combine's .coveragerc, data-file discovery, and finish() combining synthetic rank data with remote paths."""

from __future__ import annotations

import configparser
import io
import json
import re
import stat
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from framework.config.effective import EnvConfig
from framework.errors import MultiHostError, UsageError
from framework.hosts import Cluster, Host
from framework.launch import Target
from framework.ranksuite import coverage as fc
from framework.testing.fake import FakeTransport
from framework.transport.local import LocalTransport
from tests.support.builders import make_env

REPO = Path(__file__).resolve().parents[4]
RANK_TREE = REPO / "suites" / "cam" / "rank"
STANDIN = REPO / "standin" / "umdk_cam_op_lib"


# -- switching it on ------------------------------------------------------------------
@pytest.mark.parametrize(("option", "environ", "on"), [
    (False, {}, False),
    (True, {}, True),
    (False, {"ENABLE_COV": "1"}, True),
    (False, {"ENABLE_COV": " yes "}, True),
    (False, {"ENABLE_COV": "0"}, False),
    (False, {"ENABLE_COV": ""}, False),
])
def test_requested_by_option_or_enable_cov(option, environ, on):
    assert fc.requested(option, environ) is on


def test_requested_without_coverage_here_is_a_usage_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "coverage" else real(name, *a))
    assert fc.requested(False, {}) is False  # off: nothing to check
    with pytest.raises(UsageError, match=r"pip install 'coverage>=7.4'"):
        fc.requested(False, {"ENABLE_COV": "1"})


# -- the rank command ---------------------------------------------------------------------
def test_wrap_target_runs_pytest_under_coverage_with_a_per_rank_data_file():
    t = fc.wrap_target(Target(module="pytest", args=("/w/suites/ab/test_x.py", "--junitxml=rank{rank}.xml")),
                       ["/w/suites/ab", "umdk_cam_op_lib"])
    assert t.python_args() == [
        "-m", "coverage", "run", "--parallel-mode", "--data-file=coverage-rank{rank}.dat",
        "--source=/w/suites/ab,umdk_cam_op_lib", "-m", "pytest", "/w/suites/ab/test_x.py",
        "--junitxml=rank{rank}.xml"]


def test_wrap_target_keeps_a_script_target_and_rejects_commas():
    t = fc.wrap_target(Target(script="/w/t.py", args=("a",)), ["/w"])
    assert t.python_args()[-2:] == ["/w/t.py", "a"] and t.module == "coverage"
    with pytest.raises(UsageError, match="commas"):
        fc.wrap_target(Target(module="pytest"), ["/w/a,b"])


def test_the_rank_wrapper_substitution_gives_each_rank_its_own_file():
    arg = fc.data_file_arg()
    assert arg.replace("{rank}", "7") == "--data-file=coverage-rank7.dat"
    # what launch.FETCH_PATTERNS brings back from the run folder
    from fnmatch import fnmatch

    from framework.launch import FETCH_PATTERNS

    assert any(fnmatch("coverage-rank7.dat.host2.4242.XaBcDe", p) for p in FETCH_PATTERNS)


# -- the probe --------------------------------------------------------------------------------
def test_probe_argv_sets_up_the_rank_environment_then_runs_the_interpreter():
    argv = fc.probe_argv("/w/venv/bin/python", cann_set_env="/c/set_env.sh",
                         vendor_set_env="/o/vendors/CAM/bin/set_env.bash", env={"PYTHONPATH": "/x y"})
    assert argv[:2] == ["bash", "-c"]
    assert argv[2].startswith(". /c/set_env.sh && . /o/vendors/CAM/bin/set_env.bash && "
                              'case ":${LD_LIBRARY_PATH:-}:" in *:/o/vendors/CAM/op_api/lib:*|')
    assert " ;; esac && export PYTHONPATH='/x y' && exec /w/venv/bin/python -c " in argv[2]
    assert argv[2].endswith(" umdk_cam_op_lib")


@pytest.mark.parametrize(("stdout", "rc", "version", "problem", "op_lib"), [
    ("@@cov 7.17.5\n@@oplib /w/venv/lib/python3.11/site-packages/umdk_cam_op_lib\n", 0, "7.17.5", None,
     "/w/venv/lib/python3.11/site-packages/umdk_cam_op_lib"),
    ("@@nocov ModuleNotFoundError: No module named 'coverage'\n", 0, None,
     "ModuleNotFoundError: No module named 'coverage'", None),
    ("@@cov 6.5.0\n", 0, None, "coverage 6.5.0 is older than 7.4", None),
    ("@@cov 7.4.0b1\n", 0, "7.4.0b1", None, None),
    ("", 127, None, "the probe failed (exit status 127): bash: /nope: No such file", None),
])
def test_parse_probe(stdout, rc, version, problem, op_lib):
    p = fc.parse_probe("h", "/py", "/opp", "CAM", rc, stdout, "bash: /nope: No such file\n")
    assert (p.version, p.problem, p.op_lib, p.ok) == (version, problem, op_lib, problem is None)


def _env(tmp_path: Path, hosts: list[str], **spec_kw) -> EnvConfig:
    return make_env({h: dict(workdir=str(tmp_path / h / "wd"), python=sys.executable,
                             install_path=str(tmp_path / h / "opp"), **spec_kw) for h in hosts})


def _fake_cluster(env: EnvConfig, outputs: dict[str, str]) -> tuple[Cluster, dict[str, FakeTransport]]:
    fakes = {}
    for h, out in outputs.items():
        f = FakeTransport(h)
        f.on(re.compile(r"^cat -- .*deploy-state\.json$"),
             stdout=json.dumps({"interpreter": f"/{h}/venv/bin/python", "install_path": "/opp", "vendor": "CAM"}))
        f.on(re.compile(r"^bash -c "), stdout=out)
        fakes[h] = f
    return Cluster([Host(h, f, spec=env.hosts[h]) for h, f in fakes.items()]), fakes


def test_a_host_without_coverage_fails_once_with_one_error_naming_it(tmp_path):
    env = _env(tmp_path, ["host1", "host2", "host3"])
    cluster, fakes = _fake_cluster(env, {"host1": "@@cov 7.6.1\n",
                                         "host2": "@@nocov ModuleNotFoundError: No module named 'coverage'\n",
                                         "host3": "@@cov 7.6.1\n"})
    cov = fc.RankCoverage(env, cluster, tmp_path / "report")
    with pytest.raises(fc.CoverageUnavailable) as exc:
        cov.prepare(Target(module="pytest"), ["host1", "host2", "host3"], "/w/suites/ab", RANK_TREE)
    text = str(exc.value)
    assert "it is not usable on host2: /host2/venv/bin/python: ModuleNotFoundError: No module named 'coverage'" in text
    assert "host1" not in text and "host3" not in text and exc.value.problems.keys() == {"host2"}
    calls = sum(len(f.calls) for f in fakes.values())
    # the next launch on host2 fails the same way without probing again; one without it runs
    with pytest.raises(fc.CoverageUnavailable, match="not usable on host2"):
        cov.prepare(Target(module="pytest"), ["host1", "host2"], "/w/suites/ab", RANK_TREE)
    assert cov.prepare(Target(module="pytest"), ["host3"], "/w/suites/ab", RANK_TREE).module == "coverage"
    assert sum(len(f.calls) for f in fakes.values()) == calls


def test_several_hosts_without_coverage_are_listed_in_the_one_error(tmp_path):
    env = _env(tmp_path, ["host1", "host2"])
    cluster, _ = _fake_cluster(env, {"host1": "@@cov 5.5\n", "host2": ""})
    with pytest.raises(fc.CoverageUnavailable) as exc:
        fc.RankCoverage(env, cluster, tmp_path).check(["host1", "host2"])
    text = str(exc.value)
    assert "not usable on 2 hosts (host1, host2):" in text
    assert "\n  host1: /host1/venv/bin/python: coverage 5.5 is older than 7.4" in text
    assert "\n  host2: /host2/venv/bin/python: the probe failed (exit status 0)" in text


def test_an_unreachable_host_is_not_reported_as_missing_coverage(tmp_path):
    from framework.errors import HostUnreachable

    env = _env(tmp_path, ["host1"])
    f = FakeTransport("host1")
    f.connect_error = HostUnreachable("host1", "connect timed out")
    cov = fc.RankCoverage(env, Cluster([Host("host1", f, spec=env.hosts["host1"])]), tmp_path)
    with pytest.raises(MultiHostError, match="connect timed out"):
        cov.check(["host1"])
    assert cov.probes == {}  # probed again once the host is back


def test_prepare_wraps_and_records_where_the_tree_landed(tmp_path):
    env = _env(tmp_path, ["host1"])
    cluster, _ = _fake_cluster(env, {"host1": "@@cov 7.6.1\n@@oplib /v/site-packages/umdk_cam_op_lib\n"})
    cov = fc.RankCoverage(env, cluster, tmp_path / "report")
    t = cov.prepare(Target(module="pytest", args=("x",)), ["host1"], "/w/suites/0123456789abcdef/", RANK_TREE)
    assert "--source=/w/suites/0123456789abcdef,umdk_cam_op_lib" in t.args
    assert fc.recorded_trees(tmp_path / "report") == [("/w/suites/0123456789abcdef", RANK_TREE)]
    assert cov.probes["host1"].op_lib == "/v/site-packages/umdk_cam_op_lib"


def _local_host(name: str, env: EnvConfig) -> Host:
    return Host(name, LocalTransport(name), spec=env.hosts[name], command_timeout=60)


def test_probe_in_a_real_shell_finds_coverage_and_a_missing_one(tmp_path):
    env = _env(tmp_path, ["good", "bad"])
    # "bad" was deployed with an interpreter whose site-packages (and so coverage) is out of reach
    noside = tmp_path / "python-nosite"
    noside.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    noside.chmod(noside.stat().st_mode | stat.S_IXUSR)
    wd = Path(env.hosts["bad"].workdir)
    wd.mkdir(parents=True)
    (wd / "deploy-state.json").write_text(json.dumps({"interpreter": str(noside)}))
    cluster = Cluster([_local_host("good", env), _local_host("bad", env)])
    cov = fc.RankCoverage(env, cluster, tmp_path / "report")
    with pytest.raises(fc.CoverageUnavailable, match=rf"not usable on bad: {re.escape(str(noside))}: "
                                                     r"ModuleNotFoundError: No module named 'coverage'"):
        cov.check(["good", "bad"])
    good = cov.probes["good"]
    assert good.ok and fc.version_tuple(good.version or "") >= (7, 4)
    assert good.interpreter == sys.executable and good.install_path == env.hosts["good"].install_path


# -- gcov data --------------------------------------------------------------------------------
def test_gcda_roots_cover_the_vendor_tree_and_the_op_library_in_site_packages():
    p = fc.HostProbe("h", "/py", "/o p", "CAM", "7.6", None, "/v/site-packages/umdk_cam_op_lib")
    assert fc.gcda_roots(p) == ["'/o p/vendors/CAM'", "/v/site-packages/umdk_cam_op_lib*"]
    assert fc.gcda_roots(fc.HostProbe("h", "/py", "/opp/", None)) == ["/opp/vendors"]


def test_gcda_are_found_packed_fetched_and_unpacked_from_a_host(tmp_path):
    env = _env(tmp_path, ["h1", "h2"])
    site = tmp_path / "h1" / "venv" / "site-packages"
    (site / "umdk_cam_op_lib").mkdir(parents=True)
    wanted = [Path(env.hosts["h1"].install_path) / "vendors" / "CAM" / "op_kernel" / "k.gcda",
              site / "umdk_cam_op_lib" / "_C.gcda", site / "umdk_cam_op_lib.libs" / "libx.gcda"]
    for i, p in enumerate(wanted):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"adcg" + bytes([i]))
    (site / "other_pkg").mkdir()
    (site / "other_pkg" / "o.gcda").write_bytes(b"not ours")
    (Path(env.hosts["h1"].install_path) / "vendors" / "CAM" / "op_kernel" / "k.gcno").write_bytes(b"notes")
    for h in ("h1", "h2"):
        Path(env.hosts[h].workdir).mkdir(parents=True)
    cov = fc.RankCoverage(env, Cluster([_local_host("h1", env), _local_host("h2", env)]), tmp_path / "report")
    cov.probes["h1"] = fc.HostProbe("h1", sys.executable, env.hosts["h1"].install_path, "CAM", "7.6", None,
                                    str(site / "umdk_cam_op_lib"))
    cov.probes["h2"] = fc.HostProbe("h2", sys.executable, env.hosts["h2"].install_path, None, "7.6")
    assert cov.collect_gcov(["h1", "h2"]) == {"h1": 3, "h2": 0}
    gcov = tmp_path / "report" / "h1" / "gcov"
    for i, p in enumerate(wanted):
        assert (gcov / str(p).lstrip("/")).read_bytes() == b"adcg" + bytes([i])
    assert sorted(q.name for q in gcov.rglob("*") if q.is_file()) == ["_C.gcda", "k.gcda", "libx.gcda"]
    assert not (tmp_path / "report" / "h2").exists()
    assert list(Path(env.hosts["h1"].workdir).iterdir()) == []  # the archive on the host is gone
    assert fc.gcda_counts(tmp_path / "report") == {"h1": 3}


def test_unpack_gcda_keeps_only_gcda_files_inside_the_destination(tmp_path):
    tgz = tmp_path / "x.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        for name, data in (("opt/a.gcda", b"a"), ("../evil.gcda", b"e"), ("/abs.gcda", b"b"), ("opt/b.txt", b"t")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("opt/l.gcda")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    out = fc.unpack_gcda(tgz, tmp_path / "dest")
    assert out == [tmp_path / "dest" / "opt" / "a.gcda"]
    assert not (tmp_path / "evil.gcda").exists()


def test_a_failing_gcov_fetch_is_logged_not_raised(tmp_path, caplog):
    env = _env(tmp_path, ["h1"])
    f = FakeTransport("h1").on(re.compile(r"^set -- "), rc=2, stdout="@@gcda 2\n", stderr="tar: disk full\n")
    f.on(re.compile(r"^rm -f -- "))
    cov = fc.RankCoverage(env, Cluster([Host("h1", f, spec=env.hosts["h1"])]), tmp_path)
    cov.probes["h1"] = fc.HostProbe("h1", "/py", "/opp", "CAM", "7.6")
    assert cov.collect_gcov(["h1"]) == {}
    assert "h1: gcov data not fetched" in caplog.text and "packing 2 .gcda file(s) failed" in caplog.text


# -- combining ---------------------------------------------------------------------------------
def test_rc_text_maps_each_tree_and_the_op_library():
    text = fc.rc_text([("/var/tmp/camit/suites/0123456789abcdef/", Path("/src/suites/cam/rank"))],
                      Path("/src/standin/umdk_cam_op_lib"))
    cp = configparser.ConfigParser(interpolation=None)
    cp.read_string(text)
    assert cp.get("paths", "tree1").split() == ["/src/suites/cam/rank/", "/var/tmp/camit/suites/0123456789abcdef/",
                                                 "*/suites/0123456789abcdef/"]
    assert cp.get("paths", "umdk_cam_op_lib").split() == ["/src/standin/umdk_cam_op_lib/", "*/umdk_cam_op_lib/"]
    assert cp.getboolean("report", "ignore_errors")
    assert cp.get("run", "source") == "/src"
    assert "umdk_cam_op_lib" not in fc.rc_text([], None).split("[report]")[0]


def test_rc_text_aliases_map_remote_paths_as_coverage_reads_them(tmp_path):
    from coverage.config import read_coverage_config
    from coverage.files import PathAliases

    rc = tmp_path / "rc"
    rc.write_text(fc.rc_text([("/var/tmp/camit/cov/suites/0123456789abcdef", RANK_TREE)], STANDIN))
    config = read_coverage_config(config_file=str(rc), warn=lambda m: None)
    aliases = PathAliases()
    for paths in config.paths.values():
        for pattern in paths[1:]:
            aliases.add(pattern, paths[0])
    assert aliases.map("/var/tmp/camit/cov/suites/0123456789abcdef/test_prefill_rank.py") == \
        str(RANK_TREE / "test_prefill_rank.py")
    assert aliases.map("/real/workdir/suites/0123456789abcdef/camcheck.py") == str(RANK_TREE / "camcheck.py")
    assert aliases.map("/w/venv/lib/python3.11/site-packages/umdk_cam_op_lib/prefill.py") == str(STANDIN / "prefill.py")
    # another tree's files are not taken for this one's
    assert aliases.map("/var/tmp/camit/cov/suites/ffffffffffffffff/test_prefill_rank.py").startswith("/var/tmp")


def test_data_files_are_found_under_every_host_and_launch(tmp_path):
    for rel in ("host1/L1/coverage-rank0.dat.h.1.x", "host2/L1/coverage-rank3.dat.h.2.y",
                "host1/L2/coverage-rank0.dat", "host1/L1/rank0.log", "host1/L1/coverage-gcda-host1.tgz",
                "coverage/.coverage", ".trash/coverage-rank9.dat"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    assert [p.relative_to(tmp_path).as_posix() for p in fc.data_files(tmp_path)] == [
        "host1/L1/coverage-rank0.dat.h.1.x", "host1/L2/coverage-rank0.dat", "host2/L1/coverage-rank3.dat.h.2.y"]
    assert fc.data_files(tmp_path / "missing") == []


def test_summary_line():
    assert fc.summary_line(75, 100, 3, 8, 4, 1, "/r/coverage/index.html", {"host2": 2}) == (
        "coverage: 75.0% (75/100 lines) in 3 file(s) from 8 rank data file(s) on 4 host(s), 1 file(s) without "
        "local source left out -> /r/coverage/index.html; gcov: 2 .gcda file(s) from host2 in <host>/gcov/")


def _statements(path: Path, n: int = 3) -> list[int]:
    """Line numbers of the first top-level statements of a file (what an import executes)."""
    import ast

    return [node.lineno for node in ast.parse(path.read_text()).body[:n]]


def _rank_data(path: Path, lines: dict[str, list[int]]) -> None:
    from coverage import CoverageData

    data = CoverageData(basename=str(path))
    data.add_lines(lines)
    data.write()


def test_finish_combines_remote_rank_data_onto_this_checkout(tmp_path):
    root = tmp_path / "run"
    remote_tree = "/var/tmp/camit/cov/suites/0123456789abcdef"
    site = "/var/tmp/camit/cov/venv/lib/python3.11/site-packages/umdk_cam_op_lib"
    (root / fc.TREES_DIR).mkdir(parents=True)
    (root / fc.TREES_DIR / "0123456789abcdef.json").write_text(json.dumps({"remote": remote_tree,
                                                                           "local": str(RANK_TREE)}))
    for host, rank in (("host1", 0), ("host2", 2)):
        d = root / host / "run-prefill1"
        d.mkdir(parents=True)
        _rank_data(d / f"coverage-rank{rank}.dat.{host}.1.a", {
            f"{remote_tree}/test_prefill_rank.py": _statements(RANK_TREE / "test_prefill_rank.py"),
            f"{site}/prefill.py": _statements(STANDIN / "prefill.py"),
            "/elsewhere/unknown.py": [1],
        })
    line = fc.finish(root)
    assert line.startswith("coverage: ") and "from 2 rank data file(s) on 2 host(s)" in line, line
    assert "1 file(s) without local source left out" in line
    assert line.endswith(f"-> {root / 'coverage' / 'index.html'}")
    assert (root / "coverage" / "index.html").exists() and not (root / fc.RC_FILE).exists()
    classes = {c.get("filename"): c for c in ET.parse(root / "coverage.xml").getroot().iter("class")}
    assert set(classes) == {"suites/cam/rank/test_prefill_rank.py", "standin/umdk_cam_op_lib/prefill.py"}
    assert [e.text for e in ET.parse(root / "coverage.xml").getroot().iter("source")] == [str(REPO)]
    assert all(float(c.get("line-rate", 0)) > 0 for c in classes.values())
    # the rank data files stay as evidence
    assert len(fc.data_files(root)) == 2


def test_finish_without_data_or_without_sources_says_so(tmp_path):
    assert fc.finish(tmp_path).startswith("coverage: no rank coverage data in the run folder")
    d = tmp_path / "host1" / "L"
    d.mkdir(parents=True)
    _rank_data(d / "coverage-rank0.dat.x", {"/far/away/x.py": [1]})
    assert fc.finish(tmp_path).startswith("coverage: none of the 1 measured file(s) has its source in this checkout")


def test_finish_never_raises(tmp_path):
    d = tmp_path / "host1" / "L"
    d.mkdir(parents=True)
    (d / "coverage-rank0.dat.x").write_text("not a database")
    line = fc.finish(tmp_path)
    assert line.startswith("coverage: ")
    assert not (tmp_path / fc.RC_FILE).exists()


ENV = """\
host_info:
  node1:
    manage_nic: {name: eth0, ip: 192.0.2.11}
launch: {backend: gloo}
"""


@pytest.mark.parametrize(("args", "environ", "on"), [(["--cov-ranks"], "", True), ([], "1", True), ([], "", False)])
def test_the_plugin_switches_coverage_mode_and_prints_the_line(pytester, monkeypatch, args, environ, on):
    env = pytester.makefile(".yaml", test_env=ENV)
    pytester.makepyfile("def test_x(camit):\n    assert camit.cov_ranks is " + str(on) + "\n")
    monkeypatch.setenv("ENABLE_COV", environ)
    res = pytester.runpytest_inprocess("--env", str(env), "--report-dir", str(pytester.path / "r"),
                                       "-p", "no:cacheprovider", *args)
    res.assert_outcomes(passed=1)
    lines = [ln for ln in res.outlines if ln.startswith("coverage: ")]
    assert lines == (["coverage: no rank coverage data in the run folder (no covered launch ran)"] if on else [])


def test_coverage_mode_without_an_env_is_inert(pytester, monkeypatch):
    pytester.makepyfile("def test_x(camit):\n    assert camit.cov_ranks is False\n")
    monkeypatch.setenv("ENABLE_COV", "1")
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--cov-ranks").assert_outcomes(passed=1)
