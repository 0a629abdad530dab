"""Regenerate the built-in profile (``framework/data/calibration-profile.json``) from a bundle.

How: docs/internals/calibration.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from framework.calib import bundle
from framework.calib.compare import normalise

REGENERATE = (
    "python -m framework.lab up --hosts 2 --npu a3 --env-out LAB.yaml; "
    "python -m framework.artifacts "
    "build --out ART --env-in LAB.yaml --env-out BUILT.yaml; camit deploy --env BUILT.yaml; "
    "camit calibrate --env BUILT.yaml --out DIR; python -m framework.calib.profile DIR"
)


def profile_doc(doc: dict[str, Any]) -> dict[str, Any]:
    facts = bundle.values(doc)
    return {
        "schema": "camit-calibration-profile/1",
        "regenerate": REGENERATE,
        "facts": {key: normalise(key, value) for key, value in sorted(facts.items())},
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m framework.calib.profile BUNDLE\n")
        return 2
    doc = profile_doc(bundle.load(Path(argv[0])))
    bundle.PROFILE.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(f"wrote {bundle.PROFILE}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
