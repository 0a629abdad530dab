"""Deploy on the emulated Ascend lab: platform-named .run packages and the vendor environment.

An old-template package (its set_env.bash leaves ``<vendor>/op_api/lib`` off LD_LIBRARY_PATH) deploys, passes
verify and runs an op on a rank; a ``.run`` named for another SoC is refused before anything is sent, naming host,
file and mismatch. The lab is named by CAMIT_NPU_LAB_ENV (see test_ascend_lab.py); each test deploys into its own
workdir, so the lab's other users are not disturbed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]

OP = textwrap.dedent("""\
    import os
    import torch, torch_npu  # noqa: F401
    import umdk_cam_op_lib as cam

    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    topk = torch.tensor([[0, 1], [2, 3]], dtype=torch.int64).npu()
    per_expert, _ = cam.get_dispatch_layout(topk, 4, 1)
    print("OP-OK", per_expert.cpu().tolist(), os.environ["LD_LIBRARY_PATH"].split(":")[0], flush=True)
""")


def run(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          stdin=subprocess.DEVNULL)


def built_env(src: Path, tmp: Path, workdir: str, *extra: str) -> tuple[Path, dict[str, Any]]:
    out = tmp / "art"
    proc = run("-m", "framework.artifacts", "build", "--out", str(out), "--env-in", str(src), "--env-out",
               str(tmp / "built.yaml"), "--json", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = yaml.safe_load((tmp / "built.yaml").read_text())
    doc["defaults"]["workdir"] = workdir
    env = tmp / "env.yaml"
    env.write_text(yaml.safe_dump(doc, sort_keys=False))
    return env, json.loads(proc.stdout)


def test_an_old_template_package_deploys_and_its_op_finds_libcust_opapi(npu_lab_env_path, tmp_path):
    workdir = "/var/tmp/camit/deploy-old-template"
    env, paths = built_env(npu_lab_env_path, tmp_path, workdir, "--template", "old")
    assert Path(paths["run"]).name.startswith("CAM_ascend910_93_")
    proc = run("-m", "framework.cli", "deploy", "--env", str(env), "--hosts", "host1",
               "--report-dir", str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    script = tmp_path / "op.py"
    script.write_text(OP)
    proc = run("-m", "framework.cli", "run", "--env", str(env), "--hosts", "host1", "--nproc-per-node", "1",
               "--timeout", "120", "--report-dir", str(tmp_path / "r"), "--", str(script))
    out = proc.stdout + "".join(p.read_text(errors="replace") for p in (tmp_path / "r").rglob("rank*.log"))
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    assert "OP-OK [1, 1, 1, 1]" in out, out[-3000:]
    assert f"{workdir}/opp/vendors/CAM/op_api/lib" in out, out[-3000:]


def test_a_run_for_another_soc_is_refused_naming_host_file_and_mismatch(npu_lab_env_path, tmp_path):
    env, paths = built_env(npu_lab_env_path, tmp_path, "/var/tmp/camit/deploy-mismatch", "--soc", "ascend910b",
                           "--only", "run")
    name = Path(paths["run"]).name
    proc = run("-m", "framework.cli", "deploy", "--env", str(env), "--hosts", "host1",
               "--report-dir", str(tmp_path / "d"))
    assert proc.returncode != 0, proc.stdout
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    assert ("host1: FAILED at match: deploy step 'match' failed: no .run package for this host "
            "(soc ascend910_93") in text, text
    assert f"{name}: soc ascend910b (host: ascend910_93)" in text, text
    manifest = json.loads(next((tmp_path / "d").rglob("deploy-manifest.json")).read_text())
    assert manifest["hosts"]["host1"]["step"] == "match" and not manifest["hosts"]["host1"].get("artifacts")


@pytest.fixture(autouse=True)
def _no_stray_artifacts(tmp_path):
    yield
    shutil.rmtree(tmp_path / "art", ignore_errors=True)
