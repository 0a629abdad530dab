"""Typed lookups in parsed XML: a missing element, attribute or text fails the test where it is asked for."""

from __future__ import annotations

import xml.etree.ElementTree as ET


def one(parent: ET.Element, path: str) -> ET.Element:
    """The first element at ``path`` under ``parent``; the test fails when there is none."""
    found = parent.find(path)
    assert found is not None, f"no {path} under <{parent.tag}>"
    return found


def attr(element: ET.Element, name: str) -> str:
    """The attribute ``name`` of ``element``; the test fails when it is missing."""
    value = element.get(name)
    assert value is not None, f"<{element.tag}> has no attribute {name}"
    return value


def text(element: ET.Element) -> str:
    """The text of ``element``; the test fails when it has none."""
    assert element.text is not None, f"<{element.tag}> has no text"
    return element.text
