"""Test helpers shipped with camit so suites can test their own code without hosts."""

from framework.testing.fake import FakeTransport

__all__ = ["FakeTransport"]
