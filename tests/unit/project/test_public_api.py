"""``framework`` declares its public API lazily: every name resolves, and ``import framework`` stays cheap."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import framework

ROOT = Path(__file__).resolve().parents[3]

#: the documented public API (docs/internals/core.md, named by framework/__init__.py's docstring);
#: changing it is an API change
DOCUMENTED = {
    "__version__",
    "load", "EnvConfig", "HostSpec", "Secret",
    "Host", "Cluster", "GroupResult", "Result",
    "Command", "Argv", "ShellScript",
    "Lease", "BaseTest",
    "CONTEXT_KEY", "RunContext", "context_of", "resources_of", "record_launch", "min_nodes", "SOC_MARKERS",
    "host_share",
    "FrameworkError", "UsageError", "ConfigError", "LabError", "ArtifactError", "LeaseHeld", "LeaseError",
    "LeaseLost", "HostError", "HostUnreachable", "AuthenticationFailed", "HostKeyError", "TransferError",
    "DeployError", "Cancelled", "CommandError", "CommandFailed", "CommandTimedOut", "MultiHostError",
}
HEAVY = ("paramiko", "pydantic", "rich", "torch", "yaml", "lxml")


def test_all_is_the_documented_set_without_repeats():
    assert len(framework.__all__) == len(set(framework.__all__))
    assert set(framework.__all__) == DOCUMENTED
    assert set(framework._EXPORTS) == DOCUMENTED - {"__version__"}


def test_every_name_is_on_the_page_the_package_docstring_names():
    assert "docs/internals/core.md" in (framework.__doc__ or "")
    page = (ROOT / "docs" / "internals" / "core.md").read_text()
    api = page.split("## The public API", 1)[1].split("\n## ", 1)[0]
    missing = [n for n in DOCUMENTED - {"__version__"} if f"`{n}`" not in api]
    assert missing == []


@pytest.mark.parametrize("name", sorted(DOCUMENTED - {"__version__"}))
def test_every_name_resolves_to_the_object_of_its_module(name):
    value = getattr(framework, name)
    module = importlib.import_module(framework._EXPORTS[name])
    assert value is getattr(module, name)
    assert name in dir(framework)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Hostt'"):
        framework.Hostt  # noqa: B018
    assert not hasattr(framework, "paramiko")


def _modules_after(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter on this checkout; what it left in sys.modules."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    probe = (f"import sys\n{code}\nimport json, framework\n"
             f"print(json.dumps({{'file': framework.__file__, 'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    found = json.loads(out.splitlines()[-1])
    assert isinstance(found, dict), found
    return found


def test_import_framework_imports_no_heavy_dependency():
    got = _modules_after("import framework")
    assert Path(str(got["file"])).resolve() == ROOT / "framework" / "__init__.py"
    assert got["heavy"] == []


def test_the_light_names_stay_light_and_the_probe_sees_a_heavy_one():
    assert _modules_after("from framework import ShellScript, FrameworkError, Result")["heavy"] == []
    heavy = _modules_after("from framework import load")["heavy"]
    assert isinstance(heavy, list) and "pydantic" in heavy  # the check can fail
