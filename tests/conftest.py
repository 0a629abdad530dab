"""Shared test configuration: pytester for the plugin tests, and the lab fixtures.

Lab fixtures serve tests/integration and tests/faults alike. The lab is brought up by
``make test`` (or ``make lab-up``); another lab is chosen with CAMIT_LAB_NAME and
CAMIT_LAB_ENV. Without one, every test asking for it is skipped with the reason.
An emulated Ascend lab (``python -m framework.lab up --npu a3``) is named by
CAMIT_NPU_LAB_ENV (its env file); ``npu_lab_env`` skips when that is unset.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support.camit_labtools import lab_env_or_skip

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

# A CI that starts `make test` in the background without job control (`cmd &` in a script) hands every
# process SIGINT ignored, and an ignored signal stays ignored across exec: the camit processes these tests
# interrupt as Ctrl-C does would never see it (Python installs no KeyboardInterrupt handler for an ignored
# SIGINT; camit honours the ignore, as nohup'd programs do). A handled signal is reset to the default at
# exec, so Python's own handler here gives every subprocess of the tests a default SIGINT.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# suspect hosts off (framework.suspects) unless a test turns them on: the tests that fail a
# preflight on purpose must not keep the shared lab's hosts out of the tests after them
os.environ.setdefault("CAMIT_SUSPECT_TTL", "0")

#: tests/data holds inputs (a miniature UMDK checkout with its own test files, fixtures), never tests of ours
collect_ignore = ["data"]


#: fixtures that reach a lab; a test asking for one (or living in a ``*_lab.py`` file) is a lab test
LAB_FIXTURES = frozenset({"lab", "lab_env_path", "lab_env", "npu_lab_env_path", "npu_lab_env",
                          "npu_a2_lab_env_path", "env_variant", "cluster"})


def is_lab_test(item: pytest.Item) -> bool:
    return item.path.name.endswith("_lab.py") or not LAB_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every lab test carries the ``lab`` marker, so ``make test`` can run the rest with ``-n 2`` and the lab
    tests, which share the lab hosts' sshd, links, workdirs and core_pattern, one at a time after them."""
    for item in items:
        if is_lab_test(item) and item.get_closest_marker("lab") is None:
            item.add_marker(pytest.mark.lab)


@pytest.fixture(scope="session")
def lab():
    from framework.errors import LabError
    from framework.lab.manage import Lab

    try:
        return Lab.load(name=os.environ.get("CAMIT_LAB_NAME", "camit"))
    except LabError as exc:
        pytest.skip(f"no lab is up ({exc}); run 'make lab-up'")


@pytest.fixture(scope="session")
def lab_env_path(lab) -> Path:
    # absolute: tests hand it to subprocesses that run in other folders
    path = Path(os.environ.get("CAMIT_LAB_ENV", REPO / "env" / "lab.yaml")).resolve()
    if not path.exists():
        pytest.skip(f"{path} missing; run 'make lab-up'")
    return path


@pytest.fixture(scope="session")
def lab_env(lab_env_path):
    from framework.config.effective import load

    return load(lab_env_path)


@pytest.fixture(scope="session")
def npu_lab_env_path() -> Path:
    """The env file of an emulated Ascend lab that is up (CAMIT_NPU_LAB_ENV), absolute."""
    return lab_env_or_skip("CAMIT_NPU_LAB_ENV", "emulated Ascend lab",
                           "python -m framework.lab up --hosts 2 --npu a3 --env-out env/lab-npu.yaml")


@pytest.fixture(scope="session")
def npu_lab_env(npu_lab_env_path):
    from framework.config.effective import load

    return load(npu_lab_env_path)


@pytest.fixture(scope="session")
def npu_a2_lab_env_path() -> Path:
    """The env file of an emulated A2 lab that is up (CAMIT_NPU_A2_LAB_ENV), absolute; ``make test`` brings
    one up (``make a2-lab-up``)."""
    return lab_env_or_skip("CAMIT_NPU_A2_LAB_ENV", "emulated A2 lab",
                           "python -m framework.lab up --hosts 2 --npu a2 --name camita2 --subnet 10.79.0.0/24 "
                           "--env-out env/lab-npu-a2.yaml")


@pytest.fixture
def env_variant(lab_env_path: Path, tmp_path: Path) -> Callable[..., Path]:
    """Write a modified copy of the lab env: ``env_variant(lambda doc: ...)`` → path."""

    def make(change, name: str = "variant.yaml") -> Path:
        doc = yaml.safe_load(lab_env_path.read_text())
        change(doc)
        out = tmp_path / name
        out.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
        return out

    return make


@pytest.fixture
def cluster(lab_env):
    from framework.hosts import Cluster

    with Cluster.from_env(lab_env) as c:
        yield c
