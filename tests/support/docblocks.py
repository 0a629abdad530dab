"""The shell blocks of README.md and the getting-started pages, by kind (tests/unit/docs/test_docs.py).

A block's info string says how a test checks it:

- ```` ```sh ````: run from the repository root by a unit test (needs no lab);
- ```` ```sh lab ````: run on the emulated A3 lab (tests/integration/test_docs_lab.py), in a scratch
  folder where ``env/lab.yaml`` is that lab's env file;
- ```` ```sh cluster ````: needs a real cluster, root or minutes: parsed (``bash -n``), and each
  ``camit`` / ``python -m framework.lab`` line parsed by the real argument parser;
- ```` ```sh make ````: ``make`` lines; each must name a Makefile target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs" / "getting-started").glob("*.md")))
KINDS = ("run", "lab", "cluster", "make")
SHELLS = ("sh", "bash", "shell", "console")

_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    kind: str
    body: str

    def commands(self) -> list[str]:
        """Each command line, comments and blank lines dropped."""
        lines = (re.sub(r"\s+#.*$", "", ln).strip() for ln in self.body.splitlines())
        return [ln for ln in lines if ln and not ln.startswith("#")]


def blocks(pages: tuple[Path, ...] = PAGES) -> list[Block]:
    """Every shell block of ``pages``; an info string outside :data:`KINDS` is its own kind."""
    found = []
    for page in pages:
        text = page.read_text()
        for m in _FENCE.finditer(text):
            words = m["info"].split()
            if not words or words[0] not in SHELLS:
                continue
            kind = words[1] if len(words) > 1 else "run"
            found.append(
                Block(
                    str(page.relative_to(ROOT)), text.count("\n", 0, m.start()) + 1, kind, m["body"]
                )
            )
    return found
