"""Keeping secrets out of the report: :class:`Scrubber` replaces the env's known secret values by ``***`` in
any text written to the run folder, :func:`redact_mapping` hides secret-looking keys of a plain document.

:func:`framework.report.finish.finalize` builds one :class:`Scrubber` from the env and passes it to every
writer (``cluster.xml``, ``manifest.json``, ``index.html``); a writer called on its own scrubs nothing
unless given one. A :data:`Scrub` is any ``str -> str`` callable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig

__all__ = ["Scrub", "Scrubber", "redact_mapping"]

#: a text filter every report writer applies to what it writes
Scrub = Callable[[str], str]

_SECRET_KEY = re.compile(r"passw|pass$|token|secret|credential", re.I)


class Scrubber:
    """Replaces known secret values (the env's passwords and secret launch variables) by ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True)

    @classmethod
    def from_env(cls, env: EnvConfig | object | None) -> Scrubber:
        """The secrets of an ``EnvConfig``; none for anything else (a mapping, a path, None)."""
        found = []
        for spec in (getattr(env, "hosts", None) or {}).values():
            pw = getattr(spec, "password", None)
            if pw is not None and hasattr(pw, "reveal"):
                found.append(pw.reveal())
        for value in (getattr(getattr(env, "launch", None), "env", None) or {}).values():
            if hasattr(value, "reveal"):
                found.append(value.reveal())
        return cls(found)

    def __call__(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, "***")
        return text


def redact_mapping(doc: Any, key: str = "") -> Any:
    """A copy of a plain document (mappings, lists, scalars) with the values of secret-looking keys
    (``passwd``, ``token``, ``secret``, ``credential``…) and every ``Secret`` replaced by ``***``."""
    if isinstance(doc, Mapping):
        return {k: redact_mapping(v, str(k)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [redact_mapping(v, key) for v in doc]
    if _SECRET_KEY.search(key) or type(doc).__name__ == "Secret":
        return "***"
    return doc
