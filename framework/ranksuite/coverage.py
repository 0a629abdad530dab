"""Coverage mode (``--cov-ranks`` or ``ENABLE_COV=1``): rank-side Python and op-library coverage
from every host, combined into one report in the run folder (docs/design.md, "The rank-side
suites"). The builders are pure; the ``coverage`` package is imported only by :func:`finish`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import tarfile
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from framework import commands
from framework.commands import ShellScript
from framework.errors import FrameworkError, UsageError
from framework.fetchcaps import caps, extract_tar
from framework.launch.plan import deployed
from framework.records.folder import write_atomic
from framework.remote.layout import DeployState, HostLayout
from framework.remote.packing import sh_pack
from framework.remote.sections import read_records, sh_tag, tag_line
from framework.setenv import env_steps, extra_of

if TYPE_CHECKING:  # pragma: no cover
    from framework.config.effective import EnvConfig
    from framework.hosts import Cluster, Host
    from framework.launch import Target

log = logging.getLogger("camit.coverage")

ENV_FLAG = "ENABLE_COV"
OP_MODULE = "umdk_cam_op_lib"
MIN_VERSION = (7, 4)
DATA_STEM = "coverage-rank"
HTML_DIR = "coverage"
XML_FILE = "coverage.xml"
RC_FILE = ".coveragerc-camit"
#: one JSON per shipped rank tree: its remote folder and the local folder it came from
TREES_DIR = ".coverage-trees"
GCOV_DIR = "gcov"
STANDIN_OP_LIB = Path(__file__).resolve().parents[2] / "standin" / OP_MODULE

_TRUE = ("1", "true", "yes", "on")


# -- switching it on ------------------------------------------------------------
def requested(option: bool, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether coverage mode is on: ``--cov-ranks`` or ``ENABLE_COV=1``.

    Raises ``UsageError`` when it is on and this machine cannot combine the data
    (``coverage`` not importable here): better now than after the run.
    """
    on = bool(option) or environ.get(ENV_FLAG, "").strip().lower() in _TRUE
    if on:
        import importlib.util

        if importlib.util.find_spec("coverage") is None:
            raise UsageError(f"coverage mode (--cov-ranks / {ENV_FLAG}=1) needs the coverage package on this "
                             "machine to combine the ranks' data: pip install 'coverage>=7.4' (or '.[test]')")
    return on


# -- the rank command -------------------------------------------------------------
def data_file_arg() -> str:
    """The ``--data-file`` of every rank; the rank wrapper substitutes ``{rank}``."""
    return f"--data-file={DATA_STEM}{{rank}}.dat"


def wrap_target(target: Target, sources: Sequence[str]) -> Target:
    """``target`` run under ``coverage run --parallel-mode`` measuring ``sources`` (folders or packages).

    >>> from framework.launch import Target
    >>> args = wrap_target(Target(module="pytest", args=("t.py",)), ["/w/suites/ab", "pkg"]).python_args()
    >>> args[2:5]
    ['run', '--parallel-mode', '--data-file=coverage-rank{rank}.dat']
    >>> args[5:]
    ['--source=/w/suites/ab,pkg', '-m', 'pytest', 't.py']
    """
    from framework.launch import Target

    bad = [s for s in sources if "," in s or not s]
    if bad:
        raise UsageError(f"coverage --source entries must be non-empty and without commas: {bad}")
    return Target(module="coverage", args=("run", "--parallel-mode", data_file_arg(),
                                           "--source=" + ",".join(sources), *target.python_args()))


# -- probing a host -----------------------------------------------------------------
@dataclass(frozen=True)
class HostProbe:
    """What coverage mode needs to know about one host (from its deploy state and the ranks' interpreter)."""

    host: str
    interpreter: str
    install_path: str
    vendor: str | None = None
    version: str | None = None  # coverage's version, None when not importable
    problem: str | None = None  # why coverage cannot be used, when it cannot
    op_lib: str | None = None  # the op library's package folder, as the ranks' interpreter finds it

    @property
    def ok(self) -> bool:
        return self.problem is None


def read_state(text: str) -> dict[str, Any]:
    """The deploy state file's content (``{}`` when absent or unreadable)."""
    return DeployState.parse(text)


#: the records of :data:`PROBE_CODE` and :func:`gcda_script` (``@@<tag> <value>``, :mod:`framework.remote.sections`)
COV_TAG = "cov"  # @@cov <version>: coverage imports
NOCOV_TAG = "nocov"  # @@nocov <exception>: it does not
OPLIB_TAG = "oplib"  # @@oplib <folder>: where the ranks' interpreter finds the op library
GCDA_TAG = "gcda"  # @@gcda <count>: .gcda files found (and packed when any)

