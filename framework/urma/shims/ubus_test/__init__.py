"""camit's ``ubus_test`` package of the URMA harness (``test_framework/ubus_test``)."""
