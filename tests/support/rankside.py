"""The rank-side harness (suites/cam/rank/conftest.py) imported as a module, for unit tests of its pieces."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

RANK = Path(__file__).resolve().parents[2] / "suites" / "cam" / "rank"


@contextmanager
def rank_conftest(name: str) -> Iterator[ModuleType]:
    """The rank conftest loaded as module ``name`` (registered in ``sys.modules`` while in use: its dataclasses
    look their module up), removed again afterwards."""
    spec = importlib.util.spec_from_file_location(name, RANK / "conftest.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
