"""Deploy the CAM ``.run`` package and the ``umdk_cam_op_lib`` wheel to every host.

One step for the suites, the CLI and BaseTest: what a CAM engineer does by hand
per node (copy, ``./CAM_*.run --install-path=<opp>``, ``source set_env.bash``,
``pip install --force-reinstall``), made verified, idempotent and parallel.

Split as the rest of camit: a *pure plan* (artifacts resolved and hashed, remote
paths, every command line, output parsers) and a thin *executor* over
``Cluster``:

1. probe — one round trip per host: which artifact hashes are already staged
   under ``<workdir>/artifacts/<sha256>/``, the recorded install state, free space;
2. transfer — only what is missing; through the pipelined relay chain
   (controller → host1 → host2 → …, each writing while forwarding) when two or
   more hosts need an artifact, else (or on any relay failure, logged) direct
   SFTP push; the sha256 is verified on every host, a bad transfer retried once;
3. install — the ``.run`` with an absolute ``--install-path`` (success line and
   ``vendors/<vendor>/`` required), the wheel into a venv under the workdir built
   on the host's python (``--system-site-packages``), then one bash that sources
   CANN's and the vendor's ``set_env`` and imports the op library for its version;
   the state file is removed first and written last, so a half-installed host is
   never reported as deployed;
4. manifest — per host: artifacts, sha256, how each arrived, install path,
   vendor, installed version, step durations; written as JSON to the run folder.

A redeploy of unchanged artifacts is the probe alone: nothing is sent or reinstalled.
"""

from __future__ import annotations

import glob
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from framework import commands, errors, remote
from framework.errors import ConfigError, DeployError, FrameworkError, HostError, MultiHostError, TransferError
from framework.hosts import Cluster, Host, sha256_file

log = logging.getLogger("camit.deploy")

KINDS = ("run_package", "wheel")
VENDOR = "CAM"
OP_MODULE = "umdk_cam_op_lib"
OPS = ("get_dispatch_layout", "moe_dispatch_prefill", "moe_combine_prefill", "fused_deep_moe")
STATE_VERSION = 1
#: room kept free on a host beyond the artifacts themselves
SPACE_MARGIN = 16 * 1024 * 1024
RELAY_STREAM_CHUNK = 256 * 1024


# -- plan ---------------------------------------------------------------------
@dataclass(frozen=True)
class Artifact:
    """One local file to deploy, identified by content."""

    kind: str
    path: Path
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.path.name


def resolve_artifacts(env: Any, kinds: Sequence[str] = KINDS) -> list[Artifact]:
    """Resolve the env's artifact globs: exactly one file each, hashed.

    Raises ``ConfigError`` naming ``artifacts.<kind>`` when a pattern matches
    nothing or more than one file, or when nothing is configured at all.
    """
    found = []
    for kind in kinds:
        pattern = getattr(env.artifacts, kind)
        if not pattern:
            continue
        matches = sorted(p for p in glob.glob(pattern) if Path(p).is_file())
        if not matches:
            raise ConfigError(env.source, f"artifacts.{kind}", f"{pattern!r} matches no file")
        if len(matches) > 1:
            names = ", ".join(Path(m).name for m in matches)
            raise ConfigError(env.source, f"artifacts.{kind}",
                              f"{pattern!r} matches {len(matches)} files, expected exactly one: {names}")
        path = Path(matches[0])
        suffix = ".whl" if kind == "wheel" else ".run"
        if path.suffix != suffix:
            raise ConfigError(env.source, f"artifacts.{kind}", f"{path.name!r} is not a {suffix} file")
        found.append(Artifact(kind, path, sha256_file(path), path.stat().st_size))
    if not found:
        raise ConfigError(env.source, "artifacts", "neither run_package nor wheel is set: nothing to deploy")
    return found


