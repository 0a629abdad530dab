"""The run context in ``config.stash``: what this pytest process knows about the run, as data.

One :class:`RunContext` per process (the controller and each xdist worker), made in
``pytest_configure`` from the :class:`~framework.plugin.options.Options`: the loaded env (or None:
the plugin stays inert), the seed (a worker takes the controller's, so its repro line holds), the
xdist ``workerinput``, the run folder and the coverage mode. It opens nothing on a host; the
cluster, lease, deploy and launcher are the :mod:`~framework.plugin.resources`. The ``camit``
fixture returns it. ``LAUNCHES_KEY`` is the per-test record of launches the core watch attributes
cores to.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from framework.errors import ConfigError, FrameworkError
from framework.plugin.options import Options
from framework.plugin.xdist import host_share

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig
    from framework.launch import LaunchResult
    from framework.report.folder import RunDir

#: what pytest-xdist hands a worker (``node.workerinput``): workerid, workercount, camit_rundir, camit_seed
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

    @classmethod
    def from_config(cls, config: pytest.Config) -> RunContext:
        """Read the options, load and validate the env (a bad one is a ``UsageError``), choose the seed."""
        options = Options.from_config(config)
        worker: WorkerInput | None = getattr(config, "workerinput", None)
        if worker is not None and "camit_seed" in worker:
            seed = int(str(worker["camit_seed"]))  # xdist: the controller's seed, as its repro line says
        elif options.seed is not None:
            seed = options.seed
        else:
            seed = random.randint(0, 10000)
        env = None
        cov_ranks = False
        if options.env_path:
            from framework import coverage
            from framework.config.effective import load

            try:
                env = load(options.env_path)
                cov_ranks = coverage.requested(options.cov_ranks)  # coverage mode: framework/coverage.py
            except (ConfigError, FrameworkError) as exc:
                raise pytest.UsageError(str(exc)) from None
        return cls(config, options, env, seed, worker=worker, cov_ranks=cov_ranks)

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

    def require_env(self) -> EnvConfig:
        if self.env is None:
            raise pytest.UsageError("this test needs a cluster: pass --env FILE (or set CAMIT_ENV)")
        return self.env

    def host_names(self) -> list[str]:
        """The hosts this process drives: all of them, or under pytest-xdist (-n N) this worker's
        own contiguous share, so that workers lease, deploy and launch on disjoint hosts."""
        return host_share(list(self.require_env().hosts), self.worker)

    def ensure_rundir(self) -> RunDir:
        """The run folder: the controller's (a worker gets its path through ``workerinput``), made on first use."""
        if self.rundir is None:
            from framework.report.folder import RunDir

            if self.worker is not None and self.worker.get("camit_rundir"):
                path = Path(str(self.worker["camit_rundir"]))
                self.rundir = RunDir(path, path.name)
            else:
                self.rundir = RunDir.create(self.options.report_dir)
        return self.rundir


def context_of(config: pytest.Config) -> RunContext:
    """The run context ``pytest_configure`` stored (KeyError before that)."""
    return config.stash[CONTEXT_KEY]
