"""The plugin's command-line options and ini keys, read once into a frozen :class:`Options`.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from framework.config.envfile import INI_KEY as ENV_INI


def add_options(parser: pytest.Parser) -> None:
    """Declare camit's options (group ``camit``) and its ini key; the names are public, never renamed."""
    g = parser.getgroup("camit", "camit cluster tests")
    g.addoption("--env", dest="camit_env", metavar="FILE", default=None,
                help="test_env.yaml (default: $CAMIT_ENV, else ini camit_env)")
    g.addoption("--random-seed", dest="camit_seed", type=int, default=None, metavar="N",
                help="seed for every rank and every random case (printed with a repro line)")
    g.addoption("--hosts", dest="camit_hosts", default=None, metavar="H1,H2",
                help="only these hosts of the env (names from host_info); under -n the worker shares are cut "
                     "from them")
    g.addoption("--exclude-hosts", dest="camit_exclude_hosts", default=None, metavar="H1,H2",
                help="leave these hosts of the env out (e.g. a broken one)")
    g.addoption("--case-timeout", dest="camit_case_timeout", type=float, default=600.0, metavar="S",
                help="wall-clock limit of one launch across the cluster (default 600)")
    g.addoption("--report-dir", dest="camit_report_dir", default="reports", metavar="DIR",
                help="run folders go here: DIR/<run-id>/ and DIR/latest (default: reports)")
    g.addoption("--core-policy", dest="camit_core_policy", choices=("fail", "warn", "ignore"), default="fail",
                help="what a core dump that appeared during a test does (default: fail)")
    g.addoption("--keep-remote", dest="camit_keep_remote", action="store_true",
                help="leave the run folders on the hosts for debugging")
    g.addoption("--no-deploy", dest="camit_no_deploy", action="store_true",
                help="use what is installed on the hosts; do not deploy the env's artifacts")
    g.addoption("--world-sizes", dest="camit_worlds", default=None, metavar="4,8,16",
                help="only these world sizes (default: every size the env can host)")
    g.addoption("--ranks-per-node", dest="camit_slots", type=int, default=None, metavar="P",
                help="ranks per node (default: npu.count, else launch.nproc_per_node, else 2)")
    g.addoption("--spread", dest="camit_spread", type=int, default=1, metavar="N",
                help="place every world on at least N nodes (world 4 with --spread 2 runs 2+2; default 1: "
                     "the fewest nodes that hold it)")
    g.addoption("--umdk-src", dest="camit_umdk_src", default=None, metavar="PATH",
                help="a UMDK checkout: also run its test/cam/ut through the same launch")
    g.addoption("--update-baseline", dest="camit_update_baseline", action="store_true",
                help="write the measured performance as the cluster's new baseline")
    g.addoption("--baseline-margin", dest="camit_baseline_margin", type=float, default=None, metavar="F",
                help="fail a perf test beyond this slow-down over its recent runs (0.5 = +50%%) instead of "
                     "the history's change points (default)")
    g.addoption("--perf-matrix", dest="camit_perf_matrix", default=None, metavar="quick|nightly|FILE",
                help="the perf sweep's configurations (suites/cam/test_sweep.py; default with -m perf: quick)")
    g.addoption("--cluster-name", dest="camit_cluster", default=None, metavar="NAME",
                help="name of the cluster for baselines (default: the env file's stem)")
    g.addoption("--baseline-dir", dest="camit_baseline_dir", default=None, metavar="DIR",
                help="where <cluster>.json baselines live (default: env/baselines of this checkout)")
    g.addoption("--full-shapes", dest="camit_full_shapes", action="store_true",
                help="upstream's full case shapes instead of the small lab defaults")
    g.addoption("--cov-ranks", dest="camit_cov_ranks", action="store_true",
                help="coverage of the rank-side tree and the op library on every host, combined into "
                     "<report>/coverage/ and coverage.xml (also ENABLE_COV=1)")
    g.addoption("--launch-per", dest="camit_launch_per", choices=LAUNCH_MODES, default=None,
                help="test: one launch per test and world (default); world: the tests of one world size share "
                     "one launch of their rank-side modules, results split back per test (ini camit_launch_per)")
    parser.addini(ENV_INI, "default test_env.yaml for --env", default="")
    parser.addini(LAUNCH_INI, "--launch-per's default: test or world", default="test")


#: ``--launch-per``'s values and its ini key (framework.ranksuite.batches)
LAUNCH_MODES = ("test", "world")
LAUNCH_INI = "camit_launch_per"

#: the URMA harness's spelling of ``--random-seed``
SEED_ALIAS = "--random_seed"


def _option_names(parser: pytest.Parser) -> dict[str, str]:
    """Every option name already declared (any group, conftests' too) -> its ``dest``."""
    groups = [parser._anonymous, *parser._groups]  # pytest's own attributes: the declared option groups
    return {name: str(opt.dest) for group in groups for opt in group.options for name in opt.names()}


def add_seed_alias(parser: pytest.Parser) -> None:
    """After the initial conftests: ``--random_seed`` as camit's alias unless one of them declared it."""
    if SEED_ALIAS not in _option_names(parser):
        parser.getgroup("camit").addoption(SEED_ALIAS, dest="camit_seed", type=int, default=None, metavar="N",
                                           help="the same as --random-seed")