#: run by the ranks' interpreter: is coverage importable, where is the op library (found, not imported)
PROBE_CODE = f"""\
import importlib.util, sys
try:
    import coverage
    print({tag_line(COV_TAG)!r}, coverage.__version__)
except Exception as exc:
    print({tag_line(NOCOV_TAG)!r}, (type(exc).__name__ + ": " + str(exc)).replace("\\n", " "))
try:
    spec = importlib.util.find_spec(sys.argv[1])
except Exception:
    spec = None
locations = list(spec.submodule_search_locations or []) if spec is not None else []
if locations:
    print({tag_line(OPLIB_TAG)!r}, locations[0])
"""


def probe_argv(interpreter: str, *, cann_set_env: str | None = None, vendor_set_env: str | None = None,
               env: Mapping[str, Any] | None = None, extra_set_env: Sequence[str] = ()) -> list[str]:
    """bash that sets up the ranks' environment as a launch does, then runs :data:`PROBE_CODE`.

    Secret variables are left out: a command line is any local user's to read (the probe needs none)."""
    steps = env_steps(cann_set_env, extra_set_env, vendor_set_env)
    exported = commands.export_env({k: v for k, v in (env or {}).items() if not callable(getattr(v, "reveal", None))})
    if exported:
        steps.append(exported)
    steps.append("exec " + commands.join([interpreter, "-c", PROBE_CODE, OP_MODULE]))
    return ["bash", "-c", " && ".join(steps)]


def version_tuple(text: str) -> tuple[int, ...]:
    """``"7.4.1b2"`` → ``(7, 4, 1)``: the leading number of each dotted part, up to the first non-number."""
    out = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group()))
    return tuple(out)


def _too_old(version: str | None) -> bool:
    """Whether the probed coverage ``version`` is below :data:`MIN_VERSION`."""
    return version is not None and version_tuple(version) < MIN_VERSION


def _problem(found: Mapping[str, str], rc: int | None, tail: str) -> str | None:
    """Why coverage cannot be used on the probed host (its records ``found`` by tag), or None."""
    version = found.get(COV_TAG)
    if _too_old(version):
        return f"coverage {version} is older than {'.'.join(map(str, MIN_VERSION))}"
    if NOCOV_TAG in found:
        return found[NOCOV_TAG] or "coverage is not importable"
    if version is None:
        return f"the probe failed (exit status {rc})" + (f": {tail.strip()}" if tail.strip() else "")
    return None


def parse_probe(host: str, interpreter: str, install_path: str, vendor: str | None, rc: int | None,
                stdout: str, tail: str = "") -> HostProbe:
    """The probe's output as a :class:`HostProbe` (a problem set whenever coverage cannot be
    used)."""
    found = {rec.tag: rec.value.strip() for rec in read_records(stdout)}
    version = found.get(COV_TAG)
    op_lib = found.get(OPLIB_TAG) or None
    return HostProbe(host, interpreter, install_path, vendor, None if _too_old(version) else version,
                     _problem(found, rc, tail), op_lib)


