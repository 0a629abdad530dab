"""Helpers of the plugin's tests: the two-node env a pytester run loads, and a pytest.Item's markers."""

from __future__ import annotations

import pytest

#: a two-node gloo env (documentation addresses): enough for the plugin to load, never reached
TWO_NODE_ENV = """\
host_info:
  node1:
    manage_nic: {name: eth0, ip: 192.0.2.11}
  node2:
    manage_nic: {name: eth0, ip: 192.0.2.12}
launch: {backend: gloo}
"""


class MarkedItem:
    """The stand-in as the pytest.Item the plugin's marker readers take (its closest markers)."""

    def __init__(self, **markers: tuple[object, ...]) -> None:
        self.markers = {name: getattr(pytest.mark, name)(*args).mark
                        for name, args in markers.items()}

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.markers.get(name)
