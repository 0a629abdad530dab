"""Build the lab's CAM artifacts: the ``umdk_cam_op_lib`` wheel and the ``CAM_<soc>_<os>_<arch>.run``.

Without an NPU the lab deploys what a real CAM build would produce, made from ``standin/``:

* the wheel ``umdk_cam_op_lib-209.0.0b1-py3-none-any.whl`` (the CPU stand-in of the op library), built
  offline with setuptools' PEP 517 backend from a scratch copy of ``standin/`` (the checkout stays clean);
* a makeself ``.run`` named like CANN's, ``CAM_<soc>_<os_id>_<arch>.run`` (``os_id`` = ``ID=`` of
  /etc/os-release, ``arch`` = ``uname -m``), with the CANN custom-op payload: ``install.sh``,
  ``help.info`` and ``vendors/CAM/{bin/set_env.bash, op_api/lib/libcust_opapi.so (placeholder),
  op_api/include/aclnn_*.h, op_impl/…/libcust_opmaster_rt2.0.so, op_proto/…/libcust_opsproto_rt2.0.so,
  version.info}``.

The ``.run`` takes CANN's command line, ``./CAM_x.run --install-path=/abs/path [--quiet]``. Stock makeself
rejects unknown options, so the archive header is the stock ``makeself-header.sh`` patched at build time
(every anchor must match, or the build fails naming it): options the header does not know are
shell-quoted into ``fwdargs`` instead of "Unrecognized flag", ``--quiet`` is honoured by the header *and*
forwarded, and the embedded script runs as ``./install.sh <fwdargs> "$@"``. makeself's own ``--check``,
``--info``, ``--list``, ``--help`` (with our help text) keep working. The installer refuses a relative
path (``ERROR: use absolute path``), installs into ``<path>/vendors/CAM/`` (replacing an older copy, never
prompting), writes ``bin/set_env.bash`` with the absolute vendor path and ends with
``SUCCESS: CAM custom operator package installed to <path>/vendors/CAM``; errors are ``ERROR: …`` lines
on stdout and a non-zero exit.

Fault variants for deploy tests: ``fault="fail"`` (installer prints an ERROR line, installs nothing,
exits 1), ``fault="nosuccess"`` (installs the tree, exits 0, prints no SUCCESS line);
``build_wheel(..., broken_import=True)`` gives ``209.0.0b1+broken`` whose import raises ImportError.
Builds are reproducible (fixed timestamps, owners and packaging date), so unchanged inputs give the same
sha256. CLI: ``python -m framework.artifacts build --out DIR [--soc cpu] [--fault …] [--broken-wheel]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from framework.errors import ArtifactError, FrameworkError

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "standin"
PACKAGE = "umdk_cam_op_lib"
VERSION = "209.0.0b1"
BROKEN_VERSION = VERSION + "+broken"
VENDOR = "CAM"
FAULTS = ("none", "fail", "nosuccess")
OPS = ("fused_deep_moe", "get_dispatch_layout", "moe_dispatch_prefill", "moe_combine_prefill")
ACLNN_APIS = ("aclnnFusedDeepMoe", "aclnnDispatchLayout", "aclnnNotifyDispatch", "aclnnMoeDispatchNormal",
              "aclnnMoeCombineNormal")
#: every timestamp in the artifacts (zip's earliest date, 1980-01-01), for reproducible builds
EPOCH = 315532800
PACKAGING_DATE = "Tue Jan  1 00:00:00 UTC 1980"
HEADER_CANDIDATES = ("/usr/share/makeself/makeself-header.sh", "/usr/share/makeself-header.sh",
                     "/usr/lib/makeself/makeself-header.sh", "/usr/local/share/makeself/makeself-header.sh")


# --------------------------------------------------------------------------- naming
def os_id(os_release: Path = Path("/etc/os-release")) -> str:
    """``ID=`` of /etc/os-release (``linux`` if absent), as CAM's build names its package."""
    try:
        for line in os_release.read_text().splitlines():
            if line.startswith("ID="):
                return line[3:].strip().strip("\"'") or "linux"
    except OSError:
        pass
    return "linux"


def run_package_name(soc: str = "cpu") -> str:
    """``CAM_<soc>_<os_id>_<arch>.run``, e.g. ``CAM_cpu_debian_x86_64.run``."""
    return f"{VENDOR}_{soc}_{os_id()}_{platform.machine()}.run"


