"""A calibration bundle: run the probes on the hosts, keep each answer as a fact and write one
folder (``calibration.json`` plus ``raw/<host>/<key>.txt``), secrets scrubbed.

Design: docs/internals/calibration.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import commands
from framework.calib import golden
from framework.calib.probe import CAM_REFUSALS, HOST_FACTS, TORCH_PROBE, host_script
from framework.deploy.plan import HostLayout
from framework.errors import UsageError
from framework.preflight.probe import Section, plan_probe, split_sections
from framework.records.scrub import Scrubber
from framework.setenv import env_steps

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig, HostSpec
    from framework.hosts import Cluster, Host

SCHEMA = "camit-calibration/1"
BUNDLE_FILE = "calibration.json"
PROFILE = Path(__file__).resolve().parents[1] / "data" / "calibration-profile.json"
_TORCH_MARK = "@@camit-calib@@"
Fact = dict[str, str]
#: characters kept of one fact value (npu-smi info of a 16-die host is ~6,000)
MAX_VALUE = 64 * 1024


def host_facts(host: Host, env: EnvConfig) -> dict[str, Fact]:
    """The :data:`HOST_FACTS` of one host: each section's text (``[exit N]`` added on failure)."""
    homes = plan_probe(host.spec, env).cann_homes if host.spec is not None else []
    set_env = env.cann.set_env if env.cann else None
    result = host.run(host_script(homes, set_env), timeout=120)
    sections = split_sections(result.stdout)
    return {key: {"value": _fact_value(sections.get(section), result.rc),
                  "source": f"{host.name}: {what}"}
            for key, (section, _command, what) in HOST_FACTS.items()}


def _fact_value(sec: Section | None, rc: int | None) -> str:
    """A section's text as its fact's value: ``[exit N]`` added on failure; a section the probe
    never printed says so (``rc``: the probe's exit status)."""
    if sec is None:
        return f"[not answered: the probe exited {rc}]"
    return sec.text if sec.rc == 0 else f"{sec.text}\n[exit {sec.rc}]"


def _torch_probe(spec: HostSpec, env: EnvConfig) -> tuple[commands.ShellScript, str]:
    """The torch probe's script on the host of ``spec`` (CANN's and the CAM vendor's set_env
    sourced first) and the interpreter it runs."""
    layout = HostLayout(spec.workdir.rstrip("/") or "/", spec.install_path)
    py = layout.venv_python if spec.venv else spec.python
    q = commands.quote
    vendor = layout.vendor_set_env()
    src = ""
    if env.cann:
        src = f"[ -f {q(env.cann.set_env)} ] && . {q(env.cann.set_env)} >/dev/null 2>&1; "
    steps = " && ".join(env_steps(None, (), vendor))
    src += f"if [ -f {q(vendor)} ]; then {steps}; fi >/dev/null 2>&1; "
    return commands.ShellScript(f"{src}exec {q(py)} -c {q(TORCH_PROBE)}"), py


def _torch_answer(stdout: str) -> dict[str, str] | None:
    """The probe's values (its marked JSON line, with the refusal checks), None without one."""
    line = next((ln for ln in stdout.splitlines() if ln.startswith(_TORCH_MARK)), None)
    if line is None:
        return None
    values = {str(k): str(v) for k, v in json.loads(line[len(_TORCH_MARK) :]).items()}
    values.update(refusal_checks(values))
    return values


def torch_facts(host: Host, env: EnvConfig) -> dict[str, Fact]:
    """The torch probe's facts, run once as a launch runs ranks: by the deployed interpreter
    (the venv's when the host has one), CANN's set_env and, once deployed, the CAM vendor's
    set_env sourced."""
    assert host.spec is not None
    script, py = _torch_probe(host.spec, env)
    result = host.run(script, env=_hccl_env(env), timeout=300)
    where = f"{host.name}: {py} torch probe"
    values = _torch_answer(result.stdout)
    if values is None:
        tail = (result.stdout + result.stderr)[-2000:]
        return {
            "torch_npu.probe": {"value": f"no answer (exit {result.rc}): {tail}", "source": where}
        }
    return {key: {"value": v, "source": where} for key, v in values.items()}


