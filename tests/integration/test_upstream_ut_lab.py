"""The real upstream CAM unit tests (umdk's ``test/cam/ut``), unmodified, pass against both op libraries on the
emulated A3 lab: the stand-in (``standin/``) and the clean-room library (``tests/cleanroom_cam/``).

The project never holds upstream's test files: the checkout comes, at run time, from ``CAMIT_UMDK_CHECKOUT`` (a
umdk working tree) or else from ``git archive HEAD test/cam/ut`` of ``CAMIT_UMDK_REPO`` (a umdk git repository,
bare or not). Without either the test is skipped, naming both: it is opt-in, as upstream's cases are heavy on a
small controller (16 ranks for the prefill file, H 7168 for the fused one: minutes on two cores), more than
``make test``'s lab pass can take. The lab is CAMIT_NPU_LAB_ENV.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.support.ascend_lab import CLEANROOM, npu_lab_lock, run, suite_env

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]
#: where the machine this test was written on keeps a umdk snapshot (a bare repository), named in the skip
EXAMPLE_REPO = "/work/.mirror/openeuler-mirror+umdk/repo"
UT = "test/cam/ut"


def upstream_checkout(dest: Path) -> Path:
    """A tree holding upstream's ``test/cam/ut`` as upstream has it, or a skip naming what is missing."""
    given = os.environ.get("CAMIT_UMDK_CHECKOUT")
    if given:
        if not (Path(given) / UT).is_dir():
            pytest.fail(f"CAMIT_UMDK_CHECKOUT={given}: no {UT} there")
        return Path(given)
    given = os.environ.get("CAMIT_UMDK_REPO")
    if not given:
        pytest.skip("upstream's test/cam/ut is opt-in: set CAMIT_UMDK_CHECKOUT (a umdk checkout) or CAMIT_UMDK_REPO "
                    f"(a umdk git repository, e.g. {EXAMPLE_REPO})")
    repo = Path(given)
    if not repo.is_dir():
        pytest.fail(f"CAMIT_UMDK_REPO={given}: no such repository")
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", "HEAD", UT],
                             capture_output=True, timeout=60, check=False)
    assert archive.returncode == 0, archive.stderr.decode(errors="replace")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=60)
    return dest



@pytest.fixture
def a3_lab(npu_lab_env_path: Path) -> tuple[Path, None, str]:
    """The emulated A3 lab's env file, as ``_suite_env`` takes it."""
    return npu_lab_env_path, None, ""

@pytest.mark.parametrize("library", ["standin", "cleanroom"])
def test_the_real_upstream_ut_passes_unmodified_against_both_libraries(a3_lab, tmp_path, library):
    """Every upstream test file at the ranks it needs (16 for the prefill ops, 4 for fused_deep_moe; one A3 host
    holds 16 dies): each passes, and each of its cases passed, none skipped, on every rank."""
    checkout = upstream_checkout(tmp_path / "umdk")
    source = CLEANROOM if library == "cleanroom" else REPO / "standin"

    def workdir(doc: dict[str, Any]) -> None:
        # a workdir of its own each run (see test_injected_faults_lab: the host python is shared across workdirs)
        doc["defaults"]["workdir"] = f"/var/tmp/camit/upstream-ut-{library}-{secrets.token_hex(4)}"

    env = suite_env(a3_lab, tmp_path, workdir, wheel_source=source)
    with npu_lab_lock():
        proc = run("-m", "pytest", "suites/cam/test_upstream.py", "--env", str(env), "--umdk-src", str(checkout),
                   "--report-dir", str(tmp_path / "r"), "-p", "no:cacheprovider", "-q", "-rs", timeout=1800)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    tail = proc.stdout.strip().splitlines()[-1]
    files = sorted(p.relative_to(checkout / UT).as_posix() for p in (checkout / UT).rglob("test_*.py"))
    assert re.search(rf"\b{len(files)} passed", tail) and "skipped" not in tail, (files, tail)
    folder = (tmp_path / "r" / "latest").resolve()
    ranks = list(folder.glob("host*/*/rank*.xml"))
    assert len(ranks) == 16 + 4 * (len(files) - 1), sorted(str(p) for p in ranks)
    for xml in ranks:
        for case in ET.parse(xml).getroot().iter("testcase"):
            assert not [e.tag for e in case if e.tag in ("failure", "error", "skipped")], (xml, case.get("name"))
