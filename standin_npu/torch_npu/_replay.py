"""Facts a calibration bundle recorded on real hosts, replayed by the stand-in's own error paths.

Design: docs/internals/standin-npu.md.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path

FILE = "torch-facts.json"
#: the facts the stand-in produces itself (others come from torch, CANN or the op library)
REPLAYED = ("torch_npu.mix_device_error", "torch_npu.numpy_error")
_TYPES: dict[str, type[Exception]] = {"RuntimeError": RuntimeError, "TypeError": TypeError,
                                      "ValueError": ValueError}
_FORM = re.compile(r"\A(\w+): (.*)\Z", re.S)


@lru_cache(maxsize=1)
def facts() -> dict[str, str]:
    """The replayed facts of this host ({} without a bundle)."""
    host_file = os.environ.get("CAMIT_EMU_NPU")
    if not host_file:
        return {}
    try:
        doc = json.loads((Path(host_file).parent / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {k: v for k, v in doc.items() if k in REPLAYED and isinstance(v, str)}


def error(key: str, builtin: Exception, device: str = "npu:0") -> Exception:
    """The error to raise for fact ``key``: the bundle's when it recorded one, else ``builtin``."""
    m = _FORM.match(facts().get(key, ""))
    if m is None or m.group(1) not in _TYPES:
        return builtin
    return _TYPES[m.group(1)](m.group(2).replace("npu:0", device))
