"""Build the lab's CAM artifacts: the umdk_cam_op_lib wheel and the ``CAM_<soc>_<os>_<arch>.run``.

Made from ``standin/`` so the lab deploys what a real CAM build would produce. CLI:
``python -m framework.artifacts build --out DIR [--soc cpu] [--template new|old] [--fault …]``.
The package's contents, installer and fault variants: docs/internals/remote-and-lab.md.
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
from collections.abc import Callable, Sequence
from pathlib import Path

from framework.console import printable
from framework.errors import ArtifactError, FrameworkError
from framework.lab import checkout
from framework.lab.wheelwrite import WheelError, write_wheel

#: the umdk_cam_op_lib stand-in's source folder in the checkout (framework.lab.checkout)
STANDIN = "standin"
PACKAGE = "umdk_cam_op_lib"
VERSION = "209.0.0b1"
BROKEN_VERSION = VERSION + "+broken"
VENDOR = "CAM"
FAULTS = ("none", "fail", "nosuccess")
#: msOpGen install.sh generations: "new" writes op_api/lib into set_env.bash, "old" only prints the hint
TEMPLATES = ("new", "old")
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
_BROKEN_INIT = (
    '"""camit fault-injection build of the umdk_cam_op_lib stand-in: importing it fails."""\n\n'
    f'raise ImportError("umdk_cam_op_lib {BROKEN_VERSION} is a deliberately broken build '
    '(camit deploy fault test): import fails")\n'
)


def build_wheel(out: Path, broken_import: bool = False, source: Path | None = None) -> Path:
    """Build ``umdk_cam_op_lib-<version>-py3-none-any.whl`` into `out`; returns its path.

    Offline, written with the standard library (``framework.lab.wheelwrite``), from a scratch copy of
    `source`. With `broken_import` the version is ``209.0.0b1+broken`` and ``import`` raises ImportError.
    """
    source = source or checkout.require(f"the {PACKAGE} stand-in") / STANDIN
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
        try:  # the standard library's zip: no setuptools needed (framework/lab/wheelwrite.py)
            return write_wheel(src, out)
        except WheelError as exc:
            raise ArtifactError(f"building the {PACKAGE} wheel failed: {exc}") from None


# --------------------------------------------------------------------------- the .run payload
_HELP = """\
CAM custom operator package (camit lab build of UMDK CAM, vendor CAM)
 Install:  ./{name} --install-path=<absolute path> [--quiet]
   installs <path>/vendors/CAM and writes <path>/vendors/CAM/bin/set_env.bash (source it before use)
   without --install-path: into $ASCEND_CUSTOM_OPP_PATH, else $ASCEND_OPP_PATH (CANN set_env.sh sourced)
   --quiet   accepted (the installer never prompts); other --options are ignored
"""

_INSTALL_SH = r"""#!/bin/bash
# CAM custom operator package installer (camit lab build). Behaves as the msOpGen install.sh template
# (CANN's custom-op package, template generation @TEMPLATE@): quiet by default (no prompts; an existing
# op directory is replaced), unknown --* options ignored, "[ops_custom] [<date>] [INFO] ..." lines, a bare
# SUCCESS line at the end. With --install-path it writes vendors/<vendor>/bin/set_env.bash (template "new":
# ASCEND_CUSTOM_OPP_PATH and LD_LIBRARY_PATH; "old": ASCEND_CUSTOM_OPP_PATH only, plus the LD_LIBRARY_PATH
# hint). Deliberate differences: every path is quoted (spaces work), no chmod/chown, no .so validation.
vendor_name=@VENDOR@
template=@TEMPLATE@
fault=@FAULT@
vendordir=vendors/$vendor_name
sourcedir=$(cd "$(dirname "$0")" && pwd)
QUIET="y"
INSTALL_PATH=""

while true; do
    case "$1" in
        --quiet) QUIET="y"; shift ;;
        --install-path=*) INSTALL_PATH="${1#*=}"; INSTALL_PATH="${INSTALL_PATH%/}"; shift ;;
        --install-for-all|--force) shift ;;
        --*) shift ;;
        *) break ;;
    esac
done

log() {
    echo "[ops_custom] [$(date +"%Y-%m-%d %H:%M:%S")] $1"
}

