"""camit's pytest plugin (entry point ``pytest11: camit``): options, markers, fixtures, reports.

``pytest suites/cam --env test_env.yaml`` — the env may also come from ``$CAMIT_ENV`` or
the ini key ``camit_env``. Nothing here touches a host until a test asks for the
``cluster``/``deployed``/``launcher``/``rank_suite`` fixtures, so the plugin is inert
for ordinary test runs.

- ``--random-seed`` (also URMA's ``--random_seed``) seeds ``random`` and every rank; the
  header prints the line that reproduces the run.
- Requirement markers ``ranks(n)``, ``nodes(n)``, ``soc(*names)``, ``a2_test``/``a3_test``:
  a test the env cannot host is *skipped with a reason naming what is missing*.
- Around every test that uses the cluster, cores are snapshotted before and collected
  after; the policy (``--core-policy`` / ``core_policy`` marker) decides the outcome.
- Only the controller writes shared files (pytest-xdist: workers get the run folder
  through ``workerinput``); deploy runs once per session under a file lock.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from framework.errors import ConfigError, FrameworkError

if TYPE_CHECKING:
    from framework.cores.runwatch import ClusterWatch

SESSION_KEY = pytest.StashKey["CamitSession"]()
LAUNCHES_KEY = pytest.StashKey[list]()
SOC_MARKERS = {"a2_test": "ascend910b", "a3_test": "ascend910_93"}
MARKERS = (
    "a2_test: runs on Atlas A2 (910B) hosts",
    "a3_test: runs on Atlas A3 (910C SuperPoD) hosts",
    "multi_process_test: launches several ranks",
    "single_process_test: one process",
    "author(name): who wrote the case",
    "ranks(n): needs n ranks in total (skipped with the reason when the env has fewer)",
    "nodes(n): needs n hosts",
    "soc(*names): runs only on these SoCs (ascend910b, ascend910_93, cpu)",
    "core_policy(policy): fail | warn | ignore for cores that appear during this test",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("camit", "camit cluster tests")
    g.addoption("--env", dest="camit_env", metavar="FILE", default=None,
                help="test_env.yaml (default: $CAMIT_ENV, else ini camit_env)")
    g.addoption("--random-seed", "--random_seed", dest="camit_seed", type=int, default=None, metavar="N",
                help="seed for every rank and every random case (printed with a repro line)")
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
    g.addoption("--umdk-src", dest="camit_umdk_src", default=None, metavar="PATH",
                help="a UMDK checkout: also run its test/cam/ut through the same launch")
    g.addoption("--update-baseline", dest="camit_update_baseline", action="store_true",
                help="write the measured performance as the cluster's new baseline")
    g.addoption("--baseline-margin", dest="camit_baseline_margin", type=float, default=0.5, metavar="F",
                help="allowed slow-down over the baseline before a perf test fails (default 0.5 = +50%%)")
    g.addoption("--cluster-name", dest="camit_cluster", default=None, metavar="NAME",
                help="name of the cluster for baselines (default: the env file's stem)")
    g.addoption("--baseline-dir", dest="camit_baseline_dir", default=None, metavar="DIR",
                help="where <cluster>.json baselines live (default: env/baselines of this checkout)")
    g.addoption("--full-shapes", dest="camit_full_shapes", action="store_true",
                help="upstream's full case shapes instead of the small lab defaults")
    g.addoption("--cov-ranks", dest="camit_cov_ranks", action="store_true",
                help="coverage of the rank-side tree and the op library on every host, combined into "
                     "<report>/coverage/ and coverage.xml (also ENABLE_COV=1)")
    parser.addini("camit_env", "default test_env.yaml for --env", default="")


class CamitSession:
    """Per-process state: env, cluster, deploy, launcher, run folder (created lazily)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        opt = config.getoption
        from framework.config import resolve_env_path  # the one env-file rule: --env, $CAMIT_ENV, ini camit_env

        self.env_path, _ = resolve_env_path(opt("camit_env"), os.environ, config.getini("camit_env"), default=None)
        self.worker = getattr(config, "workerinput", None)
        if self.worker is not None and "camit_seed" in self.worker:
            self.seed = int(self.worker["camit_seed"])  # xdist: the controller's seed, as its repro line says
        elif opt("camit_seed") is not None:
            self.seed = opt("camit_seed")
        else:
            self.seed = random.randint(0, 10000)
        self.case_timeout = opt("camit_case_timeout")
        self.core_policy = opt("camit_core_policy")
        self.started = time.time()
        self.env: Any = None
        self.rundir: Any = None
        self._cluster: Any = None
        self._launcher: Any = None
        self._suite: Any = None
        self._lease: Any = None
        self.deploy_result: Any = None
        if self.env_path:
            from framework.config.effective import load

            try:
                self.env = load(self.env_path)
            except ConfigError as exc:
                raise pytest.UsageError(str(exc)) from None
        self.cov_ranks, self.cov_summary = False, ""  # coverage mode (issue 7): framework/coverage.py
        if self.env is not None:
            from framework import coverage

            try:
                self.cov_ranks = coverage.requested(opt("camit_cov_ranks"))
            except FrameworkError as exc:
                raise pytest.UsageError(str(exc)) from None

    # -- lazily built machinery ---------------------------------------------
    def require_env(self) -> Any:
        if self.env is None:
            raise pytest.UsageError("this test needs a cluster: pass --env FILE (or set CAMIT_ENV)")
        return self.env

    def ensure_rundir(self) -> Any:
        if self.rundir is None:
            from framework.report.folder import RunDir

            if self.worker is not None and self.worker.get("camit_rundir"):
                path = Path(self.worker["camit_rundir"])
                self.rundir = RunDir(path, path.name)
            else:
                self.rundir = RunDir.create(self.config.getoption("camit_report_dir"))
        return self.rundir

    def host_names(self) -> list[str]:
        """The hosts this process drives: all of them, or under pytest-xdist (-n N) this worker's
        own contiguous share, so that workers lease, deploy and launch on disjoint hosts."""
        names = list(self.require_env().hosts)
        if self.worker is None:
            return names
        count = int(self.worker.get("workercount", 1))
        index = int(str(self.worker.get("workerid", "gw0")).lstrip("gw") or 0)
        if count <= 1:
            return names
        if len(names) < count:
            raise pytest.UsageError(f"-n {count} needs at least {count} hosts in the env (one share per worker); "
                                    f"it has {len(names)}")
        share, extra = divmod(len(names), count)
        start = index * share + min(index, extra)
        return names[start:start + share + (1 if index < extra else 0)]

    @property
    def cluster(self) -> Any:
        if self._cluster is None:
            from framework.hosts import Cluster

            self._cluster = Cluster.from_env(self.require_env(), self.host_names())
            self._take_lease()
        return self._cluster

    def _take_lease(self) -> None:
        try:
            from framework.lease import Lease
        except ImportError:  # pragma: no cover - lease arrives with the CLI issue
            return
        owner = os.environ.get("BUILD_URL") or None
        self._lease = Lease(self._cluster, owner=owner, wait=float(os.environ.get("CAMIT_LEASE_WAIT", "0")))
        self._lease.__enter__()

    @property
    def launcher(self) -> Any:
        if self._launcher is None:
            from framework.launch import Launcher

            self._launcher = Launcher(self.require_env(), self.cluster, rundir=self.ensure_rundir(),
                                      on_event=_log_event, per_launch_dirs=True,
                                      keep_remote=self.config.getoption("camit_keep_remote"))
        return self._launcher

    @property
    def suite(self) -> Any:
        if self._suite is None:
            from framework.suite import RankSuite

            rank_env = {"CAMIT_SEED": str(self.seed)}
            if self.config.getoption("camit_full_shapes"):
                rank_env["CAMIT_FULL_SHAPES"] = "1"
            cov = None
            if self.cov_ranks:
                from framework.coverage import RankCoverage

                cov = RankCoverage(self.require_env(), self.cluster, self.ensure_rundir().path)
            self._suite = RankSuite(self.require_env(), self.cluster, self.launcher,
                                    slots=self.config.getoption("camit_slots"), rank_env=rank_env,
                                    case_timeout=self.case_timeout, coverage=cov)
        return self._suite

    def deploy(self, tmp_root: Path) -> Any:
        """Deploy once per run and host share (file lock + a record of what was deployed): a worker that
        xdist restarts on the same share does not deploy again; workers on other shares do not wait."""
        if self.deploy_result is not None:
            return self.deploy_result
        env = self.require_env()
        if self.config.getoption("camit_no_deploy") or not (env.artifacts.run_package or env.artifacts.wheel):
            self.deploy_result = "skipped"
            return self.deploy_result
        from filelock import FileLock

        from framework.deploy import Deployer, resolve_artifacts

        # one deploy per run and host share: the run id is shared by the controller and its xdist workers,
        # and each worker deploys its own (disjoint) share, at the same time as the others
        run_id = self.ensure_rundir().run_id
        share = f"{run_id}-{self.host_names()[0]}"
        marker = tmp_root / f"camit-deployed-{share}.txt"
        key = ",".join(a.sha256 for a in resolve_artifacts(env)) + "@" + ",".join(self.host_names())
        with FileLock(str(tmp_root / f"camit-deploy-{share}.lock")):
            if marker.exists() and marker.read_text() == key:
                self.deploy_result = "done by another worker"
                return self.deploy_result
            result = Deployer(env, self.cluster, rundir=self.ensure_rundir(), on_event=_log_event).run()
            if not result.ok:
                raise FrameworkError("deploy failed:\n" + "\n".join(f"  {e}" for e in result.errors.values()))
            marker.write_text(key)
        self.deploy_result = result
        return result

    def close(self) -> None:
        if self._lease is not None:
            try:
                self._lease.__exit__(None, None, None)
            except FrameworkError as exc:
                _log_event("lease", f"release failed: {exc}")
        if self._cluster is not None:
            self._cluster.close()


