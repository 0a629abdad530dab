"""Write the stand-ins' pure-Python wheels with the standard library (no setuptools, no network).

Why: docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any, TypeGuard


def _tomllib() -> ModuleType | None:
    """``tomllib`` where the interpreter has it (3.11+), None on 3.10: mypy checks both paths."""
    try:
        return importlib.import_module("tomllib")
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        return None


#: zip timestamps of every member (1980-01-01, as SOURCE_DATE_EPOCH builds): same input, same sha256
EPOCH = 315532800


class WheelError(Exception):
    """The source cannot be made into a wheel (no pyproject, no version, a package missing)."""


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _version(project: dict[str, Any], tool: dict[str, Any], source: Path) -> str:
    """``project.version``, else the ``attr`` of ``dynamic.version`` (read by ``ast``)."""
    if "version" in project:
        return str(project["version"])
    attr = str(tool.get("dynamic", {}).get("version", {}).get("attr", ""))
    module, _, name = attr.rpartition(".")
    path = source / (module.replace(".", "/") + ".py")
    if not module or not path.is_file():
        raise WheelError(f"{source}/pyproject.toml: no version, and no version attr file {path}")
    return _assigned(path, name)


def _assigns(node: ast.stmt, name: str) -> TypeGuard[ast.Assign]:
    """``name = ...`` (among the targets)."""
    if not isinstance(node, ast.Assign):
        return False
    return any(getattr(t, "id", None) == name for t in node.targets)


def _assigned(path: Path, name: str) -> str:
    """The literal a module assigns to ``name`` at its top level."""
    for node in ast.parse(path.read_text()).body:
        if _assigns(node, name):
            return str(ast.literal_eval(node.value))
    raise WheelError(f"{path}: no {name} = '...'")


def _license(project: dict[str, Any]) -> str:
    """``license`` as text (``{text = ...}`` or a plain string)."""
    lic = project.get("license", "")
    return str(lic.get("text", "")) if isinstance(lic, dict) else str(lic)


def _readme(project: dict[str, Any], source: Path) -> str:
    """The readme's text; "" when there is none."""
    if not project.get("readme"):
        return ""
    readme = source / str(project["readme"])
    return readme.read_text() if readme.is_file() else ""


def _metadata(project: dict[str, Any], version: str, source: Path) -> str:
    fields = [
        ("Metadata-Version", "2.1"),
        ("Name", project["name"]),
        ("Version", version),
        ("Summary", project.get("description", "")),
        ("License", _license(project)),
        ("Requires-Python", project.get("requires-python", "")),
    ]
    fields += [("Requires-Dist", dep) for dep in project.get("dependencies", [])]
    body = _readme(project, source)
    if body:
        fields.append(("Description-Content-Type", "text/markdown"))
    head = "".join(f"{k}: {v}\n" for k, v in fields if v)
    return head + (f"\n{body}" if body else "")


def _members(source: Path, packages: list[str]) -> dict[str, bytes]:
    """Each listed package's modules (setuptools' ``packages``: a package's own ``*.py``)."""
    files = {}
    for package in packages:
        folder = source / package.replace(".", "/")
        if not (folder / "__init__.py").is_file():
            raise WheelError(
                f"{source}/pyproject.toml lists package {package!r}, but {folder} has none"
            )
        for path in sorted(folder.glob("*.py")):
            files[path.relative_to(source).as_posix()] = path.read_bytes()
    return files


def write_wheel(source: Path, out: Path) -> Path:
    """``<name>-<version>-py3-none-any.whl`` of the pure-Python project ``source`` into ``out``."""
    tomllib = _tomllib()
    if tomllib is None:  # pragma: no cover - Python 3.10
        return _pip_wheel(source, out)
    doc = _pyproject(tomllib, source)
    project, tool = doc.get("project", {}), doc.get("tool", {}).get("setuptools", {})
    version = _version(project, tool, source)
    dist = re.sub(r"[-_.]+", "_", project["name"])
    info = f"{dist}-{version}.dist-info"
    packages = list(tool.get("packages", []))
    files = _members(source, packages)
    files[f"{info}/METADATA"] = _metadata(project, version, source).encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: camit-lab\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    tops = sorted({p.split(".")[0] for p in packages})
    files[f"{info}/top_level.txt"] = "".join(f"{t}\n" for t in tops).encode()
    rows = [f"{name},{_digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*rows, f"{info}/RECORD,,"]) + "\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist}-{version}-py3-none-any.whl"
    _write_zip(path, files)
    return path


def _pyproject(tomllib: ModuleType, source: Path) -> dict[str, Any]:
    """The project's pyproject.toml, read."""
    try:
        doc: dict[str, Any] = tomllib.loads((source / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise WheelError(f"{source}/pyproject.toml: {exc}") from None
    return doc


def _write_zip(path: Path, files: dict[str, bytes]) -> None:
    """The members in order, each with the fixed timestamp and mode 0644 (reproducible)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            member = zipfile.ZipInfo(name, time.gmtime(EPOCH)[:6])
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(member, data)


def _pip_wheel(source: Path, out: Path) -> Path:  # pragma: no cover - Python 3.10
    """Python 3.10: this interpreter's setuptools builds it (it must meet the requirement)."""
    before = set(out.glob("*.whl")) if out.is_dir() else set()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            str(source),
            "-w",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    made = sorted(set(out.glob("*.whl")) - before) or sorted(out.glob("*.whl"))
    if proc.returncode != 0 or not made:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise WheelError(f"pip wheel {source} failed (rc={proc.returncode}):\n{tail}")
    return made[-1]
