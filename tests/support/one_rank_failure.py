"""A launch where one rank's op is refused while its peers wait for it inside the op's collective (issue 15,
item 9), for the CPU lab (gloo) and the emulated A3 lab (hccl) tests.

:func:`write` makes a controller-side test file and a copy of the real rank-side tree (suites/cam/rank, the
harness under test) with one extra rank file: at world 4, rank 1 passes x as fp32, which the dispatch tiling
refuses (a real refusal of the op, no test hook), while ranks 0, 2, 3 enter the dispatch's count exchange and
wait there for rank 1. Before the harness's bounded agreement the launch hung until the case timeout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TEST = "test_one_rank_refused_rank.py::test_dispatch_refused_on_rank_1_only"
#: the agreement's bound for these launches (CAMIT_AGREE_TIMEOUT), and the case timeout they must beat
AGREE_S, CASE_TIMEOUT_S = 10, 300

RANK_FILE = '''\
import torch
from camref import dispatch_layout, prefill_inputs
from cases import prefill_case


def test_dispatch_refused_on_rank_1_only(cam, seed):
    case = prefill_case(cam.world)
    x, topk, w = prefill_inputs(seed, cam.rank, case)
    ntpe, sti = (torch.from_numpy(a) for a in dispatch_layout(topk, case.experts))
    dtype = torch.float32 if cam.rank == 1 else torch.bfloat16  # refused on rank 1 only (x bf16/fp16)
    cam.ops.moe_dispatch_prefill(cam.to_device(torch.from_numpy(x).to(dtype)), cam.to_device(torch.from_numpy(topk)),
                                 cam.to_device(torch.from_numpy(w)), cam.to_device(ntpe), cam.to_device(sti),
                                 cam.group_ep, cam.rank, cam.world, False)
    cam.sync()


def test_never_reached(cam):
    pass
'''

CONTROLLER_FILE = f'''\
from pathlib import Path

import pytest

from framework.plugin import LAUNCHES_KEY
from framework.ranksuite.suite import RankSuite

TREE = Path(__file__).resolve().parent / "rank"


@pytest.mark.multi_process_test
@pytest.mark.ranks(4)
def test_one_rank_refused(request, camit, cluster, launcher, rank_suite):
    suite = RankSuite(camit.require_env(), cluster, launcher, tree=TREE, slots=camit.options.slots,
                      rank_env={{"CAMIT_SEED": "1", "CAMIT_AGREE_TIMEOUT": "{AGREE_S}",
                                 "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}, case_timeout={CASE_TIMEOUT_S})
    result = suite.run("test_one_rank_refused_rank.py", 4)
    request.node.stash.setdefault(LAUNCHES_KEY, []).append(result.launch)
    result.check()
'''


def write(root: Path) -> Path:
    """The controller test file under ``root`` (its rank tree beside it)."""
    tree = root / "rank"
    shutil.copytree(REPO / "suites" / "cam" / "rank", tree, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "test_one_rank_refused_rank.py").write_text(RANK_FILE)
    ctl = root / "test_one_rank_ctl.py"
    ctl.write_text(CONTROLLER_FILE)
    return ctl


def run(ctl: Path, env: Path, reports: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", str(ctl), "--env", str(env), "--report-dir", str(reports),
                           "-p", "no:cacheprovider", "-q", *extra], cwd=REPO, capture_output=True, text=True,
                          timeout=900)


def check(proc: subprocess.CompletedProcess[str], reports: Path) -> dict[str, Any]:
    """The launch ended in seconds, not the case timeout, and the failure summary names the test and the ranks."""
    out = proc.stdout
    assert proc.returncode == 1, out[-4000:] + proc.stderr[-2000:]
    assert f"after {TEST} rank(s) 0, 2, 3 of 4 did not arrive within {AGREE_S}s of a failure (failed on rank(s) 1)" \
        in out, out[-5000:]
    folder = (reports / "latest").resolve()
    launch = json.loads(next(folder.glob("launch-*.json")).read_text())
    assert isinstance(launch, dict), launch
    assert not launch["timed_out"] and launch["duration"] < CASE_TIMEOUT_S / 3, launch
    assert launch["failure_rank"] == 1 and launch["ranks"]["1"]["exit_code"] == 4, launch
    return launch
