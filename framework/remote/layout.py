"""The host-side contract: where camit keeps everything on a host; what deploy-state.json says.

Every path camit writes under a host's workdir is named here, once (:class:`HostLayout`);
:class:`DeployState` is the install record. The layout and when a workdir is trusted:
docs/internals/remote-and-lab.md. Standard library only.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from framework.remote.sections import Record, read_records, sh_tag

STATE_FILE = "deploy-state.json"
STATE_VERSION = 1
#: the tag of the probe record carrying the state document (``@@state <json>``, :mod:`~framework.remote.sections`)
STATE_TAG = "state"
VENDOR = "CAM"
DEFAULT_WORKDIR = "/var/tmp/camit"
#: the record of :meth:`HostLayout.guard_script` refusing a workdir (``@@unsafe <path>: <why>``)
UNSAFE_TAG = "unsafe"
#: the exit status of :meth:`HostLayout.guard_script` refusing a workdir
UNSAFE_RC = 97


class _HasWorkdir(Protocol):
    @property
    def workdir(self) -> str: ...


def _q(word: str) -> str:
    return shlex.quote(str(word))


@dataclass(frozen=True)
class HostLayout:
    """Every path on one host (absolute, POSIX) below its ``workdir``; ``install_path`` for the op package."""

    workdir: str
    install_path: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "workdir", self.workdir.rstrip("/") or "/")
        if not self.install_path:
            object.__setattr__(self, "install_path", self.join("opp"))

    @classmethod
    def of(cls, spec: _HasWorkdir) -> HostLayout:
        """The layout of a ``HostSpec`` (or anything with ``workdir`` and, optionally, ``install_path``)."""
        return cls(str(spec.workdir or DEFAULT_WORKDIR), str(getattr(spec, "install_path", "") or ""))

    def join(self, *parts: str) -> str:
        return posixpath.join(self.workdir, *parts)

    # -- trust ----------------------------------------------------------------------------------
    def guard_script(self) -> str:
        """sh (one line, for the start of a round trip): make the workdir and refuse an unsafe one.

        Sets ``umask 077`` for the rest of the script, creates the missing components (``0700``),
        then checks from ``/`` down: an ancestor must be owned by root or the SSH user (the link
        itself too, when it is a symlink) and not group/other-writable unless sticky; the workdir
        itself must be a real directory (not a symlink) owned by the user and not group/other-writable
        (it is then made ``0700``). A refusal prints ``@@unsafe <path>: <why>`` and exits
        :data:`UNSAFE_RC` before anything is written there. Uses GNU/busybox ``stat -c``.
        """
        w = _q(self.workdir)
        bad = f"{{ printf '%s%s: %s\\n' '@@{UNSAFE_TAG} ' \"$1\" \"$2\"; exit {UNSAFE_RC}; }}"
        return (
            f"umask 077; _cw={w}; _me=$(id -u); "
            f"_cbad() {bad}; "
            "_cown() { [ \"$1\" = 0 ] || [ \"$1\" = \"$_me\" ]; }; "
            # the walk from / down, over what exists (run before mkdir -p follows anything, and after)
            "_cchk() { _cp=''; _crest=${_cw#/}; "
            "while [ -n \"$_crest\" ]; do "
            "_cc=${_crest%%/*}; [ \"$_cc\" = \"$_crest\" ] && _crest='' || _crest=${_crest#*/}; "
            "[ -z \"$_cc\" ] && continue; _cp=\"$_cp/$_cc\"; [ \"$_cp\" = \"$_cw\" ] && break; "
            "[ -e \"$_cp\" ] || [ -L \"$_cp\" ] || return 0; "
            "if [ -L \"$_cp\" ]; then _o=$(stat -c %u -- \"$_cp\"); "
            "_cown \"$_o\" || _cbad \"$_cp\" \"is a symlink owned by uid $_o\"; fi; "
            "_o=$(stat -L -c %u -- \"$_cp\" 2>/dev/null) || _cbad \"$_cp\" 'cannot be read'; "
            "_cown \"$_o\" || _cbad \"$_cp\" \"is owned by uid $_o (not root or uid $_me)\"; "
            "_m=0$(stat -L -c %a -- \"$_cp\"); "
            "[ $((_m & 022)) -ne 0 ] && [ $((_m & 01000)) -eq 0 ] && "
            "_cbad \"$_cp\" \"is writable by group/others (mode $(stat -L -c %a -- \"$_cp\")) "
            "without the sticky bit\"; "
            "done; "
            "[ -L \"$_cw\" ] && _cbad \"$_cw\" \"is a symlink (to $(readlink -- \"$_cw\")), not a directory\"; "
            "[ -e \"$_cw\" ] || return 0; "
            "[ -d \"$_cw\" ] || _cbad \"$_cw\" 'is not a directory'; "
            "_o=$(stat -c %u -- \"$_cw\"); "
            "[ \"$_o\" = \"$_me\" ] || _cbad \"$_cw\" \"is owned by uid $_o, not by the SSH user (uid $_me)\"; "
            "_m=0$(stat -c %a -- \"$_cw\"); "
            "[ $((_m & 022)) -ne 0 ] && "
            "_cbad \"$_cw\" \"is writable by group/others (mode $(stat -c %a -- \"$_cw\"))\"; "
            "return 0; }; "
            "_cchk; mkdir -p -- \"$_cw\" 2>/dev/null; "
            "[ -d \"$_cw\" ] || _cbad \"$_cw\" 'cannot be created as a directory'; "
            "_cchk; chmod 0700 -- \"$_cw\""
        ) + self.install_guard()

    def install_guard(self) -> str:
        """sh (``; ...``): a custom ``install_path`` outside the workdir (its ``set_env.bash`` is sourced as
        root) passes :func:`trust_tree_sh`; empty when it lies inside the workdir (guarded already)."""
        inside = self.install_path == self.workdir or self.install_path.startswith(self.workdir.rstrip("/") + "/")
        return "" if inside else f"; {trust_functions_sh()}; {trust_tree_sh(self.install_path)}"

    # -- deploy ---------------------------------------------------------------------------------
    def stage(self, sha256: str) -> str:
        """The folder of one artifact, by content."""
        return self.join("artifacts", sha256)

    def artifact(self, sha256: str, name: str) -> str:
        return f"{self.stage(sha256)}/{name}"

    def stage_ok(self, sha256: str) -> str:
        """Written once the artifact in ``stage(sha256)`` is verified."""
        return f"{self.stage(sha256)}/.ok"

    @property
    def venv(self) -> str:
        return self.join("venv")

    @property
    def venv_python(self) -> str:
        return f"{self.venv}/bin/python"

    @property
    def state_file(self) -> str:
        return self.join(STATE_FILE)

    @property
    def tmp(self) -> str:
        return self.join("tmp")

    def bin(self, name: str, sha256: str) -> str:
        """A shipped program, content-addressed: ``bin/relay-<sha12>.py``."""
        stem, _, ext = name.rpartition(".")
        return self.join("bin", f"{stem}-{sha256[:12]}.{ext}")

    @property
    def vendors(self) -> str:
        return f"{self.install_path}/vendors"

    def vendor_set_env(self, vendor: str = VENDOR) -> str:
        return f"{self.vendors}/{vendor}/bin/set_env.bash"

    def vendor_of(self, set_envs: Sequence[str]) -> str | None:
        """The vendor to use from found ``vendors/*/bin/set_env.bash``: ``CAM`` when present, else the only one."""
        return vendor_of(set_envs, self.install_path)

    def vendor_glob_script(self, tag: str = "") -> str:
        """sh printing every ``vendors/*/bin/set_env.bash`` there is: a ``@@<tag> <path>`` record each, or
        the bare path without ``tag``."""
        say = sh_tag(tag, '"$f"') if tag else 'echo "$f"'
        return (f"for f in {_q(self.install_path)}/vendors/*/bin/set_env.bash; "
                f"do [ -f \"$f\" ] && {say}; done")

    # -- launch ---------------------------------------------------------------------------------
    def target(self, sha256: str, name: str) -> str:
        """A launch target script copied from the controller."""
        return self.join("targets", sha256[:12], name)

    @property
    def runs(self) -> str:
        return self.join("runs")

    def run_dir(self, launch_id: str) -> str:
        return f"{self.runs}/{launch_id}"

    # -- suites and coverage --------------------------------------------------------------------
    def suite(self, sha256: str) -> str:
        """A shipped rank-side tree (``.ok`` inside once unpacked)."""
        return self.join("suites", sha256[:16])

    def scratch(self, name: str) -> str:
        """A temporary file directly in the workdir (archives on their way to the controller)."""
        return self.join(name)


def trust_functions_sh() -> str:
    """sh defining ``_ctrust <dir>`` and ``_cmine <file>`` (plus ``_me``, ``_cbad``, ``_cown``, ``_cdir``,
    ``_clink``): the guard of a tree camit places outside its workdir (``samepath``, a custom ``install_path``).

    ``_ctrust`` judges one folder (call it for every ancestor, top down): when it exists it must be a real
    directory owned by root or the SSH user, and not group/other-writable unless sticky (``_cdir``). A
    symlink (``/home -> /data/home``) is accepted only when root owns the link itself (its parent, judged
    before it, passed) and every folder of its resolved target passes ``_cdir`` (``_clink``).
    ``_cmine`` judges a file that is kept: a regular file (no symlink), owned by the SSH user, not
    group/other-writable. A refusal prints ``@@unsafe <path>: <why>`` and exits :data:`UNSAFE_RC`.
    """
    bad = f"{{ printf '%s%s: %s\\n' '@@{UNSAFE_TAG} ' \"$1\" \"$2\"; exit {UNSAFE_RC}; }}"
    return (
        f"_me=$(id -u); _cbad() {bad}; "
        "_cown() { [ \"$1\" = 0 ] || [ \"$1\" = \"$_me\" ]; }; "
        "_cdir() { [ -L \"$1\" ] && _cbad \"$1\" 'is a symlink'; [ -e \"$1\" ] || return 0; "
        "[ -d \"$1\" ] || _cbad \"$1\" 'is not a directory'; "
        "_o=$(stat -c %u -- \"$1\") || _cbad \"$1\" 'cannot be read'; "
        "_cown \"$_o\" || _cbad \"$1\" \"is owned by uid $_o (not root or the SSH user, uid $_me)\"; "
        "_m=0$(stat -c %a -- \"$1\"); [ $((_m & 022)) -ne 0 ] && [ $((_m & 01000)) -eq 0 ] && "
        "_cbad \"$1\" \"is writable by group/others (mode $(stat -c %a -- \"$1\")) without the sticky bit\"; "
        "return 0; }; "
        # a symlinked ancestor: the link root's, then each folder of its target judged as any folder
        "_clink() { _o=$(stat -c %u -- \"$1\") || _cbad \"$1\" 'cannot be read'; "
        "[ \"$_o\" = 0 ] || _cbad \"$1\" \"is a symlink owned by uid $_o (not root)\"; "
        "_t=$(readlink -f -- \"$1\") && [ -n \"$_t\" ] || _cbad \"$1\" 'is a symlink that does not resolve'; "
        "_r=${_t#/}; _p=; while [ -n \"$_r\" ]; do _p=\"$_p/${_r%%/*}\"; "
        "case $_r in */*) _r=${_r#*/} ;; *) _r= ;; esac; _cdir \"$_p\"; done; return 0; }; "
        "_ctrust() { if [ -L \"$1\" ]; then _clink \"$1\"; else _cdir \"$1\"; fi; }; "
        "_cmine() { [ -L \"$1\" ] && _cbad \"$1\" 'is a symlink'; "
        "[ -f \"$1\" ] || _cbad \"$1\" 'is not a regular file'; "
        "_o=$(stat -c %u -- \"$1\"); "
        "[ \"$_o\" = \"$_me\" ] || _cbad \"$1\" \"is owned by uid $_o, not by the SSH user (uid $_me)\"; "
        "_m=0$(stat -c %a -- \"$1\"); [ $((_m & 022)) -ne 0 ] && "
        "_cbad \"$1\" \"is writable by group/others (mode $(stat -c %a -- \"$1\"))\"; return 0; }"
    )


def trust_tree_sh(path: str) -> str:
    """sh: ``_ctrust`` (:func:`trust_functions_sh`) on each existing folder from ``/`` down to ``path``."""
    parts = [p for p in path.split("/") if p]
    return "; ".join(f"_ctrust {_q('/' + '/'.join(parts[: i + 1]))}" for i in range(len(parts))) or ":"


def unsafe_reason(stdout: str) -> str | None:
    """The ``<path>: <why>`` of a :meth:`HostLayout.guard_script` refusal in a round trip's output, or None."""
    for rec in read_records(stdout):
        if rec.tag == UNSAFE_TAG:
            return rec.value.strip()
    return None


