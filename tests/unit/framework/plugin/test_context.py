"""framework.plugin.context.chosen_hosts: the hosts --hosts / --exclude-hosts leave, and errors."""

from __future__ import annotations

import pytest

from framework.plugin.context import chosen_hosts
from framework.plugin.options import Options
from tests.support.builders import make_env

HOSTS = ("node1", "node2", "node3")


def test_exclude_hosts_leaves_the_others_in_file_order() -> None:
    env = make_env(HOSTS)
    assert chosen_hosts(env, Options(exclude_hosts=("node2",))) == ["node1", "node3"]
    both = Options(hosts=("node3", "node1"), exclude_hosts=("node1",))
    assert chosen_hosts(env, both) == ["node3"]
    assert chosen_hosts(env, Options()) == list(HOSTS)
    assert not Options().picks_hosts and Options(exclude_hosts=("node2",)).picks_hosts


@pytest.mark.parametrize(("options", "message"), [
    (Options(exclude_hosts=("node1", "nodeX")),
     "--exclude-hosts node1,nodeX: unknown host 'nodeX': not in "),
    (Options(hosts=("nodeY",)), "--hosts nodeY: unknown host 'nodeY': not in "),
    (Options(exclude_hosts=HOSTS), "--hosts/--exclude-hosts leave no host of "),
    (Options(hosts=("node2",), exclude_hosts=("node2",)),
     "--hosts/--exclude-hosts leave no host of "),
])
def test_a_bad_choice_is_one_usage_error_naming_the_option(options: Options, message: str) -> None:
    env = make_env(HOSTS)
    with pytest.raises(pytest.UsageError) as err:
        chosen_hosts(env, options)
    assert str(err.value).startswith(message)
