"""``common.host`` (upstream ``test_framework/common/host.py``): camit's
:mod:`framework.urma.host`."""

from framework.urma.host import BackgroundCmdRes, ResourceInfo, UBUSHost

__all__ = ["BackgroundCmdRes", "ResourceInfo", "UBUSHost"]
