"""Test builders: real, validated camit objects from a few keyword arguments, instead of look-alikes.

``make_env`` writes a ``test_env.yaml`` document and loads it with :func:`framework.config.effective.load`,
so what a test gets is the ``EnvConfig`` a user's file gives — defaults resolved, paths normalised,
secrets wrapped — and a test that passes a key the schema forbids fails loudly. ``make_host_spec`` is
one host of such an env; ``make_wheel`` is a wheel with a RECORD that hashes right (``record_digest``);
``local_env`` and ``local_transports`` are a cluster of hosts that are this machine (a workdir each), one of
them down if asked::

    env = make_env(["host1", "host2"], npu={"count": 2, "soc": "ascend910_93"}, workdir="/w")
    spec = make_host_spec("h1", workdir=str(tmp_path / "wd"), python=sys.executable)

Each host gets a distinct management address (``10.0.0.<i>``) unless its keys set one.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.util
import json
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from framework.config import document as schema
from framework.config.effective import EnvConfig, HostSpec, load
from framework.errors import HostUnreachable
from framework.testing.fake import FakeTransport
from framework.transport.base import Transport
from framework.transport.local import LocalTransport

#: the Ascend captures, one copy each: those the emulated tools replay ship in the package
#: (framework/lab/emu/data), the rest are the tests' own (tests/data/ascend)
CAPTURE_FOLDERS = (Path(__file__).resolve().parents[2] / "framework" / "lab" / "emu" / "data",
                   Path(__file__).resolve().parents[1] / "data" / "ascend")


class _Captures:
    """``ASCEND_CAPTURES / name``: the one copy of that capture, wherever it lives (:data:`CAPTURE_FOLDERS`)."""

    def __truediv__(self, name: str) -> Path:
        found = [folder / name for folder in CAPTURE_FOLDERS if (folder / name).is_file()]
        if not found:
            raise FileNotFoundError(f"no Ascend capture {name!r} in {', '.join(map(str, CAPTURE_FOLDERS))}")
        return found[0]


ASCEND_CAPTURES = _Captures()

__all__ = ["ASCEND_CAPTURES", "LOCAL_HOSTS",
           "env_document", "local_env", "local_transports", "make_env", "make_host_spec", "make_wheel",
           "record_digest"]

#: the hosts of :func:`local_env`
LOCAL_HOSTS = ("node1", "node2", "node3")


def local_env(tmp_path: Path, hosts: Sequence[str] = LOCAL_HOSTS) -> EnvConfig:
    """An env whose hosts are this machine: workdir ``tmp_path/<host>`` each, manage NIC ``192.0.2.<i>``, loaded
    from ``tmp_path/env.yaml`` as a user's file is (the lease and suspect marks are written by the real scripts)."""
    lines = ["host_info:"]
    for i, name in enumerate(hosts, 1):
        (tmp_path / name).mkdir(exist_ok=True)
        lines.append(f"  {name}: {{manage_nic: {{name: eth0, ip: 192.0.2.{i}}}, workdir: {tmp_path / name}}}")
    (tmp_path / "env.yaml").write_text("\n".join(lines) + "\n")
    return load(tmp_path / "env.yaml")


def local_transports(down: str | None = None) -> Callable[[HostSpec], Transport]:
    """A transport factory for :func:`local_env`'s hosts: this machine, but ``down``, whose connect times out."""

    def make(spec: HostSpec) -> Transport:
        if spec.name == down:
            fake = FakeTransport(spec.name)
            fake.connect_error = HostUnreachable(spec.name, "connect timed out")
            return fake
        return LocalTransport(spec.name)

    return make

#: HostSpec fields that no key of a host entry sets per host; make_env applies them after loading
_EFFECTIVE_ONLY = {f.name for f in dataclasses.fields(HostSpec)} - set(schema.HostModel.model_fields) - {"name"}


