"""Installing the staged artifacts on one host: decide (pure), then run the steps in order.

Design: docs/internals/deploy-ascend.md.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from framework import commands, remote
from framework.deploy.plan import (
    GO,
    INSTALLER,
    OP_MODULE,
    STOP,
    WARM_WAIT,
    Artifact,
    HostPlan,
    Probe,
    expected_state,
    go_script,
    install_run_script,
    install_wheel_script,
    installer_bin,
    parse_cpu,
    parse_record,
    parse_run_output,
    parse_verify,
    state_script,
    tree_script,
    vendor_env_problems,
    venv_script,
    verify_argv,
    warm_go_path,
    warm_verify_argv,
    with_cpu,
)
from framework.deploy.result import HostManifest
from framework.errors import CommandError, DeployError, TransferError, reason_of
from framework.hosts import Host
from framework.remote.layout import DeployState, vendor_of
from framework.result import Result

log = logging.getLogger("camit.deploy")
#: the state's key for the installed RECORD's sha256 (without a venv, :func:`_same_install`)
INSTALLED_RECORD = "installed_record"


def artifact_of(artifacts: Sequence[Artifact], kind: str) -> Artifact | None:
    return next((a for a in artifacts if a.kind == kind), None)


def is_unchanged(plan: HostPlan, artifacts: Sequence[Artifact], probe: Probe, manifest: HostManifest) -> bool:
    """Nothing was sent, what the install left is still there, and the state records these artifacts."""
    changed = any(r.via != "cached" for r in manifest.artifacts)
    return (not changed and _intact(plan, artifacts, probe)
            and DeployState.matches(probe.state, expected_state(plan, artifacts))
            and _same_install(plan, artifacts, probe))


def _intact(plan: HostPlan, artifacts: Sequence[Artifact], probe: Probe) -> bool:
    """What the install left is still there: a ``.run``'s vendor tree, a wheel's interpreter."""
    vendor = vendor_of(probe.vendor_trees, plan.install_path)
    return ((artifact_of(artifacts, "run_package") is None or vendor is not None)
            and (artifact_of(artifacts, "wheel") is None or probe.interpreter_ok))


def _same_install(plan: HostPlan, artifacts: Sequence[Artifact], probe: Probe) -> bool:
    """Without a venv the configured python is shared (another workdir's deploy, a user's pip): the op library
    it holds must be the one this workdir's state recorded, by the hash of its installed RECORD."""
    if plan.venv or artifact_of(artifacts, "wheel") is None:
        return True
    recorded = (probe.state or {}).get(INSTALLED_RECORD)
    return probe.installed_record is not None and recorded == probe.installed_record