if [ -n "$INSTALL_PATH" ]; then
    case "$INSTALL_PATH" in
        /*) ;;
        *) log "[ERROR] use absolute path for --install-path argument"; exit 1 ;;
    esac
    if [ ! -d "$INSTALL_PATH" ]; then
        mkdir -p "$INSTALL_PATH" || { log "[ERROR] create dir $INSTALL_PATH failed."; exit 1; }
    fi
    targetdir=$INSTALL_PATH
elif [ -n "$ASCEND_CUSTOM_OPP_PATH" ]; then
    case "$ASCEND_CUSTOM_OPP_PATH" in
        *:*) log "[ERROR] environment variable ASCEND_CUSTOM_OPP_PATH=$ASCEND_CUSTOM_OPP_PATH is set and has multiple path in it (colon inside), which will cause the custom op installed incorrectly. Please use the --install-path option to specify an installation path instead."
             exit 1 ;;
    esac
    mkdir -p "$ASCEND_CUSTOM_OPP_PATH"
    targetdir=$ASCEND_CUSTOM_OPP_PATH
else
    if [ -z "$ASCEND_OPP_PATH" ]; then
        log "[ERROR] env ASCEND_OPP_PATH no exist"
        exit 1
    fi
    targetdir=$ASCEND_OPP_PATH
fi
if [ ! -d "$targetdir" ]; then
    log "[ERROR] $targetdir no exist"
    exit 1
fi
if [ "$fault" = fail ]; then
    log "[ERROR] copy new framework files failed (injected fault: camit build --fault fail)"
    exit 1
fi

upgrade() {
    if [ ! -d "$sourcedir/$vendordir/$1" ]; then
        log "[INFO] no need to upgrade ops $1 files"
        return 0
    fi
    if [ ! -d "$targetdir/$vendordir/$1" ]; then
        log "[INFO] create $targetdir/$vendordir/$1."
        mkdir -p "$targetdir/$vendordir/$1" || { log "[ERROR] create dir $targetdir/$vendordir/$1 failed."; return 1; }
    else
        has_same_file=-1
        for file_a in "$sourcedir/$vendordir/$1"/*; do
            file_b=${file_a##*/}
            if [ -e "$targetdir/$vendordir/$1/$file_b" ]; then
                echo -n "$file_b "
                has_same_file=0
            fi
        done
        if [ "$has_same_file" -eq 0 ]; then
            echo
            rm -rf "${targetdir:?}/$vendordir/$1"/*
        fi
        log "[INFO] replace or merge old ops $1 files ......"
    fi
    log "[INFO] copy new ops $1 files ......"
    cp -rf "$sourcedir/$vendordir/$1"/* "$targetdir/$vendordir/$1/" || { log "[ERROR] copy new $1 files failed"; return 1; }
    return 0
}

if [ ! -d "$targetdir/vendors" ]; then
    log "[INFO] create $targetdir/vendors."
    mkdir -p "$targetdir/vendors" || { log "[ERROR] create dir $targetdir/vendors failed."; exit 1; }
fi
if [ ! -d "$targetdir/$vendordir" ]; then
    log "[INFO] create $targetdir/$vendordir."
    mkdir -p "$targetdir/$vendordir" || { log "[ERROR] create dir $targetdir/$vendordir failed."; exit 1; }
fi

log "[INFO] upgrade framework"
upgrade framework || exit 1
log "[INFO] upgrade op proto"
upgrade op_proto || exit 1
log "[INFO] upgrade op impl"
upgrade op_impl || exit 1
log "[INFO] upgrade op api"
upgrade op_api || exit 1
log "[INFO] upgrade uninstall"
log "[INFO] no need to upgrade uninstall.sh file"
log "[INFO] upgrade version.info"
log "[INFO] copy new version.info files ......"
cp -f "$sourcedir/$vendordir/version.info" "$targetdir/$vendordir/version.info" \
    || { log "[ERROR] copy new version.info file failed"; exit 1; }
log "[INFO] no need to upgrade custom.proto files"

vendor_path=$targetdir/$vendordir
q_vendor=$(printf %q "$vendor_path")
if [ -n "$INSTALL_PATH" ]; then
    mkdir -p "$vendor_path/bin" || { log "[ERROR] create dir $vendor_path/bin failed."; exit 1; }
    {
        echo "#!/bin/bash"
        echo "export ASCEND_CUSTOM_OPP_PATH=$q_vendor:\${ASCEND_CUSTOM_OPP_PATH}"
        if [ "$template" = new ]; then echo "export LD_LIBRARY_PATH=$q_vendor/op_api/lib/:\${LD_LIBRARY_PATH}"; fi
    } > "$vendor_path/bin/set_env.bash" || { log "[ERROR] write ASCEND_CUSTOM_OPP_PATH to set_env.bash failed"; exit 1; }
    if [ "$template" = new ]; then
        log "[INFO] using requirements: when custom module install finished or before you run the custom module, execute the command [ source $vendor_path/bin/set_env.bash ] to set the environment path"
    else
        log "[INFO] using requirements: when custom module install finished or before you run the custom module, execute the command [ export LD_LIBRARY_PATH=$vendor_path/op_api/lib/:\${LD_LIBRARY_PATH} ] to set the environment path"
    fi
else
    config_file=$targetdir/vendors/config.ini
    if [ ! -f "$config_file" ]; then
        echo "load_priority=$vendor_name" > "$config_file"
    elif ! grep -qw "load_priority=.*\b$vendor_name\b" "$config_file"; then
        sed -i "s@^load_priority=@load_priority=$vendor_name,@" "$config_file"
    fi
    log "[INFO] using requirements: when custom module install finished or before you run the custom module, execute the command [ export LD_LIBRARY_PATH=$vendor_path/op_api/lib/:\${LD_LIBRARY_PATH} ] to set the environment path"
fi

[ "$fault" = nosuccess ] && exit 0
echo "SUCCESS"
exit 0
"""

def opapi_source(apis: Sequence[str] = ACLNN_APIS) -> str:
    """C source of the lab's ``libcust_opapi.so``: ``<api>GetWorkspaceSize`` and ``<api>`` for every api.

    The names are the ``EXEC_NPU_CMD(aclnnXxx, ...)`` of umdk ``src/cam/comm_operator/pybind/*.cpp``; CAM's
    ``GetOpApiFuncAddr`` looks both up. The CPU stand-in only resolves them; calling one returns
    561103 (``ACLNN_ERR_RUNTIME_ERROR``): there is no device behind them.
    """
    lines = ["/* camit lab build of CAM's libcust_opapi.so: the aclnn entry points umdk_cam_op_lib resolves",
             " * (by bare name, through LD_LIBRARY_PATH). Generated by framework/lab/artifacts.py. */",
             "#define CAMIT_NO_DEVICE 561103", ""]
    for api in apis:
        lines += [f"int {api}GetWorkspaceSize(void) {{ return CAMIT_NO_DEVICE; }}",
                  f"int {api}(void) {{ return CAMIT_NO_DEVICE; }}"]
    return "\n".join(lines) + "\n"