def env_document(
    hosts: Iterable[str] | Mapping[str, Mapping[str, Any]] = ("host1",),
    *,
    npu: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """The ``test_env.yaml`` document (a dict): ``host_info`` from ``hosts`` plus the other sections.

    ``hosts`` is a list of names or name -> that host's keys; ``npu`` goes to ``defaults.npu``;
    ``sections`` are top-level sections (``artifacts``, ``cann``, ``launch``, ``relay``, ...).
    """
    entries = hosts if isinstance(hosts, Mapping) else {name: {} for name in hosts}
    host_info: dict[str, Any] = {}
    for i, (name, keys) in enumerate(entries.items(), 1):
        entry = {k: v for k, v in keys.items() if k not in _EFFECTIVE_ONLY}
        entry.setdefault("manage_nic", {"name": "eth0", "ip": f"10.0.0.{i}"})
        host_info[name] = entry
    doc: dict[str, Any] = {"host_info": host_info}
    if defaults or npu:
        doc["defaults"] = {**(defaults or {}), **({"npu": dict(npu)} if npu else {})}
    doc.update({k: v for k, v in sections.items() if v is not None})
    return doc


def make_env(
    hosts: Iterable[str] | Mapping[str, Mapping[str, Any]] = ("host1",),
    *,
    npu: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    source: str | None = None,
    directory: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    **sections: Any,
) -> EnvConfig:
    """A loaded ``EnvConfig`` for ``hosts`` (see :func:`env_document` for the arguments).

    Relative paths in the document resolve against ``directory`` (default: a temporary directory that
    is gone afterwards). ``source`` replaces the file name errors quote (``lab.yaml: artifacts.wheel: ...``).
    A host's keys may also name effective-only fields (``install_path``): those are set on its
    ``HostSpec`` after loading, as an env whose ``artifacts.install_path`` differs per host would.
    """
    doc = env_document(hosts, npu=npu, defaults=defaults, **sections)
    if directory is not None:
        env = _load(doc, Path(directory), environ)
    else:
        with tempfile.TemporaryDirectory(prefix="camit-env-") as tmp:
            env = _load(doc, Path(tmp), environ)
    if isinstance(hosts, Mapping):
        env = _with_effective(env, hosts)
    if source is not None:
        env = dataclasses.replace(env, source=source)
    return env


def make_host_spec(name: str = "host1", **keys: Any) -> HostSpec:
    """One ``HostSpec`` as :func:`make_env` resolves it: ``keys`` are the host's keys in ``host_info``."""
    return make_env({name: keys}).hosts[name]


def _load(doc: Mapping[str, Any], directory: Path, environ: Mapping[str, str] | None) -> EnvConfig:
    path = directory / "test_env.yaml"
    path.write_text(json.dumps(doc, indent=2) + "\n")  # JSON is YAML
    return load(path, environ)


def _with_effective(env: EnvConfig, hosts: Mapping[str, Mapping[str, Any]]) -> EnvConfig:
    specs = dict(env.hosts)
    for name, keys in hosts.items():
        extra = {k: v for k, v in keys.items() if k in _EFFECTIVE_ONLY}
        if extra:
            specs[name] = dataclasses.replace(specs[name], **extra)
    return dataclasses.replace(env, hosts=MappingProxyType(specs)) if specs != dict(env.hosts) else env


def sample_run():
    """``tests/data/reports/sample_run.py`` (a sample run folder's builders), loaded once per process."""
    name = "camit_report_sample_run"
    if name not in sys.modules:
        sample = Path(__file__).parents[1] / "data" / "reports" / "sample_run.py"
        spec = importlib.util.spec_from_file_location(name, sample)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def record_digest(data: bytes) -> str:
    """A RECORD row's hash of ``data`` (PEP 376/427: ``sha256=`` and the unpadded urlsafe base64 digest)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(out: Path, files: dict[str, bytes], name: str = "demo_pkg", version: str = "1.0", *,
               wheel_version: str = "1.0", purelib: bool = True, record: dict[str, str] | None = None,
               unrecorded: dict[str, bytes] | None = None, executable: tuple[str, ...] = ()) -> Path:
    """A wheel of ``files`` plus its dist-info (METADATA, WHEEL, a RECORD that hashes right) in ``out``;
    ``record`` overrides RECORD rows (member → row), ``unrecorded`` members are put in the zip but not in RECORD."""
    info = f"{name}-{version}.dist-info"
    every = dict(files)
    every[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    every[f"{info}/WHEEL"] = (f"Wheel-Version: {wheel_version}\nGenerator: camit-test\n"
                              f"Root-Is-Purelib: {'true' if purelib else 'false'}\nTag: py3-none-any\n").encode()
    rows = {n: f"{n},{record_digest(d)},{len(d)}" for n, d in every.items()}
    rows.update(record or {})
    rows[f"{info}/RECORD"] = f"{info}/RECORD,,"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, d in {**every, **(unrecorded or {})}.items():
            zi = zipfile.ZipInfo(n)
            zi.external_attr = (0o755 if n in executable else 0o644) << 16
            z.writestr(zi, d)
        z.writestr(f"{info}/RECORD", "\n".join(rows.values()) + "\n")
    return path
