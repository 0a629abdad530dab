"""The suite's preparation: each case's folder (its ``test.py`` and test binary) at the same path on every host.

URMA's cases run their binary by its path on the controller (``os.path.join(local_path, "echo_app.py")``)
and its harness expects the tree at that path on every host ("Preparation"). Here camit puts it there
(``BaseTest.ship``: nothing is written where a host has it already, as the lab's hosts have a checkout
under /work; a CI clone under /tmp is shipped, each lab host having a /tmp of its own), so the cases stay
as ported: renames only.
"""

import pytest

from framework.base_test import BaseTest


@pytest.fixture(autouse=True)
def _case_folder_on_every_host(request: pytest.FixtureRequest) -> None:
    # function scope: after setup_class (the class's hosts), once per class and folder (ship() remembers)
    if request.cls is not None and issubclass(request.cls, BaseTest):
        request.cls.ship(request.path.parent)