@dataclass(frozen=True)
class HostPlan:
    """Where everything goes on one host (all paths absolute, POSIX)."""

    host: str
    workdir: str
    python: str
    venv: bool
    install_path: str
    manage_ip: str
    cann_set_env: str | None = None
    soc: str = "cpu"

    @classmethod
    def for_spec(cls, spec: Any, env: Any) -> HostPlan:
        return cls(
            host=spec.name, workdir=spec.workdir.rstrip("/") or "/", python=spec.python, venv=spec.venv,
            install_path=spec.install_path, manage_ip=spec.manage_nic.ip,
            cann_set_env=env.cann.set_env if env.cann else None, soc=spec.npu.soc,
        )

    def stage(self, art: Artifact) -> str:
        return f"{self.workdir}/artifacts/{art.sha256}"

    def remote_path(self, art: Artifact) -> str:
        return f"{self.stage(art)}/{art.name}"

    @property
    def venv_dir(self) -> str:
        return f"{self.workdir}/venv"

    @property
    def interpreter(self) -> str:
        return f"{self.venv_dir}/bin/python" if self.venv else self.python

    @property
    def state_file(self) -> str:
        return f"{self.workdir}/deploy-state.json"

    def bin_path(self, name: str, sha: str) -> str:
        stem, _, ext = name.rpartition(".")
        return f"{self.workdir}/bin/{stem}-{sha[:12]}.{ext}"

    def vendor_set_env(self, vendor: str = VENDOR) -> str:
        return f"{self.install_path}/vendors/{vendor}/bin/set_env.bash"


def expected_state(plan: HostPlan, artifacts: Sequence[Artifact]) -> dict[str, Any]:
    """What the state file must say for the host to count as deployed with ``artifacts``."""
    return {
        "version": STATE_VERSION,
        "artifacts": {a.kind: a.sha256 for a in artifacts},
        "install_path": plan.install_path,
        "interpreter": plan.interpreter,
    }


@dataclass
class Probe:
    have: set[str] = field(default_factory=set)
    state: dict[str, Any] | None = None
    free: int | None = None
    vendor_trees: list[str] = field(default_factory=list)
    interpreter_ok: bool = False
    relay_ok: bool = False


def probe_script(plan: HostPlan, artifacts: Sequence[Artifact], relay_bin: str | None = None) -> str:
    """One shell script answering everything deploy needs to decide, line-tagged."""
    q = commands.quote
    parts = [f"mkdir -p {q(plan.workdir)}"]
    for a in artifacts:
        parts.append(f"[ -f {q(plan.stage(a) + '/.ok')} ] && [ -f {q(plan.remote_path(a))} ] && echo HAVE {a.sha256}")
    parts.append(f"[ -f {q(plan.state_file)} ] && printf 'STATE %s\\n' \"$(tr -d '\\n' < {q(plan.state_file)})\"")
    parts.append(f"df -Pk {q(plan.workdir)} | awk 'NR==2 {{print \"FREE\", $4 * 1024}}'")
    parts.append(f"for f in {q(plan.install_path)}/vendors/*/bin/set_env.bash; do [ -f \"$f\" ] && echo TREE \"$f\"; done")
    parts.append(f"[ -x {q(plan.interpreter)} ] && echo INTERP ok")
    if relay_bin:
        parts.append(f"[ -f {q(relay_bin)} ] && echo RELAY ok")
    return "; ".join(f"{{ {p}; }}" if i else p for i, p in enumerate(parts)) + "; true"


def parse_probe(stdout: str) -> Probe:
    probe = Probe()
    for line in stdout.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "HAVE":
            probe.have.add(rest.strip())
        elif tag == "STATE":
            try:
                probe.state = json.loads(rest)
            except ValueError:
                probe.state = None
        elif tag == "FREE":
            try:
                probe.free = int(float(rest))
            except ValueError:
                pass
        elif tag == "TREE":
            probe.vendor_trees.append(rest.strip())
        elif tag == "INTERP":
            probe.interpreter_ok = True
        elif tag == "RELAY":
            probe.relay_ok = True
    return probe