# --------------------------------------------------------------------------- the wheel
_BUILD_WHEEL = (
    "import sys\n"
    "from setuptools import build_meta\n"
    "print('CAMIT-WHEEL', build_meta.build_wheel(sys.argv[1]))\n"
)
_BROKEN_INIT = (
    '"""camit fault-injection build of the umdk_cam_op_lib stand-in: importing it fails."""\n\n'
    f'raise ImportError("umdk_cam_op_lib {BROKEN_VERSION} is a deliberately broken build '
    '(camit deploy fault test): import fails")\n'
)


def build_wheel(out: Path, broken_import: bool = False, source: Path = STANDIN) -> Path:
    """Build ``umdk_cam_op_lib-<version>-py3-none-any.whl`` into `out`; returns its path.

    Offline and without build isolation (setuptools of this interpreter), from a scratch copy of
    `source`. With `broken_import` the version is ``209.0.0b1+broken`` and ``import`` raises ImportError.
    """
    if not (source / "pyproject.toml").is_file():
        raise ArtifactError(f"{source}: no pyproject.toml (the umdk_cam_op_lib stand-in source)")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="camit-wheel-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(source, src, ignore=shutil.ignore_patterns(
            "build", "dist", "*.egg-info", "__pycache__", "*.pyc"))
        if broken_import:
            (src / PACKAGE / "_version.py").write_text(f'__version__ = "{BROKEN_VERSION}"\n')
            (src / PACKAGE / "__init__.py").write_text(_BROKEN_INIT)
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH), PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([sys.executable, "-c", _BUILD_WHEEL, str(out)], cwd=src, env=env,
                              capture_output=True, text=True, timeout=300)
        names = [ln.split(" ", 1)[1].strip() for ln in proc.stdout.splitlines() if ln.startswith("CAMIT-WHEEL ")]
        if proc.returncode != 0 or not names:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise ArtifactError(f"building the {PACKAGE} wheel failed (rc={proc.returncode}):\n{tail}")
    wheel = out / names[-1]
    if not wheel.is_file():
        raise ArtifactError(f"setuptools reported {wheel.name} but {wheel} does not exist")
    return wheel


# --------------------------------------------------------------------------- the .run payload
_HELP = """\
CAM custom operator package (camit lab build of UMDK CAM, vendor CAM)
 Install:  ./{name} --install-path=<absolute path> [--quiet]
   installs <path>/vendors/CAM; then: source <path>/vendors/CAM/bin/set_env.bash
   without --install-path the package installs into $ASCEND_OPP_PATH (CANN set_env.sh sourced)
   --quiet   print only errors and the final SUCCESS line
   --version print the package version
"""

