"""``[project].dependencies`` and the imports of ``framework/`` agree, both ways.

Every declared distribution is imported somewhere under ``framework/`` (none is dead weight), and every
third-party top-level module ``framework/`` imports — at module level, inside a function or under
``TYPE_CHECKING`` alike (``ast``, not an import: lazy imports count) — comes from a declared distribution,
so a fresh ``pip install camit`` has it. Third-party means neither in :data:`sys.stdlib_module_names` nor
``framework`` itself. The only exception is :data:`OPTIONAL`: modules of an optional feature, which must
then be declared in one of ``[project.optional-dependencies]``.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (requires-python): the same parser as a package
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[3]

#: distribution (normalised) → the top-level modules it provides, where that is not its name with ``-`` → ``_``
PROVIDES = {"pyyaml": {"yaml"}, "pytest-xdist": {"xdist"}, "pytest": {"pytest", "_pytest"}}
#: modules imported only by an optional feature, and why it is optional (each must be in an extra)
#: rank programs torchrun runs on the hosts (``camit check --pairs``, ``--heal``'s smoke run, calibration's golden
#: comparison): their torch is the
#: hosts' own, as for any launch target, never imported by the controller
RANK_PROGRAMS = {"framework/launch/pairs_rank.py", "framework/launch/smoke_allreduce.py",
                 "framework/calib/golden_rank.py"}
OPTIONAL = {"coverage": "coverage mode (--cov-ranks): framework.ranksuite.coverage checks it is importable and names "
                        "the extra before the run"}


def dist_name(requirement: str) -> str:
    """``'pytest-xdist[psutil]>=3.5; python_version>"3"'`` → ``'pytest-xdist'`` (PEP 503 normalised)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def modules_of(dist: str) -> set[str]:
    return PROVIDES.get(dist, {dist.replace("-", "_")})


def declared(pyproject: Path = ROOT / "pyproject.toml") -> tuple[set[str], set[str]]:
    """(the dependencies, every optional dependency), as normalised distribution names."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = {dist_name(r) for reqs in project.get("optional-dependencies", {}).values() for r in reqs}
    return {dist_name(r) for r in project["dependencies"]}, optional


def third_party_imports(root: Path = ROOT / "framework") -> dict[str, set[str]]:
    """top-level module → the files under ``root`` importing it, for every module not stdlib nor ``framework``."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "framework":
                    found.setdefault(top, set()).add(path.relative_to(root.parent).as_posix())
    return found


def test_every_dependency_is_imported_by_the_framework():
    deps, _ = declared()
    imported = set(third_party_imports())
    unused = sorted(d for d in deps if not modules_of(d) & imported)
    assert unused == [], f"declared in [project].dependencies but never imported under framework/: {unused}"


def test_every_third_party_import_of_the_framework_is_declared():
    deps, optional = declared()
    provided = {m for d in deps for m in modules_of(d)}
    undeclared = {m: sorted(files - RANK_PROGRAMS) for m, files in third_party_imports().items()
                  if m not in provided and m not in OPTIONAL and files - RANK_PROGRAMS}
    assert undeclared == {}, f"imported under framework/ but not in [project].dependencies: {undeclared}"
    extras = {m for d in optional for m in modules_of(d)}
    assert sorted(m for m in OPTIONAL if m not in extras) == []  # an optional module is in an extra


def test_the_checks_see_lazy_imports_and_a_fake_dependency(tmp_path):
    """The walk finds an import inside a function; an extra declared distribution shows up as unused."""
    pkg = tmp_path / "framework"
    pkg.mkdir()
    (pkg / "m.py").write_text("import os\n\ndef f():\n    import paramiko.client\n    from yaml import safe_load\n")
    assert third_party_imports(pkg) == {"paramiko": {"framework/m.py"}, "yaml": {"framework/m.py"}}
    pyproject = (ROOT / "pyproject.toml").read_text()
    text = pyproject.replace('dependencies = [\n', 'dependencies = [\n    "left-pad>=1.0",\n', 1)
    fake = tmp_path / "pyproject.toml"
    fake.write_text(text)
    deps, _ = declared(fake)
    assert "left-pad" in deps and not modules_of("left-pad") & set(third_party_imports())
    assert dist_name("pytest-xdist[psutil]>=3.5; python_version>'3'") == "pytest-xdist"
    assert dist_name("PyYAML>=6.0") == "pyyaml" and modules_of("pyyaml") == {"yaml"}