def unsafe_message(reason: str) -> str:
    """The one line a refused workdir is reported with (the host name is added by ``HostError``)."""
    return f"refusing the workdir: {reason}"


#: from this size on, :func:`sh_sha_ok` given a ``python`` hashes with it: OpenSSL's SHA-256 through hashlib
#: uses the CPU's SHA instructions (x86 SHA-NI, Armv8 SHA2), coreutils' ``sha256sum`` does not (64 MiB: 0.03 s
#: against 0.15-0.23 s of CPU on the development machine, ``bench/deploy.py``); below it the interpreter's
#: start-up (~20 ms) costs more than ``sha256sum``
BIG_FILE = 8 * 1024 * 1024
#: python printing the sha256 of the file ``sys.argv[1]`` (run ``-I -S``: no site, no environment)
_HASH_PY = ("import hashlib, sys\nh = hashlib.sha256()\nwith open(sys.argv[1], 'rb') as f:\n"
            "    for b in iter(lambda: f.read(1 << 20), b''):\n        h.update(b)\nprint(h.hexdigest())\n")


def sh_sha_ok(path: str, sha256: str, python: str | None = None) -> str:
    """sh test: ``path`` is a regular file (not a symlink) whose sha256 is ``sha256``.

    With ``python`` (the host's interpreter, for files of :data:`BIG_FILE` or more) the hash is computed by it;
    where it cannot run, by ``sha256sum`` as without it."""
    p = _q(path)
    digest = f"sha256sum < {p} 2>/dev/null | cut -c1-64"
    if python is not None:
        digest = f"{_q(python)} -I -S -c {_q(_HASH_PY)} {p} 2>/dev/null || {digest}"
    return f"{{ [ -f {p} ] && [ ! -L {p} ] && [ \"$({digest})\" = {_q(sha256)} ]; }}"


