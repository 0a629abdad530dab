"""``CompilerConfig`` (stand-in): a tree of option groups that accepts and keeps any setting.

UMDK's UTs build ``CompilerConfig()`` and pass it to ``get_npu_backend``; scripts also set options such
as ``config.experimental_config.frozen_parameter = True`` or ``config.mode = "reduce-overhead"``. The
stand-in records them; none changes how the graph runs.
"""

from __future__ import annotations

from typing import Any


class _Options:
    """An option group: attributes are created on first use, so nested settings always work."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        group = _Options()
        object.__setattr__(self, name, group)
        return group

    def as_dict(self) -> dict[str, Any]:
        return {k: v.as_dict() if isinstance(v, _Options) else v for k, v in vars(self).items()}


class CompilerConfig(_Options):
    """torchair's compiler configuration (``mode`` defaults to "max-autotune", torchair's GE mode)."""

    def __init__(self) -> None:
        self.mode = "max-autotune"
