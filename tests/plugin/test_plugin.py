"""The camit pytest plugin in-process (pytester): options, markers, skips with reasons, usage errors.

No host is contacted: these envs point at documentation addresses and no test here asks for a
connection.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from tests.support.plugin_run import TWO_NODE_ENV


@pytest.fixture
def env_file(pytester: pytest.Pytester):
    return pytester.makefile(".yaml", test_env=TWO_NODE_ENV)


def test_requirement_markers_skip_with_the_reason(pytester, env_file):
    pytester.makepyfile(textwrap.dedent("""
        import pytest

        @pytest.mark.ranks(16)
        def test_sixteen(env):
            pass

        @pytest.mark.ranks(4)
        def test_four(env):
            assert len(env.hosts) == 2

        @pytest.mark.nodes(3)
        def test_three_nodes(env):
            pass

        @pytest.mark.soc("ascend910_93")
        def test_a3_only(env):
            pass

        @pytest.mark.a2_test
        def test_a2_marked_runs_on_cpu(env):
            pass
    """))
    result = pytester.runpytest("--env", str(env_file), "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=3)
    result.stdout.fnmatch_lines([
        "*needs 16 ranks; the env has 2 host(s) x 2 rank(s) per node = 4*",
        "*needs 3 nodes; the env has 2*",
        "*needs soc in ('ascend910_93',); the env has ?'cpu'?",
    ])


def test_world_sizes_option_selects(pytester, env_file):
    pytester.makepyfile(textwrap.dedent("""
        import pytest

        @pytest.mark.parametrize("w", [pytest.param(2, marks=pytest.mark.ranks(2)),
                                       pytest.param(4, marks=pytest.mark.ranks(4))])
        def test_w(env, w):
            pass
    """))
    result = pytester.runpytest("--env", str(env_file), "--world-sizes", "4", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*world size 2 not selected (--world-sizes 4)*"])


def test_seed_and_repro_line_in_the_header(pytester, env_file):
    pytester.makepyfile("def test_x(camit):\n    assert camit.seed == 4242\n")
    result = pytester.runpytest("--env", str(env_file), "--random_seed", "4242")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["camit: env *test_env.yaml (2 hosts: node1, node2), backend gloo, seed 4242",
                                 "camit: reproduce with: pytest --env * --random-seed 4242"])


def test_bad_env_is_a_usage_error_without_traceback(pytester):
    bad = pytester.makefile(".yaml", bad_env=TWO_NODE_ENV.replace("192.0.2.12", "10.0.0.300"))
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--env", str(bad))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad_env.yaml: host_info.node2.manage_nic.ip: '10.0.0.300' is not an IPv4 address*"])
    assert "Traceback" not in result.stderr.str()


def test_cluster_fixture_without_env_says_what_to_do(pytester, monkeypatch):
    monkeypatch.delenv("CAMIT_ENV", raising=False)
    pytester.makepyfile("def test_x(cluster):\n    pass\n")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["*this test needs a cluster: pass --env FILE (or set CAMIT_ENV)*"])
    assert result.ret != 0


def test_env_from_environment_variable_and_ini(pytester, env_file, monkeypatch):
    pytester.makepyfile("def test_x(env):\n    assert list(env.hosts) == ['node1', 'node2']\n")
    monkeypatch.setenv("CAMIT_ENV", str(env_file))
    pytester.runpytest().assert_outcomes(passed=1)
    monkeypatch.delenv("CAMIT_ENV")
    pytester.makeini(f"[pytest]\ncamit_env = {env_file}\n")
    pytester.runpytest().assert_outcomes(passed=1)


def test_plugin_is_inert_without_env(pytester, monkeypatch):
    monkeypatch.delenv("CAMIT_ENV", raising=False)
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "camit:" not in result.stdout.str()
    assert not (pytester.path / "reports").exists()


def test_run_folder_holds_junit_and_reports(pytester, env_file):
    pytester.makepyfile("def test_x(env):\n    pass\n")
    result = pytester.runpytest("--env", str(env_file), "--report-dir", "out")
    result.assert_outcomes(passed=1)
    latest = pytester.path / "out" / "latest"
    assert (latest / "junit.xml").exists()
    assert (latest / "manifest.json").exists() and (latest / "index.html").exists()
    from framework.report.junit import validate_junit

    assert validate_junit(latest / "junit.xml") == []
    result.stdout.fnmatch_lines(["*reproduce: pytest --env * --report-dir out * --random-seed *"])


def test_nose_style_hooks_in_a_basetest_are_refused(pytester):
    pytester.makepyfile(textwrap.dedent("""
        from framework.base_test import BaseTest

        class TestOld(BaseTest):
            def setup(self):
                pass

            def test_x(self):
                pass
    """))
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["*TestOld.setup() is nose-style and pytest >= 8.1 never calls it; "
                                 "rename it to setup_method(self, method)*"])


def test_placement():
    from framework.ranksuite.suite import placement

    assert placement(4, 4, 2) == (2, 2)
    assert placement(8, 4, 2) == (4, 2)
    assert placement(2, 4, 2) == (1, 2)
    assert placement(16, 4, 2) == "needs 16 ranks; the env has 4 host(s) x 2 rank(s) per node = 8"
    assert placement(16, 2, 8) == (2, 8)  # A2: two nodes of 8 NPUs
    assert placement(16, 1, 16) == (1, 16)  # one A3 node of 16 dies
    assert isinstance(placement(6, 4, 4), tuple) and placement(6, 4, 4) == (2, 3)
    assert isinstance(placement(7, 3, 2), str)


def test_xdist_workers_drive_disjoint_host_shares(pytester):
    env = pytester.makefile(".yaml", five=textwrap.dedent("""\
        host_info:
          a: {manage_nic: {name: eth0, ip: 192.0.2.1}}
          b: {manage_nic: {name: eth0, ip: 192.0.2.2}}
          c: {manage_nic: {name: eth0, ip: 192.0.2.3}}
          d: {manage_nic: {name: eth0, ip: 192.0.2.4}}
          e: {manage_nic: {name: eth0, ip: 192.0.2.5}}
    """))
    pytester.makepyfile(textwrap.dedent("""
        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_share(camit, i, tmp_path_factory):
            names = camit.host_names()
            out = tmp_path_factory.getbasetemp().parent / f"share-{camit.worker['workerid']}.txt"
            out.write_text(",".join(names))
            (out.parent / f"seed-{camit.worker['workerid']}.txt").write_text(str(camit.seed))
    """))
    result = pytester.runpytest("--env", str(env), "-n", "2", "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(passed=6)
    shares = sorted(p.read_text() for p in pytester.path.parent.rglob("share-gw*.txt"))
    assert shares == ["a,b,c", "d,e"]
    # every worker runs with the controller's seed (the one its repro line prints), not one of its own
    seeds = {p.read_text() for p in pytester.path.parent.rglob("seed-gw*.txt")}
    assert len(seeds) == 1
    result.stdout.fnmatch_lines([f"*--random-seed {seeds.pop()}*"])


LAUNCH_ORDER = textwrap.dedent("""
        import os
        import pytest

        def record(name, tmp_path_factory):
            out = tmp_path_factory.getbasetemp().parent / f"order-{os.environ['PYTEST_XDIST_WORKER']}.txt"
            with open(out, "a") as fh:
                fh.write(name + "\\n")

        @pytest.mark.parametrize("i", range(40))
        def test_cheap(i, tmp_path_factory):
            record(f"cheap{i}", tmp_path_factory)

        @pytest.mark.parametrize("w", [pytest.param(w, marks=pytest.mark.ranks(w)) for w in (4, 8, 16, 32)])
        def test_launch(w, tmp_path_factory):
            record(f"launch{w}", tmp_path_factory)
