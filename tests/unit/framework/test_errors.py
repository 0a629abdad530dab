"""The exception tree: ``HostError`` keeps its reason apart from the host, and the tree is drawn in
the docs (docs/internals/core.md, where errors.py's docstring points)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import framework
from framework import errors
from framework.errors import (
    CommandFailed,
    DeployError,
    FrameworkError,
    HostError,
    HostUnreachable,
    LeaseHeld,
    MultiHostError,
    reason_of,
)
from framework.result import Result

#: the page errors.py's docstring names for its tree
TREE_PAGE = Path(__file__).resolve().parents[3] / "docs" / "internals" / "core.md"


def test_a_host_error_keeps_host_and_reason_apart():
    err = HostUnreachable("node-1", "connect timed out after 5s")
    assert (err.host, err.reason) == ("node-1", "connect timed out after 5s")
    assert str(err) == "node-1: connect timed out after 5s"
    dep = DeployError("node-1", "upload", "disk full")
    assert dep.reason == "deploy step 'upload' failed: disk full" and str(dep) == "node-1: " + dep.reason
    failed = CommandFailed(Result("n2", "false", 1, stderr="boom\n"))
    assert failed.host == "n2" and str(failed) == f"n2: {failed.reason}" and failed.reason.startswith("exit status 1: ")


def test_reason_of_strips_nothing_by_hand():
    # a reason that itself starts like a host prefix stays whole: nobody cuts text at ": " any more
    err = HostError("h1", "h1: looks like a prefix")
    assert reason_of(err) == "h1: looks like a prefix" == reason_of(err, "h1")
    assert reason_of(err, "other") == str(err)  # another host's error keeps its name
    assert reason_of(ValueError("h1: not a host error")) == "h1: not a host error"


def test_an_unreachable_host_raises_the_same_reason_again():
    from framework.hosts import Host
    from framework.testing.fake import FakeTransport

    fake = FakeTransport("h1")
    fake.connect_error = HostUnreachable("h1", "h1: odd banner")
    host = Host("h1", fake)
    with pytest.raises(HostUnreachable):
        host.connect()
    with pytest.raises(HostUnreachable) as again:
        host.connect()
    assert again.value.reason == "h1: odd banner" and again.value.__cause__ is fake.connect_error


def test_lease_errors_live_in_errors_and_stay_importable_from_lease():
    from framework import lease

    assert lease.LeaseHeld is errors.LeaseHeld and lease.LeaseError is errors.LeaseError
    assert lease.LeaseLost is errors.LeaseLost
    held = LeaseHeld("h1", None)
    assert held.host == "h1" and str(held).startswith("h1: leased by an unknown holder")


def _framework_errors() -> set[str]:
    """Every FrameworkError subclass defined anywhere in framework/ (imported to find them)."""
    import importlib
    import pkgutil

    for mod in pkgutil.walk_packages(framework.__path__, "framework."):
        if mod.name.startswith(("framework.remote.", "framework.lab.__main__", "framework.config.__main__",
                                "framework.cli.__main__")):
            continue
        importlib.import_module(mod.name)
    found, todo = set(), [FrameworkError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("framework.") and sub.__name__ != "LaunchFailed":
                found.add(sub.__name__)
            todo.append(sub)
    return found


def test_every_exception_class_is_drawn_in_the_tree():
    assert "docs/internals/core.md" in (errors.__doc__ or "")
    doc = TREE_PAGE.read_text()
    drawn = set(re.findall(r"[├└]── (?:[a-z_.]+\.)?(\w+)", doc))
    assert _framework_errors() - drawn == set()
    for name in drawn & set(dir(errors)):
        assert inspect.getdoc(getattr(errors, name)), f"{name} has no 'raised when' docstring"


def test_multi_host_error_does_not_repeat_the_host():
    e = MultiHostError({"h1": HostUnreachable("h1", "down"), "h2": ValueError("bad")}, total=3)
    assert str(e).splitlines() == ["2 of 3 hosts failed:", "  h1: down", "  h2: bad"]
