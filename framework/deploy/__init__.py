"""Deploy the CAM ``.run`` package and the ``umdk_cam_op_lib`` wheel to every host.

A pure plan, the relay chain, the install steps and :class:`Deployer`, the thin runner over
``Cluster``: probe, transfer, install, manifest. Design: docs/internals/deploy-ascend.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any

from framework import remote
from framework.deploy.install import HostInstall, needs_install, timed
from framework.deploy.plan import (
    KINDS,
    OP_MODULE,
    OPS,
    RELAY_STREAM_CHUNK,
    SPACE_MARGIN,
    STATE_VERSION,
    VENDOR,
    Artifact,
    HostPlan,
    Probe,
    dry_run_plan,
    expected_state,
    install_run_script,
    installer_bin,
    mb,
    parse_probe,
    parse_run_output,
    pick_for_host,
    pip_argv,
    probe_script,
    resolve_artifacts,
    space_problem,
    stage_ok_script,
    state_script,
    vendor_of,
    venv_script,
    verify_argv,
)
from framework.deploy.platform import Platform
from framework.deploy.relay import RelayChain
from framework.deploy.result import ArtifactRecord, DeployResult, HostManifest, merge_manifest
from framework.errors import CommandFailed, CommandTimedOut, DeployError, TransferError, reason_of
from framework.hosts import Cluster, Host
from framework.phases import PhaseEvent, PhaseSink, discard, emit, rundir_sink
from framework.remote.layout import unsafe_message, unsafe_reason

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.records.folder import RunDir

log = logging.getLogger("camit.deploy")


def _wanted(every: Sequence[Artifact], per_host: Mapping[str, list[Artifact]]) -> list[Artifact]:
    """The artifacts of ``every`` some host needs, in their order."""
    return [a for a in every if any(a in arts for arts in per_host.values())]


def _missing(per_host: Mapping[str, list[Artifact]], probes: Mapping[str, Probe]
             ) -> dict[str, list[Artifact]]:
    """Each probed host's artifacts it does not hold yet (by hash)."""
    return {h: [a for a in per_host[h] if a.sha256 not in probe.have] for h, probe in probes.items()}


