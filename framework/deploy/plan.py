"""The pure half of deploy: artifacts resolved and hashed, where they go on a host, every command line and parser.

Nothing here talks to a host. Paths come from the host's
:class:`~framework.remote.layout.HostLayout`; the install record is a
:class:`~framework.remote.layout.DeployState`.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework import commands, remote
from framework.commands import ShellScript
from framework.deploy.platform import Platform, choose, parse_run_name
from framework.errors import ConfigError
from framework.hosts import sha256_file
from framework.remote.layout import (
    BIG_FILE,
    STATE_VERSION,
    VENDOR,
    DeployState,
    HostLayout,
    sh_sha_ok,
    sh_verified,
    sh_write_file,
    vendor_of,
)
from framework.remote.sections import read_records, sh_tag
from framework.setenv import OPAPI_LIBRARY, aclnn_symbols, env_steps, extra_of, require_cann, vendor_dir_of

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig, HostSpec

KINDS = ("run_package", "wheel")
OP_MODULE = "umdk_cam_op_lib"
OPS = ("get_dispatch_layout", "moe_dispatch_prefill", "moe_combine_prefill", "fused_deep_moe")
#: room kept free on a host beyond the artifacts themselves
SPACE_MARGIN = 16 * 1024 * 1024
RELAY_STREAM_CHUNK = 256 * 1024

__all__ = ["KINDS", "OP_MODULE", "OPS", "RELAY_STREAM_CHUNK", "SPACE_MARGIN", "STATE_VERSION", "VENDOR", "Artifact",
           "HostPlan", "Probe", "expected_state", "pick_for_host", "install_run_script", "parse_probe",
           "parse_run_output", "parse_cpu", "parse_record", "pip_argv", "installer_bin", "probe_script",
           "resolve_artifacts", "space_problem", "state_script", "vendor_of",
           "venv_script", "verify_argv", "warm_verify_argv", "go_script", "warm_go_path", "dry_run_plan"]


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


def _check_count(env: EnvConfig, kind: str, pattern: str, names: list[str]) -> None:
    """One match per kind, except several ``CAM_<soc>_<os>_<arch>.run`` of one output folder
    (deploy picks each host's, :mod:`framework.deploy.platform`)."""
    if len(names) == 1:
        return
    if kind != "run_package":
        hint = ""
    elif all(parse_run_name(n) is not None for n in names):
        return
    else:
        hint = " (several .run files are allowed when each is named CAM_<soc>_<os>_<arch>.run)"
    raise ConfigError(env.source, f"artifacts.{kind}", f"{pattern!r} matches {len(names)} files, "
                      f"expected exactly one: {', '.join(names)}{hint}")


def _resolve_kind(env: EnvConfig, kind: str, pattern: str) -> list[Artifact]:
    """The files ``pattern`` (``artifacts.<kind>``) matches, checked and hashed."""
    matches = [Path(p) for p in sorted(glob.glob(pattern)) if Path(p).is_file()]
    if not matches:
        raise ConfigError(env.source, f"artifacts.{kind}", f"{pattern!r} matches no file")
    _check_count(env, kind, pattern, [m.name for m in matches])
    _check_suffix(env, kind, matches)
    return [Artifact(kind, m, sha256_file(m), m.stat().st_size) for m in matches]


def _check_suffix(env: EnvConfig, kind: str, matches: Sequence[Path]) -> None:
    """Every file of ``artifacts.wheel`` is a ``.whl``, every other one a ``.run``."""
    suffix = ".whl" if kind == "wheel" else ".run"
    wrong = [m for m in matches if m.suffix != suffix]
    if wrong:
        raise ConfigError(env.source, f"artifacts.{kind}", f"{wrong[0].name!r} is not a {suffix} file")


def resolve_artifacts(env: EnvConfig, kinds: Sequence[str] = KINDS) -> list[Artifact]:
    """Resolve the env's artifact globs: exactly one file each, hashed.

    ``run_package`` may match several ``CAM_<soc>_<os>_<arch>.run`` (one per platform; :func:`pick_for_host`
    chooses). Raises ``ConfigError`` naming ``artifacts.<kind>`` when a pattern matches nothing or more than one
    file otherwise, or when nothing is configured at all.
    """
    found = [a for kind in kinds if (pattern := getattr(env.artifacts, kind))
             for a in _resolve_kind(env, kind, pattern)]
    if not found:
        raise ConfigError(env.source, "artifacts", "neither run_package nor wheel is set: nothing to deploy")
    return found


def pick_for_host(artifacts: Sequence[Artifact], host: Platform) -> tuple[list[Artifact], str | None]:
    """The artifacts for one host: the wheel and the ``.run`` built for ``host`` (and a note when picked among
    several). Raises ``ValueError`` with the mismatch when no ``.run`` is for this host."""
    runs = [a for a in artifacts if a.kind == "run_package"]
    if not runs:
        return list(artifacts), None
    choice = choose([a.name for a in runs], host)
    if choice.index is None:
        raise ValueError(choice.error)
    chosen = runs[choice.index]
    return [a for a in artifacts if a.kind != "run_package" or a is chosen], choice.note


@dataclass(frozen=True)
class HostPlan:
    """Where everything goes on one host (all paths absolute, POSIX; from its :class:`HostLayout`)."""

    host: str
    workdir: str
    python: str
    venv: bool
    install_path: str
    manage_ip: str
    cann_set_env: str | None = None
    soc: str = "cpu"
    extra_set_env: tuple[str, ...] = ()

    @classmethod
    def for_spec(cls, spec: HostSpec, env: EnvConfig) -> HostPlan:
        require_cann(env, spec)
        return cls(
            host=spec.name, workdir=spec.workdir.rstrip("/") or "/", python=spec.python, venv=spec.venv,
            install_path=spec.install_path, manage_ip=spec.manage_nic.ip,
            cann_set_env=env.cann.set_env if env.cann else None, soc=spec.npu.soc, extra_set_env=extra_of(env),
        )

    @property
    def layout(self) -> HostLayout:
        return HostLayout(self.workdir, self.install_path)

    def stage(self, art: Artifact) -> str:
        return self.layout.stage(art.sha256)

    def remote_path(self, art: Artifact) -> str:
        return self.layout.artifact(art.sha256, art.name)

    @property
    def venv_dir(self) -> str:
        return self.layout.venv

    @property
    def interpreter(self) -> str:
        return self.layout.venv_python if self.venv else self.python

    @property
    def state_file(self) -> str:
        return self.layout.state_file

    def bin_path(self, name: str, sha: str) -> str:
        return self.layout.bin(name, sha)

    def vendor_set_env(self, vendor: str = VENDOR) -> str:
        return self.layout.vendor_set_env(vendor)


def expected_state(plan: HostPlan, artifacts: Sequence[Artifact]) -> dict[str, Any]:
    """What the state file must say for the host to count as deployed with ``artifacts``."""
    return DeployState({a.kind: a.sha256 for a in artifacts}, plan.install_path, plan.interpreter).expected()


@dataclass
class Probe:
    """What one round trip told about a host (:func:`probe_script`, :func:`parse_probe`)."""

    have: set[str] = field(default_factory=set)
    state: dict[str, Any] | None = None
    free: int | None = None
    vendor_trees: list[str] = field(default_factory=list)
    interpreter_ok: bool = False
    relay_ok: bool = False
    installer_ok: bool = False
    os_id: str | None = None
    arch: str | None = None
    #: without a venv: the sha256 of the op library's RECORD in the configured python (None: not installed)
    installed_record: str | None = None


#: the records of :func:`probe_script` (``@@<tag>[ <value>]``, :mod:`framework.remote.sections`)
HAVE_TAG = "have"  # @@have <sha256>: the artifact is staged and verified
FREE_TAG = "free"  # @@free <bytes>: free space in the workdir
TREE_TAG = "tree"  # @@tree <path>: a vendors/*/bin/set_env.bash under the install path
INTERP_TAG = "interp"  # @@interp: the interpreter is executable
RELAY_TAG = "relay"  # @@relay: the relay program is on the host
INSTALLER_TAG = "wheelinst"  # @@wheelinst: the wheel installer is on the host
OS_TAG = "os"  # @@os <ID>: ID= of /etc/os-release, as UMDK's compile_ascend_proj.sh reads it for the .run name
ARCH_TAG = "arch"  # @@arch <uname -m>
RECORD_TAG = "record"  # @@record <sha256>: the op library's installed RECORD, without a venv (RECORD_CODE)


def probe_script(plan: HostPlan, artifacts: Sequence[Artifact], relay_bin: str | None = None,
                 installer: str | None = None) -> ShellScript:
    """One shell script answering everything deploy needs to decide, as tagged records.

    It starts with the workdir's guard (:meth:`HostLayout.guard_script`: an unsafe workdir ends it with
    an ``@@unsafe`` record); a staged artifact, the venv's interpreter, the relay program (``relay_bin``) and
    the wheel installer (``installer``, :func:`installer_bin`) count as present only when they hash (or
    resolve) to what they must be, so a tampered one is replaced.
    """
    q = commands.quote
    layout = plan.layout
    parts = [layout.guard_script(), *(_staged_part(plan, a) for a in artifacts)]
    parts.append(DeployState.read_script(layout))
    parts.append(f"free=$(df -Pk {q(plan.workdir)} | awk 'NR==2 {{print $4 * 1024}}'); "
                 "[ -n \"$free\" ] && " + sh_tag(FREE_TAG, '"$free"'))
    parts.append(layout.vendor_glob_script(TREE_TAG))
    parts.append(f"{interpreter_ok(plan)} && {sh_tag(INTERP_TAG)}")
    parts += _record_parts(plan, artifacts)
    # the .run's name: os_id=$(grep ^ID= /etc/os-release | cut -d= -f2 | tr -d '"'), arch=$(uname -m)
    parts.append("id=$(grep '^ID=' /etc/os-release 2>/dev/null | head -n 1 | cut -d= -f2 | tr -d '\"'); "
                 + sh_tag(OS_TAG, '"${id:-linux}"'))
    parts.append(sh_tag(ARCH_TAG, '"$(uname -m)"'))
    if relay_bin:
        parts.append(_shipped_part(relay_bin, RELAY_TAG))
    if installer:
        parts.append(_shipped_part(installer, INSTALLER_TAG))
    return ShellScript("; ".join(f"{{ {p}; }}" if i else p for i, p in enumerate(parts)) + "; true")


def _record_parts(plan: HostPlan, artifacts: Sequence[Artifact]) -> list[str]:
    """Without a venv, sh tagging the hash of the op library's installed RECORD: the configured
    python is shared with whatever else installs there, so what it holds is judged by hash."""
    if plan.venv or not any(a.kind == "wheel" for a in artifacts):
        return []
    q = commands.quote
    rec = f"$({q(plan.interpreter)} -c {q(RECORD_CODE)} 2>/dev/null | sed -n 's/^CAMIT-RECORD //p')"
    return [f"rec={rec}; [ -n \"$rec\" ] && " + sh_tag(RECORD_TAG, '"$rec"')]


def _staged_part(plan: HostPlan, art: Artifact) -> str:
    """sh tagging ``art`` as staged when its stage marker is there and its file hashes right."""
    sha_ok = sh_sha_ok(plan.remote_path(art), art.sha256, hasher(plan, art))
    stage_ok = commands.quote(plan.layout.stage_ok(art.sha256))
    return f"[ -f {stage_ok} ] && {sha_ok} && " + sh_tag(HAVE_TAG, art.sha256)


def _shipped_part(path: str, tag: str) -> str:
    """sh tagging the shipped program ``path`` as present when it hashes to its name's sha256."""
    return f"{sh_sha_ok(path, bin_sha(path))} && {sh_tag(tag)}"


def hasher(plan: HostPlan, art: Artifact) -> str | None:
    """The interpreter that hashes ``art`` on the host (:func:`~framework.remote.layout.sh_sha_ok`): the host's
    python for an artifact of ``BIG_FILE`` or more, else None (``sha256sum``)."""
    return plan.python if art.size >= BIG_FILE else None


def bin_sha(path: str) -> str:
    """The sha256 a shipped program must have: the one its content-addressed name was made from
    (:meth:`HostLayout.bin` keeps 12 hex digits; the full digest comes from :func:`framework.remote.script`)."""
    name = path.rsplit("/", 1)[-1]
    stem, _, ext = name.rpartition(".")
    base = stem.rsplit("-", 1)[0] + "." + ext
    return remote.script(base)[1]


def interpreter_ok(plan: HostPlan) -> str:
    """sh test: the interpreter is executable and, for a venv, resolves to the host's python (a venv's
    ``bin/python`` is a symlink to the real executable behind ``python``, shims and bare names included;
    anything else there is not run, the venv is rebuilt)."""
    q = commands.quote
    test = f"[ -x {q(plan.interpreter)} ]"
    if plan.venv:
        real = f"$({q(plan.python)} -I -S -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)"
        test += f" && [ \"$(readlink -f -- {q(plan.interpreter)})\" = \"{real}\" ]"
    return f"{{ {test}; }}"


def _note_free(probe: Probe, value: str) -> None:
    """The workdir's free bytes (a number the host printed; anything else is ignored)."""
    try:
        probe.free = int(float(value))
    except ValueError:
        pass


def _flag(name: str) -> Callable[[Probe, str], None]:
    """A record whose presence sets the probe's boolean ``name``."""
    return lambda probe, _value: setattr(probe, name, True)


def _text(name: str) -> Callable[[Probe, str], None]:
    """A record whose value (stripped) is the probe's ``name``."""
    return lambda probe, value: setattr(probe, name, value.strip())


#: what each probe record sets (other tags are ignored)
_PROBE_RECORDS: dict[str, Callable[[Probe, str], None]] = {
    HAVE_TAG: lambda probe, value: probe.have.add(value.strip()),
    FREE_TAG: _note_free,
    TREE_TAG: lambda probe, value: probe.vendor_trees.append(value.strip()),
    INTERP_TAG: _flag("interpreter_ok"),
    RELAY_TAG: _flag("relay_ok"),
    INSTALLER_TAG: _flag("installer_ok"),
    OS_TAG: _text("os_id"),
    ARCH_TAG: _text("arch"),
    RECORD_TAG: _text("installed_record"),
}


def parse_probe(stdout: str) -> Probe:
    """The :class:`Probe` of one host from the records its probe script printed."""
    records = read_records(stdout)
    probe = Probe(state=DeployState.from_records(records))
    for rec in records:
        if rec.tag in _PROBE_RECORDS:
            _PROBE_RECORDS[rec.tag](probe, rec.value)
    return probe


def space_problem(plan: HostPlan, missing: Sequence[Artifact], free: int | None) -> str | None:
    """Why ``missing`` cannot be staged in the host's workdir (free space), or None."""
    need = sum(a.size for a in missing)
    if missing and free is not None and free < need + SPACE_MARGIN:
        return f"not enough space in {plan.workdir}: need {mb(need + SPACE_MARGIN)}, free {mb(free)}"
    return None


def install_run_script(plan: HostPlan, art: Artifact) -> ShellScript:
    """Run the ``.run`` like CANN packages: absolute ``--install-path``, ``--quiet``, no stdin, under
    ``umask 077`` (what it extracts and writes is never readable or writable by a co-tenant while it
    installs); a custom install path outside the workdir must pass the workdir's guard first (``@@unsafe``,
    exit 97)."""
    path = commands.quote(plan.remote_path(art))
    flag = commands.quote(f"--install-path={plan.install_path}")
    check = sh_verified(plan.remote_path(art), art.sha256, "the staged package", hasher(plan, art))
    # a custom install path is judged again right before the installer writes there (as in the probe)
    guard = plan.layout.install_guard().removeprefix("; ")
    return ShellScript(f"umask 077; {guard + '; ' if guard else ''}{check} && chmod 0700 {path} && "
                       f"{path} {flag} --quiet < /dev/null")


_SUCCESS = re.compile(r"^\s*SUCCESS\b")
_ERROR = re.compile(r"^\s*(\[[^\]]*\]\s*)*(ERROR|\[ERROR\])", re.IGNORECASE)


def parse_run_output(stdout: str) -> tuple[bool, str | None]:
    """(success line seen, first ERROR line) from a ``.run`` install's output."""
    lines = stdout.splitlines()
    ok = any(_SUCCESS.match(line) for line in lines)
    err = next((line.strip() for line in lines if _ERROR.match(line) or "ERROR:" in line), None)
    return ok, err


def tree_script(plan: HostPlan) -> ShellScript:
    """sh listing the ``vendors/*/bin/set_env.bash`` under the install path (after a ``.run`` install)."""
    return ShellScript(plan.layout.vendor_glob_script() + "; true")


def venv_script(plan: HostPlan) -> ShellScript:
    """sh building the venv when its interpreter is missing or not the host's python: ``--without-pip``
    (ensurepip was ~15 s of a first deploy per host under load; the wheel goes in with camit's own installer,
    :func:`install_wheel_script`), ``--system-site-packages`` (torch and CANN's python are the host's)."""
    q = commands.quote
    return ShellScript(f"{interpreter_ok(plan)} || {q(plan.python)} -m venv --clear --without-pip "
                       f"--system-site-packages {q(plan.venv_dir)}")


PIP_OPTIONS = ("install", "--force-reinstall", "--no-deps", "--no-index", "--disable-pip-version-check", "-q")


def pip_argv(plan: HostPlan, art: Artifact) -> list[str]:
    """pip run by the interpreter itself: the install without a venv (into the configured python)."""
    return [plan.interpreter, "-m", "pip", *PIP_OPTIONS, plan.remote_path(art)]


#: ``@@cpu`` and then the shell's ``times`` (its own user/sys, then its children's): a step's CPU on the host
CPU_TAG = "cpu"


def with_cpu(script: str) -> str:
    """sh running ``script`` and then printing the CPU seconds it took on the host (the shell and every process
    it waited for: the step's process tree) as an ``@@cpu`` record; the exit status stays ``script``'s."""
    return f"{{ {script}\n}}; rc=$?; {sh_tag(CPU_TAG)}; times; exit $rc"


_TIMES = re.compile(r"(\d+)m(\d+(?:\.\d*)?)s")


def parse_cpu(stdout: str) -> float | None:
    """The CPU seconds of a :func:`with_cpu` step (user + sys of the shell and its children), None if absent."""
    rec = next((r for r in reversed(read_records(stdout)) if r.tag == CPU_TAG), None)
    found = _TIMES.findall(rec.body) if rec is not None else []
    if not found:
        return None
    return round(sum(int(m) * 60 + float(s) for m, s in found), 3)


#: the wheel installer shipped to the hosts (``framework/remote/wheelinst.py``): installs into camit's venv
INSTALLER = "wheelinst.py"


def installer_bin(plan: HostPlan) -> str:
    """Where the wheel installer goes on the host: content-addressed under its workdir (:meth:`HostPlan.bin_path`)."""
    return plan.bin_path(INSTALLER, remote.script(INSTALLER)[1])


def wheelinst_argv(plan: HostPlan, art: Artifact) -> list[str]:
    """The venv's interpreter running the shipped installer on the staged wheel (``-I``: no ``PYTHON*``
    variables, user site or working directory; ``sysconfig`` is then the venv's own scheme). The installer
    checks the wheel's sha256 itself (``--sha256``) on the file it then installs from."""
    return [plan.interpreter, "-I", installer_bin(plan), "--sha256", art.sha256, plan.remote_path(art)]


def install_wheel_script(plan: HostPlan, art: Artifact) -> ShellScript:
    """The staged wheel installed, only when it still hashes to ``art.sha256`` and the interpreter is the one it
    must be: into camit's venv by the shipped installer (:func:`wheelinst_argv`, 0.35 s of CPU for a 64 MiB
    wheel where pip took 1.02 s, side by side in ``bench/deploy.py``; run only when it hashes to the shipped
    one), which hashes the wheel itself, on the open file it installs from (OpenSSL's SHA-256 through hashlib:
    the whole step 0.36 s of CPU for 64 MiB against 0.48 s for ``sha256sum`` and then the installer, side by
    side in ``bench/deploy.py``); without a venv by the configured python's pip (:func:`pip_argv`) after
    ``sha256sum``. A wheel the installer refuses (not matching its RECORD, unsafe
    paths, ``Wheel-Version`` 2) fails the step: there is no fallback to pip."""
    refusal = commands.quote(f"camit: {plan.interpreter} is not {plan.python}: not run")
    interp = f"{{ {interpreter_ok(plan)} || {{ echo {refusal} >&2; exit 3; }}; }}"
    if plan.venv:
        installer = installer_bin(plan)
        install = (f"{sh_verified(installer, bin_sha(installer), 'the wheel installer')} && "
                   + commands.join(wheelinst_argv(plan, art)))
        return ShellScript(f"{interp} && {{ {install}; }}")
    check = sh_verified(plan.remote_path(art), art.sha256, "the staged wheel", hasher(plan, art))
    return ShellScript(f"{check} && {interp} && {{ {commands.join(pip_argv(plan, art))}; }}")


def stage_ok_script(plan: HostPlan, art: Artifact) -> ShellScript:
    """sh marking ``art`` staged and verified (its ``.ok``, written to a fresh name and renamed)."""
    return ShellScript(sh_write_file(plan.layout.stage_ok(art.sha256), art.sha256))


#: Python printing the sha256 of the op library's installed ``RECORD`` (every installed file's hash: what is
#: installed, whoever installed it), or nothing when no distribution is there
RECORD_CODE = (
    "import hashlib\nfrom importlib import metadata as md\n"
    f"try:\n    r = md.distribution({OP_MODULE!r}).read_text('RECORD')\nexcept md.PackageNotFoundError:\n"
    "    r = None\n"
    "print('CAMIT-RECORD', hashlib.sha256(r.encode()).hexdigest() if r else '')\n"
)


def _import_code(plan: HostPlan) -> str:
    """Python importing the op library (torch_npu first on an NPU host) and printing its version and ops."""
    return (
        ("import torch_npu\n" if plan.soc != "cpu" else "")
        + f"import torch, {OP_MODULE} as m\n"
        # the real wheel is a bare extension module without __version__: its version is the distribution's
        + "from importlib import metadata as md\n"
        + "try:\n    v = md.version(m.__name__)\nexcept md.PackageNotFoundError:\n    v = 'unknown'\n"
        + "print('CAMIT-VERSION', v)\n"
        + f"ns = torch.ops.{OP_MODULE}\n"
        + f"print('CAMIT-OPS', ','.join(n for n in {OPS!r} if hasattr(ns, n)))\n"
        + ("" if plan.venv else RECORD_CODE)
    )


def _verify_steps(plan: HostPlan, vendor: str | None) -> list[str]:
    q = commands.quote
    # importing torch and the op library writes caches under TMPDIR: keep them in the workdir
    tmp = plan.layout.tmp
    return [f"mkdir -p {q(tmp)}", f"export TMPDIR={q(tmp)}",
            *env_steps(plan.cann_set_env, plan.extra_set_env, plan.vendor_set_env(vendor) if vendor else None)]


def _opapi_code() -> str:
    """Python checking the vendor's op API as CAM's GetOpApiFuncAddr finds it: dlopen by bare name, then look up
    each aclnn symbol; and printing ``ASCEND_CUSTOM_OPP_PATH`` (:func:`vendor_env_problems` reads both)."""
    return (
        "import ctypes, os\n"
        "print('CAMIT-OPP', os.environ.get('ASCEND_CUSTOM_OPP_PATH', ''))\n"
        "try:\n"
        f"    lib = ctypes.CDLL({OPAPI_LIBRARY!r})\n"
        "except OSError as exc:\n"
        "    print('CAMIT-OPAPI-ERROR', str(exc).replace(chr(10), ' '))\n"
        "else:\n"
        f"    print('CAMIT-OPAPI-MISSING', ','.join(s for s in {aclnn_symbols(OPS)!r} if not hasattr(lib, s)))\n"
    )


def verify_argv(plan: HostPlan, vendor: str | None) -> list[str]:
    """bash that sources CANN, the extra scripts and the vendor ``set_env`` (:func:`framework.setenv.env_steps`),
    checks ``libcust_opapi.so`` and ``ASCEND_CUSTOM_OPP_PATH`` (with a vendor), and imports the op library."""
    q = commands.quote
    opapi = _opapi_code() if vendor else ""
    steps = _verify_steps(plan, vendor)
    steps.append(f"{q(plan.interpreter)} -c {q(opapi + _import_code(plan))}")
    return ["bash", "-c", " && ".join(steps)]


#: how long a warm verify (:func:`warm_verify_argv`) waits for its go file before it gives up (the install then
#: runs the plain :func:`verify_argv`)
WARM_WAIT = 600
#: the go file's words: import the op library now / exit without importing it
GO, STOP = "go", "stop"


def warm_go_path(plan: HostPlan, nonce: str) -> str:
    return f"{plan.layout.tmp}/verify-{nonce}.go"


def warm_verify_argv(plan: HostPlan, go_path: str, vendor: str | None = None) -> list[str]:
    """:func:`verify_argv` started before the wheel is installed: the same bash (CANN, the extra scripts and,
    with a ``vendor``, its ``set_env`` sourced; the op API checked), then the interpreter imports torch (and
    torch_npu) — the bulk of the check's CPU and time — and waits for ``go_path``. Its word ``go`` (written once
    the wheel is in, :func:`go_script`) makes it import the op library as :func:`verify_argv` does (a ``.pth``
    file the wheel brings is not read: the real wheel has none); anything else ends it without;
    :data:`WARM_WAIT` passing ends it with ``CAMIT-WARM-ABANDONED``.

    Without a ``.run`` it starts while the artifacts upload; with one, once the ``.run`` made the vendor
    ``set_env`` it sources, beside the wheel's pip install."""
    q = commands.quote
    wait = (
        "import os, sys, time\n"
        "go, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])\n"
        "while not os.path.exists(go):\n"
        "    if time.monotonic() > deadline:\n"
        "        print('CAMIT-WARM-ABANDONED'); sys.exit(5)\n"
        "    time.sleep(0.02)\n"
        "with open(go) as f:\n"
        "    word = f.read().strip()\n"
        "os.unlink(go)\n"
        f"if word != {GO!r}:\n"
        "    sys.exit(0)\n"
        "import importlib\n"
        "importlib.invalidate_caches()  # the wheel went into site-packages after this interpreter listed it\n"
    )
    pre = ("import torch_npu\n" if plan.soc != "cpu" else "") + "import torch\n"
    code = (_opapi_code() if vendor else "") + pre + wait + _import_code(plan)
    steps = _verify_steps(plan, vendor)
    steps.append(f"exec {q(plan.interpreter)} -c {q(code)} {q(go_path)} {WARM_WAIT}")
    return ["bash", "-c", " && ".join(steps)]


def go_script(plan: HostPlan, go_path: str, word: str) -> ShellScript:
    """sh handing a warm verify its word (:func:`warm_verify_argv`), written whole (renamed into place)."""
    return ShellScript(f"mkdir -p {commands.quote(plan.layout.tmp)} && {sh_write_file(go_path, word)}")


def parse_verify(stdout: str) -> tuple[str | None, list[str] | None]:
    """(installed version, ops found) from :func:`verify_argv`'s output (None: line missing)."""
    version = ops = None
    for line in stdout.splitlines():
        if line.startswith("CAMIT-VERSION "):
            version = line.split(" ", 1)[1].strip()
        elif line.startswith("CAMIT-OPS "):
            ops = [o for o in line.split(" ", 1)[1].strip().split(",") if o]
    return version, ops


def parse_record(stdout: str) -> str | None:
    """The installed ``RECORD``'s sha256 a ``CAMIT-RECORD`` line gives (:data:`RECORD_CODE`), None if absent."""
    found = [line.split(" ", 1)[1].strip() for line in stdout.splitlines() if line.startswith("CAMIT-RECORD ")]
    return found[-1] if found and found[-1] else None


def vendor_env_problems(plan: HostPlan, vendor: str, stdout: str) -> list[str]:
    """What :func:`verify_argv` found wrong in the vendor's environment: ``libcust_opapi.so`` not loadable by bare
    name or missing an op's ``aclnn*`` symbols, ``ASCEND_CUSTOM_OPP_PATH`` not starting with the vendor dir."""
    opp, problems = _opapi_findings(stdout)
    return problems + _opp_path_problems(opp, vendor_dir_of(plan.vendor_set_env(vendor)))


def _opapi_findings(stdout: str) -> tuple[str | None, list[str]]:
    """The ``ASCEND_CUSTOM_OPP_PATH`` the verify step printed (None: no such line) and what it found
    wrong with ``libcust_opapi.so``."""
    problems, opp = [], None
    for line in stdout.splitlines():
        tag, _, value = line.partition(" ")
        if tag == "CAMIT-OPP":
            opp = value.strip()
        elif tag == "CAMIT-OPAPI-ERROR":
            problems.append(f"dlopen({OPAPI_LIBRARY}) by bare name failed after sourcing set_env: {value.strip()}")
        elif tag == "CAMIT-OPAPI-MISSING" and value.strip():
            problems.append(f"{OPAPI_LIBRARY} lacks {value.strip().replace(',', ', ')}")
    return opp, problems


def _opp_path_problems(opp: str | None, vendor_dir: str) -> list[str]:
    """What is wrong with ``ASCEND_CUSTOM_OPP_PATH``: missing, or not under ``vendor_dir`` first."""
    if opp is None:
        return ["the verify step printed no ASCEND_CUSTOM_OPP_PATH"]
    if opp == vendor_dir or opp.startswith((vendor_dir + ":", vendor_dir + "/")):
        return []
    return [f"ASCEND_CUSTOM_OPP_PATH={opp or '(empty)'} does not start with the vendor dir "
            f"{vendor_dir}"]


def state_script(plan: HostPlan, state: Mapping[str, Any]) -> ShellScript:
    return ShellScript(DeployState.write_script(plan.layout, state))


def mb(n: float) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


def _dry_run_steps(plan: HostPlan, runs: Sequence[Artifact], wheel: Artifact | None) -> list[dict[str, str]]:
    """Every step the install can take on ``plan``'s host, in order (see :func:`dry_run_plan`)."""
    several = len(runs) > 1
    steps: list[dict[str, str]] = []

    def step(name: str, command: str, when: str = "") -> None:
        steps.append({"step": name, "command": str(command), **({"when": when} if when else {})})

    if plan.venv and wheel is not None:
        step("venv", venv_script(plan), "the venv's interpreter is missing or not the host's python")
        steps.append({"step": "ship-installer", "sends": installer_bin(plan),
                      "when": "the probe did not find the wheel installer there with its sha256"})
    step("clear-state", commands.join(DeployState.clear_argv(plan.layout)))
    for art in runs:
        step("install-run", install_run_script(plan, art),
             f"{art.name} is the .run for the host's platform" if several else "")
    if runs:
        step("check-tree", tree_script(plan))
    if wheel is not None:
        step("install-wheel", install_wheel_script(plan, wheel))
        step("verify", commands.join(verify_argv(plan, VENDOR if runs else None)))
    # its content (the vendor, the installed version, the time) is known only once the steps ran
    steps.append({"step": "write-state", "writes": plan.state_file,
                  "when": "last, once every step passed: the artifacts' sha256, interpreter, vendor, version"})
    return steps


def dry_run_plan(plan: HostPlan, artifacts: Sequence[Artifact]) -> dict[str, Any]:
    """What deploy would send and run on one host, decided without contacting it (``camit deploy --dry-run``).

    Every step the install can take, in order, with its exact command (``when`` says which ones run only in
    some cases; the install runs each inside :func:`with_cpu`, for its CPU time on the host): the probe that decides
    what is sent and whether anything is installed is left out, as are
    its findings (staged hashes, the recorded state, the host's OS and arch: which of several ``.run`` files
    fits, the vendor the ``.run`` makes: the import check is shown for :data:`VENDOR`).
    """
    runs = [a for a in artifacts if a.kind == "run_package"]
    wheel = next((a for a in artifacts if a.kind == "wheel"), None)
    steps = _dry_run_steps(plan, runs, wheel)
    return {
        "host": plan.host, "workdir": plan.workdir, "install_path": plan.install_path, "python": plan.python,
        "venv": plan.venv_dir if plan.venv else None, "interpreter": plan.interpreter, "state_file": plan.state_file,
        "artifacts": [_dry_run_artifact(plan, a) for a in artifacts],
        "run_package_choice": _run_choice(plan, len(runs)),
        "steps": steps,
    }


def _dry_run_artifact(plan: HostPlan, art: Artifact) -> dict[str, Any]:
    """One artifact of the dry run: what it is, and where it comes from and goes."""
    return {"kind": art.kind, "name": art.name, "sha256": art.sha256, "size": art.size,
            "local": str(art.path), "remote": plan.remote_path(art)}


def _run_choice(plan: HostPlan, runs: int) -> str | None:
    """How the host's ``.run`` is picked among ``runs`` of them (None: there is one at most)."""
    if runs <= 1:
        return None
    return (f"one of {runs} .run files, picked on the host's platform (npu.soc {plan.soc}, "
            "os-release ID and uname -m from the probe)")
