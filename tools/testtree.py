"""Tests mirror the tree they test: the tests of ``framework/launch/monitor.py`` are
``tests/unit/framework/launch/test_monitor.py``; shared helpers live in ``tests/support/``.

``python tools/testtree.py`` prints the moves still to make (test files flat in ``tests/unit/``, helpers
in ``tests/``); ``--apply`` makes them with ``git mv`` and rewrites what names the old places (imports,
paths in the text of tracked files, ``Path(__file__).parents[N]`` in the moved files). A second run
plans nothing. ``tests/unit/project/test_tree_guard.py`` holds the rule (:func:`problem`).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
UNIT = PurePosixPath("tests/unit")
SUPPORT = PurePosixPath("tests/support")

#: the folders of tests/unit/ and the code each mirrors (framework/ folder by folder, the others flat)
AREAS: dict[str, str] = {
    "framework": "framework", "standin": "standin", "standin_npu": "standin_npu", "suites": "suites",
    "tools": "tools", "bench": "bench", "support": "tests/support",
}

#: test files no one module stands for, and why
ALLOWED: dict[str, str] = {
    "docs/test_docs.py": "every page's shell blocks and links: the documentation as a whole",
    "project/test_demo.py": "make demo's recipe and its placement across the hosts (Makefile)",
    "project/test_dependencies.py": "pyproject.toml's dependencies against what the code imports",
    "project/test_jenkinsfile.py": "the Jenkinsfile's stages and exit codes",
    "project/test_layers.py": "the import layers of the whole tree",
    "project/test_make_test_passes.py": "make test's passes and their markers (Makefile)",
    "project/test_one_default.py": "each default the packages share is written out once, across the tree",
    "project/test_public_api.py": "what `import framework` gives (the package root)",
    "project/test_public_surface.py": "suites/ imports framework through its public names only",
    "project/test_tree_guard.py": "this layout",
    "standin/test_injected_faults.py": "the fault-injected copy of the stand-in the lab test builds",
}

#: where each file once flat in tests/unit/ lives (its imports and name decided it)
PLACES: dict[str, str] = {
    "test_artifacts.py": "framework/lab/test_artifacts.py",
    "test_ascend_parsers.py": "framework/ascend/test_parse.py",
    "test_base_test_urma.py": "framework/test_base_test_urma.py",
    "test_builders.py": "support/test_builders.py",
    "test_calib.py": "framework/test_calib.py",
    "test_calib_golden.py": "framework/calib/test_golden.py",
    "test_calib_torch_replay.py": "framework/calib/test_replay_torch.py",
    "test_cam_contract.py": "suites/test_cam_contract.py",
    "test_cam_rank_agreement.py": "suites/test_cam_rank_agreement.py",
    "test_cam_rank_checks.py": "suites/test_cam_rank_checks.py",
    "test_cam_rank_health.py": "suites/test_cam_rank_health.py",
    "test_cause.py": "framework/launch/test_cause.py",
    "test_cli_completion.py": "framework/cli/test_completion.py",
    "test_cli_package.py": "framework/test_cli_package.py",
    "test_cli_dry_run.py": "framework/test_cli_dry_run.py",
    "test_cli_startup.py": "framework/test_cli_startup.py",
    "test_commands.py": "framework/test_commands.py",
    "test_complexity_ratchet.py": "tools/test_complexity.py",
    "test_config.py": "framework/test_config.py",
    "test_config_all_errors.py": "framework/test_config_all_errors.py",
    "test_config_legacy.py": "framework/config/test_legacy.py",
    "test_console.py": "framework/test_console.py",
    "test_console_live.py": "framework/test_console_live.py",
    "test_coredump.py": "framework/test_cores.py",
    "test_cores_caps.py": "framework/cores/test_caps.py",
    "test_cores_inspection.py": "framework/cores/test_inspection.py",
    "test_cores_logs.py": "framework/cores/test_logs.py",
    "test_cores_missing.py": "framework/cores/test_missing.py",
    "test_cores_pattern.py": "framework/cores/test_pattern.py",
    "test_cores_watch.py": "framework/cores/test_watch.py",
    "test_coverage.py": "framework/ranksuite/test_coverage.py",
    "test_demo.py": "project/test_demo.py",
    "test_dependencies.py": "project/test_dependencies.py",
    "test_deploy_first.py": "framework/test_deploy_first.py",
    "test_deploy_plan.py": "framework/deploy/test_plan.py",
    "test_deploy_platform.py": "framework/deploy/test_platform.py",
    "test_diagcollect.py": "framework/cores/test_diagcollect.py",
    "test_diagnose.py": "framework/launch/test_diagnose.py",
    "test_docs.py": "docs/test_docs.py",
    "test_errors.py": "framework/test_errors.py",
    "test_fake_transport.py": "framework/testing/test_fake.py",
    "test_faultbundle.py": "framework/cores/test_faultbundle.py",
    "test_fetch_bounds.py": "framework/launch/test_fetch_bounds.py",
    "test_host_names.py": "framework/cores/test_scan_host_names.py",
    "test_hosts.py": "framework/test_hosts.py",
    "test_injected_faults.py": "standin/test_injected_faults.py",
    "test_interrupt_scope.py": "framework/cli/test_run_interrupt_scope.py",
    "test_jenkinsfile.py": "project/test_jenkinsfile.py",
    "test_lab_emu.py": "framework/lab/test_emu.py",
    "test_lab_emu_preflight.py": "framework/lab/test_emu_preflight.py",
    "test_lab_emu_tools.py": "framework/lab/emu/test_tools.py",
    "test_lab_npu_plan.py": "framework/lab/test_plan_npu.py",
    "test_lab_plan.py": "framework/lab/test_plan.py",
    "test_launch_monitor.py": "framework/launch/test_monitor.py",
    "test_launch_per_world.py": "framework/ranksuite/test_batch_per_world.py",
    "test_launch_plan.py": "framework/launch/test_plan.py",
    "test_launch_teardown.py": "framework/launch/test_monitor_teardown.py",
    "test_launch_timeouts_net.py": "framework/test_launch_timeouts_net.py",
    "test_layers.py": "project/test_layers.py",
    "test_lease.py": "framework/test_lease.py",
    "test_linequeue_bounds.py": "framework/transport/test_base_linequeue_bounds.py",
    "test_local_transport.py": "framework/transport/test_local.py",
    "test_make_test_passes.py": "project/test_make_test_passes.py",
    "test_npu_cores_and_pings.py": "framework/preflight/test_pings_and_npu_cores.py",
    "test_output.py": "framework/transport/test_base_output.py",
    "test_pairs.py": "framework/test_pairs.py",
    "test_perf_changepoint.py": "framework/perf/test_changepoint.py",
    "test_perf_history.py": "framework/perf/test_history.py",
    "test_perf_page.py": "framework/perf/test_page.py",
    "test_perf_row.py": "framework/perf/test_row.py",
    "test_perf_straggler.py": "framework/perf/test_straggler.py",
    "test_perf_sweep.py": "framework/perf/test_sweep.py",
    "test_perfbase.py": "framework/ranksuite/test_perfbase.py",
    "test_pgid_marker.py": "framework/transport/test_base_pgid_marker.py",
    "test_phases.py": "framework/test_phases.py",
    "test_plugin_resources.py": "framework/plugin/test_resources.py",
    "test_preflight_plan.py": "framework/test_preflight_plan.py",
    "test_preflight_rendezvous.py": "framework/preflight/test_rendezvous.py",
    "test_public_api.py": "project/test_public_api.py",
    "test_public_surface.py": "project/test_public_surface.py",
    "test_relay.py": "framework/remote/test_relay.py",
    "test_remote_layout.py": "framework/remote/test_layout.py",
    "test_remote_protocol.py": "framework/remote/test_protocol.py",
    "test_report.py": "framework/test_report.py",
    "test_report_ci.py": "framework/report/test_ci.py",
    "test_report_facts.py": "framework/test_report_facts.py",
    "test_report_html.py": "framework/report/test_html.py",
    "test_ranksuite_batches.py": "framework/ranksuite/test_batches.py",
    "test_report_stable.py": "framework/test_report_stable.py",
    "test_rundir.py": "framework/records/test_folder.py",
    "test_samepath.py": "framework/test_samepath.py",
    "test_secret_scrub.py": "framework/records/test_scrub.py",
    "test_sections.py": "framework/remote/test_sections.py",
    "test_ssh_config.py": "framework/config/test_sshconfig.py",
    "test_ssh_known_hosts.py": "framework/transport/test_ssh_known_hosts.py",
    "test_stacks.py": "framework/launch/test_stacks.py",
    "test_standin_on_npu.py": "standin/test_umdk_cam_op_lib_on_npu.py",
    "test_standin_ops.py": "standin/test_umdk_cam_op_lib_ops.py",
    "test_standin_timing.py": "standin/test_timing.py",
    "test_suite_ship.py": "framework/ranksuite/test_suite_ship.py",
    "test_suite_worlds.py": "framework/ranksuite/test_suite_worlds.py",
    "test_supervisor.py": "framework/remote/test_supervisor.py",
    "test_suspects.py": "framework/test_suspects.py",
    "test_tar_header_bomb.py": "framework/test_fetchcaps_tar_header_bomb.py",
    "test_timeline.py": "framework/launch/test_timeline.py",
    "test_timeline_sources.py": "framework/launch/test_timeline_sources.py",
    "test_torch_npu_standin.py": "standin_npu/test_torch_npu.py",
    "test_urma_host.py": "framework/urma/test_host.py",
    "test_wheelinst.py": "framework/remote/test_wheelinst.py",
    "test_wheelwrite.py": "framework/lab/test_wheelwrite.py",
    "test_workdir_trust.py": "framework/remote/test_layout_workdir_trust.py",
    "test_xdist_sched.py": "framework/plugin/test_xdist.py",
}

#: the helpers of tests/ several test folders import: into tests/support/
HELPERS = ("builders.py", "camit_labtools.py", "docblocks.py", "emu_holders.py", "one_rank_failure.py",
           "ptyrun.py", "rankside.py")

#: tracked files whose text may name a test file or a helper by its path or module
TEXT_SUFFIXES = (".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".txt")
TEXT_NAMES = ("Makefile", "Jenkinsfile")

IMPORT = re.compile(r"^\s*from\s+framework((?:\.\w+)*)\s+import\s+([\w, ]+)", re.M)


# -- the rule ---------------------------------------------------------------------------------------------
def names_in(folder: Path, deep: bool) -> set[str]:
    """The modules and packages in ``folder`` (below it too when ``deep``), a leading ``_`` dropped."""
    found: set[str] = set()
    for path in folder.rglob("*.py") if deep else folder.glob("*.py"):
        found.add(path.stem.lstrip("_"))
    for path in folder.rglob("*") if deep else folder.iterdir():
        if path.is_dir() and any(path.glob("*.py")):
            found.add(path.name)
    found.discard("init")
    return found


def names_for(rel: PurePosixPath) -> set[str] | None:
    """The names a test file at ``rel`` (under tests/unit/) may be named after; None: no such area."""
    area, folders = rel.parts[0], rel.parts[1:-1]
    if area not in AREAS:
        return None
    if area != "framework":
        return names_in(ROOT / AREAS[area], deep=True) if not folders else set()
    folder = ROOT.joinpath("framework", *folders)
    return names_in(folder, deep=False) if (folder / "__init__.py").is_file() else set()


def problem(rel: PurePosixPath) -> str | None:
    """Why the test file ``rel`` (relative to tests/unit/) is out of place, None when it is in place."""
    if str(rel) in ALLOWED:
        return None
    names = names_for(rel)
    if names is None:
        return f"{UNIT / rel}: not in a folder of an area ({', '.join(sorted(AREAS))}) nor allowed (ALLOWED)"
    rest = rel.name.removeprefix("test_").removesuffix(".py")
    if not any(rest == n or rest.startswith(n + "_") for n in names):
        where = AREAS[rel.parts[0]] + "/" + "/".join(rel.parts[1:-1])
        return f"{UNIT / rel}: named after no module in {where.rstrip('/')} (test_<module>[_<aspect>].py)"
    return None


def test_files(root: Path = ROOT) -> list[PurePosixPath]:
    """Every test file under tests/unit/, relative to it."""
    unit = root / UNIT
    return sorted(PurePosixPath(p.relative_to(unit).as_posix()) for p in unit.rglob("test_*.py"))


# -- the plan ---------------------------------------------------------------------------------------------
def starts(rest: str, key: str) -> bool:
    return rest == key or rest.startswith(key + "_")


def in_framework(rest: str) -> str | None:
    """``launch_monitor`` → ``framework/launch/test_monitor.py``: the longest module path the name starts with."""
    best: tuple[int, str] | None = None
    for init in sorted((ROOT / "framework").rglob("__init__.py")):
        folder = init.parent.relative_to(ROOT / "framework").parts
        for name in names_in(init.parent, deep=False):
            key = "_".join((*folder, name))
            if starts(rest, key) and (best is None or len(key) > best[0]):
                best = (len(key), "/".join(("framework", *folder, f"test_{name}{rest[len(key):]}.py")))
    return best[1] if best else None


def in_other_area(rest: str) -> str | None:
    """``complexity_x`` → ``tools/test_complexity_x.py``: the first other area with a module of that name."""
    for area, code in AREAS.items():
        names = names_in(ROOT / code, deep=True) if area != "framework" and (ROOT / code).is_dir() else set()
        if any(starts(rest, name) for name in names):
            return f"{area}/test_{rest}.py"
    return None


def by_name(rest: str) -> str | None:
    return in_framework(rest) or in_other_area(rest)


def by_imports(rest: str, text: str) -> str | None:
    """The framework module the file imports most: ``framework/<package>/test_<module>_<rest>.py``."""
    counts: Counter[str] = Counter()
    for dotted, names in IMPORT.findall(text):
        parts = [p for p in dotted.split(".") if p]
        folder = ROOT.joinpath("framework", *parts)
        for name in [n.strip() for n in names.split(",")]:
            found = (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()
            module = ".".join([*parts, name] if found else parts)
            if module:
                counts[module] += 1
    if not counts:
        return None
    *folders, module = counts.most_common(1)[0][0].split(".")
    if (ROOT.joinpath("framework", *folders, module) / "__init__.py").is_file():
        folders, module = [*folders, module], ""
    stem = f"test_{module}_{rest}" if module and not starts(rest, module) else f"test_{rest}"
    return "/".join(("framework", *folders, f"{stem}.py"))


def destination(name: str, text: str) -> str | None:
    """Where the flat file ``tests/unit/<name>`` goes (relative to tests/unit/), None when no rule says."""
    if name in PLACES:
        return PLACES[name]
    rest = name.removeprefix("test_").removesuffix(".py")
    return by_name(rest) or by_imports(rest, text)


def plan(root: Path = ROOT) -> tuple[list[tuple[str, str]], list[str]]:
    """(old → new paths relative to the checkout, the flat files no rule places)."""
    moves: list[tuple[str, str]] = []
    unplaced: list[str] = []
    for path in sorted((root / UNIT).glob("test_*.py")):
        dest = destination(path.name, path.read_text(encoding="utf-8"))
        if dest is None or (root / UNIT / dest).exists():
            unplaced.append(f"{UNIT / path.name}" + (f" (its place {UNIT / dest} is taken)" if dest else ""))
        else:
            moves.append((str(UNIT / path.name), str(UNIT / dest)))
    moves += [(f"tests/{h}", str(SUPPORT / h)) for h in HELPERS if (root / "tests" / h).is_file()]
    return moves, unplaced


# -- the rewrite ------------------------------------------------------------------------------------------
def module_of(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def renames(root: Path, moves: Iterable[tuple[str, str]] = ()) -> list[tuple[re.Pattern[str], str]]:
    """Old path and module → new, for ``moves`` and every place of the tables whose file is there now."""
    pairs = [(str(UNIT / old), str(UNIT / new)) for old, new in PLACES.items()]
    pairs += [(f"tests/{h}", str(SUPPORT / h)) for h in HELPERS] + list(moves)
    out: list[tuple[re.Pattern[str], str]] = []
    for helper in (h.removesuffix(".py") for h in HELPERS if (root / SUPPORT / h).is_file()):
        out.append((re.compile(rf"(?<![\w.])from tests import {helper}(?!\w)"), f"from tests.support import {helper}"))
    for old, new in pairs:
        if (root / new).is_file() and not (root / old).exists():
            out.append((re.compile(re.escape(old) + r"(?![\w/])"), new))
            out.append((re.compile(r"(?<![\w.])" + re.escape(module_of(old)) + r"(?!\w)"), module_of(new)))
    return out


def reparent(text: str, delta: int) -> str:
    """``Path(__file__)...parents[N]`` (and ``.parent.parent``, ``.parent / "data"``) for a file ``delta``
    folders deeper than it was."""
    if delta == 0:
        return text
    file_ = r"(Path\(__file__\)(?:\.resolve\(\))?)"
    text = re.sub(file_ + r"\.parents\[(\d+)\]", lambda m: f"{m[1]}.parents[{int(m[2]) + delta}]", text)
    text = re.sub(file_ + r"\.parent\.parent(?!\.parent)", lambda m: f"{m[1]}.parents[{1 + delta}]", text)
    # tests/data named from the helper's own folder (tests/): one more level from tests/support/
    return re.sub(file_ + r"\.parent( / \"data\")", lambda m: f"{m[1]}.parents[{delta}]{m[2]}", text)


def tracked_texts(root: Path, keep: Sequence[str]) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
    out = []
    for name in filter(None, listed.split("\0")):
        kept = any(name == k or name.startswith(k.rstrip("/") + "/") for k in keep)
        if kept or name.startswith("tests/data/") or not (root / name).is_file():
            continue
        if name.endswith(TEXT_SUFFIXES) or Path(name).name in TEXT_NAMES:
            out.append(root / name)
    return out


def rewrite(root: Path, files: Iterable[Path], patterns: list[tuple[re.Pattern[str], str]]) -> list[Path]:
    changed = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        new = text
        for pattern, repl in patterns:
            new = pattern.sub(repl, new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def packages(root: Path, moves: Iterable[tuple[str, str]]) -> list[Path]:
    """The __init__.py each new folder needs (test modules of one name in two folders: tests.unit.x.test_plan)."""
    made = []
    for _, new in moves:
        folder = (root / new).parent
        while folder.is_relative_to(root / "tests"):
            init = folder / "__init__.py"
            if not init.exists():
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text("")
                made.append(init)
            folder = folder.parent
    return made


def git(root: Path, *argv: str) -> None:
    subprocess.run(["git", *argv], cwd=root, check=True)


def apply(root: Path, moves: list[tuple[str, str]], keep: Sequence[str]) -> None:
    for old, new in moves:
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        git(root, "mv", old, new)
        delta = len(PurePosixPath(new).parts) - len(PurePosixPath(old).parts)
        path = root / new
        path.write_text(reparent(path.read_text(encoding="utf-8"), delta), encoding="utf-8")
    made = packages(root, moves)
    if made:
        git(root, "add", *map(str, made))
    changed = rewrite(root, tracked_texts(root, keep), renames(root, moves))
    python = [str(p) for p in {*changed, *(root / new for _, new in moves)} if p.suffix == ".py"]
    if python:  # an import renamed may sort elsewhere now
        subprocess.run([sys.executable, "-m", "ruff", "check", "--fix", "--select", "I", "--quiet", *python],
                       cwd=root, check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--apply", action="store_true", help="make the moves (git mv) and rewrite the references")
    parser.add_argument("--keep", action="append", default=[], metavar="PATH",
                        help="a tracked file or folder whose text is left as it is (repeatable)")
    args = parser.parse_args(argv)
    moves, unplaced = plan()
    for old, new in moves:
        print(f"{old} -> {new}")
    for name in unplaced:
        print(f"cannot place {name}: add it to PLACES in tools/testtree.py", file=sys.stderr)
    if args.apply:
        apply(ROOT, moves, args.keep)
    elif not moves:
        print("nothing to move")
    return 1 if unplaced else 0


if __name__ == "__main__":
    sys.exit(main())
