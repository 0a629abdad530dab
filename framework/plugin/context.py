"""The run context in ``config.stash``: what this pytest process knows about the run, as data.

Design: docs/internals/plugin.md.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from framework.errors import ConfigError, FrameworkError
from framework.plugin.options import Options
from framework.plugin.xdist import ShareBook, host_share

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.launch import LaunchResult
    from framework.records.folder import RunDir

#: what pytest-xdist hands a worker (``node.workerinput``): workerid, workercount, camit_rundir, camit_seed,
#: camit_hosts (the worker's host share, from the controller's :class:`~framework.plugin.xdist.ShareBook`)
WorkerInput = Mapping[str, object]

CONTEXT_KEY = pytest.StashKey["RunContext"]()
#: the launches a test ran (``run_ranks``), for the core watch to attribute cores to ranks
LAUNCHES_KEY = pytest.StashKey[list["LaunchResult"]]()


@dataclass
class RunContext:
    """This process's view of the run (``config.stash[CONTEXT_KEY]``, the ``camit`` fixture)."""

    config: pytest.Config
    options: Options
    env: EnvConfig | None
    seed: int
    worker: WorkerInput | None = None
    started: float = field(default_factory=time.time)
    rundir: RunDir | None = None
    cov_ranks: bool = False
    cov_summary: str = ""
    #: why the env (from ``$CAMIT_ENV`` or the ini key, not ``--env``) did not load: raised at activation
    env_error: str | None = None
    #: camit is in use in this process (explicit ``--env``, or a test uses a camit fixture)
    active: bool = False
    #: the controller's hand-out of host shares under ``-n`` (made at the first worker)
    shares: ShareBook | None = None
    #: the test running now (pytest nodeid, attempt: pytest-rerunfailures' ``execution_count``, else 1); the
    #: launcher records it in each launch so the report names launches by test, not by a counter
    test: tuple[str, int] | None = None
    #: the failed attempts pytest-rerunfailures reran (controller): folded into pytest's junit.xml at the end
    reruns: list[Any] = field(default_factory=list)
    #: the env's suspect hosts (framework.suspects), host → mark; None until read
    #: (:meth:`load_suspects`)
    suspects: dict[str, Any] | None = None

    @classmethod
    def from_config(cls, config: pytest.Config) -> RunContext:
        """Read the options, load and validate the env (a bad one is a ``UsageError``), choose the
        seed."""
        options = Options.from_config(config)
        worker: WorkerInput | None = getattr(config, "workerinput", None)
        env, env_error, cov_ranks = _load_env(options)
        ctx = cls(config, options, env, _seed(options, worker), worker=worker, cov_ranks=cov_ranks,
                  env_error=env_error)
        ctx.active = env is not None and options.env_explicit
        return ctx

    @property
    def case_timeout(self) -> float:
        return self.options.case_timeout

    @property
    def core_policy(self) -> str:
        return self.options.core_policy

    @property
    def is_controller(self) -> bool:
        """Not an xdist worker: the process that writes the run's shared files."""
        return self.worker is None

    def activate(self) -> bool:
        """camit is used in this process: the env must load (else ``UsageError``, one line naming the file),
        the run folder is made (not under ``--collect-only``). Idempotent; False without any env file."""
        if self.active:
            return True
        if not self.options.env_path:
            return False
        if self.env is None:
            raise pytest.UsageError(self.env_error or f"{self.options.env_path}: the env did not load")
        self.active = True
        if not self.config.option.collectonly:
            self.ensure_rundir()
        return True

    def loaded_env(self) -> EnvConfig:
        """The env (``UsageError`` saying why there is none); asking for it does not put camit in use."""
        if self.env is None:
            if self.env_error:
                raise pytest.UsageError(self.env_error)
            raise pytest.UsageError("this test needs a cluster: pass --env FILE (or set CAMIT_ENV)")
        return self.env

    def require_env(self) -> EnvConfig:
        """The env, for something that uses the cluster: camit is in use from now on (:meth:`activate`)."""
        env = self.loaded_env()
        self.activate()
        return env

    def chosen_hosts(self) -> list[str]:
        """The env's hosts this run uses: ``--hosts`` (in file order), less ``--exclude-hosts``,
        less the suspect hosts read so far unless ``--hosts`` names them; not an activation."""
        return chosen_hosts(self.loaded_env(), self.options, self.suspects or {})

    def load_suspects(self) -> dict[str, Any]:
        """Read the env's suspect marks once (the controller, before hosts are chosen; through the
        session's transport factory); unreachable hosts are skipped (reported when the cluster
        opens)."""
        from framework import suspects

        if self.suspects is None and self.worker is None and suspects.default_ttl() > 0:
            from framework.hosts import Cluster
            from framework.plugin.resources import RESOURCES_KEY

            res = self.config.stash.get(RESOURCES_KEY, None)
            factory = res.transport_factory if res is not None else None
            with Cluster.from_env(self.loaded_env(), None, transport_factory=factory) as cluster:
                self.suspects = suspects.read(cluster)
            from framework.plugin.reporting import record_suspects

            record_suspects(self)
        return self.suspects or {}

    def host_names(self) -> list[str]:
        """The hosts this process drives: the chosen ones, or under pytest-xdist (-n N) the share the
        controller handed this worker (``camit_hosts``), so that workers lease, deploy and launch on
        disjoint hosts, and a replacement worker on the share of the one that died."""
        chosen = self.chosen_hosts()
        if self.worker is not None and "camit_hosts" in self.worker:
            given = self.worker["camit_hosts"]
            return [str(n) for n in given] if isinstance(given, list | tuple) else []
        return host_share(chosen, self.worker)

    def worker_share(self, worker_id: str, count: int) -> list[str] | None:
        """The controller: the host share to hand the starting xdist worker ``worker_id`` (None: no env, or
        fewer hosts than workers, which the worker then reports when it needs its hosts)."""
        if self.env is None:
            return None
        try:
            if self.shares is None:
                self.load_suspects()
                self.shares = ShareBook(self.chosen_hosts(), count)
            return self.shares.hand_out(worker_id)
        except pytest.UsageError:
            return None

    def plan_rundir(self) -> RunDir:
        """The run folder's path, not made yet (the controller hands it to xdist workers at once)."""
        if self.rundir is None:
            from framework.records.folder import RunDir, new_run_id

            if self.worker is not None and self.worker.get("camit_rundir"):
                path = Path(str(self.worker["camit_rundir"]))
                self.rundir = RunDir(path, path.name)
            else:
                run_id = new_run_id()
                self.rundir = RunDir(Path(self.options.report_dir) / run_id, run_id)
        return self.rundir

    def in_use(self) -> bool:
        """camit was used by this process or, under xdist, by a worker (which made the planned run folder)."""
        return self.active or (self.rundir is not None and self.rundir.path.is_dir())

    def ensure_rundir(self) -> RunDir:
        """The run folder: the controller's (a worker gets its path through ``workerinput``), made on first use
        (by whichever process uses camit first; ``latest`` points at it)."""
        planned = self.plan_rundir()
        if not planned.path.is_dir():
            from framework.records.folder import RunDir

            self.rundir = RunDir.create(planned.path.parent, planned.run_id)
        return self.rundir or planned


