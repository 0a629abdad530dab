"""Running an unmodified URMA harness tree (``test/intergration_test``) under camit's plugin.

Design: docs/internals/urma.md.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from framework.plugin.context import context_of
from framework.urma.tree import PREPARED

#: the file that marks a harness root (under it)
MARKER = Path("test_framework") / "ubus_test" / "base_test.py"
#: upstream module name -> camit's module standing in for it
SHIMS = {
    "common": "framework.urma.shims.common",
    "common.constants": "framework.urma.shims.common.constants",
    "common.utils": "framework.urma.shims.common.utils",
    "common.host": "framework.urma.shims.common.host",
    "common.check_resource": "framework.urma.shims.common.check_resource",
    "ubus_test": "framework.urma.shims.ubus_test",
    "ubus_test.base_test": "framework.urma.shims.ubus_test.base_test",
}
#: upstream's default test timeout (``const.TMOUT``; ``test/pytest.ini`` ``--timeout=300``)
DEFAULT_TIMEOUT = 300


def harness_root(path: Path) -> Path | None:
    """The harness root at or above ``path``, or None."""
    path = path.resolve()
    for folder in (path, *path.parents):
        if (folder / MARKER).is_file():
            return folder
    return None


def roots_of(args: Iterable[str], invocation_dir: Path) -> list[Path]:
    """The harness roots of the path arguments (options and ``::`` node parts ignored), once
    each."""
    roots: list[Path] = []
    for arg in args:
        if arg.startswith("-"):
            continue
        path = invocation_dir / arg.split("::", 1)[0]
        root = harness_root(path) if path.exists() else None
        if root is not None and root not in roots:
            roots.append(root)
    return roots


def install_shims() -> None:
    """camit's modules under upstream's names in ``sys.modules`` (an upstream one loaded already is
    replaced)."""
    for name, ours in SHIMS.items():
        sys.modules[name] = importlib.import_module(ours)


def _prepend(path: Path) -> None:
    text = str(path)
    if text not in sys.path:
        sys.path.insert(0, text)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> None:
    """Before any conftest loads: set up the harness trees among ``args`` (:func:`detect`)."""
    detect(early_config, parser, args)


def detect(config: pytest.Config, parser: pytest.Parser, args: list[str]) -> HarnessPlugin | None:
    """Before the initial conftests: set a harness tree up (docs/internals/urma.md); None when no tree."""
    roots = roots_of(args, config.invocation_params.dir)
    if not roots:
        return None
    if getattr(config.known_args_namespace, "numprocesses", None):
        raise pytest.UsageError(
            f"{roots[0]}: an URMA harness tree runs without -n (one session ships the tree "
            "to the hosts and removes it at its end; xdist workers would remove it under "
            "each other)"
        )
    install_shims()
    for root in roots:
        _prepend(root / "test_framework")
        config.pluginmanager.set_blocked(str(root / "conftest.py"))
    named = (
        config.invocation_params.dir / a.split("::", 1)[0] for a in args if not a.startswith("-")
    )
    plugin = HarnessPlugin(roots, {p.resolve() for p in named if p.is_file()})
    config.pluginmanager.register(plugin, "camit-urma-harness")
    declared = {
        name
        for group in [parser._anonymous, *parser._groups]
        for opt in group.options
        for name in opt.names()
    }  # pytest's own attributes: the declared option groups
    if "--timeout" not in declared:
        parser.getgroup("camit").addoption(
            "--timeout",
            dest="camit_urma_timeout",
            type=float,
            default=None,
            metavar="SECONDS",
            help="URMA harness: the tests' time limit "
            "(const.TMOUT; install pytest-timeout to enforce it)",
        )
    return plugin


def timeout_of(item: pytest.Item) -> float:
    """The test's pytest-timeout limit: its ``timeout`` marker, else ``--timeout``/ini, else 300."""
    mark = item.get_closest_marker("timeout")
    if mark is not None and mark.args:
        return float(mark.args[0])
    for dest in ("timeout", "camit_urma_timeout"):
        value = item.config.getoption(dest, None)
        if value:
            return float(value)
    try:
        ini = item.config.getini("timeout")
    except ValueError:  # not declared: no pytest-timeout
        ini = None
    return float(ini) if ini else DEFAULT_TIMEOUT


class HarnessPlugin:
    """Upstream's root conftest, done per test from the collected item (registered by
    :func:`detect`)."""

    def __init__(self, roots: list[Path], cases: set[Path]) -> None:
        self.roots = roots
        self.cases = cases  # the files named on the command line

    def owns(self, path: Path) -> Path | None:
        path = path.resolve()
        return next((r for r in self.roots if path.is_relative_to(r)), None)

    def pytest_configure(self, config: pytest.Config) -> None:
        if "timeout" not in config.getini("markers") and not config.pluginmanager.hasplugin(
            "timeout"
        ):
            config.addinivalue_line(
                "markers", "timeout(seconds): the test's time limit (URMA harness)"
            )

    def pytest_collect_file(self, file_path: Path) -> None:
        """Before a case module is imported: its suite folder on ``sys.path`` (``from public
        import``;
        the
        ``public`` of another suite forgotten), and for a case named on the command line
        ``const.CASE_*``.
        """
        path = file_path.resolve()
        if (
            self.owns(path) is None
            or path.suffix != ".py"
            or path.name in ("conftest.py", "public.py")
        ):
            return
        suite = path.parent.parent
        public = sys.modules.get("public")
        if public is not None and Path(str(getattr(public, "__file__", ""))).parent != suite:
            del sys.modules["public"]
        _prepend(suite)
        if path in self.cases:
            self._set_case(path)

    def pytest_sessionfinish(self) -> None:
        """The trees shipped this session taken away (before camit closes the cluster)."""
        PREPARED.remove_all()

    @staticmethod
    def _set_case(path: Path) -> None:
        from framework.urma.shims.common.constants import const

        const.CASE_PATH = str(path)
        const.CASE_DIR = str(path.parent)
        const.CASE_NAME = path.parent.name

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        from framework.urma.shims.common.constants import const

        if self.owns(item.path) is None:
            return
        self._set_case(item.path.resolve())
        const.TMOUT = timeout_of(item)
        ctx = context_of(item.config)
        if ctx.env is not None and ctx.options.env_path:
            const.CONF_FILE = ctx.options.env_path
        if ctx.env is not None and not item.config.option.collectonly:
            const.CASE_LOG_PATH = str((ctx.ensure_rundir().path / "case_log").resolve())