class CoverageUnavailable(FrameworkError):
    """Raised when coverage mode is on and the ranks' interpreter of one or more hosts lacks ``coverage``."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        head = (f"coverage mode (--cov-ranks / {ENV_FLAG}=1) needs the coverage package "
                f"(>= {'.'.join(map(str, MIN_VERSION))}) in the ranks' interpreter")
        if len(self.problems) == 1:
            host, why = next(iter(self.problems.items()))
            text = f"{head}; it is not usable on {host}: {why}"
        else:
            text = f"{head}; it is not usable on {len(self.problems)} hosts ({', '.join(self.problems)}):"
            text += "".join(f"\n  {h}: {why}" for h, why in self.problems.items())
        super().__init__(text + "\ninstall it there (pip install 'coverage>=7.4') or run without coverage mode")


# -- gcov data --------------------------------------------------------------------------
def gcda_roots(probe: HostProbe) -> list[str]:
    """Shell words (quoted, globs left open) for where a coverage build of the op library writes ``.gcda``."""
    q = commands.quote
    vendors = f"{probe.install_path.rstrip('/')}/vendors"
    roots = [q(f"{vendors}/{probe.vendor}") if probe.vendor else q(vendors)]
    if probe.op_lib:
        # the package folder and its siblings (umdk_cam_op_lib.libs, ...dist-info) in site-packages
        roots.append(q(str(PurePosixPath(probe.op_lib).parent)) + f"/{OP_MODULE}*")
    return roots


def gcda_script(roots: Sequence[str], tgz: str) -> ShellScript:
    """sh: pack the ``*.gcda`` under ``roots`` (shell words; paths from /) into ``tgz`` through the host
    program (:mod:`framework.remote.packing`: no folder followed through a symlink, each file the SSH
    user's, opened once), then print the ``@@gcda <count>`` record of the files packed (no archive is
    left when there were none)."""
    count = sh_tag(GCDA_TAG, '"${n:-0}"')
    return ShellScript(f"set -- {' '.join(roots)}; rm -f -- {commands.quote(tgz)}; "
                       + sh_pack(commands.quote(tgz), caps().max_bytes, -1, '"$@"', {"names": ["*.gcda"]})
                       + f"; {count}; [ -n \"$n\" ] || {{ printf '%s\\n' \"$r\" >&2; exit 1; }}; "
                       f"[ \"$n\" -gt 0 ] || rm -f -- {commands.quote(tgz)}")


def parse_gcda_count(stdout: str) -> int:
    """The count of :func:`gcda_script`'s ``@@gcda`` record (0 without one)."""
    for rec in read_records(stdout):
        if rec.tag == GCDA_TAG:
            value = rec.value.strip()
            return int(value) if value.isdigit() else 0
    return 0


def unpack_gcda(tgz: Path, dest: Path, host: str = "host") -> list[Path]:
    """Extract the ``.gcda`` regular files of ``tgz`` below ``dest`` (nothing absolute, no ``..``)."""
    def place(member: tarfile.TarInfo) -> Path | None:
        rel = PurePosixPath(member.name)
        if rel.is_absolute() or ".." in rel.parts or rel.suffix != ".gcda":
            return None
        return Path(*rel.parts)

    # streamed under the fetch caps (framework.fetchcaps): a bomb stops at the member and total caps
    got = extract_tar(tgz, dest, host=host, what=f".gcda data {tgz.name}", place=place)
    for note in got.notes or []:
        log.warning("%s", note)
    return got.files


# -- the session-side executor -------------------------------------------------------------
class RankCoverage:
    """Coverage for one session's rank launches: probe hosts once, wrap the rank command, fetch ``.gcda``.

    ``RankSuite`` calls :meth:`prepare` before and :meth:`collect_gcov` after each launch.
    """

    def __init__(self, env: EnvConfig, cluster: Cluster, rundir_path: str | os.PathLike[str]) -> None:
        self.env = env
        self.cluster = cluster
        self.root = Path(rundir_path)
        #: one probe per host and session: a host without coverage fails every launch on it without a re-probe
        self.probes: dict[str, HostProbe] = {}

    def prepare(self, target: Target, hosts: Sequence[str], remote_dir: str, tree: Path) -> Target:
        """``target`` wrapped for coverage, after checking ``hosts``; records where ``tree`` landed."""
        self.check(hosts)
        rec = {"remote": remote_dir.rstrip("/"), "local": str(Path(tree).resolve())}
        write_atomic(self.root / TREES_DIR / f"{PurePosixPath(remote_dir).name}.json", json.dumps(rec))
        return wrap_target(target, [remote_dir.rstrip("/"), OP_MODULE])

    def check(self, hosts: Sequence[str]) -> dict[str, HostProbe]:
        """Probe the hosts not probed yet; raise :class:`CoverageUnavailable` naming every host that lacks it."""
        self._probe_new(hosts)
        missing = {h: f"{p.interpreter}: {p.problem}" for h in hosts
                   if not (p := self.probes[h]).ok}
        if missing:
            raise CoverageUnavailable(missing)
        return {h: self.probes[h] for h in hosts}

    def _probe_new(self, hosts: Sequence[str]) -> None:
        """Probe the hosts of ``hosts`` not probed yet this session."""
        todo = [h for h in hosts if h not in self.probes]
        if todo:
            got = self.cluster.map(self._probe, todo)
            got.raise_on_failure()  # an unreachable host is its own error, not a coverage one
            self.probes.update(got.succeeded)

    def _probe(self, host: Host) -> HostProbe:
        spec = self.env.hosts[host.name]
        layout = HostLayout.of(spec)
        state = DeployState.from_doc(read_state(host.run(["cat", "--", layout.state_file], timeout=60).stdout))
        # the same choices as framework.launch: the deployed interpreter and vendor set_env
        chosen = deployed(spec, layout.workdir, state)
        cann = self.env.cann.set_env if self.env.cann else None
        argv = probe_argv(chosen.python, cann_set_env=cann, vendor_set_env=chosen.vendor_set_env,
                          env=dict(self.env.launch.env), extra_set_env=extra_of(self.env))
        res = host.run(argv, timeout=120)
        probe = parse_probe(host.name, chosen.python, chosen.install_path, chosen.vendor, res.rc,
                            res.stdout, res.tail(5))
        log.info("%s: coverage %s in %s", host.name,
                 probe.version or f"unusable ({probe.problem})", chosen.python)
        return probe

    def collect_gcov(self, hosts: Sequence[str]) -> dict[str, int]:
        """Fetch every ``.gcda`` of ``hosts`` into ``<report>/<host>/gcov/``; host → files. Never raises."""

        def one(host: Host) -> int:
            probe = self.probes.get(host.name) or self.probes.setdefault(host.name, self._probe(host))
            token = secrets.token_hex(4)
            tgz = HostLayout.of(self.env.hosts[host.name]).scratch(f"coverage-gcda-{host.name}-{token}.tgz")
            res = host.run(gcda_script(gcda_roots(probe), tgz), timeout=300)
            count = parse_gcda_count(res.stdout)
            if not count:
                return 0
            dest = self.root / host.name / GCOV_DIR
            local = dest / f".fetch-{token}.tgz"
            try:
                if not res.ok:
                    raise FrameworkError(f"{host.name}: packing {count} .gcda file(s) failed: {res.tail(3)}")
                host.get(tgz, local)
            finally:
                host.run(["rm", "-f", "--", tgz], timeout=60)
            try:
                files = unpack_gcda(local, dest, host.name)
            finally:
                local.unlink(missing_ok=True)
            log.info("%s: fetched %d .gcda file(s) into %s", host.name, len(files), dest)
            return len(files)

        got = self.cluster.map(one, list(hosts))
        for host, err in got.failed.items():
            log.warning("%s: gcov data not fetched: %s", host, err)
        return dict(got.succeeded)