def _refuse_unknown_hosts(env: EnvConfig, options: Options) -> None:
    """A ``UsageError`` naming the option, the first host ``--hosts`` / ``--exclude-hosts`` names that the env
    does not have, and the env file."""
    given = (("--hosts", options.hosts or ()), ("--exclude-hosts", options.exclude_hosts))
    for flag, names in given:
        unknown = [n for n in names if n not in env.hosts]
        if unknown:
            raise pytest.UsageError(f"{flag} {','.join(names)}: unknown host {unknown[0]!r}: "
                                    f"not in {env.source} (its hosts: {', '.join(env.hosts)})")


def _seed(options: Options, worker: WorkerInput | None) -> int:
    """The run's seed: the controller's on an xdist worker (as its repro line says), else
    ``--random-seed``, else a random one."""
    if worker is not None and "camit_seed" in worker:
        return int(str(worker["camit_seed"]))
    if options.seed is not None:
        return options.seed
    return random.randint(0, 10000)


def _load_env(options: Options) -> tuple[EnvConfig | None, str | None, bool]:
    """(the env, why it did not load, coverage mode) from the options; a bad env is a
    ``UsageError`` when named on the command line (``$CAMIT_ENV`` alone: an error only once camit
    is used)."""
    named_hosts = options.picks_hosts
    if not options.env_path:
        if named_hosts:
            raise pytest.UsageError(
                "--hosts/--exclude-hosts: no env file (pass --env FILE or set CAMIT_ENV)")
        return None, None, False
    from framework.config.effective import load
    from framework.ranksuite import coverage

    try:
        env = load(options.env_path)
        cov_ranks = coverage.requested(options.cov_ranks)  # coverage mode: ranksuite/coverage.py
        chosen_hosts(env, options)
    except (ConfigError, FrameworkError, pytest.UsageError) as exc:
        if options.env_explicit or named_hosts:
            raise pytest.UsageError(str(exc)) from None
        return None, str(exc), False
    return env, None, cov_ranks


def _wanted(name: str, options: Options, left_out: set[str]) -> bool:
    """Whether ``--hosts`` (when given) names host ``name`` and nothing leaves it out."""
    return (options.hosts is None or name in options.hosts) and name not in left_out


def chosen_hosts(env: EnvConfig, options: Options,
                 suspect: Mapping[str, Any] | None = None) -> list[str]:
    """The env's hosts that ``--hosts`` / ``--exclude-hosts`` leave (file order), without the
    ``suspect`` ones unless ``--hosts`` names them; an unknown name or none left is a
    ``UsageError`` naming the option, the host and the env file."""
    _refuse_unknown_hosts(env, options)
    left_out = set(options.exclude_hosts)
    if options.hosts is None:
        left_out |= set(suspect or ())
    chosen = [n for n in env.hosts if _wanted(n, options, left_out)]
    if not chosen:
        raise _none_left(env, options, suspect)
    return chosen


def _none_left(env: EnvConfig, options: Options,
               suspect: Mapping[str, Any] | None) -> pytest.UsageError:
    """The error when the options, and the suspect hosts they do not override, leave no host."""
    if suspect and options.hosts is None:
        return pytest.UsageError(f"every host of {env.source} left is suspect "
                                 f"({', '.join(suspect)}): "
                                 "re-admit with camit check --heal, or name hosts with --hosts")
    return pytest.UsageError(f"--hosts/--exclude-hosts leave no host of {env.source}")


def context_of(config: pytest.Config) -> RunContext:
    """The run context ``pytest_configure`` stored (KeyError before that)."""
    return config.stash[CONTEXT_KEY]