class Deployer:
    """Deploy ``env``'s artifacts to ``cluster``; ``run()`` returns a ``DeployResult``.

    ``relay`` overrides ``env.relay``; ``on_event(host, message)`` receives progress
    lines (the CLI prints them); ``rundir`` (a ``RunDir``) gets ``deploy-manifest.json``;
    ``on_phase`` the ``connect`` and ``deploy`` phase of each host (by default, with a
    ``rundir``, into its ``phases.json``).
    """

    def __init__(self, env: EnvConfig, cluster: Cluster, *, relay: bool | None = None,
                 rundir: RunDir | None = None, on_event: Callable[[str, str], None] | None = None,
                 on_phase: PhaseSink | None = None) -> None:
        self.env = env
        self.cluster = cluster
        self.relay = env.relay if relay is None else relay
        self.rundir = rundir
        self.on_event = on_event or (lambda host, msg: log.info("%s: %s", host, msg))
        self.on_phase = on_phase or (rundir_sink(rundir) if rundir is not None else discard)
        self.plans = {h.name: HostPlan.for_spec(env.hosts[h.name], env) for h in cluster}
        self.relay_script, self.relay_sha = remote.script("relay.py")

    def plan_only(self) -> list[dict[str, Any]]:
        """What :meth:`run` would send and run on each host (:func:`~framework.deploy.plan.dry_run_plan`), with
        how the artifacts would travel; nothing contacts a host (``camit deploy --dry-run``)."""
        artifacts = resolve_artifacts(self.env)
        transfer = ("relay chain when two or more hosts lack an artifact, else direct SFTP"
                    if self._relays(self.plans) else "direct SFTP")
        return [dict(dry_run_plan(plan, artifacts), transfer=transfer)
                for plan in self.plans.values()]

    def _relays(self, hosts: Sized) -> bool:
        """Whether an artifact ``hosts`` lack goes by the relay chain (when on, for two or more)."""
        return self.relay and len(hosts) >= 2

    def run(self) -> DeployResult:
        start = time.monotonic()
        artifacts = resolve_artifacts(self.env)
        result = DeployResult({h: HostManifest(h, install_path=p.install_path, interpreter=p.interpreter)
                               for h, p in self.plans.items()}, {})
        try:
            self._run(artifacts, result)
        finally:
            result.duration = time.monotonic() - start
            self._phases(result)
            if self.rundir is not None:
                self.rundir.update_json("deploy-manifest.json", lambda old: merge_manifest(old, result.to_json()))
        return result

    def _phases(self, result: DeployResult) -> None:
        if self.on_phase is discard:
            return
        t0 = time.time() - result.duration
        events = []
        for h, m in result.manifests.items():
            probe = m.durations.get("probe", 0.0)
            events.append(PhaseEvent(h, "connect", t0, t0 + probe))
            events.append(PhaseEvent(h, "deploy", t0 + probe, t0 + sum(m.durations.values())))
        emit(self.on_phase, events)  # every host's at once: one write of phases.json, not one per host

    def _fail(self, result: DeployResult, host: str, step: str, exc: BaseException) -> None:
        text = reason_of(exc, host)
        err = exc if isinstance(exc, DeployError) else DeployError(
            host, step, text, exit_code=getattr(exc, "exit_code", None))
        m = result.manifests[host]
        m.status, m.step, m.error = "failed", err.step, text
        result.errors[host] = err
        self.on_event(host, f"FAILED at {err.step}: {text}")

    def _alive(self, result: DeployResult) -> list[str]:
        return [h for h in self.plans if h not in result.errors]

    def _relay_bin(self, host: str) -> str:
        return self.plans[host].bin_path("relay.py", self.relay_sha)

    def _pick(self, artifacts: list[Artifact], probes: dict[str, Probe],
              result: DeployResult) -> dict[str, list[Artifact]]:
        """host → its artifacts: the ``.run`` named for its platform (npu.soc, os-release ID, uname -m)."""
        chosen: dict[str, list[Artifact]] = {}
        for h, probe in probes.items():
            host = Platform(self.plans[h].soc, probe.os_id or "linux", probe.arch or "unknown")
            try:
                chosen[h], note = pick_for_host(artifacts, host)
            except ValueError as exc:
                self._fail(result, h, "match", DeployError(h, "match", str(exc)))
                continue
            if note:
                result.notes.append(f"{h}: {note}")
                self.on_event(h, note)
        return chosen

    def _run(self, every: list[Artifact], result: DeployResult) -> None:
        probes = self._probe(every, result)
        per_host = self._pick(every, probes, result)
        probes = {h: p for h, p in probes.items() if h in per_host}
        missing = _missing(per_host, probes)
        wanted = _wanted(every, per_host)
        self._check_space(missing, probes, result)
        via: dict[tuple[str, str], str] = {}
        installs: dict[str, HostInstall] = {}
        try:
            prepared = self._prepare(per_host, probes, result, installs)
            try:
                for art in wanted:
                    self._transfer(art, missing, probes, via, result)
            finally:
                prepared.join()
            self._record_artifacts(per_host, via, result)
            self._install(per_host, probes, result, installs)
        finally:
            for inst in installs.values():  # hosts lost before their install: no import check left running
                inst.stop()

    def _record_artifacts(self, per_host: Mapping[str, list[Artifact]],
                          via: Mapping[tuple[str, str], str], result: DeployResult) -> None:
        """Each live host's manifest lists its artifacts and how each got there."""
        for h in self._alive(result):
            result.manifests[h].artifacts = [
                ArtifactRecord(a.kind, a.name, a.sha256, a.size, via.get((h, a.kind), "cached"))
                for a in per_host[h]
            ]

    def _check_space(self, missing: dict[str, list[Artifact]], probes: dict[str, Probe],
                     result: DeployResult) -> None:
        """Fail the hosts without the room for the artifacts they miss."""
        for h, arts in missing.items():
            problem = space_problem(self.plans[h], arts, probes[h].free)
            if problem:
                self._fail(result, h, "upload", TransferError(h, problem))

    # -- 1. probe -------------------------------------------------------------------------------
    def _probe(self, artifacts: list[Artifact], result: DeployResult) -> dict[str, Probe]:
        def probe(host: Host) -> Probe:
            plan = self.plans[host.name]
            wheel = plan.venv and any(a.kind == "wheel" for a in artifacts)
            script = probe_script(plan, artifacts, self._relay_bin(host.name) if self.relay else None,
                                  installer_bin(plan) if wheel else None)
            res = timed(result.manifests[host.name], "probe", lambda: host.run(script, timeout=60))
            why = unsafe_reason(res.stdout)
            if why is not None:
                raise DeployError(host.name, "workdir", unsafe_message(why))
            if not res.ok:
                raise CommandTimedOut(res, 60) if res.timed_out else CommandFailed(res)
            return parse_probe(res.stdout)

        probes: dict[str, Probe] = {}
        for name, value in self.cluster.map(probe).items():
            if isinstance(value, BaseException):
                self._fail(result, name, "probe", value)
            else:
                probes[name] = value
        return probes

    # -- 2. transfer ----------------------------------------------------------------------------
    def _transfer(self, art: Artifact, missing: dict[str, list[Artifact]], probes: dict[str, Probe],
                  via: dict[tuple[str, str], str], result: DeployResult) -> None:
        """``art`` to every live host missing it: the relay chain when two or more do, direct push
        for the rest."""
        targets = self._targets(art, missing, via, result)
        if not targets:
            return
        pending = targets
        if self._relays(targets):
            pending = self._relay_to(art, targets, probes, via, result)
        self._push_all(art, [h for h in pending if h not in result.errors], via, result)

    def _targets(self, art: Artifact, missing: Mapping[str, list[Artifact]],
                 via: dict[tuple[str, str], str], result: DeployResult) -> list[str]:
        """The live hosts missing ``art``; the other live hosts have it cached (so ``via`` says)."""
        alive = self._alive(result)
        targets = [h for h in alive if art in missing.get(h, [])]
        for h in alive:
            if h not in targets:
                via.setdefault((h, art.kind), "cached")
        return targets

    def _push_all(self, art: Artifact, hosts: list[str], via: dict[tuple[str, str], str],
                  result: DeployResult) -> None:
        """Push ``art`` to ``hosts`` directly, in parallel."""
        def push(host: Host) -> None:
            self._push(host, art, result)

        for name, value in self.cluster.map(push, hosts).items():
            if isinstance(value, BaseException):
                self._fail(result, name, "upload", value)
            else:
                via[(name, art.kind)] = "direct"

    def _relay_to(self, art: Artifact, targets: list[str], probes: dict[str, Probe],
                  via: dict[tuple[str, str], str], result: DeployResult) -> list[str]:
        """The relay chain's part of :meth:`_transfer`: the hosts it served in ``via``; returns those left."""
        result.relay_used = True
        pending = self._relay(art, targets, probes, result)
        for h in targets:
            if h not in pending and h not in result.errors:
                via[(h, art.kind)] = "relay"
        if pending:
            note = f"relay: direct push of {art.name} to {', '.join(pending)}"
            result.notes.append(note)
            log.warning("%s", note)
        return pending

    def _relay(self, art: Artifact, targets: list[str], probes: dict[str, Probe], result: DeployResult) -> list[str]:
        """Stream ``art`` through a chain of ``targets``; return the hosts that still need a direct push."""
        chain = RelayChain(self.cluster, self.plans, self.relay_script,
                           {h: self._relay_bin(h) for h in targets}, on_event=self.on_event, progress=self._progress)
        outcome = chain.send(art, targets, probes)
        result.notes += outcome.notes
        for h, seconds in outcome.received.items():
            m = result.manifests[h]
            m.durations["upload"] = round(m.durations.get("upload", 0.0) + seconds, 3)
        return outcome.pending

    def _push(self, host: Host, art: Artifact, result: DeployResult) -> None:
        plan = self.plans[host.name]
        m = result.manifests[host.name]
        self.on_event(host.name, f"upload {art.name} ({mb(art.size)}) direct")
        # a relay killed mid-stream may have left its partial file behind
        host.run(["rm", "-f", "--", plan.remote_path(art) + ".part"], timeout=30)
        progress = self._progress(host.name, art)
        for attempt in (1, 2):
            try:
                timed(m, "upload", lambda: host.put(art.path, plan.remote_path(art), sha256=art.sha256,
                                                    progress=progress))
                break
            except TransferError as exc:
                if attempt == 2 or "mismatch" not in str(exc):
                    raise
                self.on_event(host.name, f"retrying upload of {art.name}: {exc}")
        host.check(stage_ok_script(plan, art), timeout=30)

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
            self.on_event(host, f"upload {art.name}: {mb(sent)} of {mb(total)}, {mb(rate)}/s")

        return report

    def _prepare(self, per_host: dict[str, list[Artifact]], probes: dict[str, Probe], result: DeployResult,
                 installs: dict[str, HostInstall]) -> threading.Thread:
        """Start, beside the transfer, what the install needs and the upload does not (the venv, the wheel
        installer, the import check's torch import: :meth:`HostInstall.prepare`) on every host that will install a
        wheel; the caller joins the thread before installing, and the install goes on with ``installs[host]``."""
        hosts = [h for h in self._alive(result)
                 if any(a.kind == "wheel" for a in per_host[h])
                 and needs_install(self.plans[h], per_host[h], probes[h])]
        failed: dict[str, BaseException] = {}

        def prepare(host: Host) -> None:
            inst = installs[host.name] = HostInstall(host, self.plans[host.name], result.manifests[host.name],
                                                     self.on_event)
            inst.prepare(per_host[host.name], probes[host.name])

        def work() -> None:
            failed.update((n, v) for n, v in self.cluster.map(prepare, hosts).items() if isinstance(v, BaseException))

        def after() -> None:
            for name, exc in failed.items():
                if name not in result.errors:  # a host lost mid-upload is reported at its upload
                    self._fail(result, name, "venv", exc)

        thread = _Joined(work, after)
        if hosts:
            thread.start()
        return thread

    # -- 3. install -----------------------------------------------------------------------------
    def _install(self, per_host: dict[str, list[Artifact]], probes: dict[str, Probe], result: DeployResult,
                 installs: dict[str, HostInstall]) -> None:
        def install(host: Host) -> None:
            inst = installs.get(host.name) or HostInstall(host, self.plans[host.name], result.manifests[host.name],
                                                          self.on_event)
            inst.run(per_host[host.name], probes[host.name])

        for name, value in self.cluster.map(install, self._alive(result)).items():
            if isinstance(value, BaseException):
                step = value.step if isinstance(value, DeployError) else "install"
                self._fail(result, name, step, value)


class _Joined(threading.Thread):
    """A thread whose ``join()`` (a no-op when it never started) then runs ``after`` in the joining thread."""

    def __init__(self, target: Callable[[], None], after: Callable[[], None]) -> None:
        super().__init__(target=target, name="camit-deploy-prepare", daemon=True)
        self.after = after

    def join(self, timeout: float | None = None) -> None:
        if self.is_alive() or self.ident is not None:
            super().join(timeout)
            self.after()


def deploy(env: EnvConfig, cluster: Cluster, **kwargs: Any) -> DeployResult:
    """Deploy and return the result (failures are in it; call ``raise_on_failure()`` to raise)."""
    return Deployer(env, cluster, **kwargs).run()


__all__ = ["KINDS", "OPS", "OP_MODULE", "RELAY_STREAM_CHUNK", "SPACE_MARGIN", "STATE_VERSION", "VENDOR", "Artifact",
           "ArtifactRecord", "DeployResult", "Deployer", "HostManifest", "HostPlan", "Probe", "deploy",
           "expected_state", "install_run_script", "merge_manifest", "parse_probe", "parse_run_output", "pip_argv",
           "probe_script", "resolve_artifacts", "state_script", "vendor_of", "venv_script", "verify_argv"]