def _hccl_env(env: EnvConfig) -> dict[str, str]:
    """The HCCL_* variables of ``launch.env``, as a rank sees them (secret values never leave the
    controller here)."""
    return {k: v for k, v in env.launch.env.items() if k.startswith("HCCL_") and isinstance(v, str)}


def refusal_checks(values: dict[str, str]) -> dict[str, str]:
    """Per CAM op: does its refusal name the quantity as the contract does (``yes``, else what)."""
    out = {}
    for op, (entry, words) in CAM_REFUSALS.items():
        text = values.get(f"cam.refusal.{op}", "")
        out[f"cam.refusal.{op}.names_quantity"] = (
            "yes" if words in text else f"no: expected {words!r} ({entry})"
        )
    return out


def collect(cluster: Cluster, env: EnvConfig, *, measure: bool = True) -> dict[str, Any]:
    """The bundle document (not yet scrubbed) of every host of ``cluster``; ``measure``: run the
    fused-vs-golden launch (:mod:`framework.calib.golden`), else its facts say it was skipped."""
    per_host = cluster.map(lambda h: host_facts(h, env)).raise_on_failure().succeeded
    hosts = {name: per_host[name] for name in sorted(per_host)}
    first = cluster[min(hosts)]
    facts = dict(hosts[first.name])
    facts.update(torch_facts(first, env))
    skipped = golden.not_measured("skipped (--no-golden)")
    facts.update(golden.run(env, cluster) if measure else skipped)
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "facts": facts,
        "hosts": hosts,
    }


def bounded(text: str, limit: int = MAX_VALUE) -> str:
    """``text`` cut to its first ``limit`` characters, the cut said (a host's output is data)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters not kept]"


def write(doc: dict[str, Any], out: Path, scrub: Scrubber) -> Path:
    """Write ``doc`` scrubbed and bounded (:data:`MAX_VALUE` per value) into ``out``:
    ``calibration.json`` and ``raw/<host>/<key>.txt``, nothing else (no core, no launch log)."""
    for facts in [doc["facts"], *doc["hosts"].values()]:
        for fact in facts.values():  # scrubbed whole first: a cut never halves a secret
            fact["value"] = bounded(scrub.text(fact["value"]))
            fact["source"] = bounded(scrub.text(fact["source"]))
    for name, facts in doc["hosts"].items():
        raw = out / "raw" / name
        raw.mkdir(parents=True, exist_ok=True)
        for key, fact in facts.items():
            (raw / f"{key}.txt").write_text(fact["value"] + "\n", encoding="utf-8")
            fact["raw"] = f"raw/{name}/{key}.txt"
    path = out / BUNDLE_FILE
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _check_bundle(file: Path, doc: object) -> dict[str, Any]:
    """``doc`` as a bundle; ``UsageError`` naming ``file`` and the key when it is not one of this
    schema."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UsageError(f"{file}: schema: expected {SCHEMA!r}")
    for part in ("facts", "hosts"):
        if not isinstance(doc.get(part), dict):
            raise UsageError(f"{file}: {part}: expected a mapping")
    _check_facts(file, doc["facts"])
    return doc


def _check_facts(file: Path, facts: dict[str, Any]) -> None:
    """Each top-level fact holds a string value; ``UsageError`` naming the first that does not."""
    for key, fact in facts.items():
        if not _is_fact(fact):
            raise UsageError(f"{file}: facts.{key}.value: expected a string")


def _is_fact(fact: object) -> bool:
    return isinstance(fact, dict) and isinstance(fact.get("value"), str)


def load(path: Path) -> dict[str, Any]:
    """A bundle (folder or ``calibration.json``), checked; one error naming the file and key."""
    file = path / BUNDLE_FILE if path.is_dir() else path
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{file}: not a calibration bundle ({exc})") from None
    return _check_bundle(file, doc)


def values(doc: dict[str, Any]) -> dict[str, str]:
    """Fact key → value of a bundle's top-level facts (the profile's form)."""
    return {key: fact["value"] for key, fact in doc["facts"].items()}


def load_profile(path: Path = PROFILE) -> dict[str, str]:
    """The built-in profile: fact key → the value the emulation assumes."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in doc["facts"].items()}