def find_cc() -> str:
    """The C compiler (``cc``, else ``gcc``); ArtifactError if there is none."""
    exe = shutil.which("cc") or shutil.which("gcc")
    if not exe:
        raise ArtifactError("no C compiler (cc/gcc) on PATH: the CAM .run ships a real libcust_opapi.so "
                            "(Debian: apt-get install gcc)")
    return exe


def build_opapi_library(out_dir: Path, apis: Sequence[str] = ACLNN_APIS) -> Path:
    """Compile ``libcust_opapi.so`` (:func:`opapi_source`) into `out_dir`; returns its path.

    Built from a relative source path without debug info or build id, so the bytes depend only on the compiler.
    """
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="camit-opapi-") as tmp:
        (Path(tmp) / "cust_opapi.c").write_text(opapi_source(apis))
        argv = [find_cc(), "-shared", "-fPIC", "-O2", "-g0", "-Wl,-soname,libcust_opapi.so", "-Wl,--build-id=none",
                "-o", "libcust_opapi.so", "cust_opapi.c"]
        proc = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, LC_ALL="C"))
        built = Path(tmp) / "libcust_opapi.so"
        if proc.returncode != 0 or not built.is_file():
            raise ArtifactError(f"compiling libcust_opapi.so failed (rc={proc.returncode}): "
                                + (proc.stderr.strip().splitlines() or ["no output"])[-1])
        dest = out_dir / "libcust_opapi.so"
        shutil.copyfile(built, dest)
    return dest


