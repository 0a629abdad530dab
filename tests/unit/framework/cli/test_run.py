"""``camit run``'s dry run (framework.cli.run): the master port it shows and what it leaves to
the launch."""

from __future__ import annotations

from framework.cli.run import _LATER, _NO_PORT, _port_and_later


def test_a_configured_master_port_is_shown_and_not_left_to_the_launch() -> None:
    assert _port_and_later(29600, 29600) == ("29600", list(_LATER))


def test_without_one_node_0_picks_it_at_launch_and_the_dry_run_shows_0() -> None:
    assert _port_and_later(None, 0) == ("0", [_NO_PORT, *_LATER])
