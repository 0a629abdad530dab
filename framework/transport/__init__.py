"""Transports: how a ``Host`` reaches its machine (SSH, local subprocess, or a fake)."""

from framework.transport.base import OutputTail, Transport

__all__ = ["OutputTail", "Transport"]