def _payload(root: Path, soc: str, fault: str, template: str = "new") -> None:
    """Write the .run payload (install.sh, help.info, vendors/CAM/…) under `root`."""
    arch = platform.machine()
    files: dict[str, str] = {
        "install.sh": _INSTALL_SH.replace("@VENDOR@", VENDOR).replace("@FAULT@", fault)
                                 .replace("@TEMPLATE@", template),
        "help.info": _HELP.format(name=run_package_name(soc)),
        f"vendors/{VENDOR}/version.info": (
            f"Version={VERSION}\nvendor_name={VENDOR}\nsoc_version={soc}\nos={os_id()}\narch={arch}\n"
            f"ops={','.join(OPS)}\nbuilt_by=camit (CPU stand-in; msOpGen template {template})\n"
        ),
        f"vendors/{VENDOR}/op_impl/ai_core/tbe/op_tiling/lib/linux/{arch}/libcust_opmaster_rt2.0.so":
            "camit placeholder (tiling library)\n",
        f"vendors/{VENDOR}/op_proto/lib/linux/{arch}/libcust_opsproto_rt2.0.so": "camit placeholder (op proto)\n",
    }
    for api in ACLNN_APIS:
        files[f"vendors/{VENDOR}/op_api/include/aclnn_{_snake(api)}.h"] = (
            f"/* camit placeholder: {api} and {api}GetWorkspaceSize are provided by libcust_opapi.so */\n")
    _write_files(root, files)
    build_opapi_library(root / "vendors" / VENDOR / "op_api" / "lib").chmod(0o755)
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
        os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)


def _snake(api: str) -> str:
    """``aclnnMoeDispatch`` -> ``moe_dispatch`` (the name in the API's header file)."""
    return "".join("_" + c.lower() if c.isupper() else c for c in api[5:]).lstrip("_")


