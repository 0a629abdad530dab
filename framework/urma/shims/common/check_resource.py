"""``common.check_resource`` (upstream: a psutil script run on a host): camit samples /proc instead.

:meth:`BackgroundCmdRes.check_resource <framework.urma.host.BackgroundCmdRes.check_resource>` runs
:data:`SAMPLER` (stdlib only) on the host; nothing imports this module for its effect.
"""

from framework.urma.host import SAMPLER

__all__ = ["SAMPLER"]
