"""Launch torchrun across the cluster: fail fast, tear down everywhere, leave nothing behind.

Split in three, as deploy is:

- :mod:`~framework.launch.plan` (pure): targets, backend variables, each node's plan and exact bash
  line (CANN and vendor ``set_env``, the variables, ``ulimit -c``, then the supervisor running
  ``python -m torch.distributed.run ... --no-python <python> rankwrap.py ...``);
- :mod:`~framework.launch.monitor` (pure): the supervisors' lines in, the launch's verdict out;
- :mod:`~framework.launch.fetch`: each node's run folder back into ``<report>/<host>/``;
- :mod:`~framework.launch.devices`: on NPU hosts, the bounded check that the run's pids released their
  devices (a device still held marks the host dirty for the session: later launches there fail at once),
  and the NPU state a failed launch saves.

:class:`Launcher` (:mod:`~framework.launch.runner`) is the thin runner over them: it ships the supervisor and rank
wrapper (content-addressed, once), picks a free master port on node 0 at launch time, starts one
supervisor per node over its own SSH channel and feeds their lines to the monitor. The first
failing rank or node, a node that goes silent (heartbeats, not TCP timeouts), the job timeout,
Ctrl-C/SIGTERM or any other exception that stops the controller (pytest-timeout, ``pytest.exit``) → every supervisor
is told to kill its run (its process group and every process
tagged with the run id; on the job timeout it first asks every rank for its Python stacks), and we
wait for each to confirm. Then, on NPU hosts, the devices are checked (and a failure's NPU state
saved), and per-rank logs, status, JUnit files, plogs and that state are fetched. Phases (``launch``, ``run``,
``teardown``, ``collect``) go to ``on_phase``.

The package's names (``from framework.launch import Launcher, Target``) load on first use (PEP 562), so
the pure submodules the env loader and the preflight use (``nic``, ``timeouts``) import without the runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from framework._lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover - what the lazy names are, for type checkers and editors
    from framework.launch.plan import (
        FETCH_PATTERNS,
        HEARTBEAT,
        LOST_AFTER,
        SUPERVISOR_SILENCE,
        NodePlan,
        Target,
        backend_env,
        launch_label,
        node_command,
    )
    from framework.launch.result import LaunchResult, NodeResult, RankResult
    from framework.launch.runner import Launcher

__all__ = ["FETCH_PATTERNS", "HEARTBEAT", "LOST_AFTER", "SUPERVISOR_SILENCE", "LaunchResult", "Launcher", "NodePlan",
           "NodeResult", "RankResult", "Target", "backend_env", "launch_label", "node_command"]

#: the module that defines each public name; loaded on first use, so the pure submodules (``nic``,
#: ``timeouts``: the env loader's checks) import without the runner, SSH hosts and all
_MODULES: dict[str, tuple[str, ...]] = {
    "framework.launch.plan": ("FETCH_PATTERNS", "HEARTBEAT", "LOST_AFTER", "SUPERVISOR_SILENCE", "NodePlan", "Target",
                              "backend_env", "launch_label", "node_command"),
    "framework.launch.result": ("LaunchResult", "NodeResult", "RankResult"),
    "framework.launch.runner": ("Launcher",),
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), {n: m for m, ns in _MODULES.items() for n in ns})
