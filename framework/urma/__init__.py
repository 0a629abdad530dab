"""camit's URMA-harness compatibility layer: UMDK's ``test/intergration_test`` cases run unchanged.

When a pytest argument lies in a harness tree (a folder with
``test_framework/ubus_test/base_test.py``), camit's plugin (:mod:`framework.urma.harness`) puts
camit's own ``ubus_test.*`` and ``common.*`` (:mod:`framework.urma.shims`) into ``sys.modules``
ahead of the tree's, puts the tree's ``test_framework`` (its ``app`` layer) and each suite folder on
``sys.path``, and does per test what the tree's root ``conftest.py`` did (that file is then not
loaded): seed, ``const.CASE_PATH``/``CASE_DIR``/ ``CASE_NAME``, ``const.TMOUT`` from the test's
timeout. :mod:`framework.urma.host` is upstream's host API.
"""
