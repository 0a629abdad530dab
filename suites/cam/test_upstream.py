"""Upstream CAM unit tests (``--umdk-src PATH``): ship the checkout's test/cam to the hosts and run
each test file with the rank count it needs, results in the same reports.

Design: docs/internals/cam-suite.md.
"""

from pathlib import Path

import pytest
from camsuite import CAM_MARKS

#: ranks each upstream test directory needs (cam-ops.md §7); others run at 4
UPSTREAM_RANKS = {"fused_deep_moe": 4, "moe_dispatch_combine_prefill": 16}
#: launch env per upstream test directory: the prefill ops need a 4096 MB HCCL buffer (CAM API guide)
UPSTREAM_ENV = {"moe_dispatch_combine_prefill": {"HCCL_BUFFSIZE": "4096"}}


def upstream_files(config):
    src = config.getoption("camit_umdk_src")
    if not src:
        return []
    ut = Path(src) / "test" / "cam" / "ut"
    if not ut.is_dir():
        raise pytest.UsageError(f"--umdk-src {src}: no test/cam/ut in that checkout")
    return sorted(p.relative_to(ut.parent).as_posix() for p in ut.rglob("test_*.py"))


def pytest_generate_tests(metafunc):
    if "upstream_file" not in metafunc.fixturenames:
        return
    files = upstream_files(metafunc.config)
    params = []
    for f in files:
        ranks = next((n for d, n in UPSTREAM_RANKS.items() if f"/{d}/" in f"/{f}"), 4)
        params.append(pytest.param(f, ranks, marks=[pytest.mark.ranks(ranks), *CAM_MARKS], id=f"{f}-{ranks}ranks"))
    if not params:
        params = [pytest.param(None, 0, marks=pytest.mark.skip(reason="no --umdk-src given"), id="none")]
    metafunc.parametrize(("upstream_file", "world"), params)


@pytest.fixture(scope="session")
def upstream_suite(camit, cluster, launcher, rank_suite):
    """The checkout's test/cam as a rank-side tree, on the session's cluster and launcher (after deploy)."""
    from framework.ranksuite import RankSuite

    src = Path(camit.options.umdk_src) / "test" / "cam"
    return RankSuite(camit.require_env(), cluster, launcher, tree=src, slots=camit.options.slots,
                     rank_env={"CAMIT_SEED": str(camit.seed)}, case_timeout=camit.case_timeout,
                     pytest_args=["-s", "-rs"], coverage=rank_suite.coverage, spread=camit.options.spread)


@pytest.mark.multi_process_test
def test_upstream_ut(request, camit, upstream_suite, upstream_file, world):
    from framework import min_nodes, record_launch

    extra = next((e for d, e in UPSTREAM_ENV.items() if f"/{d}/" in f"/{upstream_file}"), {})
    result = upstream_suite.run(upstream_file, world, extra_env=extra,
                                name=Path(upstream_file).stem,
                                min_nodes=min_nodes(request.node, camit))
    record_launch(request.node, result)
    result.check().require_ran()
