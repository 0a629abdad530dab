"""Fixtures for fault scenarios on the network-namespace lab (real sshd, real processes).

Bring up a lab of your own and point the tests at it:

    python -m framework.lab up --hosts 4 --name flt --subnet 10.89.0.0/24 --env-out /tmp/flt.yaml
    CAMIT_LAB_NAME=flt CAMIT_LAB_ENV=/tmp/flt.yaml python -m pytest tests/faults

Without a lab every lab test is skipped with the reason (as in tests/integration).
Each scenario checks the same four things through tests/support/camit_labtools.py: the outcome
names what failed, the time is bounded, no process of the run is left on any host
(``tagged``), and nothing was written on a host outside the run's workdir
(``Footprint``).
"""

from __future__ import annotations

import secrets

import pytest


@pytest.fixture
def workdir_name() -> str:
    """A fresh workdir name under the lab hosts' /var/tmp/camit for this test only."""
    return f"flt-{secrets.token_hex(4)}"
