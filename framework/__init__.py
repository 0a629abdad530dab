"""camit: multi-host integration tests for the CAM MoE dispatch/combine operators.

The package is organised one concern per module (see README.md for the map):
``errors`` (the exception tree), ``config`` (test_env.yaml -> typed environment),
``commands`` (pure, quoted command builders), ``transport`` (SSH / local / fake),
``hosts`` (Host and Cluster fan-out), ``lab`` (network-namespace cluster on one
machine) and ``cli`` (the ``camit`` console script).
"""

__version__ = "0.1.0"
