# As the harness's: needs Fabric; camit's shim must win over it.
from fabric import Connection  # noqa: F401
