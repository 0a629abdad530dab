"""Root conftest: lets ``pytest`` run from a plain checkout (framework importable
without an install). The camit pytest plugin itself lives in
``framework/plugin/`` (hooks in ``hooks.py``) and is registered through the ``pytest11`` entry point."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
