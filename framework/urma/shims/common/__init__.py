"""camit's ``common`` package of the URMA harness (``test_framework/common``)."""