def install_run_script(plan: HostPlan, art: Artifact) -> str:
    """Run the ``.run`` like CANN packages: absolute ``--install-path``, ``--quiet``, no stdin."""
    path = commands.quote(plan.remote_path(art))
    flag = commands.quote(f"--install-path={plan.install_path}")
    return f"chmod +x {path} && {path} {flag} --quiet < /dev/null"


_SUCCESS = re.compile(r"^\s*SUCCESS\b")
_ERROR = re.compile(r"^\s*(\[[^\]]*\]\s*)*(ERROR|\[ERROR\])", re.IGNORECASE)


def parse_run_output(stdout: str) -> tuple[bool, str | None]:
    """(success line seen, first ERROR line) from a ``.run`` install's output."""
    lines = stdout.splitlines()
    ok = any(_SUCCESS.match(line) for line in lines)
    err = next((line.strip() for line in lines if _ERROR.match(line) or "ERROR:" in line), None)
    return ok, err


def vendor_of(trees: Sequence[str], install_path: str) -> str | None:
    """The vendor directory name to use: ``CAM`` when present, else the only one there is."""
    names = [t[len(install_path) + len("/vendors/"):].split("/", 1)[0] for t in trees
             if t.startswith(install_path + "/vendors/")]
    if VENDOR in names:
        return VENDOR
    return names[0] if len(names) == 1 else None


def venv_script(plan: HostPlan) -> str:
    q = commands.quote
    return f"[ -x {q(plan.interpreter)} ] || {q(plan.python)} -m venv --system-site-packages {q(plan.venv_dir)}"


def pip_argv(plan: HostPlan, art: Artifact) -> list[str]:
    return [plan.interpreter, "-m", "pip", "install", "--force-reinstall", "--no-deps", "--no-index",
            "--disable-pip-version-check", "-q", plan.remote_path(art)]


def verify_argv(plan: HostPlan, vendor: str | None) -> list[str]:
    """bash that sources CANN and the vendor ``set_env`` and imports the op library."""
    q = commands.quote
    # importing torch and the op library writes caches under TMPDIR: keep them in the workdir
    tmp = f"{plan.workdir}/tmp"
    steps = [f"mkdir -p {q(tmp)}", f"export TMPDIR={q(tmp)}"]
    if plan.cann_set_env:
        steps.append(f". {q(plan.cann_set_env)}")
    if vendor:
        steps.append(f". {q(plan.vendor_set_env(vendor))}")
    code = (
        ("import torch_npu\n" if plan.soc != "cpu" else "")
        + f"import torch, {OP_MODULE} as m\n"
        + "print('CAMIT-VERSION', getattr(m, '__version__', 'unknown'))\n"
        + f"ns = torch.ops.{OP_MODULE}\n"
        + f"print('CAMIT-OPS', ','.join(n for n in {OPS!r} if hasattr(ns, n)))\n"
    )
    steps.append(f"{q(plan.interpreter)} -c {q(code)}")
    return ["bash", "-c", " && ".join(steps)]


def state_script(plan: HostPlan, state: dict[str, Any]) -> str:
    q = commands.quote
    tmp = plan.state_file + ".tmp"
    return f"printf '%s\\n' {q(json.dumps(state, sort_keys=True))} > {q(tmp)} && mv -f {q(tmp)} {q(plan.state_file)}"


# -- results ------------------------------------------------------------------
@dataclass
class ArtifactRecord:
    kind: str
    name: str
    sha256: str
    size: int
    via: str  # cached | relay | direct


@dataclass
class HostManifest:
    host: str
    status: str = "pending"  # deployed | unchanged | failed
    artifacts: list[ArtifactRecord] = field(default_factory=list)
    install_path: str = ""
    vendor: str | None = None
    interpreter: str = ""
    installed_version: str | None = None
    ops: list[str] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    step: str | None = None


