"""The plugin's resources without pytest: opening the leased cluster, unreachable hosts, the broken opening.

The reachable hosts are this machine (``LocalTransport``, a workdir each under tmp_path), so the lease
files are written by the real lease scripts; the unreachable one is a ``FakeTransport`` whose
connect fails.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import cast

import pytest

from framework.config.effective import EnvConfig
from framework.errors import MultiHostError
from framework.lease import LeaseHeld
from framework.plugin.context import RunContext
from framework.plugin.options import LeaseSettings, Options
from framework.plugin.resources import Resources, open_leased_cluster
from tests.support.builders import LOCAL_HOSTS, local_env, local_transports

HOSTS = LOCAL_HOSTS
transports = local_transports


@pytest.fixture
def env(tmp_path: Path) -> EnvConfig:
    return local_env(tmp_path)


def leased(tmp_path: Path) -> list[str]:
    return [h for h in HOSTS if (tmp_path / h / "camit-lease.json").exists()]


def test_the_cluster_is_leased_and_the_stack_releases_it(env, tmp_path):
    with ExitStack() as stack:
        opened = open_leased_cluster(env, ["node1", "node2"], stack, lease=LeaseSettings(owner="me"),
                                     transport_factory=transports())
        assert list(opened.cluster.hosts) == ["node1", "node2"]
        assert opened.lease is not None and sorted(opened.lease.held) == ["node1", "node2"]
        assert leased(tmp_path) == ["node1", "node2"] and opened.unreachable is None
    assert leased(tmp_path) == []


def test_an_unreachable_host_fails_the_opening_and_leases_nothing(env, tmp_path):
    with ExitStack() as stack, pytest.raises(MultiHostError, match="node2: connect timed out"):
        open_leased_cluster(env, None, stack, transport_factory=transports(down="node2"))
    assert leased(tmp_path) == []


def test_allow_unreachable_leases_the_reachable_hosts_and_keeps_the_error(env, tmp_path):
    with ExitStack() as stack:
        opened = open_leased_cluster(env, None, stack, transport_factory=transports(down="node2"),
                                     allow_unreachable=True)
        assert list(opened.cluster.hosts) == list(HOSTS)  # the probe still reports node2
        assert leased(tmp_path) == ["node1", "node3"]
        assert opened.unreachable is not None and list(opened.unreachable.errors) == ["node2"]
    assert leased(tmp_path) == []


def _resources(env: EnvConfig, down: str | None = None) -> Resources:
    ctx = RunContext(config=cast(pytest.Config, None), options=Options(), env=env, seed=1)  # no pytest session
    return Resources(ctx, transport_factory=transports(down))


def test_resources_open_once_and_a_strict_caller_gets_the_unreachable_hosts(env, tmp_path):
    res = _resources(env, down="node3")
    cluster = res.open_cluster(allow_unreachable=True)
    assert res.open_cluster(allow_unreachable=True) is cluster
    with pytest.raises(pytest.exit.Exception, match="^camit: cluster unreachable: node3: connect timed out$") as ended:
        res.open_cluster()  # a launch must not run on a cluster with a dead host: the session ends
    assert ended.value.returncode == 6 and res.ended == (6, str(ended.value.msg))
    res.close()
    assert leased(tmp_path) == []


def test_a_lease_held_elsewhere_breaks_the_opening_for_every_later_caller(env, tmp_path):
    with ExitStack() as stack:
        open_leased_cluster(env, ["node2"], stack, lease=LeaseSettings(owner="holder"), transport_factory=transports())
        res = _resources(env)
        with pytest.raises(pytest.exit.Exception, match="^camit: lease held: node2: leased by holder") as first:
            res.open_cluster()
        with pytest.raises(pytest.exit.Exception) as again:  # one attempt: the same end for every later caller
            res.open_cluster()
        assert first.value.returncode == again.value.returncode == 7
        assert again.value.msg == first.value.msg and res.cluster is None
        assert isinstance(res._broken, LeaseHeld)
        res.close()
        assert leased(tmp_path) == ["node2"]  # the holder's, untouched


def test_an_unreachable_host_is_marked_suspect_on_the_reachable_ones(env, tmp_path, monkeypatch):
    from framework import suspects
    from framework.hosts import Cluster

    monkeypatch.setenv("CAMIT_SUSPECT_TTL", "600")
    res = _resources(env, down="node3")
    res.ctx.suspects = {}  # read already (none): the opening marks what it finds
    res.open_cluster(allow_unreachable=True)
    res.close()
    with Cluster.from_env(env, None, transport_factory=transports()) as other:
        seen = suspects.read(other)
    assert list(seen) == ["node3"] and seen["node3"].kind == "unreachable"
    assert "connect timed out" in seen["node3"].reason
    assert not (tmp_path / "node3" / suspects.SUSPECT_DIR).exists()