# -- combining at session end ---------------------------------------------------------------
def data_files(root: Path) -> list[Path]:
    """Every rank data file fetched into the run folder (``<host>/<launch>/coverage-rank*.dat*``)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob(f"{DATA_STEM}*.dat*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def recorded_trees(root: Path) -> list[tuple[str, Path]]:
    """(remote folder, local folder) of every rank tree a covered launch used."""
    out = []
    for p in sorted((root / TREES_DIR).glob("*.json")):
        try:
            rec = json.loads(p.read_text())
            out.append((str(rec["remote"]), Path(rec["local"])))
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("coverage: unreadable tree record %s", p)
    return out


def rc_text(trees: Sequence[tuple[str, Path]], op_lib: Path | None) -> str:
    """The combine's ``.coveragerc``: ``[paths]`` from where files were on the hosts to this checkout.

    Each tree maps by its exact remote folder and, for workdirs reached through a symlink, by its
    last two components (``*/suites/<sha>/``: the content hash makes that unique). The op library maps
    wherever it was installed (``*/umdk_cam_op_lib/``) when ``op_lib`` is given. ``[run] source`` is the
    folder common to the local roots, so Cobertura names read ``suites/cam/rank/...`` and
    ``standin/umdk_cam_op_lib/...`` (this checkout), never cwd-dependent.
    """
    lines = ["# written by camit (framework/ranksuite/coverage.py) for this run's combine; removed afterwards"]
    roots = [str(Path(local)) for _, local in trees] + ([str(op_lib)] if op_lib is not None else [])
    if roots:
        # one <source> in coverage.xml, their common folder: file names stay unique across the roots
        lines += ["[run]", f"source = {Path(os.path.commonpath(roots)).as_posix()}", ""]
    lines += ["[paths]"]
    for i, (remote, local) in enumerate(trees, 1):
        remote = remote.rstrip("/")
        tail = "/".join(PurePosixPath(remote).parts[-2:])
        lines += [f"tree{i} =", f"    {Path(local).as_posix().rstrip('/')}/", f"    {remote}/", f"    */{tail}/"]
    if op_lib is not None:
        lines += [f"{OP_MODULE} =", f"    {Path(op_lib).as_posix().rstrip('/')}/", f"    */{OP_MODULE}/"]
    lines += ["", "[report]", "# files with no source in this checkout are left out (and counted)",
              "ignore_errors = True", "", "[html]", "title = camit rank-side coverage", ""]
    return "\n".join(lines)


def xml_totals(path: Path) -> tuple[int, int]:
    """(lines covered, lines valid) of a Cobertura file."""
    root = ET.parse(path).getroot()
    return int(root.get("lines-covered", 0)), int(root.get("lines-valid", 0))


def gcda_counts(root: Path) -> dict[str, int]:
    """host → ``.gcda`` files fetched into ``<report>/<host>/gcov/``."""
    counts: dict[str, int] = {}
    for p in root.glob(f"*/{GCOV_DIR}/**/*.gcda") if root.is_dir() else []:
        host = p.relative_to(root).parts[0]
        counts[host] = counts.get(host, 0) + 1
    return dict(sorted(counts.items()))


def summary_line(covered: int, valid: int, files: int, data: int, hosts: int, left_out: int,
                 where: str, gcda: Mapping[str, int]) -> str:
    """One line for the terminal: the total, what went into it, where the report is."""
    pct = 100.0 * covered / valid if valid else 0.0
    text = (f"coverage: {pct:.1f}% ({covered}/{valid} lines) in {files} file(s) from {data} rank data file(s) "
            f"on {hosts} host(s)")
    if left_out:
        text += f", {left_out} file(s) without local source left out"
    text += f" -> {where}"
    return text + gcda_text(gcda)


def gcda_text(gcda: Mapping[str, int]) -> str:
    if not gcda:
        return ""
    return f"; gcov: {sum(gcda.values())} .gcda file(s) from {', '.join(gcda)} in <host>/{GCOV_DIR}/"


def _reported(root: Path, files: Sequence[Path], measured: int, gcda: Mapping[str, int]) -> str:
    """The summary line of a combined report: its totals from ``coverage.xml``, what went in."""
    covered, valid = xml_totals(root / XML_FILE)
    reported = len(list(ET.parse(root / XML_FILE).getroot().iter("class")))
    hosts = len({p.relative_to(root).parts[0] for p in files})
    return summary_line(covered, valid, reported, len(files), hosts, measured - reported,
                        str(root / HTML_DIR / "index.html"), gcda)


def _folder_here(folder: Path | None) -> Path | None:
    """``folder`` when it is a folder on this machine, else None."""
    if folder is None or not Path(folder).is_dir():
        return None
    return folder


def finish(rundir_path: str | os.PathLike[str], *, op_lib: Path | None = STANDIN_OP_LIB) -> str:
    """Combine the run folder's rank data into ``coverage/`` (html) and ``coverage.xml``; the summary line.

    Controller only, at session end. Never raises: a failure is logged and becomes the line.
    ``op_lib`` is the local source of ``umdk_cam_op_lib`` (the stand-in, when this checkout has it).
    """
    root = Path(rundir_path)
    gcda = gcda_counts(root)
    files = data_files(root)
    if not files:
        return "coverage: no rank coverage data in the run folder (no covered launch ran)" + gcda_text(gcda)
    rc = root / RC_FILE
    try:
        import coverage
        from coverage.exceptions import NoDataError

        write_atomic(rc, rc_text(recorded_trees(root), _folder_here(op_lib)))
        html = root / HTML_DIR
        # coverage warns through `warnings` (data files it cannot read, ...); a run configured with
        # filterwarnings=error must still get its report: record them and log them instead
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cov = coverage.Coverage(data_file=str(html / ".coverage"), config_file=str(rc))
            cov.combine([str(p) for p in files], keep=True)
            cov.save()
            measured = cov.get_data().measured_files()
            try:
                cov.xml_report(outfile=str(root / XML_FILE))
                cov.html_report(directory=str(html))
            except NoDataError:
                return (f"coverage: none of the {len(measured)} measured file(s) has its source in this checkout "
                        f"(data in {html / '.coverage'})" + gcda_text(gcda))
        for w in caught:
            log.warning("coverage: %s", w.message)
        return _reported(root, files, len(measured), gcda)
    except Exception as exc:  # the report must not hide the run's outcome
        log.exception("coverage: combining failed")
        return f"coverage: not combined: {type(exc).__name__}: {exc}" + gcda_text(gcda)
    finally:
        rc.unlink(missing_ok=True)


__all__ = ["CoverageUnavailable", "HostProbe", "RankCoverage", "data_files", "finish", "gcda_roots", "gcda_script",
           "parse_probe", "probe_argv", "rc_text", "requested", "wrap_target"]