def _write_files(root: Path, files: dict[str, str]) -> None:
    """Each text under ``root``; shell scripts executable."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if rel.endswith((".sh", ".bash")) else 0o644)


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
def _check_build_args(soc: str, fault: str, template: str) -> None:
    """ArtifactError for an unknown fault or template, or a soc name unfit for a file name."""
    if fault not in FAULTS:
        raise ArtifactError(f"unknown fault {fault!r} (one of {', '.join(FAULTS)})")
    if template not in TEMPLATES:
        raise ArtifactError(f"unknown installer template {template!r} (one of {', '.join(TEMPLATES)})")
    if not soc or any(c in soc for c in "/ \t'\""):
        raise ArtifactError(f"bad soc name {soc!r}")


def _gzip_wrapper(folder: Path) -> None:
    """``folder/gzip``: gzip with ``-n`` (gzip stores its input's mtime: payloads would differ)."""
    real_gzip = shutil.which("gzip")
    if not real_gzip:
        raise ArtifactError("gzip not found on PATH (makeself compresses the payload with it)")
    folder.mkdir()
    (folder / "gzip").write_text(f'#!/bin/sh\nexec {shlex.quote(real_gzip)} -n "$@"\n')
    (folder / "gzip").chmod(0o755)


def build_run_package(out: Path, soc: str = "cpu", fault: str = "none", template: str = "new") -> Path:
    """Build ``CAM_<soc>_<os_id>_<arch>.run`` into `out`; returns its path.

    `fault`: ``none``; ``fail`` (installer prints ERROR, exits 1, installs nothing); ``nosuccess``
    (installs, exits 0, no SUCCESS line). Fault builds keep the real name: give them their own `out`.
    """
    _check_build_args(soc, fault, template)
    exe, stock_header = find_makeself()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    name = run_package_name(soc)
    with tempfile.TemporaryDirectory(prefix="camit-run-") as tmp:
        work = Path(tmp)
        _payload(work / "payload", soc, fault, template)
        (work / "header.sh").write_text(patched_header(stock_header.read_text()))
        (work / "help.info").write_text(_HELP.format(name=name))
        label = f"CAM custom operator package {VERSION} ({soc})"
        # relative arguments only: makeself records its command line in the archive (reproducible)
        argv = [exe, "--header", "./header.sh", "--help-header", "./help.info", "--nox11", "--noprogress",
                "--keep-umask", "--sha256", "--quiet", "--tar-quietly", "--packaging-date", PACKAGING_DATE,
                "--tar-extra", f"--mtime=@{EPOCH} --owner=0 --group=0 --numeric-owner",
                "payload", name, label, "./install.sh"]
        _gzip_wrapper(work / "bin")
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


def build_all(out: Path, soc: str = "cpu", fault: str = "none", broken_wheel: bool = False,
              template: str = "new") -> dict[str, Path]:
    """Both artifacts into `out`: ``{"wheel": …, "run": …}``."""
    return {"wheel": build_wheel(out, broken_import=broken_wheel),
            "run": build_run_package(out, soc=soc, fault=fault, template=template)}


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


def env_soc(env_file: Path) -> str:
    """The SoC the env's hosts declare (``npu.soc``; one value for all of them), for the .run's name."""
    from framework.config.effective import load

    socs = sorted({h.npu.soc for h in load(env_file).hosts.values()})
    if len(socs) != 1:
        raise ArtifactError(f"{env_file}: hosts declare npu.soc {', '.join(socs)}; give --soc for the .run")
    return socs[0]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m framework.artifacts",
                                     description="Build the lab's CAM artifacts (wheel and .run package).")
    sub = parser.add_subparsers(dest="cmd", required=True)
    build = sub.add_parser("build", help="build the umdk_cam_op_lib wheel and the CAM .run into --out")
    build.add_argument("--out", required=True, type=Path, help="output directory (created)")
    build.add_argument("--soc", default=None,
                       help="soc part of the .run name (default: the --env-in file's npu.soc, else cpu)")
    build.add_argument("--fault", choices=FAULTS, default="none",
                       help="build a faulty .run: 'fail' exits non-zero, 'nosuccess' prints no SUCCESS line")
    build.add_argument("--template", choices=TEMPLATES, default="new",
                       help="msOpGen installer generation: 'new' (default) writes op_api/lib into set_env.bash, "
                            "'old' writes only ASCEND_CUSTOM_OPP_PATH and prints the LD_LIBRARY_PATH hint")
    build.add_argument("--broken-wheel", action="store_true",
                       help=f"build {BROKEN_VERSION}, whose import raises ImportError")
    build.add_argument("--only", choices=("wheel", "run"), help="build just one of the two")
    build.add_argument("--wheel-source", type=Path, default=None, metavar="DIR",
                       help="the umdk_cam_op_lib source tree the wheel is built from (default: the stand-in, "
                            "standin/; tests/cleanroom_cam is the independently written second library)")
    build.add_argument("--json", action="store_true", help='print {"wheel": path, "run": path}')
    build.add_argument("--env-in", type=Path, default=None, metavar="FILE",
                       help="an env file (e.g. the lab's) to copy with artifacts: pointing at what was built")
    build.add_argument("--env-out", type=Path, default=None, metavar="FILE", help="where that copy goes")
    return parser


def _soc(args: argparse.Namespace) -> str:
    """``--soc``, else the ``--env-in`` file's, else cpu."""
    if args.soc:
        return str(args.soc)
    return env_soc(args.env_in) if args.env_in is not None else "cpu"


def _build(args: argparse.Namespace) -> dict[str, Path]:
    """The artifacts ``--only`` asks for (both by default): kind -> path."""
    soc = _soc(args)
    builders: dict[str, Callable[[], Path]] = {
        "wheel": lambda: build_wheel(args.out, broken_import=args.broken_wheel,
                                     source=args.wheel_source),
        "run": lambda: build_run_package(args.out, soc=soc, fault=args.fault,
                                         template=args.template),
    }
    return {kind: build() for kind, build in builders.items() if args.only in (None, kind)}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m framework.artifacts build --out DIR``: prints the wheel's and .run's paths."""
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.env_in is None) != (args.env_out is None):
        parser.error("--env-in and --env-out go together")
    try:
        paths = _build(args)
    except FrameworkError as exc:
        print(printable(f"error: {exc}"), file=sys.stderr)
        return 1
    if args.env_in is not None:
        write_env_with_artifacts(args.env_in, args.env_out, paths)
    if args.json:
        print(json.dumps({k: str(v) for k, v in paths.items()}))
        return 0
    print("\n".join(str(p) for p in paths.values()))
    return 0