def _log_event(host: str, message: str) -> None:
    import logging

    logging.getLogger("camit").info("%s: %s", host, message)


def session_of(config: pytest.Config) -> CamitSession:
    return config.stash[SESSION_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    session = CamitSession(config)
    config.stash[SESSION_KEY] = session
    random.seed(session.seed)
    if session.env is not None and session.worker is None and not config.option.collectonly:
        # (--collect-only runs nothing: no run folder, no summary)
        rundir = session.ensure_rundir()
        # our run folder also holds pytest's own JUnit unless the user chose a path
        if not getattr(config.option, "xmlpath", None):
            config.option.xmlpath = str(rundir.path / "junit.xml")
        if getattr(config.option, "dist", "no") == "load" and getattr(config.option, "maxschedchunk", 0) is None:
            # cluster tests are few and slow: xdist hands them out one at a time to whichever worker is
            # free (its option for "a small number of slow tests"); see pytest_collection_modifyitems
            config.option.maxschedchunk = 1


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A cluster run under ``-n``: the first tests (the launches, sorted first) are dealt one per worker."""
    if session_of(config).env is None:
        return None
    from framework.plugin.xdist import make_scheduler

    return make_scheduler(config, log)


def pytest_configure_node(node: Any) -> None:  # pytest-xdist: hand the run folder to the workers
    session = node.config.stash[SESSION_KEY]
    if session.rundir is not None:
        node.workerinput["camit_rundir"] = str(session.rundir.path)
    node.workerinput["camit_seed"] = session.seed


def _repro(config: pytest.Config, seed: int) -> str:
    from framework.report import repro_command  # the one builder: the manifest, index.html and the summary show it

    return repro_command(["pytest", *config.invocation_params.args], seed, program=["pytest"]) or "pytest"


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    session = session_of(config)
    if session.env is None:
        return None
    env = session.env
    lines = [f"camit: env {env.source} ({len(env.hosts)} hosts: {', '.join(env.hosts)}), "
             f"backend {env.launch.backend}, seed {session.seed}"]
    if session.rundir is not None:
        lines.append(f"camit: report folder {session.rundir.path}")
    lines.append(f"camit: reproduce with: {_repro(config, session.seed)}")
    return lines


def _requirements(item: pytest.Item, session: CamitSession) -> str | None:
    """Why the env cannot host ``item``, or None."""
    env = session.env
    if env is None:
        return None
    hosts = [env.hosts[n] for n in session.host_names()]
    socs = {h.npu.soc for h in hosts}
    m = item.get_closest_marker("nodes")
    if m and len(hosts) < int(m.args[0]):
        return f"needs {m.args[0]} nodes; the env has {len(hosts)}"
    m = item.get_closest_marker("ranks")
    if m:
        from framework.suite import placement, slots_per_node

        where = placement(int(m.args[0]), len(hosts), slots_per_node(env, session.config.getoption("camit_slots")))
        if isinstance(where, str):
            return where
        worlds = _selected_worlds(session.config)
        if worlds is not None and int(m.args[0]) not in worlds:
            return f"world size {m.args[0]} not selected (--world-sizes {session.config.getoption('camit_worlds')})"
    m = item.get_closest_marker("soc")
    if m and not socs <= set(m.args):
        return f"needs soc in {m.args}; the env has {sorted(socs)}"
    for name, soc in SOC_MARKERS.items():
        other = set(SOC_MARKERS.values()) - {soc}
        if item.get_closest_marker(name) and not item.get_closest_marker(
                "a2_test" if name == "a3_test" else "a3_test") and socs & other:
            return f"{name} case; the env's hosts are {sorted(socs)}"
    return None


def _selected_worlds(config: pytest.Config) -> set[int] | None:
    """The world sizes ``--world-sizes`` selects, or None for all."""
    worlds = config.getoption("camit_worlds")
    return {int(w) for w in worlds.split(",") if w.strip()} if worlds else None


def _cluster_weight(item: pytest.Item, worlds: set[int] | None) -> int:
    """How much of the cluster a test occupies: its world size (``ranks``), else its node count (``nodes``).

    A world ``--world-sizes`` leaves out weighs nothing: it is skipped at once, and sorted first it would
    take a worker's first turn in place of a real launch. Only what is the same on every worker counts
    (xdist refuses differing collections), so not the worker's own host share.
    """
    for name in ("ranks", "nodes"):
        m = item.get_closest_marker(name)
        if m and m.args:
            try:
                size = int(m.args[0])
            except (TypeError, ValueError):
                return 0
            return 0 if name == "ranks" and worlds is not None and size not in worlds else size
    return 0


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist: tests that launch across the cluster first, the largest world first.

    xdist's default ``load`` scheduler sends each worker consecutive chunks of the collection; with the
    suite's many cheap per-host checks collected first and the launches last, every launch of a 16-host
    ``-n 2`` run landed on one worker's hosts while the other worker sat idle. Sorted (stably, the
    same on every worker), dealt one per worker at the start (``framework.plugin.xdist``) and then
    handed out one at a time (``--maxschedchunk 1``, set in ``pytest_configure`` unless given), the
    launches go to whichever worker's host share is free, longest first.
    """
    if getattr(config, "workerinput", None) is None or session_of(config).env is None:
        return
    worlds = _selected_worlds(config)
    items.sort(key=lambda item: -_cluster_weight(item, worlds))


def pytest_runtest_setup(item: pytest.Item) -> None:
    session = session_of(item.config)
    cls = getattr(item, "cls", None)
    if cls is not None:
        from framework.base_test import BaseTest

        if issubclass(cls, BaseTest):
            cls._camit_session = session
    why = _requirements(item, session)
    if why:
        pytest.skip(why)


def _uses_cluster(item: pytest.Item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    cls = getattr(item, "cls", None)
    from framework.base_test import BaseTest

    return bool(names & {"cluster", "launcher", "rank_suite", "deployed"}) or (
        cls is not None and issubclass(cls, BaseTest))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Snapshot cores before the test body, collect them after; the policy may turn a pass into a failure."""
    session = session_of(item.config)
    if session.env is None or not _uses_cluster(item) or _core_policy(item, session) == "ignore":
        return (yield)
    from framework.cores.runwatch import ClusterWatch  # the one watch-around-a-run (also BaseTest, camit run)

    watch = ClusterWatch(session.cluster, session.env, policy=_core_policy(item, session), label=item.nodeid)
    watch.begin()
    failure: BaseException | None = None
    try:
        outcome = yield
    except BaseException as exc:  # the test failed: still collect cores and logs, then re-raise
        failure = exc
        outcome = None
    message = _collect(item, session, watch, failed=failure is not None)
    if failure is not None:
        if message:
            failure.args = (f"{failure.args[0] if failure.args else failure}\n{message}",) + failure.args[1:]
        raise failure
    if message and _core_policy(item, session) == "fail":
        raise AssertionError(message)
    return outcome


def _core_policy(item: pytest.Item, session: CamitSession) -> str:
    m = item.get_closest_marker("core_policy")
    return str(m.args[0]) if m else session.core_policy


def _collect(item: pytest.Item, session: CamitSession, watch: ClusterWatch, failed: bool) -> str:
    watched = watch.end(ranks=item.stash.get(LAUNCHES_KEY, []) or None, failed=failed,
                        rundir=session.ensure_rundir())
    if watched.log_error:
        _log_event("collect", f"log collection failed: {watched.log_error}")
    elif watched.log_summary:  # e.g. an OOM kill behind a rank that "died of SIGKILL"
        item.add_report_section("call", "failure signatures", watched.log_summary)
    cores = watched.cores
    if not cores:
        return ""
    policy = _core_policy(item, session)
    text = "\n".join(c.describe() + ("\n" + c.backtrace if c.backtrace else "") for c in cores)
    item.add_report_section("call", "core dumps", text)
    if policy == "warn":
        import warnings

        warnings.warn(pytest.PytestWarning(f"core dumps (policy warn):\n{text}"), stacklevel=1)
        return ""
    return text


# -- fixtures -------------------------------------------------------------------
@pytest.fixture(scope="session")
def camit(request: pytest.FixtureRequest) -> CamitSession:
    """The session object (env, seed, run folder, cluster, launcher)."""
    return session_of(request.config)


@pytest.fixture(scope="session")
def env(camit: CamitSession) -> Any:
    """The validated environment (``framework.config.EnvConfig``)."""
    return camit.require_env()


@pytest.fixture(scope="session")
def cluster(camit: CamitSession) -> Any:
    """Every host of the env, connected lazily (``framework.hosts.Cluster``)."""
    return camit.cluster


@pytest.fixture(scope="session")
def deployed(camit: CamitSession, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The env's artifacts deployed on every host, once per session (xdist-safe)."""
    root = tmp_path_factory.getbasetemp().parent
    try:
        return camit.deploy(root)
    except FrameworkError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def launcher(camit: CamitSession, deployed: Any) -> Any:
    """A ``framework.launch.Launcher`` over the cluster, after deploy."""
    return camit.launcher


@pytest.fixture(scope="session")
def rank_suite(camit: CamitSession, deployed: Any) -> Any:
    """Runs rank-side modules of suites/cam/rank across the cluster (``framework.suite.RankSuite``)."""
    return camit.suite


@pytest.fixture
def run_ranks(request: pytest.FixtureRequest, rank_suite: Any) -> Any:
    """``run_ranks(module, world, **kw)`` → ``SuiteResult``; recorded on the test for core attribution."""

    def run(module: str, world: int, **kw: Any) -> Any:
        result = rank_suite.run(module, world, **kw)
        request.node.stash.setdefault(LAUNCHES_KEY, []).append(result.launch)
        return result

    return run


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After pytest's junitxml wrote its file (trylast): cluster.xml, manifest.json, index.html.

    The terminal summary (a hook wrapper around this one) then reads the finished folder.
    """
    cs = session.config.stash.get(SESSION_KEY, None)
    if cs is None:
        return
    cs.close()
    if cs.env is None or cs.worker is not None or cs.rundir is None:
        return
    from framework import report

    if cs.cov_ranks:  # before finalize, so the manifest and index list the coverage report
        from framework import coverage

        cs.cov_summary = coverage.finish(cs.rundir.path)
    status = {0: "ok", 1: "failed", 2: "interrupted", 5: "no tests"}.get(int(exitstatus), "error")
    report.finalize(cs.rundir.path, env=cs.env, seed=cs.seed,
                    argv=["pytest", *session.config.invocation_params.args], repro=_repro(session.config, cs.seed),
                    started=cs.started, ended=time.time(), status=status)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    cs = config.stash.get(SESSION_KEY, None)
    if cs is None or cs.env is None or cs.worker is not None or cs.rundir is None:
        return
    try:
        from framework import report

        text = report.terminal_summary(cs.rundir.path, repro=_repro(config, cs.seed))
    except Exception as exc:  # the summary must never hide the run's outcome
        text = f"(no cluster summary: {exc})"
    terminalreporter.section("camit")
    for line in text.splitlines():
        terminalreporter.write_line(line)
    if cs.cov_summary:
        terminalreporter.write_line(cs.cov_summary)


def pytest_keyboard_interrupt(excinfo: Any) -> None:
    # pytest also comes here for collection errors (Session.Interrupted) and pytest.exit(): not a Ctrl-C
    if isinstance(excinfo.value, (pytest.Session.Interrupted, pytest.exit.Exception)):
        return
    sys.stderr.write("camit: interrupted; every launch was torn down, the report folder is kept\n")