def seed_of(config: pytest.Config) -> int | None:
    """The seed given: ``--random-seed``, else ``--random_seed`` (camit's alias, or a conftest's own option)."""
    seed = config.getoption("camit_seed")
    if seed is not None:
        return int(seed)
    dest = _option_names(config._parser).get(SEED_ALIAS)  # pytest's own attribute: the parser
    if dest and dest != "camit_seed":
        value = config.getoption(dest, None)
        if value is not None and str(value).strip():
            try:
                return int(str(value))
            except ValueError:
                raise pytest.UsageError(f"{SEED_ALIAS} {value!r}: not an integer") from None
    return None


def split_names(text: str | None) -> tuple[str, ...] | None:
    """``a, b,c`` -> ``("a", "b", "c")``; None or empty: None."""
    names = tuple(n.strip() for n in text.split(",") if n.strip()) if text else ()
    return names or None


def env_path(config: pytest.Config, environ: Mapping[str, str] = os.environ) -> str | None:
    """The env file of this run: ``--env``, else ``$CAMIT_ENV``, else the ini key ``camit_env``; None: none."""
    from framework.config import resolve_env_path  # the one env-file rule (also camit, BaseTest)

    return resolve_env_path(config.getoption("camit_env"), environ, config.getini(ENV_INI), default=None)[0]


def parse_worlds(text: str | None) -> frozenset[int] | None:
    """The world sizes ``--world-sizes 4,8`` selects, or None for all."""
    return frozenset(int(w) for w in text.split(",") if w.strip()) if text else None


def launch_per(config: pytest.Config) -> str:
    """``--launch-per``, else the ini key ``camit_launch_per``, else ``test``; another value is a usage error."""
    value = config.getoption("camit_launch_per") or str(config.getini(LAUNCH_INI) or "").strip() or "test"
    if value not in LAUNCH_MODES:
        raise pytest.UsageError(f"ini {LAUNCH_INI} = {value!r}: expected one of {', '.join(LAUNCH_MODES)}")
    return str(value)


def _spread(value: int | None) -> int:
    if value is not None and value < 1:
        raise pytest.UsageError(f"--spread {value}: the number of nodes must be >= 1")
    return value or 1


@dataclass(frozen=True)
class LeaseSettings:
    """Who the session's lease names as its owner (``$BUILD_URL``, else the default) and how long it waits."""

    owner: str | None = None
    wait: float = 0.0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> LeaseSettings:
        return cls(owner=environ.get("BUILD_URL") or None, wait=float(environ.get("CAMIT_LEASE_WAIT", "0")))


@dataclass(frozen=True)
class Options:
    """Every camit option of the run, read once; field names follow the option (``--no-deploy``: ``no_deploy``)."""

    env_path: str | None = None
    #: ``--env`` was given on the command line (not only ``$CAMIT_ENV`` or the ini key): camit is in use at once
    env_explicit: bool = False
    seed: int | None = None
    #: ``--hosts`` (None: every host of the env)
    hosts: tuple[str, ...] | None = None
    #: ``--exclude-hosts`` (empty: none left out)
    exclude_hosts: tuple[str, ...] = ()
    case_timeout: float = 600.0
    report_dir: str = "reports"
    core_policy: str = "fail"
    keep_remote: bool = False
    no_deploy: bool = False
    worlds_text: str | None = None
    slots: int | None = None
    spread: int = 1
    umdk_src: str | None = None
    update_baseline: bool = False
    baseline_margin: float | None = None
    cluster_name: str | None = None
    baseline_dir: str | None = None
    full_shapes: bool = False
    cov_ranks: bool = False
    #: ``--launch-per``: ``test`` (one launch per test and world) or ``world`` (framework.ranksuite.batches)
    launch_per: str = "test"
    lease: LeaseSettings = LeaseSettings()

    @property
    def picks_hosts(self) -> bool:
        """Whether ``--hosts`` or ``--exclude-hosts`` picks the hosts (else: all but suspects)."""
        return bool(self.hosts or self.exclude_hosts)

    @property
    def worlds(self) -> frozenset[int] | None:
        """The selected world sizes (``--world-sizes``), or None for every size."""
        return parse_worlds(self.worlds_text)

    @classmethod
    def from_config(cls, config: pytest.Config, environ: Mapping[str, str] = os.environ) -> Options:
        opt = config.getoption
        return cls(
            env_path=env_path(config, environ), env_explicit=bool(opt("camit_env")), seed=seed_of(config),
            hosts=split_names(opt("camit_hosts")),
            exclude_hosts=split_names(opt("camit_exclude_hosts")) or (),
            case_timeout=opt("camit_case_timeout"),
            report_dir=opt("camit_report_dir"), core_policy=opt("camit_core_policy"),
            keep_remote=bool(opt("camit_keep_remote")), no_deploy=bool(opt("camit_no_deploy")),
            worlds_text=opt("camit_worlds"), slots=opt("camit_slots"),
            spread=_spread(opt("camit_spread")), umdk_src=opt("camit_umdk_src"),
            update_baseline=bool(opt("camit_update_baseline")), baseline_margin=opt("camit_baseline_margin"),
            cluster_name=opt("camit_cluster"), baseline_dir=opt("camit_baseline_dir"),
            full_shapes=bool(opt("camit_full_shapes")), cov_ranks=bool(opt("camit_cov_ranks")),
            launch_per=launch_per(config), lease=LeaseSettings.from_environ(environ))