@dataclass
class DeployResult:
    manifests: dict[str, HostManifest]
    errors: dict[str, FrameworkError]
    duration: float = 0.0
    relay_used: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_on_failure(self) -> DeployResult:
        if self.errors:
            raise MultiHostError(self.errors, total=len(self.manifests))
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "duration": round(self.duration, 3), "relay_used": self.relay_used, "notes": self.notes,
            "hosts": {h: asdict(m) for h, m in self.manifests.items()},
        }


def merge_manifest(old: Any, new: dict[str, Any]) -> dict[str, Any]:
    """One run's ``deploy-manifest.json`` after another deploy of the same run (an xdist worker's share):
    the hosts of both (the newer entry wins for a host in both), notes of both, the longer duration."""
    if not isinstance(old, dict) or not isinstance(old.get("hosts"), dict):
        return new
    return {
        "duration": max(float(old.get("duration") or 0.0), float(new.get("duration") or 0.0)),
        "relay_used": bool(old.get("relay_used")) or bool(new.get("relay_used")),
        "notes": list(dict.fromkeys([*(old.get("notes") or []), *(new.get("notes") or [])])),
        "hosts": {**old["hosts"], **new["hosts"]},
    }


# -- executor -----------------------------------------------------------------
class Deployer:
    """Deploy ``env``'s artifacts to ``cluster``; ``run()`` returns a ``DeployResult``.

    ``relay`` overrides ``env.relay``; ``on_event(host, message)`` receives progress
    lines (the CLI prints them); ``rundir`` (a ``RunDir``) gets ``deploy-manifest.json``.
    """

    def __init__(self, env: Any, cluster: Cluster, *, relay: bool | None = None, rundir: Any = None,
                 on_event: Callable[[str, str], None] | None = None) -> None:
        self.env = env
        self.cluster = cluster
        self.relay = env.relay if relay is None else relay
        self.rundir = rundir
        self.on_event = on_event or (lambda host, msg: log.info("%s: %s", host, msg))
        self.plans = {h.name: HostPlan.for_spec(env.hosts[h.name], env) for h in cluster}
        self.relay_script, self.relay_sha = remote.script("relay.py")

    def run(self) -> DeployResult:
        start = time.monotonic()
        artifacts = resolve_artifacts(self.env)
        result = DeployResult({h: HostManifest(h, install_path=p.install_path, interpreter=p.interpreter)
                               for h, p in self.plans.items()}, {})
        try:
            self._run(artifacts, result)
        finally:
            result.duration = time.monotonic() - start
            if self.rundir is not None:
                from framework.report import record_phase

                t0 = time.time() - result.duration
                for h, m in result.manifests.items():
                    probe = m.durations.get("probe", 0.0)
                    record_phase(self.rundir.path, h, "connect", t0, t0 + probe)
                    record_phase(self.rundir.path, h, "deploy", t0 + probe, t0 + sum(m.durations.values()))
                self.rundir.update_json("deploy-manifest.json", lambda old: merge_manifest(old, result.to_json()))
        return result

    def _fail(self, result: DeployResult, host: str, step: str, exc: BaseException) -> None:
        text = errors.reason_of(exc, host)
        err = exc if isinstance(exc, DeployError) else DeployError(
            host, step, text, exit_code=getattr(exc, "exit_code", None))
        m = result.manifests[host]
        m.status, m.step, m.error = "failed", err.step, text
        result.errors[host] = err
        self.on_event(host, f"FAILED at {err.step}: {text}")

    def _alive(self, result: DeployResult) -> list[str]:
        return [h for h in self.plans if h not in result.errors]

    def _timed(self, m: HostManifest, step: str, fn: Callable[[], Any]) -> Any:
        t = time.monotonic()
        try:
            return fn()
        finally:
            m.durations[step] = round(m.durations.get(step, 0.0) + time.monotonic() - t, 3)

    def _run(self, artifacts: list[Artifact], result: DeployResult) -> None:
        relay_bin = {h: p.bin_path("relay.py", self.relay_sha) for h, p in self.plans.items()}
        # 1. probe
        def probe(host: Host) -> Probe:
            plan = self.plans[host.name]
            script = probe_script(plan, artifacts, relay_bin[host.name] if self.relay else None)
            res = self._timed(result.manifests[host.name], "probe", lambda: host.check(commands.ShellScript(script), timeout=60))
            return parse_probe(res.stdout)

        probes: dict[str, Probe] = {}
        for name, value in self.cluster.map(probe).items():
            if isinstance(value, BaseException):
                self._fail(result, name, "probe", value)
            else:
                probes[name] = value
        want = {a.kind: a.sha256 for a in artifacts}

        # 2. transfer what is missing (after a free-space check)
        missing = {h: [a for a in artifacts if a.sha256 not in probes[h].have] for h in probes}
        for h, arts in missing.items():
            need = sum(a.size for a in arts)
            free = probes[h].free
            if arts and free is not None and free < need + SPACE_MARGIN:
                self._fail(result, h, "upload", TransferError(
                    h, f"not enough space in {self.plans[h].workdir}: need {_mb(need + SPACE_MARGIN)}, "
                       f"free {_mb(free)}"))
        via: dict[tuple[str, str], str] = {}
        for art in artifacts:
            targets = [h for h in self._alive(result) if art in missing.get(h, [])]
            for h in self._alive(result):
                if art not in missing.get(h, []):
                    via[(h, art.kind)] = "cached"
            if not targets:
                continue
            pending = targets
            if self.relay and len(targets) >= 2:
                result.relay_used = True
                pending = self._relay(art, targets, probes, relay_bin, result)
                for h in targets:
                    if h not in pending and h not in result.errors:
                        via[(h, art.kind)] = "relay"
                if pending:
                    note = f"relay: direct push of {art.name} to {', '.join(pending)}"
                    result.notes.append(note)
                    log.warning("%s", note)
            for name, value in self.cluster.map(lambda host: self._push(host, art, result),
                                                [h for h in pending if h not in result.errors]).items():
                if isinstance(value, BaseException):
                    self._fail(result, name, "upload", value)
                else:
                    via[(name, art.kind)] = "direct"
        for h in self._alive(result):
            result.manifests[h].artifacts = [
                ArtifactRecord(a.kind, a.name, a.sha256, a.size, via.get((h, a.kind), "cached")) for a in artifacts
            ]

        # 3. install where anything changed
        def install(host: Host) -> None:
            self._install(host, artifacts, probes[host.name], want, result)

        for name, value in self.cluster.map(install, self._alive(result)).items():
            if isinstance(value, BaseException):
                step = value.step if isinstance(value, DeployError) else "install"
                self._fail(result, name, step, value)

    # -- transfer ---------------------------------------------------------------
    def _push(self, host: Host, art: Artifact, result: DeployResult) -> None:
        plan = self.plans[host.name]
        m = result.manifests[host.name]
        self.on_event(host.name, f"upload {art.name} ({_mb(art.size)}) direct")
        # a relay killed mid-stream may have left its partial file behind
        host.run(["rm", "-f", "--", plan.remote_path(art) + ".part"], timeout=30)
        progress = self._progress(host.name, art)
        for attempt in (1, 2):
            try:
                self._timed(m, "upload", lambda: host.put(art.path, plan.remote_path(art), sha256=art.sha256,
                                                          progress=progress))
                break
            except TransferError as exc:
                if attempt == 2 or "mismatch" not in str(exc):
                    raise
                self.on_event(host.name, f"retrying upload of {art.name}: {exc}")
        host.check(["touch", "--", plan.stage(art) + "/.ok"], timeout=30)

    def _progress(self, host: str, art: Artifact, every: float = 1.0) -> Callable[[int, int], None]:
        """A callback reporting bytes and rate at most every ``every`` seconds (and at the end)."""
        t0 = time.monotonic()
        last = [t0]

        def report(sent: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] < every and sent < total:
                return
            last[0] = now
            rate = sent / max(now - t0, 1e-6)
            self.on_event(host, f"upload {art.name}: {_mb(sent)} of {_mb(total)}, {_mb(rate)}/s")

        return report

    def _relay(self, art: Artifact, targets: list[str], probes: dict[str, Probe], relay_bin: dict[str, str],
               result: DeployResult) -> list[str]:
        """Stream ``art`` through a chain of ``targets``; return the hosts that still need a direct push."""
        cluster = self.cluster
        # ship the relay program where it is missing (content-addressed, so once per version)
        ship = [h for h in targets if not probes[h].relay_ok]
        shipped = cluster.map(lambda host: host.put(self.relay_script, relay_bin[host.name]), ship)
        chain = [h for h in targets if not isinstance(shipped.get(h), BaseException)]
        for h in ship:
            if isinstance(shipped[h], BaseException):
                result.notes.append(f"relay: cannot ship the relay program to {h}: {shipped[h]}")
                probes[h].relay_ok = False
            else:
                probes[h].relay_ok = True
        if len(chain) < 2:
            return targets
        deadline = 120 + art.size / (2 * 1024 * 1024)
        tokens = {h: secrets.token_hex(16) for h in chain}
        procs: dict[str, Any] = {}
        t0 = time.monotonic()

        def argv(h: str, listen: bool) -> list[str]:
            plan = self.plans[h]
            a = [plan.python, relay_bin[h], "--out", plan.remote_path(art), "--sha256", art.sha256,
                 "--size", str(art.size), "--deadline", f"{deadline:.0f}"]
            return a + (["--listen", plan.manage_ip] if listen else [])

        ports: dict[str, int] = {}
        try:
            for h in chain[1:]:
                try:
                    procs[h] = cluster[h].spawn(argv(h, True))
                except HostError as exc:
                    result.notes.append(f"relay: cannot start the relay on {h}: {exc}")
            for h in list(procs):
                line = procs[h].readline(timeout=20) or ""
                if line.startswith("PORT "):
                    ports[h] = int(line.split()[1])
                else:
                    result.notes.append(f"relay: {h} did not listen: {line.strip() or 'no answer'}")
                    procs.pop(h).kill()
            links = [chain[0]] + [h for h in chain[1:] if h in ports]
            if len(links) < 2:
                return targets

            def next_line(i: int) -> bytes:
                if i + 1 < len(links):
                    n = links[i + 1]
                    return f"NEXT {self.plans[n].manage_ip} {ports[n]} {tokens[n]}\n".encode()
                return b"NEXT -\n"

            for i, h in enumerate(links[1:], 1):
                procs[h].write(next_line(i) + f"TOKEN {tokens[h]}\n".encode())
                procs[h].close_stdin()
            head = links[0]
            procs[head] = cluster[head].spawn(argv(head, False))
            self.on_event(head, f"relay {art.name} ({_mb(art.size)}) through {' -> '.join(links)}")
            head_proc = procs[head]
            head_proc.write(next_line(0))
            progress = self._progress(head, art)
            sent = 0
            with open(art.path, "rb") as fh:
                for block in iter(lambda: fh.read(RELAY_STREAM_CHUNK), b""):
                    head_proc.write(block)
                    sent += len(block)
                    progress(sent, art.size)
            head_proc.close_stdin()
            pending = []
            for h in links:
                res = procs[h].wait(deadline)
                out = res.stdout if res is not None else ""
                if res is None:
                    procs[h].kill()
                for line in out.splitlines():
                    if line.startswith("NEXT-FAILED"):
                        result.notes.append(f"relay: {h}: {line}")
                if any(line == f"OK {art.sha256}" for line in out.splitlines()):
                    m = result.manifests[h]
                    m.durations["upload"] = round(m.durations.get("upload", 0.0) + time.monotonic() - t0, 3)
                else:
                    why = next((ln for ln in out.splitlines() if ln.startswith("ERR")), None)
                    why = why or (getattr(procs[h], "lost", None) or (res.tail(3) if res else "timed out"))
                    result.notes.append(f"relay: {h} did not receive {art.name}: {why}")
                    pending.append(h)
            return pending + [h for h in targets if h not in links]
        except HostError as exc:
            result.notes.append(f"relay failed ({exc}); falling back to direct push")
            for p in procs.values():
                p.kill()
            return targets
        finally:
            for p in procs.values():
                p.close()

    # -- install ----------------------------------------------------------------
    def _install(self, host: Host, artifacts: list[Artifact], probe: Probe, want: dict[str, str],
                 result: DeployResult) -> None:
        plan = self.plans[host.name]
        m = result.manifests[host.name]
        expected = expected_state(plan, artifacts)
        state = probe.state or {}
        vendor = vendor_of(probe.vendor_trees, plan.install_path)
        changed = any(r.via != "cached" for r in m.artifacts)
        run_art = next((a for a in artifacts if a.kind == "run_package"), None)
        wheel_art = next((a for a in artifacts if a.kind == "wheel"), None)
        intact = (run_art is None or vendor is not None) and (wheel_art is None or probe.interpreter_ok)
        if not changed and intact and {k: state.get(k) for k in expected} == expected:
            m.status, m.vendor = "unchanged", state.get("vendor", vendor)
            m.installed_version, m.ops = state.get("installed_version"), list(state.get("ops", []))
            self.on_event(host.name, "unchanged (hashes match, nothing sent or reinstalled)")
            return

        def step(name: str, command: Any, timeout: float = 600) -> Any:
            res = self._timed(m, name, lambda: host.run(command, timeout=timeout))
            if not res.ok:
                why = "timed out" if res.timed_out else f"exit status {res.rc}"
                raise DeployError(host.name, name, f"{why}\n{res.tail(8)}".rstrip())
            return res

        step("clear-state", ["rm", "-f", "--", plan.state_file], 60)
        if run_art is not None:
            self.on_event(host.name, f"install {run_art.name} --install-path={plan.install_path}")
            res = step("install-run", install_run_script(plan, run_art))
            ok, err = parse_run_output(res.stdout + "\n" + res.stderr)
            if not ok:
                raise DeployError(host.name, "install-run",
                                  f"{run_art.name} printed no SUCCESS line" + (f" ({err})" if err else "")
                                  + f"\n{res.tail(8)}")
            trees = step("check-tree", f"for f in {commands.quote(plan.install_path)}/vendors/*/bin/set_env.bash; "
                                       f"do [ -f \"$f\" ] && echo \"$f\"; done; true", 60).stdout.split()
            vendor = vendor_of(trees, plan.install_path)
            if vendor is None:
                raise DeployError(host.name, "install-run",
                                  f"no vendors/<vendor>/bin/set_env.bash under {plan.install_path} after install")
        if wheel_art is not None:
            if plan.venv:
                step("venv", venv_script(plan), 300)
            self.on_event(host.name, f"pip install {wheel_art.name} into {plan.interpreter}")
            step("install-wheel", pip_argv(plan, wheel_art), 900)
            res = step("verify", verify_argv(plan, vendor if run_art is not None else None), 300)
            for line in res.stdout.splitlines():
                if line.startswith("CAMIT-VERSION "):
                    m.installed_version = line.split(" ", 1)[1].strip()
                elif line.startswith("CAMIT-OPS "):
                    m.ops = [o for o in line.split(" ", 1)[1].strip().split(",") if o]
        m.vendor = vendor
        state = dict(expected, vendor=vendor, installed_version=m.installed_version, ops=m.ops,
                     deployed_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        step("write-state", state_script(plan, state), 60)
        m.status = "deployed"
        self.on_event(host.name, f"deployed {OP_MODULE} {m.installed_version or ''}".rstrip())


def _mb(n: float) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


def deploy(env: Any, cluster: Cluster, **kwargs: Any) -> DeployResult:
    """Deploy and return the result (failures are in it; call ``raise_on_failure()`` to raise)."""
    return Deployer(env, cluster, **kwargs).run()


__all__ = ["Artifact", "DeployResult", "Deployer", "HostManifest", "HostPlan", "deploy", "resolve_artifacts"]
