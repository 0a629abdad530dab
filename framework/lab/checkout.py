"""The camit checkout the lab builds its stand-ins from (``standin/``, ``standin_npu/``).

Run from a checkout (editable install or PYTHONPATH), that is this package's own tree. Installed
with ``pip install <checkout>``, it is the folder pip recorded (PEP 610 ``direct_url.json``): the
stand-ins are lab scaffolding and are not part of the camit wheel.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from pathlib import Path
from urllib.parse import unquote, urlsplit

from framework.errors import LabError

_MARKERS = ("standin", "standin_npu")


def _is_checkout(path: Path) -> bool:
    return all((path / m / "pyproject.toml").is_file() for m in _MARKERS)


def _installed_from() -> Path | None:
    """The local folder ``pip install`` took camit from, if it recorded one."""
    try:
        text = importlib.metadata.distribution("camit").read_text("direct_url.json")
        record = json.loads(text) if text else {}
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    url = urlsplit(str(record.get("url", "")))
    return Path(unquote(url.path)) if url.scheme == "file" and "dir_info" in record else None


@functools.cache
def find() -> Path | None:
    """The checkout, or None."""
    here = Path(__file__).resolve().parents[2]
    if _is_checkout(here):
        return here
    source = _installed_from()
    return source if source is not None and _is_checkout(source) else None


def require(what: str) -> Path:
    """The checkout, or a LabError saying that ``what`` needs one."""
    root = find()
    if root is None:
        raise LabError(
            f"{what} is built from a camit checkout (standin/, standin_npu/): run from one, "
            "or install camit from one with 'pip install <checkout>'"
        )
    return root