def sh_verified(path: str, sha256: str, what: str, python: str | None = None) -> str:
    """sh: fail (exit 3, a line on stderr naming the file) unless ``path`` hashes to ``sha256``
    (:func:`sh_sha_ok`); for right before ``path`` is run."""
    msg = f"camit: {what} {path} does not match its sha256 {sha256[:12]}: not run"
    return f"{{ {sh_sha_ok(path, sha256, python)} || {{ echo {_q(msg)} >&2; exit 3; }}; }}"


def sh_write_file(path: str, text: str) -> str:
    """sh writing ``text`` (plus a newline) to ``path``: a fresh file made by ``mktemp`` (``O_EXCL``) in the
    same directory, then renamed over ``path`` (a planted symlink at ``path`` is replaced, never followed)."""
    p = _q(path)
    d = _q(posixpath.dirname(path) or "/")
    return (f"{{ _t=$(mktemp {d}/.camit-XXXXXXXX) && printf '%s\\n' {_q(text)} > \"$_t\" && "
            f"mv -f -- \"$_t\" {p} || {{ rm -f -- \"$_t\"; false; }}; }}")


def vendor_of(set_envs: Sequence[str], install_path: str) -> str | None:
    """The vendor directory under ``install_path`` to use: ``CAM`` when present, else the only one there is."""
    prefix = f"{install_path}/vendors/"
    names = [t[len(prefix):].split("/", 1)[0] for t in set_envs if t.startswith(prefix)]
    if VENDOR in names:
        return VENDOR
    return names[0] if len(names) == 1 else None