def timed(m: HostManifest, step: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, its duration added to ``m.durations[step]``."""
    t = time.monotonic()
    try:
        return fn()
    finally:
        m.durations[step] = round(m.durations.get(step, 0.0) + time.monotonic() - t, 3)


def needs_install(plan: HostPlan, artifacts: Sequence[Artifact], probe: Probe) -> bool:
    """Before the transfer: will :meth:`HostInstall.run` install on this host (something to send, or what
    the probe saw is not what :func:`is_unchanged` requires)?"""
    return (any(a.sha256 not in probe.have for a in artifacts)
            or not is_unchanged(plan, artifacts, probe, HostManifest(plan.host)))


class HostInstall:
    """The install steps on one host, recorded in its manifest."""

    def __init__(self, host: Host, plan: HostPlan, manifest: HostManifest,
                 on_event: Callable[[str, str], None]) -> None:
        self.host = host
        self.plan = plan
        self.m = manifest
        self.on_event = on_event
        #: the import check started by :meth:`prepare`, until the ``verify`` step uses it
        self.warm: WarmVerify | None = None
        #: the wheel installer is on the host with its sha256 (the probe saw it, or it was shipped)
        self.installer_ready = False
        #: without a venv: the sha256 of the installed RECORD the import check saw (into the state)
        self.installed_record: str | None = None

    def run(self, artifacts: Sequence[Artifact], probe: Probe) -> None:
        try:
            self._run(artifacts, probe)
        finally:
            self.stop()

    def _run(self, artifacts: Sequence[Artifact], probe: Probe) -> None:
        plan, m = self.plan, self.m
        if is_unchanged(plan, artifacts, probe, m):
            self._unchanged(probe)
            return
        run_art, wheel_art = artifact_of(artifacts, "run_package"), artifact_of(artifacts, "wheel")
        vendor = vendor_of(probe.vendor_trees, plan.install_path)
        self.step("clear-state", DeployState.clear_argv(plan.layout), 60)
        if run_art is not None:
            vendor = self.run_package(run_art)
        if wheel_art is not None:
            self.wheel(wheel_art, vendor if run_art is not None else None, probe)
        m.vendor = vendor
        self.step("write-state", state_script(plan, self._state(artifacts, vendor)), 60)
        m.status = "deployed"
        self.on_event(self.host.name, f"deployed {OP_MODULE} {m.installed_version or ''}".rstrip())

    def _unchanged(self, probe: Probe) -> None:
        """Nothing to do: the manifest takes the install's facts from the state the probe read."""
        m, state = self.m, probe.state or {}
        m.status = "unchanged"
        m.vendor = state.get("vendor", vendor_of(probe.vendor_trees, self.plan.install_path))
        m.installed_version, m.ops = state.get("installed_version"), list(state.get("ops", []))
        self.on_event(self.host.name, "unchanged (hashes match, nothing sent or reinstalled)")

    def _state(self, artifacts: Sequence[Artifact], vendor: str | None) -> dict[str, Any]:
        """The deploy state written last: the artifacts' hashes and what the steps installed."""
        state = dict(expected_state(self.plan, artifacts), vendor=vendor,
                     installed_version=self.m.installed_version, ops=self.m.ops,
                     deployed_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        if self.installed_record:
            state[INSTALLED_RECORD] = self.installed_record
        return state

    def step(self, name: str, command: commands.Command, timeout: float = 600) -> Result:
        """Run one step; its wall time and its CPU on the host (:func:`~framework.deploy.plan.with_cpu`) go
        into the manifest."""
        script = commands.ShellScript(with_cpu(command if isinstance(command, str) else commands.join(command)))
        res: Result = timed(self.m, name, lambda: self.host.run(script, timeout=timeout))
        return self.checked(name, res)

    def checked(self, name: str, res: Result) -> Result:
        """``res`` of step ``name``: its CPU into the manifest; ``DeployError`` when it failed."""
        cpu = parse_cpu(res.stdout)
        if cpu is not None:
            self.m.cpu_seconds[name] = round(self.m.cpu_seconds.get(name, 0.0) + cpu, 3)
        if not res.ok:
            why = "timed out" if res.timed_out else f"exit status {res.rc}"
            raise DeployError(self.host.name, name, f"{why}\n{res.tail(8)}".rstrip())
        return res

    def run_package(self, art: Artifact) -> str:
        """Install the ``.run``; the vendor it installed."""
        plan, name = self.plan, self.host.name
        self.on_event(name, f"install {art.name} --install-path={plan.install_path}")
        res = self.step("install-run", install_run_script(plan, art))
        ok, err = parse_run_output(res.stdout + "\n" + res.stderr)
        if not ok:
            raise DeployError(name, "install-run", f"{art.name} printed no SUCCESS line" + (f" ({err})" if err else "")
                              + f"\n{res.tail(8)}")
        vendor = vendor_of(self.step("check-tree", tree_script(plan), 60).stdout.split(), plan.install_path)
        if vendor is None:
            raise DeployError(name, "install-run",
                              f"no vendors/<vendor>/bin/set_env.bash under {plan.install_path} after install")
        return vendor

    def prepare(self, artifacts: Sequence[Artifact], probe: Probe | None = None) -> None:
        """What needs neither the artifacts nor the network, done while they upload: the venv (``--without-pip``),
        for a wheel without a ``.run`` (no vendor ``set_env`` to source first) the import check up to the op
        library (:class:`WarmVerify`), then the wheel installer (:meth:`ship_installer`)."""
        wheel = artifact_of(artifacts, "wheel") is not None
        if self.plan.venv:
            self.step("venv", venv_script(self.plan), 300)
        if wheel and artifact_of(artifacts, "run_package") is None:
            self.warm = WarmVerify(self.host, self.plan)
        if wheel and self.plan.venv:  # after the check's start: torch's import is the longer of the two
            self.ship_installer(probe)

    def stop(self) -> None:
        """End a warm import check that will not be used (the host failed or installs nothing)."""
        warm, self.warm = self.warm, None
        if warm is not None:
            try:
                warm.finish(STOP)
            except Exception as exc:  # noqa: BLE001 - the host's own failure is reported already
                log.debug("%s: ending the import check: %s", self.host.name, exc)

    def ship_installer(self, probe: Probe | None) -> None:
        """Put the wheel installer on the host unless the probe found it there with its sha256 (content-addressed:
        shipped once per version); the install step checks its hash again right before it runs it."""
        if self.installer_ready or (probe is not None and probe.installer_ok):
            self.installer_ready = True
            return
        local, sha = remote.script(INSTALLER)
        try:
            timed(self.m, "ship-installer", lambda: self.host.put(local, installer_bin(self.plan), sha256=sha))
        except (TransferError, CommandError) as exc:
            raise DeployError(self.host.name, "install-wheel",
                              f"cannot ship the wheel installer: {reason_of(exc, self.host.name)}",
                              exit_code=exc.exit_code) from exc
        self.installer_ready = True

    def wheel(self, art: Artifact, vendor: str | None, probe: Probe | None = None) -> None:
        """The wheel into the interpreter (a venv first when configured, and the installer there), then the
        import check."""
        plan = self.plan
        if plan.venv:
            self._venv_with_installer(probe)
        if vendor is not None and self.warm is None:  # the import check beside the install, in the vendor's env
            self.warm = WarmVerify(self.host, plan, vendor)
        how = "install" if plan.venv else "pip install"
        self.on_event(self.host.name, f"{how} {art.name} into {plan.interpreter}")
        self.step("install-wheel", install_wheel_script(plan, art), 900)
        self._verified(vendor, self.verify(vendor))

    def _venv_with_installer(self, probe: Probe | None) -> None:
        """The venv (unless made while the artifacts uploaded) and the wheel installer beside it."""
        if "venv" not in self.m.durations:
            self.step("venv", venv_script(self.plan), 300)
        self.ship_installer(probe)

    def _verified(self, vendor: str | None, out: str) -> None:
        """Judge the import check's output ``out``; the version, ops and RECORD hash it saw go
        into the manifest."""
        problems = vendor_env_problems(self.plan, vendor, out) if vendor else []
        if problems:
            raise DeployError(self.host.name, "verify", "; ".join(problems))
        version, ops = parse_verify(out)
        self.installed_record = parse_record(out)
        if version is not None:
            self.m.installed_version = version
        if ops is not None:
            self.m.ops = ops

    def verify(self, vendor: str | None) -> str:
        """The import check's output: the warm one told to go on (its CPU since it started counts), else — none
        started, or it gave up waiting — a fresh one."""
        warm, self.warm = self.warm, None
        if warm is not None:
            res = timed(self.m, "verify", lambda: warm.finish(GO))
            if WarmVerify.ABANDONED not in res.stdout:
                return self.checked("verify", res).stdout
        return self.step("verify", verify_argv(self.plan, vendor), 300).stdout


class WarmVerify:
    """The import check running from before the wheel is there (:func:`~framework.deploy.plan.warm_verify_argv`):
    started in a thread of its own, given its word by :meth:`finish`."""

    ABANDONED = "CAMIT-WARM-ABANDONED"

    def __init__(self, host: Host, plan: HostPlan, vendor: str | None = None) -> None:
        self.host, self.plan, self.vendor = host, plan, vendor
        self.go = warm_go_path(plan, secrets.token_hex(8))
        self.result: Result | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"camit-verify-{host.name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        script = commands.ShellScript(with_cpu(commands.join(warm_verify_argv(self.plan, self.go, self.vendor))))
        try:
            self.result = self.host.run(script, timeout=WARM_WAIT + 300)
        except BaseException as exc:  # noqa: BLE001 - re-raised by finish() in the installing thread
            self.error = exc

    def finish(self, word: str) -> Result:
        """Write ``word`` to the go file (unless the check has ended already), wait for the check, its result;
        the exception that ended its thread is raised here."""
        if self.thread.is_alive():
            self.host.run(go_script(self.plan, self.go, word), timeout=60)
        self.thread.join(WARM_WAIT + 360)
        if self.error is not None:
            raise self.error
        if self.result is None:
            raise DeployError(self.host.name, "verify", "the import check did not end")
        return self.result