_INSTALL_SH = r"""#!/bin/bash
# CAM custom operator package installer (camit lab build; CANN msOpGen install.sh conventions).
#   <pkg>.run --install-path=<absolute path> [--quiet]
# Installs vendors/CAM under the path, writes bin/set_env.bash with the absolute vendor directory and
# ends with a SUCCESS line; every error is an "ERROR: ..." line on stdout and a non-zero exit.
VENDOR=CAM
PKG_VERSION=@VERSION@
FAULT=@FAULT@
quiet=n
install_path=""
path_given=n

info() { [ "$quiet" = y ] || echo "[CAM] [INFO]: $*"; }
fail() { echo "ERROR: $*"; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --install-path=*) install_path="${1#--install-path=}"; path_given=y ;;
        --install-path)
            [ $# -ge 2 ] || fail "--install-path needs a value"
            shift; install_path="$1"; path_given=y ;;
        --quiet|-q) quiet=y ;;
        --install|--full) ;;
        --version) echo "$PKG_VERSION"; exit 0 ;;
        *) fail "unknown option '$1' (usage: --install-path=<absolute path> [--quiet])" ;;
    esac
    shift
done

if [ "$path_given" = n ]; then
    [ -n "$ASCEND_OPP_PATH" ] || fail "no --install-path given and ASCEND_OPP_PATH is not set" \
        "(source CANN's set_env.sh or pass --install-path=<absolute path>)"
    install_path="$ASCEND_OPP_PATH"
fi
[ -n "$install_path" ] || fail "--install-path is empty"
case "$install_path" in
    /*) ;;
    *) fail "use absolute path (--install-path=$install_path)" ;;
esac
while [ "${install_path%/}" != "$install_path" ] && [ "$install_path" != / ]; do install_path="${install_path%/}"; done

if [ "$FAULT" = fail ]; then
    fail "CAM install failed: injected fault (camit build --fault fail); nothing installed"
fi

here=$(cd "$(dirname "$0")" && pwd) || fail "cannot find the extracted package"
[ -d "$here/vendors/$VENDOR" ] || fail "package payload vendors/$VENDOR missing"
target="$install_path/vendors/$VENDOR"
staging="$target.camit-new.$$"
info "installing CAM $PKG_VERSION into $target"
mkdir -p "$install_path/vendors" 2>/dev/null || fail "cannot create $install_path/vendors (permission denied?)"
rm -rf "$staging"
cp -R "$here/vendors/$VENDOR" "$staging" 2>/dev/null \
    || { rm -rf "$staging"; fail "cannot copy the package to $staging"; }

sq="'\''"
quoted="'${target//\'/$sq}'"
cat > "$staging/bin/set_env.bash" <<EOF || { rm -rf "$staging"; fail "cannot write $target/bin/set_env.bash"; }
#!/bin/bash
# CAM vendor environment, written by the CAM installer: source it before importing umdk_cam_op_lib.
cam_vendor_dir=$quoted
export ASCEND_CUSTOM_OPP_PATH="\${cam_vendor_dir}\${ASCEND_CUSTOM_OPP_PATH:+:\${ASCEND_CUSTOM_OPP_PATH}}"
export LD_LIBRARY_PATH="\${cam_vendor_dir}/op_api/lib\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}"
unset cam_vendor_dir
EOF
if [ -e "$target" ]; then
    info "replacing the existing $target"
    rm -rf "$target" || { rm -rf "$staging"; fail "cannot remove the existing $target"; }
fi
mv "$staging" "$target" || { rm -rf "$staging"; fail "cannot move the package into $target"; }
info "ops: @OPS@"
info "source $target/bin/set_env.bash before importing umdk_cam_op_lib (puts $target/op_api/lib on LD_LIBRARY_PATH)"
if [ "$FAULT" = nosuccess ]; then
    exit 0
fi
echo "SUCCESS: CAM custom operator package installed to $target"
exit 0
"""

_SET_ENV_PLACEHOLDER = """\
#!/bin/bash
# Replaced at install time by the CAM installer with the absolute vendor directory.
echo "ERROR: this set_env.bash was not written by the CAM installer" >&2
return 1 2>/dev/null || exit 1
"""


def _payload(root: Path, soc: str, fault: str) -> None:
    """Write the .run payload (install.sh, help.info, vendors/CAM/…) under `root`."""
    arch = platform.machine()
    files: dict[str, str] = {
        "install.sh": _INSTALL_SH.replace("@VERSION@", VERSION).replace("@FAULT@", fault)
                                 .replace("@OPS@", " ".join(OPS)),
        "help.info": _HELP.format(name=run_package_name(soc)),
        f"vendors/{VENDOR}/bin/set_env.bash": _SET_ENV_PLACEHOLDER,
        f"vendors/{VENDOR}/version.info": (
            f"Version={VERSION}\nvendor_name={VENDOR}\nsoc_version={soc}\nos={os_id()}\narch={arch}\n"
            f"ops={','.join(OPS)}\nbuilt_by=camit (CPU stand-in; placeholder libraries)\n"
        ),
        f"vendors/{VENDOR}/op_api/lib/libcust_opapi.so": (
            "camit placeholder for the CAM aclnn library: not a shared object.\n"
            "The umdk_cam_op_lib CPU stand-in only checks that LD_LIBRARY_PATH reaches this file.\n"
        ),
        f"vendors/{VENDOR}/op_impl/ai_core/tbe/op_tiling/lib/linux/{arch}/libcust_opmaster_rt2.0.so":
            "camit placeholder (tiling library)\n",
        f"vendors/{VENDOR}/op_proto/lib/linux/{arch}/libcust_opsproto_rt2.0.so": "camit placeholder (op proto)\n",
    }
    for api in ACLNN_APIS:
        snake = "".join("_" + c.lower() if c.isupper() else c for c in api[5:]).lstrip("_")
        files[f"vendors/{VENDOR}/op_api/include/aclnn_{snake}.h"] = (
            f"/* camit placeholder: {api} and {api}GetWorkspaceSize are provided by libcust_opapi.so */\n")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if rel.endswith((".sh", ".bash")) else 0o644)
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
        os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)