# -- typed readers of a host's JSON document: a value of another type is empty ------------------
def _text(doc: Mapping[str, Any], key: str) -> str:
    """``doc[key]`` when it is a string, else ``""``."""
    value = doc.get(key)
    return value if isinstance(value, str) else ""


def _opt_text(doc: Mapping[str, Any], key: str) -> str | None:
    """``doc[key]`` when it is a non-empty string, else None."""
    return _text(doc, key) or None


def _strings(value: object) -> tuple[str, ...]:
    """The strings of a JSON list (anything else: none)."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _str_map(value: object) -> dict[str, str]:
    """The string values of a JSON object, by key (anything else: empty)."""
    return {str(k): v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}


def _int(value: object) -> int:
    """A JSON integer (not a bool), else 0."""
    return value if type(value) is int else 0


@dataclass(frozen=True)
class DeployState:
    """``deploy-state.json``: what deploy installed on a host, written last, removed first.

    ``matches`` compares what decides a redeploy (version, artifact hashes, install
    path, interpreter); the rest (vendor, installed version, ops, time) is the record.
    """

    artifacts: Mapping[str, str] = field(default_factory=dict)
    install_path: str = ""
    interpreter: str = ""
    vendor: str | None = None
    installed_version: str | None = None
    ops: tuple[str, ...] = ()
    deployed_at: str | None = None
    version: int = STATE_VERSION

    def expected(self) -> dict[str, Any]:
        """The deciding part of the document."""
        return {"version": self.version, "artifacts": dict(self.artifacts), "install_path": self.install_path,
                "interpreter": self.interpreter}

    def to_doc(self) -> dict[str, Any]:
        return dict(self.expected(), vendor=self.vendor, installed_version=self.installed_version,
                    ops=list(self.ops), deployed_at=self.deployed_at)

    @staticmethod
    def matches(doc: Mapping[str, Any] | None, expected: Mapping[str, Any]) -> bool:
        """Whether the document ``doc`` (as read) records ``expected`` (:meth:`expected`)."""
        doc = doc or {}
        return {k: doc.get(k) for k in expected} == dict(expected)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> DeployState:
        """The state of a read document: a key that is missing or of another type is empty (the file is
        the host's data: ``{}``, or ``{"version": "x"}``, gives an empty state, never an error)."""
        doc = {} if doc is None else doc
        return cls(
            artifacts=_str_map(doc.get("artifacts")), install_path=_text(doc, "install_path"),
            interpreter=_text(doc, "interpreter"), vendor=_opt_text(doc, "vendor"),
            installed_version=_opt_text(doc, "installed_version"), ops=_strings(doc.get("ops")),
            deployed_at=_opt_text(doc, "deployed_at"), version=_int(doc.get("version")),
        )

    # -- reading ----------------------------------------------------------------------------------
    @staticmethod
    def parse(text: str) -> dict[str, Any]:
        """The document in ``text`` (``{}`` when empty, unreadable or not an object)."""
        try:
            doc = json.loads(text) if text.strip() else {}
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    @staticmethod
    def read_script(layout: HostLayout) -> str:
        """sh printing the ``@@state <document on one line>`` record when the file exists (and nothing else)."""
        path = _q(layout.state_file)
        return f"[ -f {path} ] && " + sh_tag(STATE_TAG, f"\"$(tr -d '\\n' < {path})\"")

    @staticmethod
    def from_records(records: Sequence[Record]) -> dict[str, Any] | None:
        """The document from a probe's ``@@state`` record (the last); None without one, ``{}`` when unreadable."""
        found: dict[str, Any] | None = None
        for rec in records:
            if rec.tag == STATE_TAG:
                found = DeployState.parse(rec.value)
        return found

    @staticmethod
    def from_probe(stdout: str) -> dict[str, Any] | None:
        """:meth:`from_records` of a probe's whole output."""
        return DeployState.from_records(read_records(stdout))

    # -- writing ----------------------------------------------------------------------------------
    @staticmethod
    def write_script(layout: HostLayout, doc: Mapping[str, Any]) -> str:
        """sh writing ``doc`` to the state file atomically (a fresh ``mktemp`` file, then ``mv``)."""
        return sh_write_file(layout.state_file, json.dumps(dict(doc), sort_keys=True))

    @staticmethod
    def clear_argv(layout: HostLayout) -> list[str]:
        return ["rm", "-f", "--", layout.state_file]