""")


def _first_tests(pytester: pytest.Pytester, count: int) -> list[list[str]]:
    orders = {p.name: p.read_text().split() for p in pytester.path.parent.rglob("order-gw*.txt")}
    assert len(orders) == 2, orders
    return sorted(o[:count] for o in orders.values())


def test_xdist_workers_both_start_with_the_cluster_launches(pytester, env_file):
    """Launch tests (ranks/nodes markers) collected after many cheap ones go to both workers first, in turns."""
    pytester.makepyfile(LAUNCH_ORDER)
    result = pytester.runpytest("--env", str(env_file), "--ranks-per-node", "32", "-n", "2", "-p", "no:cacheprovider",
                                "-p", "no:benchmark")
    result.assert_outcomes(passed=44)
    # xdist starts every worker with two tests; dealt in turns, the two biggest worlds start side by side
    # (xdist's own blocks gave one worker 32 and 16, the other 8 and 4)
    assert _first_tests(pytester, 2) == [["launch16", "launch4"], ["launch32", "launch8"]]


def test_xdist_worlds_left_out_by_world_sizes_take_no_first_turn(pytester, env_file):
    """--world-sizes 4,8: the skipped 16 and 32 are not sorted first, so each worker starts a real launch."""
    pytester.makepyfile(LAUNCH_ORDER)
    result = pytester.runpytest("--env", str(env_file), "--ranks-per-node", "32", "--world-sizes", "4,8", "-n", "2",
                                "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(passed=42, skipped=2)
    assert _first_tests(pytester, 1) == [["launch4"], ["launch8"]]


def test_collect_only_makes_no_run_folder(pytester, env_file):
    pytester.makepyfile("import pytest\n\n\n@pytest.mark.ranks(4)\ndef test_x(env):\n    pass\n")
    result = pytester.runpytest("--env", str(env_file), "--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*test_x*"])
    assert "camit run" not in result.stdout.str()
    assert not (pytester.path / "reports").exists()
    # the same without --collect-only makes one, so the check above can fail
    pytester.runpytest("--env", str(env_file), "-q", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (pytester.path / "reports" / "latest" / "junit.xml").is_file()


def test_host_shares_without_xdist_are_all_hosts(pytester, env_file):
    pytester.makepyfile("def test_x(camit):\n    assert camit.host_names() == ['node1', 'node2']\n")
    pytester.runpytest("--env", str(env_file)).assert_outcomes(passed=1)


def test_interrupted_line_only_for_a_real_interrupt(pytester, env_file):
    pytester.makepyfile(test_broken="import no_such_module_here\n")
    result = pytester.runpytest_subprocess("--env", str(env_file), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # pytest's word for a collection error
    assert "camit: interrupted" not in result.stderr.str() + result.stdout.str()
    (pytester.path / "test_broken.py").unlink()
    pytester.makepyfile(test_ctrl_c="def test_x():\n    raise KeyboardInterrupt\n")
    result = pytester.runpytest_subprocess("--env", str(env_file), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stderr.fnmatch_lines(["camit: interrupted; every launch was torn down, the report folder is kept"])


# ------------------------------------------------------------------ the CAM suite's worlds, placement, A3-only
REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
CAM_FILES = [f"suites/cam/test_{n}.py" for n in ("abnormal", "fused", "fuzz", "perf", "prefill", "upstream")]


def _npu_env(tmp_path, soc: str, count: int, hosts: int = 2):
    lines = ["defaults:", f"  npu: {{soc: {soc}, count: {count}}}",
             "cann: {set_env: /usr/local/Ascend/cann/set_env.sh}", "launch: {backend: hccl}", "host_info:"]
    for i in range(1, hosts + 1):
        lines += [f"  node{i}:", f"    manage_nic: {{name: eth0, ip: 192.0.2.{10 + i}}}"]
    path = tmp_path / f"{soc}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _suite(tmp_path, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "--report-dir",
                           str(tmp_path / "reports")], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_cam_worlds_cross_nodes_on_the_env(tmp_path):
    """Two A3 nodes of 16: every CAM case also runs at 32 ranks (2 x 16), beside 4, 8 and 16."""
    env = _npu_env(tmp_path, "ascend910_93", 16)
    proc = _suite(tmp_path, "suites/cam/test_fused.py", "suites/cam/test_abnormal.py", "--env", str(env),
                  "--co", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [ln for ln in proc.stdout.splitlines() if "::" in ln and "out_of_range" not in ln]
    assert ids == [f"suites/cam/test_{t}[{w}ranks]" for t in ("fused.py::test_fused_deep_moe",
                                                             "abnormal.py::test_abnormal_inputs")
                   for w in (4, 8, 16, 32)]
    big = _npu_env(tmp_path, "ascend910_93", 16, hosts=4)
    proc = _suite(tmp_path, "suites/cam/test_fused.py", "--env", str(big), "--co", "-q", "--world-sizes", "12")
    assert [ln.split("[")[1] for ln in proc.stdout.splitlines() if "::" in ln] == [
        f"{w}ranks]" for w in (4, 8, 12, 16, 32, 64)]


def test_cam_cases_are_a3_only_skipped_with_the_reason_on_a2(tmp_path):
    """An A2 env (910B hosts): every CAM controller case and the upstream runner skip, none fails."""
    env = _npu_env(tmp_path, "ascend910b", 8)
    checkout = tmp_path / "umdk" / "test" / "cam" / "ut" / "fused_deep_moe"
    checkout.mkdir(parents=True)
    (checkout / "test_fused_deep_moe.py").write_text("def test_x():\n    pass\n")
    proc = _suite(tmp_path, *CAM_FILES, "--env", str(env), "-rs", "--umdk-src", str(tmp_path / "umdk"))
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # 5 cases x worlds 4, 8, 16, the 2 bad-id cases and the upstream file
    assert re.search(r"^=+ 18 skipped in [0-9.]+s =+$", out, re.M), out
    assert re.search(r"^SKIPPED \[18\] \S+: a3_test case; the env's hosts are \['ascend910b'\]$", out, re.M), out


def test_spread_and_nodes_marker_place_a_world_over_more_nodes(pytester, env_file):
    """--spread 2 (or nodes(2)): world 2 on 2 nodes; the size check judges the spread placement."""
    pytester.makepyfile(textwrap.dedent("""
        import pytest
        from framework.plugin.markers import min_nodes

        @pytest.mark.ranks(2)
        def test_two(request, camit):
            assert min_nodes(request.node, camit) == camit.options.spread

        @pytest.mark.ranks(4)
        @pytest.mark.nodes(2)
        def test_four_on_two(request, camit):
            assert min_nodes(request.node, camit) == 2

        @pytest.mark.ranks(1)
        def test_one(env):
            pass
    """))
    result = pytester.runpytest("--env", str(env_file), "--spread", "2", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*cannot split 1 ranks evenly on >= 2 nodes over <= 2 hosts of 2 slots*"])
    result = pytester.runpytest("--env", str(env_file), "--spread", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--spread 0: the number of nodes must be >= 1*"])
