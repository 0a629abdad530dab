"""A pytest plugin (``-p camit_fast_lease``) for the lost-lease lab test: the session's lease beats every
``$CAMIT_TEST_LEASE_INTERVAL`` seconds instead of every 10, so "within one heartbeat" is quick to check."""

import os

import framework.lease

framework.lease.MAX_INTERVAL = float(os.environ.get("CAMIT_TEST_LEASE_INTERVAL", "1"))