# --------------------------------------------------------------------------- the makeself header
def _heredoc(text: str) -> str:
    """Escape plain shell text for makeself-header.sh, which emits the header through `cat << EOF`."""
    return text.replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`")


# quote each forwarded option for the header's final `eval`: ' → '\'' inside single quotes
_FWD_FUNC = r"""fwdargs=""
MS_FwdArg()
{
    ms_q=$(printf '%s' "$1" | sed "s/'/'\\\\''/g")
    fwdargs="$fwdargs '$ms_q'"
}
"""

#: (anchor in the stock header, replacement, expected number of occurrences)
_HEADER_PATCHES: tuple[tuple[str, str, int], ...] = (
    ('initargs="\\$@"\n', 'initargs="\\$@"\n' + _heredoc(_FWD_FUNC), 1),
    ("\tquiet=y\n\tnoprogress=y\n\tshift\n",
     "\tquiet=y\n\tnoprogress=y\n\t" + _heredoc('fwdargs="$fwdargs --quiet"') + "\n\tshift\n", 1),
    ('    -*)\n\techo Unrecognized flag : "\\$1" >&2\n\tMS_Help\n\texit 1\n\t;;\n',
     '    -*)\n\t' + _heredoc('MS_FwdArg "$1"') + '\n\tshift\n\t;;\n', 1),
    ('eval "\\"\\$script\\" \\$scriptargs \\"\\\\\\$@\\""',
     'eval "\\"\\$script\\" \\$scriptargs \\$fwdargs \\"\\\\\\$@\\""', 2),
)


def find_makeself() -> tuple[str, Path]:
    """(makeself executable, its stock header); ArtifactError if either is missing."""
    exe = shutil.which("makeself") or shutil.which("makeself.sh")
    if not exe:
        raise ArtifactError("makeself not found on PATH (Debian: apt-get install makeself)")
    here = Path(os.path.realpath(exe)).parent
    for cand in (str(here / "makeself-header.sh"), *HEADER_CANDIDATES):  # the one next to makeself first
        if Path(cand).is_file():
            return exe, Path(cand)
    raise ArtifactError(f"makeself-header.sh not found (looked in {', '.join(HEADER_CANDIDATES)}, {here})")


def patched_header(stock: str) -> str:
    """The stock makeself header with CANN-style option pass-through (see the module docstring)."""
    text = stock
    for anchor, replacement, count in _HEADER_PATCHES:
        found = text.count(anchor)
        if found != count:
            first = anchor.strip().splitlines()[0]
            raise ArtifactError(f"makeself header: expected {count} occurrence(s) of {first!r}, found {found}; "
                                "unsupported makeself version (2.4.x expected)")
        text = text.replace(anchor, replacement)
    return text


# --------------------------------------------------------------------------- the .run package
def build_run_package(out: Path, soc: str = "cpu", fault: str = "none") -> Path:
    """Build ``CAM_<soc>_<os_id>_<arch>.run`` into `out`; returns its path.

    `fault`: ``none``; ``fail`` (installer prints ERROR, exits 1, installs nothing); ``nosuccess``
    (installs, exits 0, no SUCCESS line). Fault builds keep the real name: give them their own `out`.
    """
    if fault not in FAULTS:
        raise ArtifactError(f"unknown fault {fault!r} (one of {', '.join(FAULTS)})")
    if not soc or any(c in soc for c in "/ \t'\""):
        raise ArtifactError(f"bad soc name {soc!r}")
    exe, stock_header = find_makeself()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    name = run_package_name(soc)
    with tempfile.TemporaryDirectory(prefix="camit-run-") as tmp:
        work = Path(tmp)
        _payload(work / "payload", soc, fault)
        (work / "header.sh").write_text(patched_header(stock_header.read_text()))
        (work / "help.info").write_text(_HELP.format(name=name))
        label = f"CAM custom operator package {VERSION} ({soc})"
        # relative arguments only: makeself records its command line in the archive (reproducible)
        argv = [exe, "--header", "./header.sh", "--help-header", "./help.info", "--nox11", "--noprogress",
                "--keep-umask", "--sha256", "--quiet", "--tar-quietly", "--packaging-date", PACKAGING_DATE,
                "--tar-extra", f"--mtime=@{EPOCH} --owner=0 --group=0 --numeric-owner",
                "payload", name, label, "./install.sh"]
        # gzip stores its input's mtime; a wrapper adds -n so the payload bytes do not change per build
        real_gzip = shutil.which("gzip")
        if not real_gzip:
            raise ArtifactError("gzip not found on PATH (makeself compresses the payload with it)")
        (work / "bin").mkdir()
        (work / "bin" / "gzip").write_text(f'#!/bin/sh\nexec {shlex.quote(real_gzip)} -n "$@"\n')
        (work / "bin" / "gzip").chmod(0o755)
        env = dict(os.environ, LC_ALL="C", TZ="UTC", PATH=f"{work / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
        proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        built = work / name
        if proc.returncode != 0 or not built.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise ArtifactError(f"makeself failed building {name} (rc={proc.returncode}):\n{tail}")
        built.chmod(0o755)
        dest = out / name
        shutil.move(str(built), dest)
    return dest


def build_all(out: Path, soc: str = "cpu", fault: str = "none", broken_wheel: bool = False) -> dict[str, Path]:
    """Both artifacts into `out`: ``{"wheel": …, "run": …}``."""
    return {"wheel": build_wheel(out, broken_import=broken_wheel),
            "run": build_run_package(out, soc=soc, fault=fault)}


# --------------------------------------------------------------------------- CLI
def write_env_with_artifacts(env_in: Path, env_out: Path, paths: dict[str, Path]) -> Path:
    """Copy ``env_in`` to ``env_out`` with ``artifacts:`` set to the built files (absolute paths)."""
    import yaml

    doc = yaml.safe_load(env_in.read_text()) or {}
    arts = dict(doc.get("artifacts") or {})
    if "run" in paths:
        arts["run_package"] = str(paths["run"].resolve())
    if "wheel" in paths:
        arts["wheel"] = str(paths["wheel"].resolve())
    doc["artifacts"] = arts
    env_out.parent.mkdir(parents=True, exist_ok=True)
    header = f"# {env_in.name} + the artifacts built by `python -m framework.artifacts build` — generated\n"
    env_out.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return env_out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m framework.artifacts build --out DIR``: prints the wheel's and the .run's paths."""
    parser = argparse.ArgumentParser(prog="python -m framework.artifacts",
                                     description="Build the lab's CAM artifacts (wheel and .run package).")
    sub = parser.add_subparsers(dest="cmd", required=True)
    build = sub.add_parser("build", help="build the umdk_cam_op_lib wheel and the CAM .run into --out")
    build.add_argument("--out", required=True, type=Path, help="output directory (created)")
    build.add_argument("--soc", default="cpu", help="soc part of the .run name (default: cpu)")
    build.add_argument("--fault", choices=FAULTS, default="none",
                       help="build a faulty .run: 'fail' exits non-zero, 'nosuccess' prints no SUCCESS line")
    build.add_argument("--broken-wheel", action="store_true",
                       help=f"build {BROKEN_VERSION}, whose import raises ImportError")
    build.add_argument("--only", choices=("wheel", "run"), help="build just one of the two")
    build.add_argument("--json", action="store_true", help='print {"wheel": path, "run": path}')
    build.add_argument("--env-in", type=Path, default=None, metavar="FILE",
                       help="an env file (e.g. the lab's) to copy with artifacts: pointing at what was built")
    build.add_argument("--env-out", type=Path, default=None, metavar="FILE", help="where that copy goes")
    args = parser.parse_args(argv)
    if (args.env_in is None) != (args.env_out is None):
        parser.error("--env-in and --env-out go together")
    try:
        paths: dict[str, Path] = {}
        if args.only in (None, "wheel"):
            paths["wheel"] = build_wheel(args.out, broken_import=args.broken_wheel)
        if args.only in (None, "run"):
            paths["run"] = build_run_package(args.out, soc=args.soc, fault=args.fault)
    except FrameworkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.env_in is not None:
        write_env_with_artifacts(args.env_in, args.env_out, paths)
    if args.json:
        print(json.dumps({k: str(v) for k, v in paths.items()}))
    else:
        for path in paths.values():
            print(path)
    return 0

