"""camit's modules under upstream's names (``common.*``, ``ubus_test.*``); see
:mod:`framework.urma.harness`."""
