"""On ``PYTHONPATH`` of a launch (``launch.env``): every torchrun worker (``LOCAL_RANK`` set) sleeps at start-up.

The signal lab tests (tests/faults/test_pytest_signals_lab.py) need a launch that is surely still
running when they stop the controller: the ranks sit here until they are killed.
"""

import os
import time

if os.environ.get("CAMIT_TEST_HANG") == "1" and "LOCAL_RANK" in os.environ:
    time.sleep(3600)
